"""A trial's record: the design point, the simulator's whole result as JSON, the SLO ratio and verdict.

Also what the planner reads back: the results of COMPLETE trials (:func:`sync`), the cheapest passing
point (:func:`best_trial`) and a flat table of the trials (:func:`trial_table`).
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass
from types import SimpleNamespace

from splitwise_plan.sim.records import from_json, to_json

ATTR = "splitwise_plan"          # study user attribute: the question
TRIAL_ATTR = "sim"               # trial user attribute: the point and its result
WORKER_ATTR = "worker"           # trial user attribute set at ask time: the owning process
SCHEMA = 1

Point = tuple[int, int]


# --- storage URLs ---------------------------------------------------------------------


# --- workers and stale trials ---------------------------------------------------------


# --- results as JSON ------------------------------------------------------------------

def encode_result(r) -> dict:
    """A simulation result as JSON-able data (a SimulationResult whole; any other object's fields)."""
    from splitwise_plan.sim.simulator import SimulationResult

    if isinstance(r, SimulationResult):
        return r.to_record()
    if is_dataclass(r):
        return {"type": "namespace", "fields": {f.name: to_json(getattr(r, f.name)) for f in fields(r)}}
    return {"type": "namespace", "fields": {k: to_json(v) for k, v in vars(r).items()}}


def decode_result(d: dict):
    """The inverse of :func:`encode_result`."""
    from splitwise_plan.sim.simulator import SimulationResult

    if d.get("type") == "SimulationResult":
        return SimulationResult.from_record(d)
    return SimpleNamespace(**{k: from_json(v) for k, v in d["fields"].items()})


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
                   cost=to_json(getattr(r, "cost", None)), power=to_json(getattr(r, "power", None)),
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


# --- the planner's studies --------------------------------------------------------------


# --- workers ------------------------------------------------------------------------------


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
