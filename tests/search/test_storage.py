"""Search trials in an Optuna storage: resume, several worker processes, one-line storage errors.

SQLite tests always run. PostgreSQL tests need a server: set SPLITWISE_TEST_POSTGRES to a
URL such as postgresql://splitwise@127.0.0.1:54329/splitwise_test (``.ci/run`` installs
Debian's server, starts a throwaway cluster and sets it); without it they skip.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import optuna
import pytest
from typer.testing import CliRunner

from splitwise_plan.cli import app, main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.planning import PlanRequest, plan, stored
from splitwise_plan.search import storage as st
from splitwise_plan.search.storage import heartbeat, urls
from splitwise_plan.search.strategies import Evaluator, Space, exhaustive_search, optuna_search

REPO = Path(__file__).resolve().parents[2]
PG_ENV = "SPLITWISE_TEST_POSTGRES"
runner = CliRunner()


# --- helpers ----------------------------------------------------------------------------

class Oracle:
    """A fake simulator on a monotone pass/fail set; records what it simulated; can be interrupted."""

    def __init__(self, passes, stop_at_call: int | None = None) -> None:
        self.passes, self.stop_at_call = passes, stop_at_call
        self.calls = 0
        self.points: list = []

    def __call__(self, points):
        self.calls += 1
        if self.calls == self.stop_at_call:
            raise KeyboardInterrupt          # Ctrl-C in the middle of a batch
        self.points += list(points)
        return [SimpleNamespace(slo_met=bool(self.passes(p, t)), tightest={"ratio": 0.5 if self.passes(p, t) else 2.0})
                for p, t in points]


def HA_LIKE(p, t):   # a pass/fail map, named as the constant it was
    return p >= 25 and t >= max(4, 35 - p)


def ha_space() -> Space:
    return Space((1, 39), (1, 69), lambda p, t: (round(4.76 * p + 2.21 * t, 9), p + t, p))


def states(study) -> Counter:
    return Counter(t.state.name for t in study.get_trials(deepcopy=False))


def simulated_points(study) -> list:
    return [(r["prompt"], r["token"]) for r in st.trial_table(study) if r["state"] == "COMPLETE" and r["simulated"]]


def load(url: str, name: str):
    return optuna.load_study(study_name=name, storage=st.open_storage(url))


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request, tmp_path):
    """A fresh SQLite file, or the PostgreSQL server of $SPLITWISE_TEST_POSTGRES (skip without it)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'plan.db'}"
        return
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"no PostgreSQL server: set {PG_ENV}=postgresql://USER@HOST:PORT/DB (.ci/run starts one)")
    rdb = st.open_storage(url)
    before = set(optuna.get_all_study_names(rdb))
    yield url
    # leave the database as found: drop the studies this test made
    for name in set(optuna.get_all_study_names(rdb)) - before:
        if name.startswith("pytest-"):
            optuna.delete_study(study_name=name, storage=rdb)


def unique(tag: str) -> str:
    return f"pytest-{tag}-{uuid.uuid4().hex[:8]}"


def small_request(url: str, prefix: str, **kw) -> PlanRequest:
    """A question that takes a fraction of a second per batch: HH at 10 req/s for 20 s, 12 x 10 machines."""
    base = dict(goal="min-cost", rps=10, duration=20, designs=("HH",), limits=(("HH", 12, 10),),
                confirm_method="fluid", search_method="events", jobs=1, storage=url, study=prefix)
    base.update(kw)
    return PlanRequest(**base)


def worker_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_worker(url: str, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "splitwise_plan", "worker", "--storage", url, "--study", name,
                             "--json", "-", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=worker_env(), cwd=str(REPO))


# --- storage URLs -----------------------------------------------------------------------

def test_storage_urls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert st.normalize_storage(None) is None
    assert st.normalize_storage("memory") is None
    assert st.normalize_storage("sqlite:///plan.db") == f"sqlite:///{tmp_path / 'plan.db'}"
    assert st.normalize_storage("postgresql://u:secret@h:5/db") == "postgresql+psycopg://u:secret@h:5/db"
    assert "secret" not in st.redact("postgresql://u:secret@h:5/db")
    for bad, needle in [("foo://x", "unsupported database"), ("sqlite://", "no SQLite file"),
                        ("sqlite:////no/such/folder/plan.db", "does not exist"), ("not a url", "not a storage URL"),
                        ("postgresql://u@h", "no database")]:
        with pytest.raises(SplitwisePlanError, match=needle):
            st.normalize_storage(bad)


def test_result_round_trip():
    """A trial keeps the whole simulation result; the one read back is equal."""
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.simulator import Simulator

    sim = Simulator(load_workload("coding").generate(10, 20, 0), method="fluid")
    r = sim.run("HH", 3, 2)
    back = st.decode_result(json.loads(json.dumps(st.encode_result(r))))
    assert back.to_dict() == r.to_dict() and back.tightest == r.tightest and back.violations == r.violations
    assert back.slowdown == r.slowdown and back.latency_s == r.latency_s


# --- resume ---------------------------------------------------------------------------

def test_resume_after_interruption_sqlite(tmp_path):
    """Ctrl-C, then the same search again: no point simulated twice, the same answer as an
    uninterrupted run, the in-memory run and the exhaustive grid; a third run simulates nothing."""
    space = ha_space()
    want = exhaustive_search(Evaluator(run=Oracle(HA_LIKE)), space).best
    memory = optuna_search(Evaluator(run=Oracle(HA_LIKE)), space, n_trials=24, batch=8, seed=3)
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    whole = optuna_search(Evaluator(run=Oracle(HA_LIKE)), space, n_trials=24, batch=8, seed=3,
                          storage=url, study_name="whole")
    assert memory.best == whole.best == want

    first = Oracle(HA_LIKE, stop_at_call=3)                 # interrupted in the third batch
    with pytest.raises(KeyboardInterrupt):
        optuna_search(Evaluator(run=first), space, n_trials=24, batch=8, seed=3, storage=url, study_name="cut")
    study = load(url, "cut")
    assert states(study)["RUNNING"] == 0                    # the in-flight trials were failed, not left running
    assert states(study)["FAIL"] == 8 and states(study)["COMPLETE"] == 16

    second = Oracle(HA_LIKE)
    res = optuna_search(Evaluator(run=second), space, n_trials=24, batch=8, seed=3, storage=url, study_name="cut")
    assert res.best == want
    done = first.points + second.points
    assert len(done) == len(set(done))                      # nothing simulated twice
    study = load(url, "cut")
    explore = [r for r in st.trial_table(study) if r["state"] == "COMPLETE" and r["phase"] == "explore"]
    assert len(explore) == 24                               # the study's 24 trials, none counted twice
    assert sorted(simulated_points(study)) == sorted(done)  # every simulation is one stored trial

    third = Oracle(HA_LIKE)
    again = optuna_search(Evaluator(run=third), space, n_trials=24, batch=8, seed=3, storage=url, study_name="cut")
    assert again.best == want and third.points == []


def test_run_n_trials_then_more(tmp_path):
    """A short run, then the full one on the same study: it asks only the missing trials."""
    space = ha_space()
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    a, b = Oracle(HA_LIKE), Oracle(HA_LIKE)
    optuna_search(Evaluator(run=a), space, n_trials=10, batch=4, seed=0, storage=url, study_name="s")
    res = optuna_search(Evaluator(run=b), space, n_trials=30, batch=4, seed=0, storage=url, study_name="s")
    assert res.best == exhaustive_search(Evaluator(run=Oracle(HA_LIKE)), space).best
    assert not set(a.points) & set(b.points)
    rows = st.trial_table(load(url, "s"))
    assert sum(r["phase"] == "explore" and r["state"] == "COMPLETE" for r in rows) == 30


def test_same_seed_same_trials(tmp_path):
    """In memory or in SQLite, the same seed asks the same points in the same order."""
    space = ha_space()
    mem, disk = Oracle(HA_LIKE), Oracle(HA_LIKE)
    r1 = optuna_search(Evaluator(run=mem), space, n_trials=16, batch=8, seed=7)
    r2 = optuna_search(Evaluator(run=disk), space, n_trials=16, batch=8, seed=7,
                       storage=f"sqlite:///{tmp_path / 'p.db'}", study_name="s")
    assert mem.points == disk.points and r1.best == r2.best


def test_trials_of_dead_workers_are_failed(tmp_path, monkeypatch):
    """RUNNING trials left by a crash: a dead process on this machine at once, any other after the grace period."""
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    space = ha_space()
    study, rdb = st.open_study(url, "s", seed=0, n_trials=24)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    crashed = study.ask()
    crashed.set_user_attr(st.WORKER_ATTR, f"{heartbeat._HOST}|{gone.pid}|dead00")     # this machine, process gone
    crashed.suggest_int("prompt", 1, 39), crashed.suggest_int("token", 1, 69)
    remote = study.ask()
    rdb.record_heartbeat(remote._trial_id)
    remote.set_user_attr(st.WORKER_ATTR, "elsewhere|0|1|remote")              # another machine: heartbeat
    remote.suggest_int("prompt", 1, 39), remote.suggest_int("token", 1, 69)
    assert st.fail_stale(study, rdb) == 1                                      # the dead local process only
    monkeypatch.setattr(heartbeat, "GRACE_PERIOD", 1)
    time.sleep(2.2)
    assert st.fail_stale(study, rdb) == 1                                      # the silent remote one
    res = optuna_search(Evaluator(run=Oracle(HA_LIKE)), space, n_trials=24, batch=8, seed=0, storage=url,
                        study_name="s")
    assert res.best == exhaustive_search(Evaluator(run=Oracle(HA_LIKE)), space).best
    c = states(load(url, "s"))
    assert c["RUNNING"] == 0 and c["FAIL"] == 2


@pytest.mark.parametrize("other_ends", ["complete", "fail"])
def test_a_point_another_worker_is_simulating_is_not_simulated_twice(tmp_path, other_ends):
    """A trial whose point a lower-numbered RUNNING trial of another worker holds waits for its
    result (or simulates it when that trial fails) instead of simulating it at the same time."""
    import threading

    url = f"sqlite:///{tmp_path / 'plan.db'}"
    space = ha_space()
    study, rdb = st.open_study(url, "s", seed=0, n_trials=2)
    other = study.ask()                                    # another machine's trial, in flight
    rdb.record_heartbeat(other._trial_id)
    other.set_user_attr(st.WORKER_ATTR, "elsewhere|0|1|remote")
    other.suggest_int("prompt", 1, 39), other.suggest_int("token", 1, 69)
    point = (other.params["prompt"], other.params["token"])
    study.enqueue_trial({"prompt": point[0], "token": point[1]})   # this worker will be asked the same point
    oracle = Oracle(HA_LIKE)

    def finish():
        time.sleep(0.5)
        if other_ends == "fail":
            study.tell(other, state=optuna.trial.TrialState.FAIL)
            return
        remote = Evaluator(run=Oracle(HA_LIKE))
        r = remote([point])[0]
        other.set_user_attr(st.TRIAL_ATTR, st.trial_record(remote, space, point, r, simulated=True,
                                                            worker="elsewhere|0|1|remote", phase="explore"))
        study.tell(other, float(space.key(*point)[0]))

    t = threading.Thread(target=finish)
    t.start()
    stats = st.explore(study, Evaluator(run=oracle), space, n_trials=2, batch=1, rdb=rdb)
    t.join()
    assert stats.waited == 1
    mine = [r for r in st.trial_table(study) if r["number"] == other.number + 1][0]
    assert (mine["prompt"], mine["token"]) == point and mine["state"] == "COMPLETE"
    if other_ends == "complete":
        assert oracle.points == [] and not mine["simulated"]      # took the other worker's result
        assert stats.told == 1
    else:
        assert oracle.points[0] == point and mine["simulated"]    # the other trial failed: simulated here
        assert stats.told == 2                                     # and it does not count: one more trial
    sims = simulated_points(study)
    assert len(sims) == len(set(sims))
    assert states(study)["COMPLETE"] == 2


def test_a_study_keeps_its_question(tmp_path):
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    req = small_request(url, "q")
    name = stored.prepare(req, "HH")
    assert name == "q/HH" and st.study_names(url, "q") == ["q/HH"]
    with pytest.raises(SplitwisePlanError, match="another question"):
        stored.prepare(small_request(url, "q", rps=11), "HH")
    attrs = load(url, name).user_attrs[st.ATTR]
    assert attrs["request"]["rps"] == 10 and attrs["design"] == "splitwise-hh" and attrs["n_trials"] == 24
    ev, space = stored.rebuild(attrs)
    assert space.p_range == (1, 12) and space.t_range == (1, 10) and ev.method == "events"
    # the default name is derived from the inputs, and differs when they differ
    a = stored.study_name(small_request(url, None), "HH", "events")
    b = stored.study_name(small_request(url, None, seed=1), "HH", "events")
    assert a != b and a.startswith("min-cost-bloom-176b-coding-10rps-20s-seed0-") and a.endswith("/HH")


# --- worker processes ----------------------------------------------------------------------

def test_two_worker_processes_share_a_study(storage_url):
    """Two `splitwise-plan worker` processes on one study (SQLite and PostgreSQL): every trial told
    once, every point simulated once; the planner then reads them all and gives the in-memory answer."""
    prefix = unique("two")
    req = small_request(storage_url, prefix)
    name = f"{prefix}/HH"
    # start both workers first, waiting for the study; create it once both are ready, so they start together
    procs = [start_worker(storage_url, name, "--batch", "4", "--wait", "120") for _ in range(2)]
    for p in procs:
        assert "waiting up to 120 s" in p.stderr.readline()
    assert stored.prepare(req, "HH", n_trials=64) == name
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert "Traceback" not in err
        outs.append(json.loads(out))
    study = load(storage_url, name)
    c = states(study)
    assert c["RUNNING"] == 0 and c["FAIL"] == 0
    told = [o["studies"][0]["told"] for o in outs]
    assert sum(told) == c["COMPLETE"]                       # each trial counted by exactly one worker
    assert 64 <= c["COMPLETE"] <= 64 + 4                    # the target, overshot by at most one batch
    assert all(n > 0 for n in told), told                   # both took part
    sims = simulated_points(study)
    assert len(sims) == len(set(sims)) == sum(o["simulated"] for o in outs)
    # the planner reads the workers' trials: no more exploration, and the answer of a plain run
    res = plan(req)
    ref = plan(small_request(None, None, strategy="frontier", storage=None))
    assert (res.designs[0].prompt, res.designs[0].token) == (ref.designs[0].prompt, ref.designs[0].token)
    explore = [r for r in st.trial_table(load(storage_url, name)) if r["phase"] == "explore"]
    assert len(explore) == c["COMPLETE"]


def test_killed_worker_then_resume(tmp_path):
    """kill -9 in the middle of a worker's run; the planner goes on, fails the dead trials, same answer."""
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    req = small_request(url, "kill")
    name = stored.prepare(req, "HH", n_trials=400)
    for _ in range(5):   # a batch may end between reading RUNNING and the kill: then a worker is killed again
        p = start_worker(url, name, "--batch", "4")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            c = states(load(url, name))
            if c["COMPLETE"] >= 12 and c["RUNNING"] >= 1:      # in the middle of a batch
                break
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        p.communicate()
        left = states(load(url, name))["RUNNING"]
        if left:
            break
    assert left >= 1                                        # the crash left trials RUNNING
    res = plan(req)
    study = load(url, name)
    c = states(study)
    assert c["RUNNING"] == 0 and c["FAIL"] == left          # failed at once (a dead process on this machine)
    sims = simulated_points(study)
    assert len(sims) == len(set(sims))
    ref = plan(small_request(None, None, strategy="frontier", storage=None))
    assert (res.designs[0].prompt, res.designs[0].token) == (ref.designs[0].prompt, ref.designs[0].token)


# --- the command line -------------------------------------------------------------------------

def one_line_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("args, needle", [
    (["--storage", "foo://x"], "unsupported database"),
    (["--storage", "sqlite:////no/such/folder/plan.db"], "does not exist"),
    (["--storage", "postgresql://nobody@127.0.0.1:1/nothing"], "cannot open the database"),
    (["--study", "x"], "give --storage too"),
    (["--storage", "sqlite:///{tmp}/p.db", "--strategy", "exhaustive"], "--strategy optuna"),
])
def test_cli_bad_storage_is_one_line(args, needle, tmp_path):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    one_line_error(runner.invoke(app, ["--goal", "min-cost", "--rps", "10", "--designs", "HH", *args]), needle)


def test_cli_storage_is_for_min_goals(tmp_path):
    one_line_error(runner.invoke(app, ["--goal", "max-throughput", "--budget-power", "40xH100", "--designs", "HH",
                                       "--storage", f"sqlite:///{tmp_path / 'p.db'}"]), "max-throughput")


def test_cli_worker_errors(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    # no such file: said, and not created (an empty database a planner would never find)
    one_line_error(runner.invoke(app, ["worker", "--storage", url, "--study", "nope"]), "no such database file")
    assert not (tmp_path / "p.db").exists()
    one_line_error(runner.invoke(app, ["worker", "--storage", f"sqlite+pysqlite:///{tmp_path / 'p.db'}"]),
                   "no such database file")
    assert not (tmp_path / "p.db").exists()
    st.check_storage(url)   # a planner's storage, with no such study
    one_line_error(runner.invoke(app, ["worker", "--storage", url, "--study", "nope"]), "no study 'nope'")
    one_line_error(runner.invoke(app, ["worker", "--storage", "memory"]), "persistent --storage")
    one_line_error(runner.invoke(app, ["worker", "--storage", "foo://x"]), "unsupported database")
    one_line_error(runner.invoke(app, ["worker"]), "--storage")


def test_worker_json_on_stdout_is_the_report_alone(tmp_path):
    """worker --json /dev/stdout printed its summary line after the JSON: not JSON any more."""
    db = tmp_path / "w.db"
    plan(goal="min-cost", rps=10, duration=10, designs="HH", jobs=1, storage=f"sqlite:///{db}", study="w")
    for target in ("/dev/stdout", "-"):
        proc = subprocess.run([sys.executable, "-m", "splitwise_plan", "worker", "--storage", f"sqlite:///{db}",
                               "--study", "w", "--json", target], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["told"] == 0 and doc["command"] == "worker" and doc["schema_version"] == 2, proc.stdout
        assert proc.stderr.splitlines()[-1].startswith("worker: told 0 trials"), proc.stderr



def sqlite_names(path: Path) -> list:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master"))
    finally:
        con.close()


def foreign_db(path: Path, *tables: str) -> Path:
    con = sqlite3.connect(path)
    for t in tables:
        con.execute(f"CREATE TABLE {t} (x TEXT)")
    con.commit()
    con.close()
    return path


PLAN = ["--goal", "min-cost", "--rps", "10", "--duration", "10", "--designs", "HH", "-q"]


@pytest.mark.parametrize("tables", [("users",), ("studies",), ("studies", "version_info", "alembic_version")])
@pytest.mark.parametrize("cmd", [["worker"], PLAN], ids=["worker", "plan"])
def test_cli_refuses_an_sqlite_database_that_is_not_optunas(tmp_path, capsys, tables, cmd):
    """Optuna used to add its 13 tables to any SQLite file, then fail (or say only "An exception is
    raised during the commit" when the file had its own ``studies`` table): refused, file unchanged."""
    db = foreign_db(tmp_path / "other.db", *tables)
    before, data = sqlite_names(db), db.read_bytes()
    assert main([*cmd, "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: --storage {db} is an SQLite database but not an Optuna storage "
                   f"(its tables: {', '.join(sorted(tables))})"]
    assert sqlite_names(db) == before and db.read_bytes() == data


@pytest.mark.parametrize("cmd", [["worker"], PLAN], ids=["worker", "plan"])
def test_cli_refuses_a_file_that_is_not_sqlite(tmp_path, capsys, cmd):
    db = tmp_path / "notes.db"
    db.write_text("arrival_timestamp,prompt_size,token_size\n0.0,10,2\n")
    assert main([*cmd, "--storage", f"sqlite:///{db}"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: --storage {db} is not an SQLite database"]
    assert db.read_text().startswith("arrival_timestamp")


def test_a_worker_makes_no_storage_in_an_empty_sqlite_file(tmp_path, capsys):
    """A worker joins a planner's studies: an empty file (0 bytes, or a database with no table) is
    left as it is, while the planner may still make its storage there."""
    zero = tmp_path / "zero.db"
    zero.touch()
    bare = tmp_path / "bare.db"
    foreign_db(bare, "t")
    con = sqlite3.connect(bare)
    con.execute("DROP TABLE t")
    con.commit()
    con.close()
    for db in (zero, bare):
        assert main(["worker", "--storage", f"sqlite:///{db}"]) == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert f"{db} holds no Optuna storage" in line and line.startswith("error: "), line
        assert sqlite_names(db) == []
    assert zero.stat().st_size == 0
    st.check_storage(f"sqlite:///{zero}")          # the planner's path: Optuna's tables made there
    assert {"studies", "version_info", "alembic_version"} <= set(sqlite_names(zero))
    assert st.check_sqlite_file(str(zero)) is True


def test_optuna_schema_marker():
    """Optuna's ``studies`` with ``version_info``, or ``studies`` alone (another process is making the
    rest now: Optuna creates ``studies`` first, ``alembic_version`` last)."""
    studies, info = {"study_id", "study_name"}, {"version_info_id", "schema_version", "library_version"}
    assert st.is_optuna_schema({"studies": studies, "version_info": info, "trials": {"trial_id"}})
    assert st.is_optuna_schema({"studies": studies})
    assert not st.is_optuna_schema({"studies": {"x"}})
    assert not st.is_optuna_schema({"studies": studies, "users": {"x"}})
    assert not st.is_optuna_schema({"alembic_version": {"version_num"}, "users": {"x"}})


def test_cli_plan_resumes_from_sqlite(tmp_path):
    """The planner with --storage: the second run reads every trial back and simulates nothing new."""
    url = f"sqlite:///{tmp_path / 'plan.db'}"
    args = ["--goal", "min-cost", "--rps", "10", "--duration", "20", "--designs", "HH", "--confirm-method", "fluid",
            "--jobs", "1", "--storage", url]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    [name] = st.study_names(url)
    n = states(load(url, name))["COMPLETE"]
    second = runner.invoke(app, args)
    assert second.exit_code == 0, second.output
    assert states(load(url, name))["COMPLETE"] == n          # nothing new to simulate or store
    win = [ln for ln in first.stdout.splitlines() if ln.startswith("Winner")]
    assert win and win == [ln for ln in second.stdout.splitlines() if ln.startswith("Winner")]
    worker = runner.invoke(app, ["worker", "--storage", url, "--study", name.split("/")[0], "--json", "-"])
    assert worker.exit_code == 0, worker.output
    assert json.loads(worker.stdout)["told"] == 0            # the study is complete already


def test_a_study_remembers_its_kv_transfer_and_keeps_older_names():
    # the reference's link is left out of a study's request, so studies made before the option keep
    # their names; any other link is part of the question a worker rebuilds
    plain = PlanRequest(goal="min-cost", rps=70)
    # the name the command line's --rps 70 (a float) always gave; an int from Python is the same question
    assert stored.study_prefix(plain, "fluid") == "min-cost-bloom-176b-coding-70rps-120s-seed0-6d0d1a6a"
    assert {stored.study_prefix(PlanRequest(rps=v), "fluid") for v in (70, 70.0, "70", np.int64(70))} == {
        stored.study_prefix(plain, "fluid")}
    assert "transfer" not in stored.request_attrs(plain, "fluid")[0]
    slow = PlanRequest(goal="min-cost", rps=70, transfer="layerwise", bandwidth=12.5)
    r, _ = stored.request_attrs(slow, "fluid")
    assert (r["transfer"], r["bandwidth"]) == ("layerwise", 12.5)
    assert stored.study_prefix(slow, "fluid") != stored.study_prefix(plain, "fluid")
    r = dict(r, limits=(), designs=("HH",))
    assert PlanRequest(**r).scheduler == slow.scheduler


def test_processes_that_open_a_new_storage_at_once_all_get_it(tmp_path):
    """Planners and workers started together on a new SQLite file race to create its tables; the
    loser used to fail ('UNIQUE constraint failed: alembic_version'). Each now opens the tables."""
    code = "import sys; from splitwise_plan.search.storage import open_storage; open_storage(sys.argv[1])"
    for k in range(2):
        url = f"sqlite:///{tmp_path / f'race{k}.db'}"
        procs = [subprocess.Popen([sys.executable, "-c", code, url], stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
        errs = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, errs


def test_opening_a_storage_another_process_is_creating_waits_for_its_tables(tmp_path, monkeypatch):
    real = optuna.storages.RDBStorage
    said = iter(["(sqlite3.OperationalError) table studies already exists",
                 "(sqlite3.IntegrityError) UNIQUE constraint failed: alembic_version.version_num"])

    def racing(*a, **k):
        why = next(said, None)
        if why is not None:
            raise RuntimeError(why)
        return real(*a, **k)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    monkeypatch.setattr(urls, "_STORAGES", {})
    assert st.open_storage(f"sqlite:///{tmp_path / 'new.db'}") is not None

    def broken(*a, **k):
        raise RuntimeError("disk I/O error")

    monkeypatch.setattr(optuna.storages, "RDBStorage", broken)   # any other error: at once, one line
    monkeypatch.setattr(urls, "_STORAGES", {})
    with pytest.raises(SplitwisePlanError, match="cannot open the database: disk I/O error"):
        st.open_storage(f"sqlite:///{tmp_path / 'other.db'}")


def test_a_plan_leaves_the_callers_optuna_logging_as_it_was():
    """The planner quiets Optuna's line per trial while it runs, not for the rest of the notebook."""
    before = optuna.logging.get_verbosity()
    try:
        optuna.logging.set_verbosity(optuna.logging.DEBUG)
        plan(goal="min-cost", rps=5, duration=10, designs="HH", strategy="optuna", jobs=1)
        assert optuna.logging.get_verbosity() == optuna.logging.DEBUG
    finally:
        optuna.logging.set_verbosity(before)
