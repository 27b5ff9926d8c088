"""A plan's search kept in a storage: the question each design's study holds, and a worker's rebuild
of it.

The study stores the plan's inputs (paths made absolute, with the files' SHA-256), the design and
its (prompt, token) space, so ``splitwise-plan worker`` needs only the storage URL and the name.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from splitwise_plan.errors import SplitwisePlanError, input_name
from splitwise_plan.inputs.paths import file_sha256
from splitwise_plan.planning.objectives import grid_limits, key_fn, pool_units
from splitwise_plan.planning.request import Inputs, PlanRequest, default_batch
from splitwise_plan.search import Evaluator, Space, capacity_model
from splitwise_plan.search.storage import (
    ATTR,
    SCHEMA,
    best_trial,
    check_sqlite_file,
    check_storage,
    explore,
    normalize_storage,
    open_storage,
    open_study,
    redact,
    sqlite_file,
    study_names,
    worker_id,
)


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
         "duration": float(req.duration), "seed": int(req.seed), "tp": req.tp, "search_method": method,
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
    from splitwise_plan.inputs.designs import get_design

    return f"{study_prefix(req, method)}/{get_design(design if isinstance(design, str) else design.name).short}"


def question(req, design, method: str, space, units: tuple[dict, dict], rate: float, batch: int) -> dict:
    """The study attribute that lets a worker rebuild the search of one design."""
    r, files = request_attrs(req, method)
    up, ut = units
    from splitwise_plan.inputs.designs import get_design
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


def plan_space(req, design: str):
    """(evaluator, space, units, rate, batch, method) of one design, built as the planner builds them."""
    from splitwise_plan.inputs.designs import get_design

    d = get_design(design)
    method = req.resolved_search_method()
    inputs = Inputs.load(req)
    rate = req.rps if req.rps is not None else inputs.trace.rate
    sim = inputs.simulator(inputs.stream(req.rps, req.seed), method, search=True)
    cm = capacity_model(sim, d)
    p_max, t_max = grid_limits(req, d, rate)
    up, ut = pool_units(inputs, d)
    ps = np.arange(1, p_max + 1)
    space = Space((1, p_max), (0, 0) if d.is_baseline else (1, t_max), key_fn(req.objective, up, ut),
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


def rebuild(attrs: dict):
    """(evaluator, space) of a stored question: the worker's view of the planner's search."""
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
    space = Space(tuple(sp["p_range"]), tuple(sp["t_range"]), key_fn(sp["objective"], sp["up"], sp["ut"]), t_min=t_min)
    ev = Evaluator(sim, attrs["design"], method, threshold=1.0 - float(r.get("margin", 0.0)))
    return ev, space


def run_worker(url: str, name: str | None = None, *, trials: int | None = None, batch: int | None = None,
               wait_s: float = 0.0, log: Callable[[str], None] | None = None) -> dict:
    """Join the studies named ``name`` (or under ``name/``) and run their trials; a summary dict."""
    from optuna.trial import TrialState

    if trials is not None and (isinstance(trials, bool) or int(trials) < 1):
        raise SplitwisePlanError(f"{input_name('trials')} must be a positive integer, got {trials!r}")
    if batch is not None and (isinstance(batch, bool) or int(batch) < 1):
        raise SplitwisePlanError(f"{input_name('batch')} must be a positive integer, got {batch!r}")
    deadline = time.monotonic() + max(0.0, float(wait_s))
    db = sqlite_file(url)
    # opening a missing or empty file would make Optuna's tables there: a worker only joins a planner's
    while db not in (None, ":memory:") and not (os.path.isfile(db) and os.path.getsize(db) > 0
                                                 and check_sqlite_file(db)):
        if time.monotonic() >= deadline:
            what = f"{db} holds no Optuna storage" if os.path.isfile(db) else f"no such database file {db}"
            raise SplitwisePlanError(f"{input_name('storage')} {redact(normalize_storage(url))}: {what}; a worker joins "
                                     f"the studies a planner keeps there ({input_name('storage')} on the planner)")
        time.sleep(0.2)
    url = check_storage(url)
    if url is None:
        raise SplitwisePlanError(f"a worker needs a persistent {input_name('storage')} (sqlite:///FILE or postgresql://...)")
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
