"""Search the (prompt, token) machine counts of one design for the best point that meets the SLOs.

Three strategies share one :class:`Evaluator` (which caches and counts simulator runs):

- ``"frontier"`` (default): a cost-ordered walk of the pass/fail frontier. It assumes
  what the paper's Figure 12 shows, that more machines of either pool never turn a
  passing design into a failing one: a failure at (p, t) implies failures at every
  (p' <= p, t' <= t), a pass implies passes at every (p' >= p, t' >= t). Each round
  bisects, in a batch of columns (prompt counts), the token counts not yet decided
  and still cheaper than the best pass found, so it returns exactly the exhaustive
  grid's optimum under that monotonicity in a few dozen simulations instead of
  thousands, and each round is one batched ``run_many`` call.
- ``"optuna"``: an Optuna study (seeded TPE sampler with the SLO ratio as a
  constraint) explores the space first; its trials seed the frontier walk, which
  then certifies the optimum, so the answer is the same and the trials live in an
  Optuna storage (``storage=...``) that other tools can read. With a persistent storage
  (SQLite, PostgreSQL) a study is resumable and shared by worker processes: see
  :mod:`splitwise_plan.search.storage`.
- ``"exhaustive"``: the whole grid, for tests and benchmarks.

Points the capacity model proves infeasible are never simulated.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.search.evaluator import Evaluator
from splitwise_plan.search.space import Point, SearchResult, Space

STRATEGIES = ("frontier", "optuna", "exhaustive")


# --- strategies -----------------------------------------------------------------------

def frontier_search(evaluate: Evaluator, space: Space, *, batch: int = 8, exclude: Sequence[Point] = (),
                    max_rounds: int = 10_000,
                    on_round: Callable[[Point | None, list], None] | None = None) -> SearchResult:
    """Exact optimum of a monotone pass/fail grid in few, batched simulations (module doc).

    ``on_round(best so far, probes)``, if given, sees each round before it runs.
    """
    t0 = time.perf_counter()
    ps, ts = space.ps, space.ts
    p0, t_lo, t_hi = int(ps[0]), int(ts[0]), int(ts[-1])
    n = len(ps)
    excluded = set(map(tuple, exclude))
    fail = space.lower() - 1                     # F[i]: token counts <= F[i] fail at ps[i]
    fail = np.maximum(fail, t_lo - 1)
    passt = np.full(n, t_hi + 1, dtype=np.int64)  # token counts >= passt[i] pass at ps[i]
    best: Point | None = None
    best_key = None
    # per column, the token counts still cheaper than the best (and than the space's ceiling)
    cap = np.full(n, t_hi, dtype=np.int64) if space.ceiling is None else space.below(space.ceiling)
    stale = False                               # the best changed since ``cap`` was computed

    def absorb(pt: Point, ok: bool) -> None:
        nonlocal best, best_key, stale
        i = pt[0] - p0
        if pt in excluded:       # confirmed failing by the oracle: a plain failure here
            ok = False
        if ok:
            passt[i:] = np.minimum(passt[i:], pt[1])
            k = space.key(*pt)
            if best_key is None or k < best_key:
                best, best_key, stale = pt, k, True
        else:
            fail[: i + 1] = np.maximum(fail[: i + 1], pt[1])

    # What the evaluator already knows (earlier strategies, earlier confirmations).
    for pt in list(evaluate.cache):
        if p0 <= pt[0] <= ps[-1] and t_lo <= pt[1] <= t_hi:
            absorb(pt, evaluate.passed(pt))
    rounds = 0
    while rounds < max_rounds:
        if stale:
            cap, stale = space.cheaper_than(best), False
        lo = fail + 1
        hi = np.minimum(passt - 1, cap)
        active = np.flatnonzero(lo <= hi)
        if active.size == 0:
            break
        if active.size > batch:
            # the centres of ``batch`` equal slices of the active columns
            pick = np.unique(((np.arange(batch) + 0.5) * active.size / batch).astype(int))
            active = active[pick]
        # k-ary search: each column gets an equal share of the round's points, evenly
        # spaced in its undecided interval (one point = bisection); what narrow columns
        # leave of the round goes to the widest ones
        widths = (hi[active] - lo[active] + 1).astype(int)
        ks = np.minimum(max(1, batch // active.size), widths)
        spare = batch - int(ks.sum())
        while spare > 0 and (ks < widths).any():
            i = int(np.argmax(np.where(ks < widths, widths - ks, -1)))
            ks[i] += 1
            spare -= 1
        probes = []
        for i, width, k in zip(active, widths, ks):
            ts_i = {int(lo[i] + (j + 1) * width // (k + 1)) for j in range(k)} if k < width else \
                set(range(int(lo[i]), int(hi[i]) + 1))
            probes += [(int(ps[i]), t) for t in sorted(ts_i)]
        if on_round is not None:
            on_round(best, probes)
        results = evaluate(probes)
        rounds += 1
        for pt, r in zip(probes, results):
            absorb(pt, evaluate.ok(r))
    res = evaluate.cache.get(best) if best is not None else None
    return SearchResult(best, res, evaluate.evaluations, rounds, space.size, space.candidates(),
                        time.perf_counter() - t0, "frontier", tuple(sorted(excluded)))


def exhaustive_search(evaluate: Evaluator, space: Space, *, prune: bool = False, batch: int = 256,
                      exclude: Sequence[Point] = ()) -> SearchResult:
    """Simulate every point of the grid (or every point the capacity model leaves, with ``prune``)."""
    t0 = time.perf_counter()
    excluded = set(map(tuple, exclude))
    lower = space.lower() if prune else np.full(len(space.ps), space.t_range[0])
    pts = [(int(p), int(t)) for i, p in enumerate(space.ps) for t in space.ts if t >= lower[i]]
    rounds = 0
    for k in range(0, len(pts), batch):
        evaluate(pts[k:k + batch])
        rounds += 1
    passing = [pt for pt in pts if evaluate.passed(pt) and pt not in excluded]
    best = min(passing, key=lambda pt: space.key(*pt)) if passing else None
    return SearchResult(best, evaluate.cache.get(best) if best else None, evaluate.evaluations, rounds,
                        space.size, len(pts), time.perf_counter() - t0, "exhaustive", tuple(sorted(excluded)))


def optuna_search(evaluate: Evaluator, space: Space, *, n_trials: int = 24, batch: int = 8, seed: int = 0,
                  storage=None, study_name: str | None = None, exclude: Sequence[Point] = (),
                  study_attrs: dict | None = None) -> SearchResult:
    """Optuna TPE exploration (SLO ratio as constraint), then the frontier walk certifies the optimum.

    ``storage``: None (in memory), a URL (``sqlite:///plan.db``, ``postgresql://...``) or an
    Optuna storage. With a persistent storage and a ``study_name`` the trials survive the
    process: a second call (a resumed run, or another worker) reuses every stored
    simulation, asks only the trials still missing from the study's ``n_trials``, and
    the frontier walk's own simulations are stored as trials too (see :mod:`splitwise_plan.search.storage`).
    ``study_attrs`` describe the question; they are stored with a new study and must match
    those of an existing one.
    """
    from splitwise_plan.search.storage.explore import attach, explore
    from splitwise_plan.search.storage.studies import open_study

    t0 = time.perf_counter()
    study, rdb = open_study(storage, study_name, seed=seed, n_trials=n_trials, attrs=study_attrs)
    stats = explore(study, evaluate, space, n_trials=n_trials, batch=batch, exclude=exclude, rdb=rdb)
    explored = evaluate.evaluations
    hooks = evaluate.prefetch, evaluate.record
    if rdb is not None:            # the certification reads and stores trials too
        attach(study, evaluate, space, exclude=exclude, phase="frontier")
    try:
        fr = frontier_search(evaluate, space, batch=batch, exclude=exclude)
    finally:
        evaluate.prefetch, evaluate.record = hooks
    where = f" in study {study.study_name!r}: {stats.summary()}" if rdb is not None else ""
    return SearchResult(fr.best, fr.result, evaluate.evaluations, fr.rounds + stats.rounds,
                        space.size, space.candidates(), time.perf_counter() - t0,
                        f"optuna({explored} explored{where})+frontier", fr.excluded)


def search(evaluate: Evaluator, space: Space, strategy: str = "frontier", **kw) -> SearchResult:
    """Run one strategy (``frontier``, ``optuna`` or ``exhaustive``)."""
    if strategy == "frontier":
        return frontier_search(evaluate, space, **{k: v for k, v in kw.items() if k in ("batch", "exclude", "on_round")})
    if strategy == "optuna":
        return optuna_search(evaluate, space, **kw)
    if strategy == "exhaustive":
        return exhaustive_search(evaluate, space, **{k: v for k, v in kw.items() if k in ("prune", "exclude")})
    raise SplitwisePlanError(f"search strategy {strategy!r} is unknown; valid: {', '.join(STRATEGIES)}")
