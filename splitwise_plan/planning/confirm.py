"""Confirmation: the confirm simulator (the discrete-event oracle by default) re-checks a search's answer
on every seed's stream, and a point holds when each passes with the request's margin
(:class:`Confirmer`, which may run its simulations ahead in a pool of workers, :class:`Pool`). Also the
search's simulator over every seed's stream (:class:`OverSeeds`), so the search asks what confirmation will.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import Future
from dataclasses import replace

from splitwise_plan.inputs.designs import get_design
from splitwise_plan.planning.explain import searched_text
from splitwise_plan.planning.memo import Kept, Memo, confirm_key, search_key
from splitwise_plan.planning.objectives import point_text
from splitwise_plan.planning.request import Inputs, PlanRequest
from splitwise_plan.planning.streams import first_stream, on_stream, severity, stream_seeds
from splitwise_plan.search import Evaluator, Space, passes, search
from splitwise_plan.sim.simulator import Simulator


class Pool:
    """Workers (threads, or processes) that remember their jobs, so that closing drops the ones still
    pending (confirmations started ahead and no longer needed) instead of awaiting them."""

    def __init__(self, executor) -> None:
        self.executor, self.jobs = executor, []

    def submit(self, fn, *args):
        self.jobs.append(self.executor.submit(fn, *args))
        return self.jobs[-1]

    def close(self, kill: bool = False) -> None:
        """Drop the pending jobs; wait for the running ones, or (``kill``: the caller was stopped) leave
        them (a thread's one simulation ends on its own) or end them (a process's)."""
        for job in self.jobs:
            job.cancel()
        if not kill:
            self.executor.shutdown(wait=True)
        elif hasattr(self.executor, "_processes"):
            self.executor.shutdown(wait=True, kill_workers=True)
        else:
            self.executor.shutdown(wait=False, cancel_futures=True)


class OverSeeds:
    """The search's simulator on every seed's stream, a point's result its worst: so the search
    asks what confirmation will (with ``seeds`` K, the worst of K streams), and its answer is not
    a point that holds on the first stream only (which confirmation then rejects, and the next,
    until the design is given up)."""

    def __init__(self, inputs: Inputs, req: PlanRequest, method: str, first: Simulator, rate=None,
                 memo: Memo | None = None, say=None) -> None:
        seeds = stream_seeds(inputs, req)
        rate = req.rps if rate is None else rate   # max-throughput searches at rates of its own
        self.sims = [first] + [inputs.simulator(inputs.stream(rate, s), method, search=True, threads=first.threads)
                               for s in seeds[1:]]
        self.tags = [None] if inputs.trace is not None else seeds   # each result's stream (a trace has no seed)
        self.runs: Counter = Counter()   # simulations run, per design
        self.stopped = lambda: False     # set to the lockstep's: a stopped plan runs no further stream
        self.memo = memo                 # the points of a stopped run of the same plan, and where to keep them
        self.say = say                   # say(text): what the plan is doing, in plain words (progress)
        self.method = method

    def run_points(self, points) -> list:
        return self._worst(points, lambda sim, pts: sim.run_points(pts), lambda pt: pt[0])

    def run_many(self, design: str, points) -> list:
        return self._worst(points, lambda sim, pts: sim.run_many(design, pts), lambda pt: design)

    def _worst(self, points, run, design_of) -> list:
        """Each point's worst result over the streams. A point that fails one stream fails them all, so
        each next stream runs only the points that still pass (the worst failure is not sought).
        A point the memo knows is not simulated again."""
        points = list(points)
        keys = [search_key(design_of(pt), pt[-2:]) for pt in points]
        known = [self.memo.get(k) if self.memo is not None else None for k in keys]
        worst = [k.result if k is not None else None for k in known]
        runs = [k.runs if k is not None else 1 for k in known]
        todo = [i for i, k in enumerate(known) if k is None]
        for i, r in zip(todo, run(self.sims[0], [points[i] for i in todo]) if todo else []):
            worst[i] = replace(r, seed=self.tags[0])
        for tag, sim in zip(self.tags[1:], self.sims[1:]):
            if self.stopped():
                raise KeyboardInterrupt
            live = [i for i in todo if worst[i].slo_met]
            for i, r in zip(live, run(sim, [points[i] for i in live]) if live else []):
                worst[i] = max(worst[i], replace(r, seed=tag), key=severity)
                runs[i] += 1
        for pt, n in zip(points, runs):
            self.runs[design_of(pt)] += n
        if self.say is not None and todo:
            designs = ", ".join(sorted({get_design(design_of(pt)).short for pt in points}))
            self.say(f"searching {designs} ({searched_text(self.method)}, "
                     f"{sum(self.runs[d] for d in dict.fromkeys(map(design_of, points))):,} simulations)")
        if self.memo is not None:
            self.memo.put([Kept(keys[i], worst[i], runs[i]) for i in todo])
        return worst


def _confirm_sim(inputs: Inputs, req: PlanRequest, rate, seed: int) -> Simulator:
    """The confirm method's simulator on one stream at ``rate``."""
    return inputs.simulator(inputs.stream(rate, seed), req.confirm_method)


def _confirm_run(inputs: Inputs, req: PlanRequest, design: str, pt, rate, seed: int):
    """One confirmation simulation (a task for a worker thread, picklable for a process)."""
    return _confirm_sim(inputs, req, rate, seed).run(design, *pt)


class Confirmer:
    """Runs the confirm method over ``seeds`` streams at one rate and keeps the worst result; a
    point holds when every stream passes with the request's margin, as in the search.

    With a process ``pool`` (and the ``lockstep`` its search runs in) each simulation runs
    there, while the other designs' searches go on here.
    """

    def __init__(self, inputs: Inputs, req: PlanRequest, search_method: str, pool=None, lockstep=None,
                 search_over_seeds: bool = False, memo: Memo | None = None, say=None) -> None:
        self.inputs, self.req, self.search_method = inputs, req, search_method
        self.pool, self.lockstep = pool, lockstep
        self.search_over_seeds = search_over_seeds   # a search result is then the worst over all the seeds
        self.memo = memo             # confirmations of a stopped run of the same plan, and where to keep them
        self.say = say               # say(text): what the plan is doing, in plain words (progress)
        self.threshold = 1.0 - req.margin
        self._sims: dict = {}
        self._jobs: dict = {}        # (design, point, rate, seed) -> Future of the pool
        self.runs = 0
        self.history: list = []      # ((rate, worst SimulationResult), ...): every point confirmed, in order

    def confirmed(self, rate: float | None = None) -> tuple:
        """:attr:`history` for a :class:`DesignPlan`: a trace's rate (None here) as ``rate``, the plan's."""
        return tuple((float(rate if r is None else r), res) for r, res in self.history)

    def _sim(self, rate, seed):
        k = (rate, seed)
        if k not in self._sims:
            self._sims[k] = _confirm_sim(self.inputs, self.req, rate, seed)
        return self._sims[k]

    def _submit(self, design: str, pt, rate, seed: int):
        key = (design, tuple(pt), rate, seed)
        if key not in self._jobs:
            self._jobs[key] = self.pool.submit(_confirm_run, self.inputs, self.req, design, pt, rate, seed)
        return self._jobs[key]

    def prefetch(self, design: str, pt, rate) -> None:
        """Start confirming ``pt`` in the pool (on the first stream) before it is asked for."""
        if self.pool is not None and self.req.confirm_method != self.search_method and (
                self.memo is None or self.memo.get(confirm_key(design, pt, rate, self.req.seed)) is None):
            self._submit(design, pt, rate, self.req.seed)

    def searches_done(self) -> bool:
        """Has every other design's search in this process ended (so confirmations started ahead slow none)?"""
        if self.lockstep is None:
            return True
        with self.lockstep.away():
            return self.lockstep.idle()

    def __call__(self, design: str, pt, rate, search_result=None):
        """(all seeds pass?, worst SimulationResult, simulations run)."""
        req = self.req
        if search_result is not None and req.confirm_method == self.search_method and self.search_over_seeds:
            # the search ran these simulations (on the first stream alone when there is one)
            worst = on_stream(search_result, first_stream(self.inputs, req))
            self.history.append((rate, worst))
            return passes(search_result, self.threshold), worst, 0
        results, runs = [], 0
        trace = self.inputs.trace is not None
        seeds = stream_seeds(self.inputs, req)
        for k, s in enumerate(seeds, 1):
            if self.say is not None:
                self._say(design, pt, rate, k, len(seeds))
            if (s == req.seed and search_result is not None and req.confirm_method == self.search_method):
                results.append(replace(search_result, seed=None if trace else s))   # the search ran it already
                continue
            kept = self.memo.get(confirm_key(design, pt, rate, s)) if self.memo is not None else None
            if kept is not None:
                results.append(kept.result)
            elif self.pool is not None:
                key = (design, tuple(pt), rate, s)
                job = self._submit(*key)
                with self.lockstep.away():   # the other searches go on meanwhile
                    if self.lockstep.idle() and job.cancel():   # not started, and nothing else runs here
                        job = self._jobs[key] = Future()
                        job.set_result(self._sim(rate, s).run(design, *pt))
                    results.append(job.result())
            else:
                results.append(self._sim(rate, s).run(design, *pt))
            results[-1] = replace(results[-1], seed=None if trace else s)
            if kept is None and self.memo is not None:
                self.memo.put([Kept(confirm_key(design, pt, rate, s), results[-1])])
            runs += 1
            if not passes(results[-1], self.threshold):
                break
        self.runs += runs
        worst = max(results, key=severity)
        self.history.append((rate, worst))
        return all(passes(r, self.threshold) for r in results), worst, runs

    def _say(self, design: str, pt, rate, k: int, n: int) -> None:
        """'confirming HH 330+34 (event simulation, stream 2 of 3)' (and the rate, when not the plan's)."""
        d = get_design(design)
        at = "" if rate is None or rate == self.req.rps else f" at {rate:g} req/s"
        streams = f", stream {k} of {n}" if n > 1 else ""
        self.say(f"confirming {d.short} {point_text(d, pt)}{at} ({searched_text(self.req.confirm_method)}{streams})")

    def lookahead(self, ev: Evaluator, space: Space, design: str, rate, excluded: list, best, depth: int,
                  batch: int) -> None:
        """Prefetch the confirmations of the ``depth`` points the search would return next, should
        ``best`` (then each next one) fail confirmation, as far as they need no new simulation."""
        if self.pool is None:
            return
        dry = Evaluator(run=_no_simulation, threshold=ev.threshold)
        dry.cache = ev.cache          # read only: a new point ends the look-ahead before it is stored
        out = list(excluded) + [best]
        for _ in range(depth):
            try:
                nxt = search(dry, space, "frontier", exclude=out, batch=batch).best
            except _NeedsSimulation:
                return
            if nxt is None:
                return
            self.prefetch(design, nxt, rate)
            out.append(nxt)


class _NeedsSimulation(Exception):
    pass


def _no_simulation(points):
    raise _NeedsSimulation
