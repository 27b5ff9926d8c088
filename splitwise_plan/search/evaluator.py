"""Simulations for a search: the :class:`Evaluator` caches and counts a design's runs, and
:class:`Lockstep` lets several designs' searches share each simulation round.

:func:`passes` is the verdict every search and the planner use: every SLO met, every request
finished, and the tightest SLO below ``1 - margin``.
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import contextmanager
from typing import Callable, Sequence

from splitwise_plan.search.space import Point

WAKE_S = 0.1   # how often a wait for another thread wakes to look whether the run was stopped (Ctrl-C)

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
        #: optional: ``verdict(result) -> bool`` replaces :func:`passes` (a search that learned from confirmation)
        self.verdict: Callable[[object], bool] | None = None
        self._run = run
        self.cache: dict[Point, object] = {}
        self.evaluations = 0
        self.calls = 0
        self.seconds = 0.0
        #: optional hooks (None: plain in-memory caching): ``prefetch(points)`` may fill the
        #: cache before a call (results other processes stored), ``record(points, results)``
        #: sees every new simulation (to store it); used by :mod:`splitwise_plan.search.storage`
        self.prefetch: Callable[[list[Point]], None] | None = None
        self.record: Callable[[list[Point], list], None] | None = None

    def ok(self, result) -> bool:
        """Does a simulation result pass (every SLO met, and within the threshold if below 1)?"""
        return passes(result, self.threshold) if self.verdict is None else self.verdict(result)

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

                from splitwise_plan.sim.simulator import starting_workers
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

    def stopped(self) -> bool:
        """Was :meth:`stop` called (a round in flight then ends at its next step)?"""
        return isinstance(self._error, KeyboardInterrupt)

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
