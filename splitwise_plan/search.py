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
  :mod:`.study`.
- ``"exhaustive"``: the whole grid, for tests and benchmarks.

Points the capacity model proves infeasible are never simulated.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .errors import SplitwisePlanError

STRATEGIES = ("frontier", "optuna", "exhaustive")
Point = tuple[int, int]


# --- evaluation -------------------------------------------------------------------

def passes(result, threshold: float = 1.0) -> bool:
    """Does a simulation result pass: every SLO met, every request finished (the percentiles let
    1% of them go: a request that never gets memory must not) and, for a ``threshold`` below 1 (a
    safety margin of 1 - threshold), its tightest value/limit ratio below the threshold?"""
    if not result.slo_met or getattr(result, "completed", 0) < getattr(result, "requests", 0):
        return False
    if threshold >= 1.0:
        return True
    ratio = result.tightest.get("ratio", math.inf) if result.tightest else math.inf
    return bool(ratio < threshold)


def _run_chunk(sim, design, points, method):
    return sim.run_many(design, points, method=method)


class Evaluator:
    """Runs a simulator on design points, caching results and counting simulations.

    ``jobs`` > 1 splits each batch over joblib workers (threads for the fluid
    simulator, whose numpy kernels release the GIL; processes for the events oracle).
    ``run`` may replace the simulator: any ``callable(points) -> results`` whose
    results have ``slo_met`` and ``tightest`` (used by the tests).
    """

    def __init__(self, sim=None, design=None, method: str | None = None, *, jobs: int = 1,
                 run: Callable[[list[Point]], list] | None = None, threshold: float = 1.0) -> None:
        if run is None and sim is None:
            raise ValueError("an Evaluator needs a simulator or a run function")
        self.sim, self.design, self.method, self.jobs = sim, design, method, max(1, int(jobs or 1))
        #: a point passes when all SLOs hold and its tightest value/limit ratio is below this
        self.threshold = float(threshold)
        self._run = run
        self.cache: dict[Point, object] = {}
        self.evaluations = 0
        self.calls = 0
        self.seconds = 0.0
        #: optional hooks (None: plain in-memory caching): ``prefetch(points)`` may fill the
        #: cache before a call (results other processes stored), ``record(points, results)``
        #: sees every new simulation (to store it); used by :mod:`.study`
        self.prefetch: Callable[[list[Point]], None] | None = None
        self.record: Callable[[list[Point], list], None] | None = None

    def ok(self, result) -> bool:
        """Does a simulation result pass (every SLO met, and within the threshold if below 1)?"""
        return passes(result, self.threshold)

    def passed(self, pt: Point) -> bool:
        return self.ok(self.cache[pt])

    def __call__(self, points: Sequence[Point]) -> list:
        if self.prefetch is not None:
            self.prefetch([tuple(map(int, p)) for p in points])
        todo = list(dict.fromkeys(tuple(map(int, p)) for p in points if tuple(map(int, p)) not in self.cache))
        if todo:
            t0 = time.perf_counter()
            if self._run is not None:
                results = list(self._run(todo))
            elif self.jobs > 1 and len(todo) > 1:
                from joblib import Parallel, delayed
                from .simulator import starting_workers
                n = min(self.jobs, len(todo))
                chunks = [todo[i::n] for i in range(n)]
                prefer = "threads" if (self.method or getattr(self.sim, "method", "")) == "fluid" else "processes"
                with starting_workers():   # (a generator: the call starts them and returns)
                    outs = Parallel(n_jobs=n, prefer=prefer, return_as="generator")(
                        delayed(_run_chunk)(self.sim, self.design, c, self.method) for c in chunks)
                by_pt = {pt: r for c, o in zip(chunks, outs) for pt, r in zip(c, o)}
                results = [by_pt[pt] for pt in todo]
            else:
                results = self.sim.run_many(self.design, todo, method=self.method)
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            self.evaluations += len(todo)
            for pt, r in zip(todo, results):
                self.cache[pt] = r
            if self.record is not None:
                self.record(todo, results)
        return [self.cache[tuple(map(int, p))] for p in points]


WAKE_S = 0.1   # how often a wait for another thread wakes to look whether the run was stopped (Ctrl-C)


class Lockstep:
    """Runs what several searches (one thread each) ask of the simulator as one batch a round.

    ``run_points(items)`` simulates (design, prompt, token) items of several designs at
    once (``Simulator.run_points``). Each search evaluates through its :meth:`client`; a
    round runs when every search still going is waiting for one (a search that is done,
    or :meth:`away` confirming elsewhere, is not waited for), so the fluid simulator's
    per-request loop is paid once a round for all designs instead of once per design.
    """

    def __init__(self, run_points: Callable[[list], list]) -> None:
        self._run = run_points
        self._cond = threading.Condition()
        self._live = 0
        self._asks: dict = {}       # ticket -> [(design, p, t), ...]
        self._answers: dict = {}
        self._error: BaseException | None = None
        self.rounds = 0

    def enter(self) -> None:
        """A search starts (or comes back from :meth:`away`)."""
        with self._cond:
            self._live += 1

    def leave(self) -> None:
        """A search is done (or goes :meth:`away`): the others no longer wait for it."""
        with self._cond:
            self._live -= 1
            if self._asks and len(self._asks) >= self._live and self._error is None:
                self._round()

    def idle(self) -> bool:
        """No search is going (all done or away): this process has nothing else to run."""
        with self._cond:
            return self._live == 0

    @contextmanager
    def away(self):
        """A search waits for something else (a confirmation in another process)."""
        self.leave()
        try:
            yield
        finally:
            self.enter()

    def stop(self) -> None:
        """The caller was stopped (Ctrl-C): every search raises at its next simulation round.

        It does not wait for the lock: a round in progress holds it for seconds (and wakes the
        searches as it ends); the searches also look again every ``WAKE_S`` while they wait.
        """
        self._error = self._error or KeyboardInterrupt()
        if self._cond.acquire(blocking=False):
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()

    def client(self, design: str) -> Callable[[list], list]:
        """An ``Evaluator`` run function for ``design``'s search."""
        def run(points: list) -> list:
            ticket = object()
            with self._cond:
                if self._error is not None:
                    raise self._error
                self._asks[ticket] = [(design, *pt) for pt in points]
                if len(self._asks) >= self._live:
                    self._round()
                while ticket not in self._answers:
                    if self._error is not None:
                        raise self._error
                    self._cond.wait(WAKE_S)
                return self._answers.pop(ticket)
        return run

    def _round(self) -> None:
        """Simulate every waiting search's points in one call (with the lock held: they all wait)."""
        asks, self._asks = self._asks, {}
        try:
            results = self._run([x for items in asks.values() for x in items])
        except BaseException as exc:
            self._error = exc
            self._cond.notify_all()
            raise
        k = 0
        for ticket, items in asks.items():
            self._answers[ticket] = results[k:k + len(items)]
            k += len(items)
        self.rounds += 1
        self._cond.notify_all()


# --- the space ----------------------------------------------------------------------

@dataclass(frozen=True)
class Space:
    """A grid of (prompt, token) counts with a lexicographic key to minimize.

    ``key(p, t)`` returns a tuple (the objective first, then tie-breakers); a baseline
    has ``t_range == (0, 0)``. ``t_min[i]`` is the smallest token count that the
    capacity model allows for prompt count ``p_range[0] + i`` (``t_max + 1``: none).
    """

    p_range: tuple[int, int]
    t_range: tuple[int, int]
    key: Callable[[int, int], tuple] = field(repr=False)
    t_min: np.ndarray | None = field(default=None, repr=False)

    @property
    def ps(self) -> np.ndarray:
        return np.arange(self.p_range[0], self.p_range[1] + 1)

    @property
    def ts(self) -> np.ndarray:
        return np.arange(self.t_range[0], self.t_range[1] + 1)

    @property
    def size(self) -> int:
        return len(self.ps) * len(self.ts)

    def lower(self) -> np.ndarray:
        """Smallest token count worth simulating per prompt count."""
        lo = np.full(len(self.ps), self.t_range[0], dtype=np.int64)
        if self.t_min is not None:
            lo = np.maximum(lo, np.asarray(self.t_min, dtype=np.int64))
        return lo

    def candidates(self) -> int:
        """Points left after the capacity pruning."""
        lo = self.lower()
        return int(np.clip(self.t_range[1] - lo + 1, 0, None).sum())

    def cheaper_than(self, pt: Point) -> np.ndarray:
        """Per prompt count, the largest token count whose key is below ``pt``'s (``t_range[0] - 1``: none).

        A key grows with the token count (the objective's units are not negative and more
        machines break its ties), so each column is one bisection: no grid of millions of
        points is ever listed, whatever the rate scales the space to.
        """
        ts = range(self.t_range[0], self.t_range[1] + 1)
        best = self.key(*pt)
        return np.array([self.t_range[0] - 1 + bisect_left(ts, best, key=lambda t, p=int(p): self.key(p, t))
                         for p in self.ps], dtype=np.int64)


@dataclass(frozen=True)
class SearchResult:
    """The best passing point (None if none in the space) and what it took to find it."""

    best: Point | None
    result: object | None
    evaluations: int
    rounds: int
    grid_size: int
    candidates: int
    seconds: float
    strategy: str
    excluded: tuple = ()


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
    cap = np.full(n, t_hi, dtype=np.int64)    # per column, the token counts still cheaper than the best
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
    the frontier walk's own simulations are stored as trials too (see :mod:`.study`).
    ``study_attrs`` describe the question; they are stored with a new study and must match
    those of an existing one.
    """
    from . import study as st

    t0 = time.perf_counter()
    study, rdb = st.open_study(storage, study_name, seed=seed, n_trials=n_trials, attrs=study_attrs)
    stats = st.explore(study, evaluate, space, n_trials=n_trials, batch=batch, exclude=exclude, rdb=rdb)
    explored = evaluate.evaluations
    hooks = evaluate.prefetch, evaluate.record
    if rdb is not None:            # the certification reads and stores trials too
        st.attach(study, evaluate, space, exclude=exclude, phase="frontier")
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
