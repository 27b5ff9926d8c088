"""A stopped sweep keeps its finished points and the same command goes on from them."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from splitwise_plan.cli import main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.report import checkpoint as ck
from splitwise_plan.sim.simulator import Simulator

SWEEP = ["sweep", "--design", "HH", "--prompt", "1:3", "--token", "1:2", "--rps", "5", "--duration", "20",
         "--method", "events", "--jobs", "1"]


def _rows(path):
    return list(csv.DictReader(path.open()))


def _stopped_after(k: int, monkeypatch, argv) -> int:
    """Run the command with a Ctrl-C right after its ``k``-th part is kept; its exit status."""
    add, calls = ck.Checkpoint.add, []

    def add_then_stop(self, results):
        add(self, results)
        calls.append(len(results))
        if len(calls) == k:
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(ck.Checkpoint, "add", add_then_stop)
        return main(argv)


def test_a_stopped_sweep_resumes_and_ends_as_an_uninterrupted_one(tmp_path, monkeypatch, capsys):
    whole = tmp_path / "whole.csv"
    assert main(SWEEP + ["--csv", str(whole), "--quiet"]) == 0
    out = tmp_path / "out.csv"
    partial = tmp_path / "out.csv.partial"
    assert _stopped_after(3, monkeypatch, SWEEP + ["--csv", str(out)]) != 0   # Ctrl-C after the third point
    err = capsys.readouterr().err
    assert "stopped: 3 of 6 design points are kept in" in err and str(partial) in err
    assert not out.exists() and len(partial.read_text().splitlines()) == 1 + 3
    simulated = []
    run_many = Simulator.run_many

    def counted(self, design, points, *a, **kw):
        simulated.extend(points)
        return run_many(self, design, points, *a, **kw)

    monkeypatch.setattr(Simulator, "run_many", counted)
    assert main(SWEEP + ["--csv", str(out)]) == 0
    assert "resuming: 3 of 6 design points kept in" in capsys.readouterr().err
    assert len(simulated) == 3                  # only the missing points ran
    assert _rows(out) == _rows(whole)           # the same report as the uninterrupted sweep
    assert not partial.exists()                 # done: nothing left to resume


def test_a_checkpoint_of_other_inputs_is_set_aside(tmp_path, capsys):
    out = tmp_path / "s.json"
    partial = tmp_path / "s.json.partial"
    other = json.dumps({"format": ck.FORMAT.format(kind="sweep"), "version": ck.VERSION, "fingerprint": "other"})
    other += "\n" + json.dumps({"type": "SimulationResult", "fields": {}}) + "\n"   # a line of its work
    partial.write_text(other)
    assert main(SWEEP + ["--json", str(out)]) == 0
    assert "made by a sweep with other inputs; moved it to" in capsys.readouterr().err
    assert len(json.loads(out.read_text())["results"]) == 6 and not partial.exists()
    # the other sweep's points are not lost: they wait beside it, as .old
    assert (tmp_path / "s.json.partial.old").read_text() == other


def test_the_checkpoint_keeps_results_exactly_and_skips_a_torn_line(tmp_path):
    stream = load_workload("coding").generate(5.0, duration_s=20.0, seed=0)
    results = Simulator(stream, method="events").run_many("HH", [(1, 1), (2, 1)])
    digest = ck.fingerprint({"model": "bloom-176b"}, stream, "splitwise-hh")
    c = ck.Checkpoint(tmp_path / "x.partial", digest)
    c.start()
    c.add(results)
    with c.path.open("a") as f:
        f.write('{"type": "SimulationResult", "fiel')         # a crash while writing
    done = c.load()
    assert done == {(1, 1): results[0], (2, 1): results[1]}
    notes = []
    other = ck.Checkpoint(c.path, digest + "0", say=notes.append)
    assert other.load() == {} and c.path.exists()   # left as it is until the other run starts its own
    other.start()
    assert len(notes) == 1 and "made by a sweep with other inputs; moved it to" in notes[0]
    assert ck.Checkpoint(c.path.with_name("x.partial.old"), digest).load() == done
    other.add(results)
    again = ck.Checkpoint(c.path, digest + "1", say=notes.append)   # .old is taken: the next free name
    again.load()
    again.start()
    assert notes[1].endswith(f"moved it to {c.path}.old.2 and starting afresh")


def test_a_file_of_no_work_is_replaced_not_kept(tmp_path):
    """An empty file, or another run's header alone, holds nothing to keep: starting over it moves nothing
    to .old (where it would replace a file that holds work)."""
    old = tmp_path / "x.partial.old"
    old.write_text("work of an earlier run\n")
    for content in ("", json.dumps({"format": ck.FORMAT.format(kind="plan"), "version": 1, "fingerprint": "x"})):
        notes = []
        c = ck.Checkpoint(tmp_path / "x.partial", "digest", say=notes.append)
        c.path.write_text(content)
        assert c.load() == {}
        c.start()
        assert notes == [] and old.read_text() == "work of an earlier run\n" and c.owned


def test_only_a_file_of_its_own_is_removed(tmp_path):
    c = ck.Checkpoint(tmp_path / "x.partial", "digest")
    c.path.write_text("a file of someone else\n")
    c.load()
    c.remove()
    assert c.path.read_text() == "a file of someone else\n"


@pytest.mark.parametrize("content", [
    b"\xff\xfe not text\n",                                     # binary
    b"[1, 2, 3]\n",                                              # JSON, not a header
    b'"a string"\n',
    b'{"format": "splitwise-plan "}\n{}\n',                    # a format of no kind
    b'{"format": "splitwise-plan x checkpoint"}\n{}\n',
    b"[" * 100_000 + b"\n",                                     # nested past the parser's depth
])
def test_a_file_that_is_no_checkpoint_is_set_aside(tmp_path, content):
    notes = []
    c = ck.Checkpoint(tmp_path / "x.partial", "digest", say=notes.append)
    c.path.write_bytes(content)
    assert c.load() == {}
    c.start()
    assert notes[0].startswith(f"ignoring {c.path}: it is not a checkpoint of splitwise-plan")


def test_lines_that_are_no_results_are_skipped(tmp_path):
    stream = load_workload("coding").generate(5.0, duration_s=20.0, seed=0)
    results = Simulator(stream, method="events").run_many("HH", [(1, 1)])
    c = ck.Checkpoint(tmp_path / "x.partial", "digest")
    c.start()
    with c.path.open("a") as f:
        f.write('{"type": "SimulationResult", "fields": []}\n{"type": "Foo", "fields": {}}\n[1]\n"s"\n')
        f.write('{"type": "Foo", "fields": {"prompt_machines": 1, "token_machines": 1}}\n')
        f.write('{"type": "SimulationResult", "fields": {"prompt_machines": [5], "token_machines": 1}}\n')
        f.write("[" * 100_000 + "\n")
    c.add(results)
    assert c.load() == {(1, 1): results[0]}


def test_the_fingerprint_changes_with_any_input():
    stream = load_workload("coding").generate(5.0, duration_s=20.0, seed=0)
    other = load_workload("coding").generate(5.0, duration_s=20.0, seed=1)
    base = ck.fingerprint({"model": "bloom-176b"}, stream, "splitwise-hh", stop_early=False)
    assert base == ck.fingerprint({"model": "bloom-176b"}, stream, "splitwise-hh", stop_early=False)
    for changed in (ck.fingerprint({"model": "llama2-70b"}, stream, "splitwise-hh", stop_early=False),
                    ck.fingerprint({"model": "bloom-176b"}, other, "splitwise-hh", stop_early=False),
                    ck.fingerprint({"model": "bloom-176b"}, stream, "splitwise-ha", stop_early=False),
                    ck.fingerprint({"model": "bloom-176b"}, stream, "splitwise-hh", stop_early=True)):
        assert changed != base
    assert ck.path_for(None, "-", "map.png").name == "map.png.partial" and ck.path_for(None, "-") is None
    if os.path.exists("/dev/null"):   # a device takes no checkpoint beside it (it would land in /dev)
        assert ck.path_for("/dev/null", "map.png").name == "map.png.partial" and ck.path_for("/dev/null") is None


def test_a_sweep_whose_progress_cannot_be_kept_still_ends(tmp_path, monkeypatch, capsys):
    def refuse(self, *a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ck.Path, "write_text", refuse)
    out = tmp_path / "s.csv"
    assert main(SWEEP + ["--csv", str(out)]) == 0
    assert capsys.readouterr().err.count("cannot keep the sweep's progress in") == 1
    assert len(_rows(out)) == 6


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_pipe_where_the_checkpoint_goes_is_never_read(tmp_path):
    """A named pipe (or a device) there would block the read forever (or never end): it is replaced."""
    c = ck.Checkpoint(tmp_path / "x.partial", "digest")
    os.mkfifo(c.path)
    assert c.load() == {}
    c.start()
    assert c.path.is_file() and c.owned


def test_a_report_named_as_the_checkpoint_is_refused(tmp_path):
    out = tmp_path / "r.csv"
    with pytest.raises(SplitwisePlanError, match="is where the run keeps its progress, beside"):
        ck.path_for(out, tmp_path / "r.csv.partial")


def test_a_smaller_sweep_or_one_stopped_by_a_typo_keeps_what_a_stopped_sweep_kept(tmp_path, monkeypatch, capsys):
    out, partial = tmp_path / "out.csv", tmp_path / "out.csv.partial"
    assert _stopped_after(2, monkeypatch, SWEEP + ["--csv", str(out)]) != 0   # Ctrl-C after the second point
    kept = partial.read_text()
    assert kept.count("\n") == 1 + 2
    assert main(SWEEP + ["--csv", str(out), "--rps", "abc"]) == 2 and partial.read_text() == kept   # a typo
    import splitwise_plan.cli.simulate as cs

    def stop(*a, **k):
        raise KeyboardInterrupt
    with monkeypatch.context() as m:   # other inputs, stopped before a point of their own: nothing moves
        m.setattr(cs, "run_grid", stop)
        assert main(SWEEP + ["--csv", str(out), "--seed", "1"]) != 0
    assert "stopped before any of its design points finished" in capsys.readouterr().err
    assert partial.read_text() == kept and not (tmp_path / "out.csv.partial.old").exists()
    small = [a if a != "1:3" else "3" for a in SWEEP]   # a grid without the kept points (prompt 1)
    assert main(small + ["--csv", str(out)]) == 0
    assert "which this run does not name" in capsys.readouterr().err and partial.exists()
    assert main(SWEEP + ["--csv", str(out)]) == 0
    assert "resuming: 4 of 6 design points kept in" in capsys.readouterr().err and not partial.exists()


def test_a_file_given_by_another_path_is_the_same_input(tmp_path, monkeypatch):
    from splitwise_plan.planning import PlanRequest
    slo = tmp_path / "my.toml"
    slo.write_text((Path(__file__).resolve().parents[2] / "slos" / "paper.toml").read_text())
    monkeypatch.chdir(tmp_path)
    a = ck.plan_fingerprint(PlanRequest(rps=5, slos="my.toml"), "1")
    assert a == ck.plan_fingerprint(PlanRequest(rps=5, slos=str(slo)), "1")
    slo.write_text(slo.read_text().replace("p99 = 6.0", "p99 = 7.0", 1))
    assert a != ck.plan_fingerprint(PlanRequest(rps=5, slos="my.toml"), "1")   # its contents count


def test_a_plan_with_no_file_keeps_its_checkpoint_in_the_user_cache_folder(tmp_path, monkeypatch, plan_cache):
    """$SPLITWISE_PLAN_CACHE_DIR/plans (the tests point it at a folder of their own), else
    $XDG_CACHE_HOME/splitwise-plan/plans (an absolute one), else ~/.cache/splitwise-plan/plans; the file
    is named by the plan's fingerprint; a folder that cannot be made is no place (None)."""
    assert ck.CACHE_ENV == "SPLITWISE_PLAN_CACHE_DIR" and os.environ[ck.CACHE_ENV] == str(plan_cache)
    digest = "0123456789abcdef" * 4
    where = ck.plan_cache_path(digest)
    assert where == plan_cache / "plans" / "0123456789abcdef.partial" and where.parent.is_dir()
    monkeypatch.delenv(ck.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ck.plan_cache_dir() == tmp_path / "xdg" / "splitwise-plan" / "plans"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for xdg in ("", "relative/cache"):   # unset, or relative (which the XDG spec says to ignore)
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert ck.plan_cache_dir() == tmp_path / "home" / ".cache" / "splitwise-plan" / "plans"
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv(ck.CACHE_ENV, str(tmp_path / "a-file" / "cache"))   # under a file: cannot be made
    assert ck.plan_cache_path(digest) is None
    c = ck.Checkpoint(where, digest, kind="plan")   # and a plan's file there is a checkpoint like any other
    c.start()
    assert c.owned and c.load() == {} and where.read_text().count("\n") == 1
    c.finish([], "designs")
    assert not where.exists()


def test_a_stopped_plan_says_where_its_progress_is_kept_or_why_it_is_not(tmp_path):
    c = ck.Checkpoint(tmp_path / "plans" / "ab.partial", "ab", kind="plan")
    c.path.parent.mkdir()
    c.start()
    assert ck.stopped_note(c, 4, "plan", "designs", cache=tmp_path) == (
        f"stopped: 0 of 4 designs are kept in {c.path}; the same command goes on from there")
    note = ck.stopped_note(None, 4, "plan", "designs", also="; --storage keeps every simulation", cache=tmp_path)
    assert note.startswith(f"stopped: nothing is kept, since the plan writes no file and cannot write to {tmp_path} "
                           "(set SPLITWISE_PLAN_CACHE_DIR to a folder it can write, or give a --csv")
    assert note.endswith("the same command then goes on from them; --storage keeps every simulation)")
    # a sweep with no file keeps nothing, as ever
    assert ck.stopped_note(None, 6, "sweep", "design points").startswith(
        "stopped: nothing is kept, since the sweep writes no file")
