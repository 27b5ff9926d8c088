"""Search trials kept in an Optuna storage: resumable, shared by many workers, read back by the planner.

The storage is Optuna's own (no home-made queue):

- none (the default): an in-memory study that lives as long as the search;
- ``sqlite:///plan.db``: an embedded SQLite file, for resuming on one machine;
- ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``: a PostgreSQL server (the ``psycopg``
  driver, ``pip install 'splitwise-plan[postgres]'``), for workers on several machines.

One study per (question, design). The planner names it ``PREFIX/SHORT`` (``SHORT`` is the
design's short name, ``HH``), ``PREFIX`` being ``--study NAME`` or a name derived from the
inputs (goal, model, workload, rate, duration, seed and a hash of everything that changes
a simulation), and stores the question as the study's user attribute ``splitwise_plan``:
the plan inputs (paths made absolute, with the files' SHA-256), the design, the search
method and the (prompt, token) space. A ``splitwise-plan worker`` rebuilds the simulator
and the space from that attribute alone, so it needs only the storage URL and the name.

Each trial is one design point. Its user attribute ``sim`` holds the point, the simulator's
whole result (``result``: the nine percentiles, the SLO verdict, cost, power), the tightest
SLO ratio, pass/fail, the objective, whether this trial ran the simulator (``simulated``)
or reused a stored result, and the worker; ``worker`` (set when the trial is asked) names
the process that owns it. Rules that keep every point simulated once and every trial
counted once:

- before asking and before every simulation, the :class:`~.search.Evaluator` is filled
  from the study's COMPLETE trials; a trial whose point is already known is told the
  stored result without a simulation;
- a trial whose point a lower-numbered RUNNING trial of another worker already holds
  waits for that trial's result instead of simulating it (Optuna numbers trials in the
  order it creates them, under a lock on the study);
- a study holds ``n_trials`` TPE trials (those of the frontier walk come on top): each
  worker asks only what the COMPLETE and RUNNING ones leave (several workers may overshoot by up to a batch each, as Optuna's own
  ``MaxTrialsCallback`` does);
- in-flight trials carry an Optuna heartbeat; Ctrl-C (or any exception) fails them before
  the process stops, and a worker fails the RUNNING trials of a dead process: at once when
  that process ran on the same machine, after :data:`GRACE_PERIOD` seconds without a
  heartbeat otherwise (Optuna's ``fail_stale_trials``). Failed trials never count;
- the frontier walk that certifies the optimum stores its simulations as trials too.

So the same command run again goes on where it stopped, and the answer, certified by
the frontier walk, is the same as an uninterrupted run's for the same seed.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Sequence

import numpy as np

from .errors import SplitwisePlanError
from .paths import file_sha256

ATTR = "splitwise_plan"          # study user attribute: the question
TRIAL_ATTR = "sim"               # trial user attribute: the point and its result
WORKER_ATTR = "worker"           # trial user attribute set at ask time: the owning process
SCHEMA = 1
MEMORY_NAMES = ("memory", "inmemory", "in-memory", ":memory:")
HEARTBEAT_INTERVAL = 5           # seconds between heartbeats of in-flight trials (Optuna's, an int)
GRACE_PERIOD = 60                # seconds without a heartbeat after which a RUNNING trial is failed
PARAM_WAIT_S = 10.0              # how long to wait for another worker's just-asked trial to get its point
POLL_S = 0.1                     # polling period while waiting for another worker's trial

Point = tuple[int, int]


# --- storage URLs ---------------------------------------------------------------------

def redact(url: str | None) -> str:
    """The URL with its password hidden (for messages)."""
    if url is None:
        return "memory"
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL: show it as given
        return str(url)


def normalize_storage(url: str | None) -> str | None:
    """A checked storage URL: None for in-memory; ``sqlite:///`` with an absolute path;
    ``postgresql+psycopg://`` for a bare ``postgresql://`` (the psycopg 3 driver)."""
    if url is None:
        return None
    text = str(url).strip()
    if not text or text.lower() in MEMORY_NAMES:
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    hint = "use sqlite:///FILE or postgresql://USER@HOST[:PORT]/DATABASE"
    try:
        u = make_url(text)
    except (ArgumentError, ValueError):
        raise SplitwisePlanError(f"--storage {text!r} is not a storage URL; {hint}") from None
    backend = u.get_backend_name()
    if backend == "sqlite":
        db = u.database
        if not db or db == ":memory:":
            raise SplitwisePlanError(f"--storage {text!r} names no SQLite file (leave --storage out for an "
                                     f"in-memory study); use sqlite:///FILE")
        path = Path(db).expanduser()
        if not path.is_absolute():
            path = Path.cwd() / path
        if path.is_dir():
            raise SplitwisePlanError(f"--storage {text!r}: {path} is a folder, not a SQLite file")
        if not path.parent.is_dir():
            raise SplitwisePlanError(f"--storage {text!r}: folder {path.parent} does not exist")
        return u.set(database=str(path)).render_as_string(hide_password=False)
    if backend == "postgresql":
        if not u.database:
            raise SplitwisePlanError(f"--storage {redact(text)!r} names no database; "
                                     f"use postgresql://USER@HOST[:PORT]/DATABASE")
        if u.drivername == "postgresql":
            u = u.set(drivername="postgresql+psycopg")
        return u.render_as_string(hide_password=False)
    raise SplitwisePlanError(f"--storage {redact(text)!r}: unsupported database {backend!r}; {hint}")


_STORAGES: dict[str, object] = {}
_LOCK = threading.Lock()


def _engine_kwargs(url: str) -> dict:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 120}}      # wait on another process's write lock
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    return {}


# what opening a new storage says while another process creates its tables (SQLite, PostgreSQL)
_CREATING = ("already exists", "UNIQUE constraint failed", "duplicate key", "database is locked")
_CREATE_TRIES = 8


def sqlite_tables(path: str) -> dict[str, set[str]]:
    """The tables (and views) of an existing SQLite file with their columns, read only: what
    it holds is looked at before Optuna opens it, since Optuna adds its tables to any database.

    A file that is not an SQLite database is a one-line SplitwisePlanError.
    """
    import sqlite3

    try:
        con = sqlite3.connect(f"{Path(path).as_uri()}?mode=ro", uri=True, timeout=120)
    except sqlite3.Error as exc:
        raise SplitwisePlanError(f"--storage {path}: cannot open the database: {_first_line(exc)}") from None
    try:
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                           "AND name NOT LIKE 'sqlite!_%' ESCAPE '!'")]
        return {n: {r[1] for r in con.execute("SELECT * FROM pragma_table_info(?)", (n,))} for n in names}
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc):
            raise SplitwisePlanError(f"--storage {path} is not an SQLite database") from None
        raise SplitwisePlanError(f"--storage {path}: cannot read the database: {_first_line(exc)}") from None
    finally:
        con.close()


def is_optuna_schema(tables: dict[str, set[str]]) -> bool:
    """True for Optuna's tables: its ``studies`` and ``version_info`` (every Optuna schema has
    both), or ``studies`` alone, the first table of a storage another process is creating now."""
    if not {"study_id", "study_name"} <= tables.get("studies", set()):
        return False
    return {"schema_version", "library_version"} <= tables.get("version_info", set()) or set(tables) == {"studies"}


def check_sqlite_file(path: str) -> bool:
    """Refuse an SQLite file that holds tables but not Optuna's (Optuna would add its own to
    them); True when the file holds an Optuna storage, False when it holds no table yet."""
    tables = sqlite_tables(path)
    if tables and not is_optuna_schema(tables):
        names = sorted(tables)
        shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        raise SplitwisePlanError(f"--storage {path} is an SQLite database but not an Optuna storage "
                                 f"(its tables: {shown})")
    return bool(tables)


def open_storage(url: str | None):
    """The Optuna ``RDBStorage`` of a URL (created once per process), or None for in-memory.

    A bad URL, a missing driver or an unreachable database is a one-line SplitwisePlanError,
    and so is an SQLite file that is not Optuna's (checked before Optuna adds its tables).
    """
    url = normalize_storage(url)
    if url is None:
        return None
    with _LOCK:
        if url in _STORAGES:
            return _STORAGES[url]
        db = sqlite_file(url)
        if db not in (None, ":memory:") and os.path.isfile(db) and os.path.getsize(db) > 0:
            check_sqlite_file(db)
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            for attempt in range(_CREATE_TRIES):
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")      # heartbeat_interval is "experimental"
                        rdb = optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url),
                                                         heartbeat_interval=HEARTBEAT_INTERVAL,
                                                         grace_period=GRACE_PERIOD)
                    break
                except Exception as exc:  # noqa: BLE001 - another process creating the same new schema?
                    if attempt + 1 == _CREATE_TRIES or not any(m in str(exc) for m in _CREATING):
                        raise
                    time.sleep(0.1 * (attempt + 1))   # it has made its tables by now, or soon: open them
        except ImportError:
            raise SplitwisePlanError(
                f"--storage {redact(url)}: the database driver is not installed; "
                f"pip install 'splitwise-plan[postgres]' (psycopg)") from None
        except Exception as exc:  # noqa: BLE001 - SQLAlchemy/driver errors: one line, no traceback
            raise SplitwisePlanError(f"--storage {redact(url)}: cannot open the database: {_first_line(exc)}") from None
        if url.startswith("sqlite"):
            _sqlite_wal(rdb)
        # Optuna warns that heartbeats are meant for Study.optimize; explore() beats for its ask/tell trials
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        _STORAGES[url] = rdb
        return rdb


def _sqlite_wal(rdb) -> None:
    """Write-ahead log and fewer fsyncs for SQLite: readers never block the writer (several
    worker processes), and a commit costs about a millisecond instead of an fsync. A crash
    keeps the file consistent; at worst the last trials are lost and asked again."""
    import sqlalchemy

    def on_connect(dbapi_conn, _record):
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    sqlalchemy.event.listen(rdb.engine, "connect", on_connect)
    rdb.engine.dispose()          # connections opened while creating the tables predate the hook


def check_storage(url: str | None) -> str | None:
    """Validate a URL and connect once (so a bad storage fails before any simulation)."""
    url = normalize_storage(url)
    open_storage(url)
    return url


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return line[:300]


# --- workers and stale trials ---------------------------------------------------------

def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "-"


_HOST = f"{socket.gethostname()}|{_boot_id()}"


def worker_id() -> str:
    """``host|boot|pid|token``: who owns a trial (the process part is checked for liveness)."""
    return f"{_HOST}|{os.getpid()}|{uuid.uuid4().hex[:6]}"


def _dead_here(worker: str) -> bool:
    """True when ``worker`` ran on this machine (since its last boot) and its process is gone."""
    parts = str(worker).split("|")
    if len(parts) != 4 or "|".join(parts[:2]) != _HOST:
        return False
    try:
        pid = int(parts[2])
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class _Heartbeat:
    """One thread recording Optuna heartbeats for this process's in-flight trials."""

    def __init__(self, rdb) -> None:
        self.rdb = rdb
        self.ids: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="splitwise-heartbeat", daemon=True)
        self._thread.start()

    def add(self, trial_id: int) -> None:
        with self._lock:
            self.ids.add(trial_id)
        self._beat(trial_id)

    def discard(self, trial_id: int) -> None:
        with self._lock:
            self.ids.discard(trial_id)

    def _beat(self, trial_id: int) -> None:
        try:
            self.rdb.record_heartbeat(trial_id)
        except Exception:  # noqa: BLE001 - a missed beat is retried next period
            pass

    def _loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL):
            with self._lock:
                ids = list(self.ids)
            for tid in ids:
                self._beat(tid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def fail_stale(study, rdb, mine: Sequence[int] = ()) -> int:
    """Fail RUNNING trials of dead workers; returns how many this call failed."""
    import optuna
    from optuna.trial import TrialState

    mine = set(mine)
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))} - mine
    if not before:
        return 0
    rdb.heartbeat_interval, rdb.grace_period = HEARTBEAT_INTERVAL, GRACE_PERIOD
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.storages.fail_stale_trials(study)     # no heartbeat for GRACE_PERIOD seconds
    now = datetime.now()
    for tr in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if tr.number in mine:
            continue
        owner = tr.user_attrs.get(WORKER_ATTR)
        age = (now - tr.datetime_start).total_seconds() if tr.datetime_start else 0.0
        orphan = "prompt" not in tr.params and age > GRACE_PERIOD    # died between ask and its first heartbeat
        if (owner is not None and _dead_here(owner)) or orphan:
            study.tell(tr.number, state=TrialState.FAIL, skip_if_finished=True)
    failed = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))}
    return len(before & failed)


# --- results as JSON ------------------------------------------------------------------

def _to_json(x):
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x):
            return {k: _to_json(v) for k, v in x.items()}
        return {"__pairs__": [[_to_json(k), _to_json(v)] for k, v in x.items()]}
    if isinstance(x, (list, tuple)):
        return [_to_json(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return [_to_json(v) for v in x.tolist()]
    return x


def _from_json(x):
    if isinstance(x, dict):
        if set(x) == {"__pairs__"}:
            return {_key(k): _from_json(v) for k, v in x["__pairs__"]}
        return {k: _from_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_from_json(v) for v in x]
    return x


def _key(k):
    if isinstance(k, float) and k.is_integer():
        return int(k)
    return k


def encode_result(r) -> dict:
    """A simulation result as JSON-able data (a SimulationResult whole; any other object's fields)."""
    from .simulator import SimulationResult

    if isinstance(r, SimulationResult):
        return {"type": "SimulationResult", "fields": {f.name: _to_json(getattr(r, f.name)) for f in fields(r)}}
    if is_dataclass(r):
        return {"type": "namespace", "fields": {f.name: _to_json(getattr(r, f.name)) for f in fields(r)}}
    return {"type": "namespace", "fields": {k: _to_json(v) for k, v in vars(r).items()}}


def decode_result(d: dict):
    """The inverse of :func:`encode_result`."""
    from .simulator import SimulationResult

    vals = {k: _from_json(v) for k, v in d["fields"].items()}
    if d.get("type") == "SimulationResult":
        vals["violations"] = tuple(vals.get("violations") or ())
        return SimulationResult(**vals)
    return SimpleNamespace(**vals)


def _ratio(r) -> float:
    if getattr(r, "tightest", None):
        return float(r.tightest.get("ratio", math.inf))
    return 0.0 if r.slo_met else 2.0


def constraint(evaluate, r, pt: Point, excluded) -> float:
    """Optuna constraint of a point (<= 0 feasible): the SLO ratio - 1, or 1e9 when not simulated."""
    if r is None:
        return 1e9                               # pruned by the capacity model: not simulated
    ratio = _ratio(r)
    ok = evaluate.ok(r) and pt not in excluded
    if not math.isfinite(ratio):
        return 1e9
    return float(ratio - 1.0 if ok else max(ratio - 1.0, 1e-9))


def trial_record(evaluate, space, pt: Point, r, *, simulated: bool, worker: str, phase: str,
                 excluded=()) -> dict:
    """The ``sim`` user attribute of a trial."""
    rec = {"point": [int(pt[0]), int(pt[1])], "objective": float(space.key(*pt)[0]), "phase": phase,
           "worker": worker, "simulated": bool(simulated), "pruned": r is None}
    if r is not None:
        rec.update(slo_met=bool(r.slo_met), ratio=_ratio(r), ok=bool(evaluate.ok(r) and pt not in excluded),
                   cost=_to_json(getattr(r, "cost", None)), power=_to_json(getattr(r, "power", None)),
                   result=encode_result(r))
    return rec


def point_of(trial, t_lo: int, has_token: bool = True) -> Point | None:
    """The (prompt, token) point of a trial, None while it has not got all its parameters yet."""
    rec = trial.user_attrs.get(TRIAL_ATTR)
    if rec and "point" in rec:
        return int(rec["point"][0]), int(rec["point"][1])
    if "prompt" not in trial.params or (has_token and "token" not in trial.params):
        return None
    return int(trial.params["prompt"]), int(trial.params.get("token", t_lo))


def sync(trials, evaluate) -> int:
    """Put the results of COMPLETE trials into the evaluator's cache; returns how many were new."""
    from optuna.trial import TrialState

    new = 0
    for tr in trials:
        if tr.state != TrialState.COMPLETE:
            continue
        rec = tr.user_attrs.get(TRIAL_ATTR)
        if not rec or "result" not in rec:
            continue
        pt = (int(rec["point"][0]), int(rec["point"][1]))
        if pt not in evaluate.cache:
            evaluate.cache[pt] = decode_result(rec["result"])
            new += 1
    return new


# --- studies --------------------------------------------------------------------------

def _sampler(seed: int | None, n_trials: int):
    import optuna

    new_api = hasattr(optuna.trial.Trial, "set_constraint")   # Optuna >= 5
    kw = {} if new_api else {"constraints_func": lambda tr: tr.user_attrs.get("constraint", (1.0,))}
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(1, n_trials)),
                                      constant_liar=True, **kw)


def _identity(attrs: dict) -> dict:
    """The part of a question that decides what a stored simulation means."""
    req = {k: v for k, v in attrs.get("request", {}).items() if k not in ("margin", "limits")}
    sp = attrs.get("space", {})
    return {"request": req, "files": attrs.get("files", {}), "design": attrs.get("design"),
            "p_range": sp.get("p_range"), "t_range": sp.get("t_range"), "objective": sp.get("objective")}


def _diff(old: dict, new: dict, where: str = "") -> str | None:
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            d = _diff(a, b, f"{where}{k}.")
            if d:
                return d
        elif a != b:
            return f"{where}{k}: {a!r} there, {b!r} here"
    return None


def open_study(storage, name: str | None, *, seed: int | None = 0, n_trials: int = 24,
               attrs: dict | None = None, must_exist: bool = False):
    """(study, RDBStorage or None): a new or existing study, its question checked against ``attrs``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage is None or isinstance(storage, str):
        rdb = store = open_storage(storage)    # None: in memory
    else:                                      # an Optuna storage object given by the caller
        store = storage
        rdb = storage if isinstance(storage, optuna.storages.RDBStorage) else None
    sampler = _sampler(seed, n_trials)
    try:
        if must_exist:
            study = optuna.load_study(study_name=name, storage=store, sampler=sampler)
        else:
            study = optuna.create_study(direction="minimize", sampler=sampler, storage=store,
                                        study_name=name, load_if_exists=name is not None)
    except KeyError:
        raise SplitwisePlanError(f"no study {name!r} in {redact(getattr(store, 'url', None))}") from None
    except SplitwisePlanError:
        raise
    except Exception as exc:  # noqa: BLE001 - database errors: one line
        raise SplitwisePlanError(f"study {name!r} in {redact(getattr(store, 'url', None))}: {_first_line(exc)}") from None
    if attrs is not None:
        have = study.user_attrs.get(ATTR)
        if have is None:
            if rdb is not None and study.get_trials(deepcopy=False):
                raise SplitwisePlanError(f"study {name!r} in {redact(rdb.url)} was not made by splitwise-plan; "
                                         f"give another --study")
            study.set_user_attr(ATTR, {**attrs, "n_trials": int(n_trials)})
        else:
            d = _diff(_identity(have), _identity(attrs))
            if d:
                raise SplitwisePlanError(f"study {name!r} in {redact(getattr(rdb, 'url', None))} holds another "
                                         f"question ({d}); give another --study")
    return study, rdb


@dataclass
class ExploreStats:
    """What one :func:`explore` call did."""

    told: int = 0            # trials this process completed
    simulated: int = 0       # of which ran the simulator
    reused: int = 0          # took a stored result (earlier runs, other workers, this batch)
    pruned: int = 0          # infeasible by the capacity model: no simulation
    waited: int = 0          # waited for another worker's simulation of the same point
    failed: int = 0          # stale trials of dead workers this process failed
    rounds: int = 0
    complete: int = 0        # COMPLETE TPE trials in the study at the end
    running: int = 0         # RUNNING trials of other workers at the end

    def summary(self) -> str:
        return (f"{self.told} trials told here ({self.simulated} simulated, {self.reused} reused, "
                f"{self.pruned} pruned), {self.complete} complete in the study")


def explore(study, evaluate, space, *, n_trials: int, batch: int, exclude: Sequence[Point] = (),
            rdb=None, worker: str | None = None, log: Callable[[str], None] | None = None) -> ExploreStats:
    """Ask/evaluate/tell until the study holds ``n_trials`` COMPLETE or RUNNING TPE trials (module doc)."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    worker = worker or worker_id()
    stats = ExploreStats()
    lower = space.lower()
    p_lo, p_hi = space.p_range
    t_lo, t_hi = space.t_range
    excluded = set(map(tuple, exclude))
    inflight: dict[int, object] = {}          # trial number -> optuna Trial
    hb = _Heartbeat(rdb) if rdb is not None else None
    new_api = _new_api()
    has_token = t_hi > t_lo

    def tell(tr, pt, r, simulated):
        rec = trial_record(evaluate, space, pt, r, simulated=simulated, worker=worker, phase="explore",
                           excluded=excluded)
        c = constraint(evaluate, r, pt, excluded)
        try:
            tr.set_user_attr(TRIAL_ATTR, rec)
            if new_api:
                tr.set_constraint("slo", c)
            else:
                tr.set_user_attr("constraint", (c,))
            study.tell(tr, rec["objective"])
        except (UpdateFinishedTrialError, ValueError) as exc:
            if isinstance(exc, ValueError) and "Cannot tell" not in str(exc):
                raise
            # another worker failed this trial as stale (this process was too slow): keep the
            # result anyway, as a trial of its own
            study.add_trial(_frozen(space, pt, rec, c, new_api))
        inflight.pop(tr.number, None)
        if hb is not None:
            hb.discard(tr._trial_id)
        stats.told += 1
        stats.simulated += int(simulated)
        stats.pruned += int(r is None)
        stats.reused += int(r is not None and not simulated)

    try:
        while True:
            if rdb is not None:
                stats.failed += fail_stale(study, rdb, inflight)
            trials = study.get_trials(deepcopy=False)
            sync(trials, evaluate)
            complete = sum(t.state == TrialState.COMPLETE and _explored(t) for t in trials)
            running = sum(t.state == TrialState.RUNNING for t in trials)
            k = min(batch, n_trials - complete - running)
            if k <= 0:
                stats.complete, stats.running = complete, running
                break
            asked = []
            for _ in range(k):
                tr = _ask(study, worker) if rdb is not None else study.ask()
                inflight[tr.number] = tr
                if hb is not None:
                    hb.add(tr._trial_id)
                p = tr.suggest_int("prompt", p_lo, p_hi)
                t = tr.suggest_int("token", t_lo, t_hi) if t_hi > t_lo else t_lo
                asked.append((tr, (int(p), int(t))))
            stats.rounds += 1
            leader = _leaders(study, evaluate, inflight, t_lo, has_token) if rdb is not None else {}
            todo, sims, follow = [], set(), []
            for tr, pt in asked:
                if pt[1] < lower[pt[0] - p_lo]:
                    continue
                if pt in evaluate.cache:
                    continue
                lead = leader.get(pt)
                if lead is not None and lead < tr.number:
                    follow.append((tr, pt, lead))
                    continue
                if pt not in sims:
                    sims.add(pt)
                    todo.append(pt)
            known = set(evaluate.cache)
            if todo:
                evaluate(todo)
            fresh = set(todo)
            for tr, pt in asked:
                if any(f[0] is tr for f in follow):
                    continue
                if pt[1] < lower[pt[0] - p_lo]:
                    tell(tr, pt, None, False)
                    continue
                simulated = pt in fresh and pt not in known
                fresh.discard(pt)         # later trials of the same point in this batch reuse it
                tell(tr, pt, evaluate.cache[pt], simulated)
            if follow:
                stats.waited += len(follow)
                _wait_for_leaders(study, evaluate, rdb, follow, tell, inflight, stats)
    except BaseException:
        for number, tr in list(inflight.items()):   # Ctrl-C or a crash: never leave RUNNING trials
            try:
                study.tell(tr, state=TrialState.FAIL, skip_if_finished=True)
            except Exception:  # noqa: BLE001 - the database may be the cause
                pass
        raise
    finally:
        if hb is not None:
            hb.stop()
    if log is not None:
        log(stats.summary())
    return stats


def _ask(study, worker: str):
    """``study.ask()``, the trial created with its owner (``worker`` attribute) in one transaction,
    so that a process killed at any moment leaves no RUNNING trial without an owner."""
    import optuna
    from optuna.trial import FrozenTrial, TrialState

    if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):   # enqueued trials first
        tr = study.ask()
        tr.set_user_attr(WORKER_ATTR, worker)
        return tr
    template = FrozenTrial(number=-1, state=TrialState.RUNNING, value=None, datetime_start=datetime.now(),
                           datetime_complete=None, params={}, distributions={}, user_attrs={WORKER_ATTR: worker},
                           system_attrs={}, intermediate_values={}, trial_id=-1)
    trial_id = study._storage.create_new_trial(study._study_id, template_trial=template)
    local = getattr(study, "_thread_local", None)
    if local is not None and hasattr(local, "cached_all_trials"):
        local.cached_all_trials = None       # as Study.ask: the sampler reads the trials afresh
    return optuna.trial.Trial(study, trial_id)


def _explored(trial) -> bool:
    """Does a trial count toward ``n_trials`` (TPE's; not those the frontier walk stored)?"""
    return (trial.user_attrs.get(TRIAL_ATTR) or {}).get("phase") != "frontier"


def _new_api() -> bool:
    import optuna
    return hasattr(optuna.trial.Trial, "set_constraint")


def _leaders(study, evaluate, mine: dict, t_lo: int, has_token: bool) -> dict:
    """point -> lowest number of another process's RUNNING trial holding it.

    Waits (at most PARAM_WAIT_S) for lower-numbered trials asked but not yet given their point.
    """
    from optuna.trial import TrialState

    deadline = time.monotonic() + PARAM_WAIT_S
    top = max(mine) if mine else -1
    while True:
        trials = study.get_trials(deepcopy=False)
        sync(trials, evaluate)
        running = [t for t in trials if t.state == TrialState.RUNNING and t.number not in mine]
        pending = [t for t in running if t.number < top and point_of(t, t_lo, has_token) is None]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(POLL_S / 2)
    lead: dict = {}
    for t in running:
        pt = point_of(t, t_lo, has_token)
        if pt is not None and (pt not in lead or t.number < lead[pt]):
            lead[pt] = t.number
    return lead


def _wait_for_leaders(study, evaluate, rdb, follow, tell, inflight, stats) -> None:
    """Tell each follower the result of the trial it waits for, or simulate when that trial failed."""
    from optuna.trial import TrialState

    last_stale = time.monotonic()
    while follow:
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        sync(trials.values(), evaluate)
        rest = []
        for tr, pt, lead in follow:
            if pt in evaluate.cache:
                tell(tr, pt, evaluate.cache[pt], False)
            elif trials.get(lead) is None or trials[lead].state != TrialState.RUNNING:
                evaluate([pt])                 # the other worker's trial failed: simulate it here
                tell(tr, pt, evaluate.cache[pt], True)
            else:
                rest.append((tr, pt, lead))
        follow = rest
        if follow:
            if time.monotonic() - last_stale > HEARTBEAT_INTERVAL:
                stats.failed += fail_stale(study, rdb, inflight)
                last_stale = time.monotonic()
            time.sleep(POLL_S)


def _distributions(space) -> dict:
    from optuna.distributions import IntDistribution

    d = {"prompt": IntDistribution(int(space.p_range[0]), int(space.p_range[1]))}
    if space.t_range[1] > space.t_range[0]:
        d["token"] = IntDistribution(int(space.t_range[0]), int(space.t_range[1]))
    return d


def _frozen(space, pt: Point, rec: dict, c: float, new_api: bool):
    import optuna

    dist = _distributions(space)
    params = {"prompt": int(pt[0])}
    if "token" in dist:
        params["token"] = int(pt[1])
    attrs = {TRIAL_ATTR: rec, WORKER_ATTR: rec["worker"]}
    kw = {"constraints": {"slo": float(c)}} if new_api else {}
    if not new_api:
        attrs["constraint"] = (float(c),)
    return optuna.trial.create_trial(params=params, distributions=dist, value=float(rec["objective"]),
                                     user_attrs=attrs, **kw)


def attach(study, evaluate, space, *, exclude: Sequence[Point] = (), phase: str = "frontier",
           worker: str | None = None) -> None:
    """Make ``evaluate`` read the study before each call and store each new simulation as a trial."""
    from optuna.trial import TrialState

    worker = worker or worker_id()
    excluded = set(map(tuple, exclude))
    new_api = _new_api()

    def prefetch(points):
        if any(tuple(p) not in evaluate.cache for p in points):
            sync(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), evaluate)

    def record(points, results):
        frozen = []
        for pt, r in zip(points, results):
            rec = trial_record(evaluate, space, pt, r, simulated=True, worker=worker, phase=phase,
                               excluded=excluded)
            frozen.append(_frozen(space, pt, rec, constraint(evaluate, r, pt, excluded), new_api))
        study.add_trials(frozen)

    evaluate.prefetch, evaluate.record = prefetch, record


# --- the planner's studies --------------------------------------------------------------

def _abs_if_file(value):
    if value is None:
        return None
    p = Path(str(value)).expanduser()
    return str(p.resolve()) if p.is_file() else str(value)


def request_attrs(req, method: str) -> tuple[dict, dict]:
    """(request fields, {absolute path: sha256}) of a PlanRequest, as stored with its studies."""
    r = {"goal": req.goal, "rps": req.rps, "model": req.model, "workload": _abs_if_file(req.workload),
         "trace": _abs_if_file(req.trace), "slos": _abs_if_file(req.slos),
         "machines_file": _abs_if_file(req.machines_file), "profiles": _abs_if_file(req.profiles),
         "duration": float(req.duration), "seed": int(req.seed), "tp": int(req.tp), "search_method": method,
         "margin": float(req.margin), "limits": [list(x) for x in req.limits]}
    sched = req.scheduler
    if not sched.is_reference:   # the reference's link is left out, as in the studies made before the option
        r.update(transfer=sched.transfer, bandwidth=sched.bandwidth_gib_s)
    files = {}
    for k in ("workload", "trace", "slos", "machines_file", "profiles"):
        v = r[k]
        if v is not None and Path(v).is_file():
            files[v] = file_sha256(v)
    return r, files


def study_prefix(req, method: str) -> str:
    """``--study`` or ``GOAL-MODEL-WORKLOAD-RATErps-DURs-seedS-HASH`` (the hash covers every input)."""
    if req.study:
        return req.study
    r, files = request_attrs(req, method)
    ident = {k: v for k, v in r.items() if k not in ("margin", "limits")}
    h = hashlib.sha256(json.dumps({"request": ident, "files": files}, sort_keys=True).encode()).hexdigest()[:8]
    src = Path(req.trace).stem if req.trace else (Path(req.workload).stem if Path(str(req.workload)).is_file()
                                                  else str(req.workload))
    rate = f"{req.rps:g}rps" if req.rps is not None else "trace-rate"
    return f"{req.goal}-{req.model}-{src}-{rate}-{req.duration:g}s-seed{req.seed}-{h}".replace("/", "_")


def study_name(req, design, method: str) -> str:
    """The study of one design of a plan: ``PREFIX/SHORT``."""
    from .designs import get_design

    return f"{study_prefix(req, method)}/{get_design(design if isinstance(design, str) else design.name).short}"


def question(req, design, method: str, space, units: tuple[dict, dict], rate: float, batch: int) -> dict:
    """The study attribute that lets a worker rebuild the search of one design."""
    r, files = request_attrs(req, method)
    up, ut = units
    from .designs import get_design
    name = get_design(design if isinstance(design, str) else design.name).name
    return {"schema": SCHEMA, "tool": "splitwise-plan", "request": r, "files": files, "design": name,
            "rate": float(rate), "batch": int(batch), "seed": int(req.seed),
            "space": {"p_range": [int(x) for x in space.p_range], "t_range": [int(x) for x in space.t_range],
                      "t_min": None if space.t_min is None else [int(x) for x in np.asarray(space.t_min)],
                      "objective": req.objective,
                      "up": {k: float(v) for k, v in up.items()}, "ut": {k: float(v) for k, v in ut.items()}}}


def search_options(req, design, method: str, space, units: tuple[dict, dict], rate: float, batch: int) -> dict:
    """The keyword arguments the planner gives ``search(...)`` when ``req.storage`` is set."""
    return {"storage": req.storage, "study_name": study_name(req, design, method),
            "study_attrs": question(req, design, method, space, units, rate, batch)}


def check_request(req) -> None:
    """PlanRequest checks of ``storage``/``study``; switches the strategy to optuna with a storage."""
    if req.study is not None and (not str(req.study).strip() or any(c.isspace() for c in str(req.study))):
        raise SplitwisePlanError(f"--study must be a name without spaces, got {req.study!r}")
    if req.storage is None:
        if req.study is not None:
            raise SplitwisePlanError("--study names a study in a --storage; give --storage too")
        return
    url = normalize_storage(req.storage)
    object.__setattr__(req, "storage", url)
    if url is None:
        if req.study is not None:
            raise SplitwisePlanError("--study names a study in a --storage; an in-memory study has no name")
        return
    from .planner import in_memory_inputs
    loaded = in_memory_inputs(req)
    if loaded:   # a stored study is resumed, and its workers rebuild the search, from the files it names
        raise SplitwisePlanError(f"--storage needs the plan's inputs as files; {', '.join(loaded)} "
                                 f"{'is' if len(loaded) == 1 else 'are'} an object in memory here")
    if req.goal == "max-throughput":   # before connecting: a refused request leaves no new database behind
        raise SplitwisePlanError("--storage keeps the (prompt, token) search of --goal min-cost and min-power; "
                                 "max-throughput does not use it")
    if req.strategy == "exhaustive":
        raise SplitwisePlanError("--storage keeps Optuna trials: use --strategy optuna (the default with --storage)")
    open_storage(url)   # a bad storage fails before any simulation
    object.__setattr__(req, "strategy", "optuna")


def plan_space(req, design: str):
    """(evaluator, space, units, rate, batch, method) of one design, built as the planner builds them."""
    from .capacity import capacity_model
    from .designs import get_design
    from .planner import Inputs, _key_fn, _limits, _units, default_batch
    from .search import Evaluator, Space

    d = get_design(design)
    method = req.resolved_search_method()
    inputs = Inputs.load(req)
    rate = req.rps if req.rps is not None else inputs.trace.rate
    sim = inputs.simulator(inputs.stream(req.rps, req.seed), method, search=True)
    cm = capacity_model(sim, d)
    p_max, t_max = _limits(req, d, rate)
    up, ut = _units(inputs, d)
    ps = np.arange(1, p_max + 1)
    space = Space((1, p_max), (0, 0) if d.is_baseline else (1, t_max), _key_fn(req.objective, up, ut),
                  t_min=cm.min_token(ps, t_max if not d.is_baseline else 0))
    ev = Evaluator(sim, d.name, method, threshold=1.0 - req.margin)
    return ev, space, (up, ut), rate, req.batch or default_batch(method, d), method


def prepare(req, design: str, n_trials: int = 24) -> str:
    """Create (or check) the study of one design of a plan without running it; returns its name.

    For workers started before the planner, and for benchmarks.
    """
    if req.storage is None:
        raise SplitwisePlanError("prepare() needs a PlanRequest with a storage")
    _, space, units, rate, batch, method = plan_space(req, design)
    name = study_name(req, design, method)
    open_study(req.storage, name, seed=req.seed, n_trials=n_trials,
               attrs=question(req, design, method, space, units, rate, batch))
    return name


# --- workers ------------------------------------------------------------------------------

def sqlite_file(url: str | None) -> str | None:
    """The database file of an SQLite storage URL (None for another kind of storage, or no URL)."""
    if not url:
        return None
    from sqlalchemy.engine import make_url
    try:
        u = make_url(normalize_storage(url))
    except Exception:  # noqa: BLE001 - no URL, or a malformed one: open_storage says what is wrong
        return None
    if u.get_backend_name() != "sqlite":   # sqlite:// and sqlite+pysqlite:// alike
        return None
    return u.database or ":memory:"


def study_names(url: str | None, name: str | None = None) -> list[str]:
    """splitwise-plan studies in the storage named ``name`` or under ``name/`` (all when None)."""
    import optuna

    rdb = open_storage(url)
    if rdb is None:
        raise SplitwisePlanError("a worker needs a persistent --storage (sqlite:///FILE or postgresql://...)")
    try:
        summaries = optuna.get_all_study_summaries(rdb, include_best_trial=False)
    except Exception as exc:  # noqa: BLE001
        raise SplitwisePlanError(f"--storage {redact(url)}: {_first_line(exc)}") from None
    out = []
    for s in summaries:
        if ATTR not in s.user_attrs:
            continue
        if name is None or s.study_name == name or s.study_name.startswith(name.rstrip("/") + "/"):
            out.append(s.study_name)
    return sorted(out)


def rebuild(attrs: dict):
    """(evaluator, space) of a stored question: the worker's view of the planner's search."""
    from .planner import Inputs, PlanRequest, _key_fn
    from .search import Evaluator, Space

    if attrs.get("schema") != SCHEMA:
        raise SplitwisePlanError(f"the study was made by another splitwise-plan version (schema {attrs.get('schema')})")
    r = dict(attrs["request"])
    for path, digest in attrs.get("files", {}).items():
        if not Path(path).is_file():
            raise SplitwisePlanError(f"the study reads {path}, which this machine lacks (copy it to the same path)")
        if file_sha256(path) != digest:
            raise SplitwisePlanError(f"{path} differs from the file the study was made with (SHA-256)")
    r["limits"] = tuple(tuple(x) for x in r.get("limits", ()))
    r["designs"] = (attrs["design"],)
    r["jobs"] = 1
    req = PlanRequest(**r)
    method = r["search_method"]
    inputs = Inputs.load(req)
    sim = inputs.simulator(inputs.stream(req.rps, req.seed), method, search=True)
    sp = attrs["space"]
    t_min = None if sp.get("t_min") is None else np.asarray(sp["t_min"], dtype=np.int64)
    space = Space(tuple(sp["p_range"]), tuple(sp["t_range"]), _key_fn(sp["objective"], sp["up"], sp["ut"]), t_min=t_min)
    ev = Evaluator(sim, attrs["design"], method, threshold=1.0 - float(r.get("margin", 0.0)))
    return ev, space


def run_worker(url: str, name: str | None = None, *, trials: int | None = None, batch: int | None = None,
               wait_s: float = 0.0, log: Callable[[str], None] | None = None) -> dict:
    """Join the studies named ``name`` (or under ``name/``) and run their trials; a summary dict."""
    from optuna.trial import TrialState

    if trials is not None and (isinstance(trials, bool) or int(trials) < 1):
        raise SplitwisePlanError(f"--trials must be a positive integer, got {trials!r}")
    if batch is not None and (isinstance(batch, bool) or int(batch) < 1):
        raise SplitwisePlanError(f"--batch must be a positive integer, got {batch!r}")
    deadline = time.monotonic() + max(0.0, float(wait_s))
    db = sqlite_file(url)
    # opening a missing or empty file would make Optuna's tables there: a worker only joins a planner's
    while db not in (None, ":memory:") and not (os.path.isfile(db) and os.path.getsize(db) > 0
                                                 and check_sqlite_file(db)):
        if time.monotonic() >= deadline:
            what = f"{db} holds no Optuna storage" if os.path.isfile(db) else f"no such database file {db}"
            raise SplitwisePlanError(f"--storage {redact(normalize_storage(url))}: {what}; a worker joins "
                                     "the studies a planner keeps there (--storage on the planner)")
        time.sleep(0.2)
    url = check_storage(url)
    if url is None:
        raise SplitwisePlanError("a worker needs a persistent --storage (sqlite:///FILE or postgresql://...)")
    announced = False
    while True:
        names = study_names(url, name)
        if names or time.monotonic() >= deadline:
            break
        if log is not None and not announced:
            log(f"waiting up to {wait_s:g} s for {'study ' + repr(name) if name else 'a study'} in {redact(url)}")
            announced = True
        time.sleep(0.2)
    if not names:
        have = study_names(url)
        shown = ", ".join(have[:8]) + (", ..." if len(have) > 8 else "") if have else "none"
        what = f"no study {name!r}" if name else "no splitwise-plan study"
        raise SplitwisePlanError(f"{what} in {redact(url)} (splitwise-plan studies there: {shown})")
    wid = worker_id()
    t0 = time.perf_counter()
    out = {"storage": redact(url), "worker": wid, "studies": []}
    for n in names:
        rdb = open_storage(url)
        probe, _ = open_study(url, n, seed=None, must_exist=True)
        attrs = probe.user_attrs.get(ATTR)
        target = int(trials if trials is not None else attrs.get("n_trials", 24))
        seed = int.from_bytes(hashlib.sha256(f"{attrs.get('seed', 0)}|{wid}".encode()).digest()[:4], "little")
        study, _ = open_study(url, n, seed=seed, n_trials=target, must_exist=True)
        ev, space = rebuild(attrs)
        t1 = time.perf_counter()
        stats = explore(study, ev, space, n_trials=target, batch=int(batch or attrs.get("batch", 8)), rdb=rdb,
                        worker=wid)
        counts = {s.name.lower(): 0 for s in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.FAIL)}
        for t in study.get_trials(deepcopy=False):
            if t.state.name.lower() in counts:
                counts[t.state.name.lower()] += 1
        best = best_trial(study, ev)
        row = {"study": n, "design": attrs["design"], "trials_target": target, "told": stats.told,
               "simulated": stats.simulated, "reused": stats.reused, "pruned": stats.pruned,
               "waited": stats.waited, "failed_stale": stats.failed, **counts,
               "best": best, "seconds": round(time.perf_counter() - t1, 3),
               "simulator_seconds": round(ev.seconds, 3)}
        out["studies"].append(row)
        if log is not None:
            b = f"best passing so far {best['prompt']}+{best['token']} (objective {best['objective']:g})" if best \
                else "no passing point yet"
            log(f"{n}: told {stats.told} trials ({stats.simulated} simulated, {stats.reused} reused, "
                f"{stats.pruned} pruned) in {row['seconds']:.1f} s; the study holds {counts['complete']} complete, "
                f"{counts['running']} running, {counts['fail']} failed; {b}")
    out["told"] = sum(r["told"] for r in out["studies"])
    out["simulated"] = sum(r["simulated"] for r in out["studies"])
    out["seconds"] = round(time.perf_counter() - t0, 3)
    return out


def best_trial(study, evaluate) -> dict | None:
    """The cheapest stored passing point (by the objective, then the trial number)."""
    from optuna.trial import TrialState

    best = None
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        rec = t.user_attrs.get(TRIAL_ATTR) or {}
        if "result" not in rec:
            continue
        if not evaluate.ok(decode_result(rec["result"])):
            continue
        key = (float(rec["objective"]), t.number)
        if best is None or key < best[0]:
            best = (key, {"prompt": rec["point"][0], "token": rec["point"][1], "objective": rec["objective"],
                          "trial": t.number})
    return best[1] if best else None


def trial_table(study) -> list[dict]:
    """Every trial of a study as a flat row (state, point, simulated, verdict): for reports and tests."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        rec = t.user_attrs.get(TRIAL_ATTR) or {}
        pt = rec.get("point") or [t.params.get("prompt"), t.params.get("token")]
        rows.append({"number": t.number, "state": t.state.name, "prompt": pt[0], "token": pt[1],
                     "simulated": bool(rec.get("simulated", False)), "pruned": bool(rec.get("pruned", False)),
                     "phase": rec.get("phase"), "worker": rec.get("worker") or t.user_attrs.get(WORKER_ATTR),
                     "slo_met": rec.get("slo_met"), "ratio": rec.get("ratio"), "objective": rec.get("objective")})
    return rows
