"""Report files (atomic JSON/CSV), plots, cluster files and the progress helper."""

from __future__ import annotations

import io
import json
import math
import os
import time

import numpy as np
import pytest
from rich.console import Console

from splitwise_plan.cli.progress import progress
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.cluster_file import load_cluster, parse_cluster
from splitwise_plan.report import files
from splitwise_plan.report import formats as reports
from splitwise_plan.report.files import check_writable
from splitwise_plan.report.formats import (
    SCHEMA_VERSION,
    atomic_open,
    atomic_write_text,
    build_report,
    csv_text,
    write_csv,
    write_json,
)
from splitwise_plan.report.plots import check_plot_path, design_point, optimum, write_plot


def _leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# --- atomic writing ------------------------------------------------------------------

def test_atomic_write_creates_file_and_no_temp(tmp_path):
    p = tmp_path / "r.json"
    atomic_write_text(p, "hello\n")
    assert p.read_text() == "hello\n"
    assert _leftovers(tmp_path) == []


def test_failure_mid_write_keeps_old_file_and_removes_temp(tmp_path):
    p = tmp_path / "r.json"
    p.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(p) as fh:
            fh.write("half of a new rep")
            fh.flush()
            raise RuntimeError("interrupted")
    assert p.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_json_dump_failing_mid_write_keeps_old_file(tmp_path, monkeypatch):
    p = tmp_path / "r.json"
    p.write_text('{"old": true}')

    def broken_dump(obj, fh, **kw):
        fh.write('{"results": [')
        raise KeyboardInterrupt  # e.g. Ctrl-C while writing

    monkeypatch.setattr(reports.json, "dump", broken_dump)
    with pytest.raises(KeyboardInterrupt):
        write_json(p, {"a": 1})
    assert json.loads(p.read_text()) == {"old": True}
    assert _leftovers(tmp_path) == []


def test_os_error_on_replace_is_one_line_user_error(tmp_path, monkeypatch):
    p = tmp_path / "r.csv"
    p.write_text("old")

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(SplitwisePlanError, match="No space left"):
        write_csv(p, [{"a": 1}])
    assert p.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_a_symlink_stays_and_its_target_is_replaced(tmp_path):
    (tmp_path / "target.csv").write_text("old\n")
    (tmp_path / "link.csv").symlink_to("target.csv")
    atomic_write_text(tmp_path / "link.csv", "new\n")
    assert os.readlink(tmp_path / "link.csv") == "target.csv"
    assert (tmp_path / "target.csv").read_text() == "new\n"
    (tmp_path / "dangling.csv").symlink_to("made.csv")
    atomic_write_text(tmp_path / "dangling.csv", "x\n")
    assert (tmp_path / "dangling.csv").is_symlink() and (tmp_path / "made.csv").read_text() == "x\n"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_a_pipe_is_written_into_not_replaced(tmp_path):
    """As /dev/stdout or /dev/null: a report written there must not replace the device with a file."""
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    atomic_write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]   # no temporary file left


def test_check_writable_errors(tmp_path):
    with pytest.raises(SplitwisePlanError, match="does not exist"):
        check_writable(tmp_path / "nope" / "r.json")
    with pytest.raises(SplitwisePlanError, match="is a directory"):
        check_writable(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(SplitwisePlanError, match="not a folder"):
        check_writable(tmp_path / "file" / "r.json")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can write read-only folders")
def test_check_writable_read_only_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(SplitwisePlanError, match="takes no new file"):
            check_writable(ro / "r.json")
    finally:
        ro.chmod(0o700)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc on this platform")
def test_check_writable_tries_the_folder_even_as_root(tmp_path):
    """Permission bits say yes to root everywhere; /proc takes no file for anyone. A link to a
    missing folder fails too (the write replaces the file the link leads to)."""
    with pytest.raises(SplitwisePlanError, match="folder /proc takes no new file"):
        check_writable("/proc/r.json")
    (tmp_path / "r.json").symlink_to(tmp_path / "gone" / "r.json")
    with pytest.raises(SplitwisePlanError, match=f"folder {tmp_path / 'gone'} does not exist"):
        check_writable(tmp_path / "r.json")


def test_json_report_schema_and_strict_values(tmp_path):
    doc = build_report("simulate", {"model": "bloom-176b", "rate_rps": np.float64(5.0)},
                       [{"x": float("nan"), "n": np.int64(3), "ok": np.bool_(True)}], extra={"inf": math.inf})
    p = write_json(tmp_path / "r.json", doc)
    back = json.loads(p.read_text())
    assert back["schema_version"] == SCHEMA_VERSION
    assert back["tool"]["name"] == "splitwise-plan" and back["tool"]["version"]
    assert back["command"] == "simulate" and back["inputs"]["rate_rps"] == 5.0
    assert back["results"] == [{"x": None, "n": 3, "ok": True}]
    assert back["extra"] == {"inf": None}
    assert "NaN" not in p.read_text()


def test_csv_rows_and_columns(tmp_path):
    text = csv_text([{"a": 1, "b": 0.5}, {"a": 2, "c": "x"}])
    assert text.splitlines() == ["a,b,c", "1,0.5,", "2,,x"]
    p = write_csv(tmp_path / "r.csv", [{"a": 1}])
    assert p.read_text() == "a\n1\n"


def test_a_value_not_measured_is_an_empty_csv_cell(tmp_path):
    """Issue 54: inf, -inf and NaN (Python's or numpy's) write an empty cell, not ``inf`` or ``nan``,
    and pandas reads the column back as floats, NaN there; a finite value is written unchanged."""
    import pandas as pd
    rows = [{"e2e_p99_s": v, "cost": 1853.104615, "n": 3} for v in
            (math.inf, -math.inf, math.nan, np.float64(np.inf), np.float32(np.nan), 0.1, np.float64(75.03389034251254))]
    text = csv_text(rows)
    assert text.splitlines() == ["e2e_p99_s,cost,n"] + [",1853.104615,3"] * 5 + ["0.1,1853.104615,3",
                                                                                  "75.03389034251254,1853.104615,3"]
    assert "inf" not in text and "nan" not in text
    back = pd.read_csv(write_csv(tmp_path / "r.csv", rows))
    assert back["e2e_p99_s"].dtype == np.float64 and back["e2e_p99_s"].isna().tolist() == [True] * 5 + [False] * 2
    assert back["e2e_p99_s"].iloc[-1] == 75.03389034251254 and back["cost"].dtype == np.float64


# --- plots ----------------------------------------------------------------------------

def _sweep_rows():
    rows = []
    for p in range(1, 6):
        for t in range(1, 4):
            r = 3.0 / p * (1 + 0.5 / t)
            rows.append({"design": "splitwise-hh", "prompt_machines": p, "token_machines": t,
                         "cost": 4.76 * (p + t), "power": 44 * p + 30.8 * t, "slo_met": r < 1,
                         "tightest_ratio": r, "tightest_slo": "ttft_p99"})
    return rows


DESIGNS = [{"design": "baseline-a100", "machines": 40, "cost": 88.4, "power": 992, "throughput": 70},
           {"design": "splitwise-hh", "prompt_machines": 27, "token_machines": 3, "cost": 142.8,
            "power": 1320, "throughput_rps": 90}]


def test_optimum_is_cheapest_passing_point():
    best = optimum([design_point(r) for r in _sweep_rows()])
    assert best["met"]
    assert best["cost"] == min(r["cost"] for r in _sweep_rows() if r["slo_met"])
    assert optimum([design_point(dict(r, slo_met=False)) for r in _sweep_rows()]) is None


@pytest.mark.parametrize("name", ["map.png", "map.svg", "map.html"])
def test_design_space_plot_files(tmp_path, name):
    p = write_plot(tmp_path / name, sweep=_sweep_rows(), title="test sweep")
    data = p.read_bytes()
    assert len(data) > 1000
    if name.endswith(".png"):
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    elif name.endswith(".svg"):
        assert b"<svg" in data[:500]
    else:
        text = data.decode()
        assert text.startswith("<!DOCTYPE html>") and "<svg" in text and "<table>" in text
        assert "<?xml" not in text  # the SVG is inlined, not a file reference
    assert _leftovers(tmp_path) == []


def test_comparison_and_combined_plots(tmp_path):
    png = write_plot(tmp_path / "cmp.png", designs=DESIGNS, normalize_to="baseline-a100")
    assert png.read_bytes()[:4] == b"\x89PNG"
    both = write_plot(tmp_path / "both.svg", sweep=_sweep_rows(), designs=DESIGNS)
    assert b"<svg" in both.read_bytes()[:500]
    page = write_plot(tmp_path / "both.html", sweep=_sweep_rows(), designs=DESIGNS).read_text()
    assert page.count("<svg") >= 2 and "Designs compared" in page


def test_baseline_and_all_failing_sweeps_plot(tmp_path):
    base = [{"design": "baseline-h100", "prompt_machines": m, "token_machines": 0, "cost": 4.76 * m,
             "power": 44.0 * m, "slo_met": m > 2, "tightest_ratio": 3.0 / m} for m in range(1, 6)]
    assert write_plot(tmp_path / "b.png", sweep=base).stat().st_size > 0
    failing = [dict(r, slo_met=False, tightest_ratio=float("inf")) for r in _sweep_rows()]
    assert write_plot(tmp_path / "f.png", sweep=failing).stat().st_size > 0


@pytest.mark.parametrize("name", ["plot.pdf", "plot", "plot.jpeg"])
def test_bad_plot_extension(tmp_path, name):
    with pytest.raises(SplitwisePlanError, match=r"use \.png, \.svg or \.html"):
        check_plot_path(tmp_path / name)


def test_nothing_to_plot(tmp_path):
    with pytest.raises(SplitwisePlanError, match="nothing to plot"):
        write_plot(tmp_path / "x.png")


# --- cluster files -----------------------------------------------------------------------

def test_cluster_toml_and_yaml(write):
    spec = load_cluster(write("c.toml", 'name = "prod"\ndesign = "hh"\nprompt_machines = 27\n'
                                        'token_machines = 3\ntp = 8\ntoken_machine_type = "dgx-a100"\n'))
    # H100 prompt machines and A100 token machines are Splitwise-HA, whatever design the file started from
    assert (spec.design.name, spec.prompt_machines, spec.token_machines) == ("splitwise-ha", 27, 3)
    assert spec.design.token_machine == "dgx-a100" and spec.model == "bloom-176b" and spec.name == "prod"
    ah = load_cluster(write("ah.toml", 'design = "AA"\nprompt_machines = 2\ntoken_machines = 1\n'
                                       'token_machine_type = "dgx-h100"\n'))
    assert ah.design.name == "dgx-a100:dgx-h100" and ah.design.machines == ("dgx-a100", "dgx-h100")
    base = load_cluster(write("b.toml", 'design = "H100"\nmachines = 40\nmodel = "llama2-70b"\n'))
    assert base.is_baseline and base.machines == 40 and base.token_machines == 0
    pytest.importorskip("yaml")
    y = load_cluster(write("c.yaml", "design: HA\nprompt_machines: 5\ntoken_machines: 2\n"))
    assert y.design.name == "splitwise-ha" and y.machines == 7


def test_a_key_given_twice_in_a_yaml_cluster_file_is_refused(write):
    """PyYAML keeps the last of a repeated key, so ``check`` gated 27+1 machines of a file that also
    says 3 token machines; TOML refuses the same file."""
    pytest.importorskip("yaml")
    with pytest.raises(SplitwisePlanError, match=r"c.yaml, line 4: key 'token_machines' is given twice"):
        load_cluster(write("c.yaml", "design: HH\nprompt_machines: 27\ntoken_machines: 3\ntoken_machines: 1\n"))


def test_a_cluster_file_saved_with_a_byte_order_mark_reads_as_without(tmp_path):
    """Windows Notepad starts UTF-8 files with a BOM: TOML read it as 'Invalid statement (at line 1,
    column 1)'; the CSV readers already read past it."""
    text = 'design = "HH"\nprompt_machines = 27\ntoken_machines = 3\n'
    for name in ("c.toml", "c.yaml"):
        if name.endswith("yaml"):
            pytest.importorskip("yaml")
            text = "design: HH\nprompt_machines: 27\ntoken_machines: 3\n"
        p = tmp_path / name
        p.write_bytes(b"\xef\xbb\xbf" + text.encode())
        spec = load_cluster(p)
        assert (spec.design.name, spec.prompt_machines, spec.token_machines) == ("splitwise-hh", 27, 3)


@pytest.mark.parametrize("doc, match", [
    ({}, "missing key design"),
    ({"design": "XX", "prompt_machines": 1, "token_machines": 1}, "design 'XX' is unknown"),
    ({"design": "HH", "prompt_machines": 1}, "needs token_machines"),
    ({"design": "HH", "machines": 4}, "not machines"),
    ({"design": "A100", "prompt_machines": 3, "token_machines": 1}, "baseline"),
    ({"design": "A100"}, "needs machines"),
    ({"design": "HH", "prompt_machines": 0, "token_machines": 1}, "at least 1"),
    ({"design": "HH", "prompt_machines": 2.5, "token_machines": 1}, "whole number"),
    ({"design": "HH", "prompt_machines": 1, "token_machines": 1, "model": "gpt9"}, "model 'gpt9' is unknown"),
    ({"design": "HH", "prompt_machines": 1, "token_machines": 1, "colour": "red"}, "unknown key"),
    ({"design": "HH", "prompt_machines": 1, "token_machines": 1, "prompt_machine_type": "tpu"}, "not a known machine"),
    ({"design": "HH", "prompt_machines": 1, "token_machines": 1, "tp": 0}, "at least 1"),
])
def test_cluster_file_errors(doc, match):
    with pytest.raises(SplitwisePlanError, match=match):
        parse_cluster(doc, "cluster file c.toml")


def test_cluster_file_bad_syntax_and_missing(write, tmp_path):
    with pytest.raises(SplitwisePlanError, match="not valid TOML"):
        load_cluster(write("bad.toml", "design = \n"))
    with pytest.raises(SplitwisePlanError, match="not found"):
        load_cluster(tmp_path / "missing.toml")


# --- progress ------------------------------------------------------------------------------

def _console():
    return Console(file=io.StringIO(), force_terminal=False, width=100)


def _shown(bar) -> None:
    """Wait (up to 2 s) for the bar's timer thread to show it."""
    for _ in range(200):
        if bar.shown:
            return
        time.sleep(0.01)


def test_progress_quiet_and_quick_runs_print_nothing():
    c = _console()
    with progress(3, "work", quiet=True, delay_s=0.0, console=c) as bar:
        bar.advance(3)
    with progress(3, "work", delay_s=30.0, console=c) as bar:
        bar.advance(3)
    assert c.file.getvalue() == ""
    assert bar.completed == 3 and not bar.shown


def test_a_run_stopped_before_its_bar_showed_still_says_so():
    """A check stopped in its first second exited 130 with nothing on stderr, and so did any stop with
    --quiet (a cancelled CI job's log did not say why it ended); a quick run that ends prints nothing still."""
    for quiet, said in ((False, "checking: 1/3 stopped (Ctrl-C) after "), (True, "checking: 1/3 stopped (Ctrl-C) after ")):
        c = _console()
        with pytest.raises(KeyboardInterrupt):
            with progress(3, "checking", delay_s=30.0, console=c, quiet=quiet) as bar:
                bar.advance(1)
                raise KeyboardInterrupt
        assert c.file.getvalue().startswith(said) and c.file.getvalue().count("\n") == (1 if said else 0)


def test_progress_after_delay_is_one_plain_line_when_not_a_terminal():
    c = _console()
    with progress(4, "sweeping", delay_s=0.0, console=c) as bar:
        _shown(bar)
        bar.advance(4)
    out = c.file.getvalue()
    assert bar.shown and out.startswith("sweeping: 4/4 done in ") and out.count("\n") == 1
    assert "\x1b[" not in out  # no colour or cursor codes when not a terminal


def test_a_long_run_in_a_plain_log_shows_it_is_alive():
    c = _console()
    with progress(6, "plan min-cost, 6 designs", delay_s=0.0, console=c, heartbeat_s=0.05) as bar:
        _shown(bar)
        bar.advance(1)
        bar.update(description="plan min-cost: splitwise-aa ok in 41.0 s")
        for _ in range(200):   # up to 2 s for a heartbeat
            if "after" in c.file.getvalue():
                break
            time.sleep(0.01)
        bar.advance(5)
    lines = c.file.getvalue().strip().splitlines()
    beats = [x for x in lines[:-1] if x.startswith("plan min-cost: splitwise-aa ok in 41.0 s: 1/6 after ")]
    assert beats and all(x.endswith(" s") for x in beats)
    assert lines[-1].startswith("plan min-cost, 6 designs: 6/6 done in ")
    n = len(lines)
    time.sleep(0.2)                                   # no heartbeat once the run is over
    assert len(c.file.getvalue().strip().splitlines()) == n


@pytest.mark.parametrize("terminal", [False, True])
def test_an_interrupted_run_says_so_and_how_far_it_got(terminal):
    c = Console(file=io.StringIO(), force_terminal=terminal, width=100)
    with pytest.raises(KeyboardInterrupt):
        with progress(6, "plan min-cost, 6 designs", delay_s=0.0, console=c) as bar:
            _shown(bar)
            bar.advance(2)
            raise KeyboardInterrupt
    out = c.file.getvalue()
    last = out.strip().splitlines()[-1]
    assert last.endswith(" s") and "done" not in last
    assert last.split("\x1b[2K")[-1].startswith("plan min-cost, 6 designs: 2/6 stopped (Ctrl-C) after ")


def test_progress_live_bar_on_a_terminal():
    c = Console(file=io.StringIO(), force_terminal=True, width=100)
    with progress(4, "sweeping", delay_s=0.0, console=c) as bar:
        _shown(bar)
        bar.advance(4)
    assert bar.shown and "sweeping" in c.file.getvalue()


def test_progress_plain_line_does_not_wrap():
    c = _console()          # 100 columns
    desc = "plan min-cost, 6 designs: " + "x" * 120
    with progress(6, desc, delay_s=0.0, console=c) as bar:
        _shown(bar)
        bar.advance(6)
    out = c.file.getvalue()
    assert out.count("\n") == 1 and out.startswith(desc + ": 6/6 done in ")
