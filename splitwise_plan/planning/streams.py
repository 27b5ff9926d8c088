"""The streams a plan runs on, and the results it keeps of them: the seeds an answer must hold on
(:func:`stream_seeds`; a trace is one stream), the worst result over them (:func:`severity`), results named by their stream (:func:`on_stream`, :func:`first_stream`), and
the rows of every point a search simulated (:func:`evaluated_rows`: a :class:`DesignPlan`'s ``evaluated``).
"""

from __future__ import annotations

from dataclasses import replace

from splitwise_plan.planning.objectives import tightest_ratio
from splitwise_plan.planning.request import Inputs, PlanRequest
from splitwise_plan.search import Evaluator


def stream_seeds(inputs: Inputs, req: PlanRequest) -> list[int]:
    """The seeds of the streams an answer must hold on (a trace is one stream)."""
    return [req.seed] if inputs.trace is not None else list(range(req.seed, req.seed + req.seeds))


def severity(r) -> tuple:
    """How badly a result misses: a failing one first, then by its tightest SLO ratio."""
    return not r.slo_met, tightest_ratio(r)


def first_stream(inputs: Inputs, req: PlanRequest) -> int | None:
    """The seed of a plan's first stream (None: a trace)."""
    return None if inputs.trace is not None else req.seed


def on_stream(r, seed: int | None):
    """``r`` naming the stream it ran on: ``seed`` unless it names one already (the worst of several)."""
    return r if r.seed is not None or seed is None else replace(r, seed=seed)


def evaluated_rows(ev: Evaluator, rate: float, seed: int | None) -> tuple:
    """The points an evaluator simulated, as ((rate, SimulationResult), ...) in (prompt, token) order, each
    result naming its stream (``seed``, None for a trace, where the search ran on one stream only)."""
    return tuple((float(rate), on_stream(r, seed)) for _, r in sorted(ev.cache.items()))


def evaluated_budget_rows(cache: dict, seed: int | None) -> tuple:
    """The points of every rate the max-throughput search tried (``cache``: rate -> (evaluator, ...)), on
    the stream of ``seed``."""
    return tuple(row for rate in sorted(cache) for row in evaluated_rows(cache[rate][0], rate, seed))
