"""The iso-throughput goals, min-cost and min-power: per design, the cheapest (or least-power) prompt
and token machine counts that meet every SLO at the goal's rate. The capacity model and its ILP bound
the grid, a search with the fast simulator finds the optimum, and the confirm simulator re-checks it: a
rejected point is excluded and the search moves to the next; a confirmed one is then walked down while
the confirm simulator holds (:func:`_descend`; a baseline's single pool: gallop, then bisect).
"""

from __future__ import annotations

import time

import numpy as np

from splitwise_plan.errors import plural
from splitwise_plan.inputs.designs import Design, get_design
from splitwise_plan.planning.bias import Bias
from splitwise_plan.planning.confirm import Confirmer, OverSeeds
from splitwise_plan.planning.explain import method_text, out_of_reach, out_of_reach_text, reference_label
from splitwise_plan.planning.objectives import grid_limits, key_fn, point_text, pool_units, tightest_ratio
from splitwise_plan.planning.request import Inputs, PlanRequest, default_batch
from splitwise_plan.planning.result import DesignPlan
from splitwise_plan.planning.streams import evaluated_rows, first_stream, stream_seeds
from splitwise_plan.search import Evaluator, Lockstep, Space, capacity_model, search
from splitwise_plan.sim.simulator import FEW_CACHES, Simulator, cpu_cores


def plan_iso(inputs: Inputs, req: PlanRequest, design: str, method: str, lockstep: Lockstep | None = None,
             pool=None, sim: Simulator | None = None, over: OverSeeds | None = None, memo=None,
             say=None) -> DesignPlan:
    """The best machine counts of ``design`` at the goal's rate: search, then confirm.

    In a ``lockstep`` the search's simulations run batched with other designs' (see
    :func:`~splitwise_plan.planning.planner._plan_group`); a ``pool`` then runs its confirmations.
    ``sim``: the search's simulator at the goal's rate, if the caller has one; ``over``: the
    lockstep's simulations over the seeds' streams (which count the simulations run per design);
    ``memo``: the simulations of a stopped run of the same plan (a :class:`~.memo.Memo`), and where to keep new ones;
    ``say(text)``: told in plain words what the plan is doing (a progress line).
    """
    t0 = time.perf_counter()
    d = get_design(design)
    if sim is None:
        sim = inputs.simulator(inputs.stream(req.rps, req.seed), method, search=True)
    s = _IsoSearch(inputs, req, d, method, sim, lockstep, pool, t0, over, memo, say)
    missed = out_of_reach(sim, d)
    if missed:   # no machine count meets these SLOs: nothing to search
        return s._answer("infeasible", note=out_of_reach_text(missed, reference_label(sim.slos)))
    while True:
        sr = search(s.ev, s.space, req.strategy, exclude=s.excluded, **s.opts)
        if sr.best is None and s.ceiling is not None:   # nothing cheaper than its design's best answer
            return s._answer("pruned", note=f"nothing below its design's best answer, {s.ceiling:,.2f}")
        if sr.best is None:
            return s.climb() if s.excluded else s.infeasible()
        if req.strategy == "frontier" and cpu_cores() > 2:
            # with a core to spare: should this one fail, the search's next answer is already
            # being confirmed (on two cores both are busy, and the guess only slows the searches)
            s.confirm.lookahead(s.ev, s.space, d.name, req.rps, s.excluded, sr.best, 1, s.batch)
        ok, worst, _ = s.confirm(d.name, sr.best, req.rps, s.ev.cache.get(sr.best))
        if ok:
            return s.held(sr.best, worst)
        s.reject(sr.best, worst)
        if len(s.excluded) >= req.max_confirm:
            return s.climb()


def _evaluator(inputs: Inputs, req: PlanRequest, d: Design, method: str, sim: Simulator, lockstep,
               over_seeds: bool, memo=None, say=None) -> tuple[Evaluator, OverSeeds | None]:
    """The search's evaluator of ``d``: batched in the ``lockstep``, else over every seed's stream
    (``over_seeds``, when there are several), else the simulator ``sim`` itself; and the
    :class:`OverSeeds` it runs on, if its own."""
    jobs = max(1, req.jobs if req.jobs > 0 else 1)
    if lockstep is not None:
        return Evaluator(run=lockstep.client(d.name), threshold=1.0 - req.margin), None
    if over_seeds and (len(stream_seeds(inputs, req)) > 1 or memo is not None):
        seeds = OverSeeds(inputs, req, method, sim, memo=memo, say=say)
        return Evaluator(run=lambda pts: seeds.run_many(d.name, pts), threshold=1.0 - req.margin), seeds
    return Evaluator(sim, d.name, method, jobs=jobs, threshold=1.0 - req.margin), None


class _IsoSearch:
    """One design's search space, evaluator and confirmer at the goal's rate, and what the confirm
    simulator rejected so far: the state :func:`plan_iso` carries from one candidate to the next."""

    def __init__(self, inputs: Inputs, req: PlanRequest, d: Design, method: str, sim: Simulator, lockstep,
                 pool, t0: float, over: OverSeeds | None = None, memo=None, say=None) -> None:
        self.inputs, self.req, self.d, self.method, self.sim, self.t0 = inputs, req, d, method, sim, t0
        self.rate = rate = req.rps if req.rps is not None else inputs.trace.rate
        cm = capacity_model(sim, d)
        self.p_max, self.t_max = p_max, t_max = grid_limits(req, d, rate)
        self.units = pool_units(inputs, d)
        self.key = key_fn(req.objective, *self.units)
        ps = np.arange(1, p_max + 1)
        self.ceiling = inputs.ceilings.get(d.name)   # (--tp auto: the value a TP pair must beat, if any)
        self.space = Space((1, p_max), (0, 0) if d.is_baseline else (1, t_max), self.key,
                           t_min=cm.min_token(ps, t_max if not d.is_baseline else 0),
                           ceiling=None if self.ceiling is None else (round(self.ceiling, 9),))
        bound = cm.ilp_bound(req.objective, p_max=p_max, t_max=None if d.is_baseline else t_max)
        self.batch = req.batch or default_batch(method, d)
        # the search's simulations cover every seed's stream, but with a storage (whose workers
        # simulate the first stream's trials for any request)
        over_seeds = req.storage is None
        self.ev, own = _evaluator(inputs, req, d, method, sim, lockstep, over_seeds, memo, say)
        self.over = over if lockstep is not None else own   # counts the search's simulations, if not ev
        self.confirm = Confirmer(inputs, req, method, pool, lockstep, search_over_seeds=over_seeds, memo=memo,
                                 say=say)
        self.excluded: list = []
        self.rejected: list = []   # (point text, its confirmed tightest SLO ratio)
        self.failed: dict = {}     # point -> its worst confirm result, for each point rejected
        self.bias = Bias(sim.slos, 1.0 - req.margin)   # the search's optimism, learned from those
        self.base = dict(design=d.name, short=d.short, rate=float(rate), bound=bound.value,
                         grid_size=self.space.size, candidates=self.space.candidates())
        self.opts = self._search_options(pool)

    def _search_options(self, pool) -> dict:
        """The keyword arguments of each ``search(...)``."""
        req, d = self.req, self.d
        opts = {"batch": self.batch}
        if req.strategy == "optuna":
            opts.update(seed=req.seed)
        if req.storage is not None:   # trials kept in an Optuna storage: one study per (question, design)
            from splitwise_plan.planning.stored import search_options
            opts.update(search_options(req, d, self.method, self.space, self.units, self.rate, self.batch))
        if pool is not None and req.strategy == "frontier":
            opts["on_round"] = self._on_round
        return opts

    def _on_round(self, best, probes) -> None:
        """A round short of points is likely the last: confirm the best so far meanwhile."""
        if best is not None and len(probes) < self.batch:
            self.confirm.prefetch(self.d.name, best, self.req.rps)

    def _answer(self, status: str, **fields) -> DesignPlan:
        """The design's answer: ``status`` and ``fields``, with what the search and confirmation ran."""
        runs = self.ev.evaluations if self.over is None else self.over.runs[self.d.name]
        return DesignPlan(status=status, evaluations=runs,
                          confirmations=self.confirm.runs, confirmed=self.confirm.confirmed(self.rate),
                          seconds=time.perf_counter() - self.t0,
                          evaluated=evaluated_rows(self.ev, self.rate, first_stream(self.inputs, self.req)),
                          **fields, **self.base)

    def infeasible(self) -> DesignPlan:
        """No point left that the search passes: infeasible, or unconfirmed when confirmation rejected some."""
        d, req = self.d, self.req
        note = (f"no design within {self.p_max} machines meets the SLOs" if d.is_baseline else
                f"no design within {self.p_max} prompt x {self.t_max} token machines meets the SLOs")
        note += (f" with the {req.margin:.0%} margin" if req.margin > 0 else "") + _too_big(self.sim, d)
        if self.excluded:
            note += f"; {self._rejected_text()}"
        return self._answer("unconfirmed" if self.excluded else "infeasible", note=note)

    def reject(self, best, worst) -> None:
        """The confirm simulator failed ``best`` (its worst result ``worst``): exclude it from the search,
        and let the search read each SLO it missed as confirmation did (:class:`~.bias.Bias`), so that
        its next candidate is one it passes by more: a dearer design, not another of the same cost that the
        search is as optimistic about."""
        self.excluded.append(best)
        self.failed[tuple(best)] = worst
        point = point_text(self.d, best)
        self.rejected.append((point, tightest_ratio(worst)))
        if not self.d.is_baseline:   # (one pool: the next candidate is a machine more, dearer already)
            self.bias.learn(self.ev.cache.get(best), worst, self.ev.cache.values())
            self.ev.verdict = self.bias.passes

    def climb(self) -> DesignPlan:
        """The search has no candidate left that confirmation may hold (or ``max_confirm`` were rejected):
        the confirm simulator searches the grid itself, from what it has failed so far, so that a design a
        larger cluster satisfies is answered, and one that none within the grid does says so. A point the
        search failed by far (its results optimistic where they miss) is taken as failing without another
        simulation; the answer is then walked down as a confirmed candidate is (:meth:`held`)."""
        d, req = self.d, self.req
        rate, n_rejected, runs_before = req.rps, len(self.excluded), self.confirm.runs

        def run(points) -> list:
            searched = [self.ev.cache.get(pt) for pt in points]
            return [r if r is not None and not self.ev.ok(r) and not _near_miss(r)
                    else self.confirm(d.name, pt, rate)[1] for pt, r in zip(points, searched)]

        ev = Evaluator(run=run, threshold=1.0 - req.margin)
        ev.cache.update(self.failed)
        sr = search(ev, self.space, "frontier", exclude=self.excluded, batch=max(2, cpu_cores()))
        rejected = self._rejected_text()
        if sr.best is None:
            within = f"{self.p_max} machines" if d.is_baseline else f"{self.p_max} prompt x {self.t_max} token machines"
            return self._answer("unconfirmed", note=f"all {n_rejected} candidates {rejected}; "
                                f"{method_text(req.confirm_method)} holds no design within {within}"
                                + _too_big(self.sim, d))
        self.excluded += [pt for pt, r in ev.cache.items() if r.method == req.confirm_method and not ev.ok(r)]
        climbed = (f"after {plural(n_rejected, 'candidate')} failed, {method_text(req.confirm_method)} searched "
                   f"the grid itself ({self.confirm.runs - runs_before:,} simulations)")
        return self.held(sr.best, sr.result, climbed)

    def held(self, best, worst, how: str = "") -> DesignPlan:
        """The confirm simulator holds ``best``: the answer, once walked down to the confirm simulator's
        own optimum (when it is another simulator than the search's); ``how``: how it was found, if
        not by the search."""
        d, req = self.d, self.req
        p, t = best
        note = "; ".join(filter(None, (self._rejected_text(), how)))
        search, confirm = method_text(self.method), method_text(req.confirm_method)
        if d.is_baseline and req.confirm_method != self.method:
            refined, worst = self._refine_baseline(p, worst)
            if refined < p:
                note = (note + "; " if note else "") + f"{confirm} holds {refined} machines, fewer than {search}'s {p}"
                p = refined
        elif req.confirm_method != self.method:
            (p2, t2), worst = _descend(self.confirm, d.name, (p, t), worst, self.key, self.space, self.excluded,
                                       req.rps, self.ev.cache, _far_tries(self.sim, d), probe=self.ev)
            if (p2, t2) != (p, t):
                note = (note + "; " if note else "") + f"{confirm} holds {p2}+{t2}, cheaper than {search}'s {p}+{t}"
                p, t = p2, t2
        return self._answer("ok", prompt=p, token=t, cost=worst.cost, power=worst.power, result=worst, note=note)

    def _rejected_text(self) -> str:
        """The points the search passed and confirmation failed, with their tightest SLO's share of its limit."""
        if not self.rejected:
            return ""
        points = ", ".join(f"{pt} ({ratio:.0%})" for pt, ratio in self.rejected)
        return (f"{method_text(self.method)} passed and {method_text(self.req.confirm_method)} failed {points} "
                f"(tightest SLO as a share of its limit)")

    def _refine_baseline(self, p: int, worst):
        """(machines, worst result) of the confirm simulator's optimum of a baseline held at ``p``.

        One pool: the confirm simulator may hold with fewer machines than the search's; gallop down
        (steps 1, 1, 2, 4, ...), then bisect, so the answer is the confirm simulator's optimum."""
        confirm, name, rps = self.confirm, self.d.name, self.req.rps
        p_lb = int(np.argmax(self.space.lower() == 0)) + 1    # the capacity model's lower bound
        lo_p = max([p_lb - 1] + [q for q, _ in self.excluded if q < p])   # known to fail at or below
        step, refined = 1, p
        while refined - lo_p > 1:
            q = max(lo_p + 1, refined - step)
            ok2, worst2, _ = confirm(name, (q, 0), rps)
            if not ok2:
                lo_p = q
                break
            # one machine at a time first (the search is rarely off by more), then doubling
            refined, worst, step = q, worst2, (step * 2 if refined < p else step)
        while refined - lo_p > 1:
            q = (refined + lo_p) // 2
            ok2, worst2, _ = confirm(name, (q, 0), rps)
            if ok2:
                refined, worst = q, worst2
            else:
                lo_p = q
        return refined, worst


def _too_big(sim: Simulator, d: Design) -> str:
    """Why no design of ``d`` can finish every request, if some need more KV cache than any of its
    instances holds beside the weights ('' otherwise)."""
    c = sim.cluster(d, 1, 0 if d.is_baseline else 1)
    free = c.kv_room
    s = sim.stream
    n = int(np.count_nonzero((s.prompt_tokens + s.output_tokens) * float(c.model.kv_bytes_per_token) > free))
    return (f": {plural(n, 'request')} need{'s' if n == 1 else ''} more KV cache than an instance "
            f"holds beside the weights ({free / 1e9:.3g} GB), so never finish{'es' if n == 1 else ''}") if n else ""


# The fluid model's tightest SLO ratio runs up to ~1.28x the discrete-event oracle's near the Splitwise
# frontiers (bench_simulator.py: Splitwise-AA 76+8 at 100 req/s of coding, 1.22 against 0.95): a
# point the search failed by less than this much may well hold
_FLUID_SLACK = 1.3
# Where a token instance holds few requests' KV caches (simulator.FEW_CACHES), the fluid model can read
# 1.5x the oracle's or fail to finish, and a cheaper design that holds would stay hidden (Llama2-70B at TP2, 60 s at 70 req/s
# of coding: the search answers Splitwise-HA 8+6 and fails 7+6, which the oracle holds). There a descent
# also confirms the neighbours the search failed by more, until _FAR_TRIES of them have failed; elsewhere
# until _NEAR_TRIES have: the search stops a failing point early, and a knife edge it fails may hold in the
# oracle (Splitwise-AA 55+6 at 70 req/s of coding: 1.03 against 0.997), and an oracle run costs ~40 ms
_FAR_TRIES = 4
_NEAR_TRIES = 2


def _far_tries(sim: Simulator, d: Design) -> int:
    """Oracle runs a descent of ``d`` may lose on neighbours the search failed (see _FAR_TRIES)."""
    return _FAR_TRIES if sim.caches_per_token_instance(d) < FEW_CACHES else _NEAR_TRIES


def _descend(confirm, design: str, pt, worst, key, space: Space, known_fail, rate, searched: dict,
             far_tries: int = 0, probe=None):
    """From a confirmed Splitwise answer, move to a neighbour better by the objective (one machine
    fewer in a pool, or one moved to the cheaper pool) while the confirm simulator holds there.

    Near the frontier the fluid search errs both ways, so better neighbours are confirmed, best
    first, but none below a point the confirm simulator failed: those the search simulated to
    the end and failed by less than ``_FLUID_SLACK`` (``searched``: its results), and the
    others until ``far_tries`` of them have failed confirmation, those the search came closest on
    first (``probe(points)`` adds the search's results of points it never simulated to ``searched``).
    Returns (point, its worst result)."""
    failed = set(map(tuple, known_fail))   # points the confirm simulator failed: so do those with fewer machines
    lower = space.lower()
    (p_lo, p_hi), (_, t_hi) = space.p_range, space.t_range

    def allowed(n) -> bool:
        """May ``n`` be confirmed: a near miss of the search, or another while the far budget lasts?"""
        return far_tries > 0 or _near_miss(searched.get(n))

    while True:
        p, t = pt
        here = key(p, t)[0]
        # and one machine moved to the dearer pool for as few of the cheaper pool's as make it better
        # (Llama2-70B at TP2, Splitwise-HA: the search answered 6+11, the oracle holds 7+6, 12% cheaper)
        trades = [next(((p + 1, t - k) for k in range(2, t) if key(p + 1, t - k)[0] < here), None),
                  next(((p - k, t + 1) for k in range(2, p) if key(p - k, t + 1)[0] < here), None)]
        better = [n for n in ((p - 1, t), (p, t - 1), (p - 1, t + 1), (p + 1, t - 1), *filter(None, trades))
                  if p_lo <= n[0] <= p_hi and lower[n[0] - p_lo] <= n[1] <= t_hi
                  and key(*n)[0] < here and allowed(n)
                  and not any(f[0] >= n[0] and f[1] >= n[1] for f in failed)]
        unseen = [n for n in better if n not in searched]
        if far_tries > 0 and probe is not None and unseen:
            probe(unseen)   # the search's verdicts rank them (one pass)
        # the search's near misses first, best first; then the others, the search's closest first
        better.sort(key=lambda n: (0, key(*n)) if _near_miss(searched.get(n))
                    else (1, _closeness(searched.get(n)), key(*n)))
        if confirm.searches_done():   # the first here, the others side by side in the pool (if any)
            for n in better[1:]:
                confirm.prefetch(design, n, rate)
        for n in better:   # a point that holds is better than those tried before: never a candidate again
            if not allowed(n):   # the far budget ran out in this step
                continue
            ok, w, _ = confirm(design, n, rate)
            if ok:
                pt, worst = n, w
                break
            failed.add(n)
            far_tries -= not _near_miss(searched.get(n))
        else:
            return pt, worst


def _closeness(r) -> tuple:
    """How near the search came to passing ``r``: by its tightest SLO ratio, or, stopped by the
    verdict, by how many requests it ran first (more is nearer); unsearched last."""
    if r is None:
        return (2, 0.0)
    return (1, -float(r.completed)) if r.stopped_early else (0, tightest_ratio(r))


def _near_miss(r) -> bool:
    """Did the search simulate the point to the end and fail it by less than ``_FLUID_SLACK``?"""
    return r is not None and not r.stopped_early and tightest_ratio(r) < _FLUID_SLACK
