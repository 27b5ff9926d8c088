"""The max-throughput goal (iso-cost, iso-power): per design, the highest rate some machine counts within
the budget hold. The search simulator bisects the rate over the budget's maximal points
(:func:`budget_points`), from the capacity model's ILP bound down; the confirm simulator then gallops
down from the search's rate until a point holds, up while it holds, and bisects between the two.
"""

from __future__ import annotations

import math
import time

import numpy as np

from splitwise_plan.inputs.budget import parse_budget
from splitwise_plan.inputs.designs import Design, get_design
from splitwise_plan.planning.confirm import Confirmer, OverSeeds
from splitwise_plan.planning.objectives import REFERENCE_RATE, point_text, pool_units, tightest_ratio
from splitwise_plan.planning.request import Inputs, PlanRequest, default_batch
from splitwise_plan.planning.result import DesignPlan
from splitwise_plan.planning.streams import evaluated_budget_rows, first_stream, stream_seeds
from splitwise_plan.search import Evaluator, capacity_model

_TRIES_PER_RATE = 2   # budget points the confirm simulator may reject at one rate before it counts as failed


def budget_points(inputs: Inputs, d: Design, kind: str, budget: float, p_max: int, t_max: int) -> list:
    """The maximal (prompt, token) counts within the budget (every other point is dominated)."""
    up, ut = pool_units(inputs, d)
    pts = []
    eps = 1e-9 * max(1.0, budget)
    if d.is_baseline:
        n = min(p_max, int(math.floor((budget + eps) / up[kind])))
        return [(n, 0)] if n >= 1 else []
    for p in range(1, p_max + 1):
        rest = budget - p * up[kind] + eps
        if rest < ut[kind]:
            break
        pts.append((p, min(t_max, int(math.floor(rest / ut[kind])))))
    # drop points dominated by another point within the budget
    return [pt for pt in pts if not any(q != pt and q[0] >= pt[0] and q[1] >= pt[1] for q in pts)]


def plan_budget(inputs: Inputs, req: PlanRequest, design: str, method: str) -> DesignPlan:
    """The highest rate ``design`` holds within the request's budget, to ``req.rate_tol`` req/s:
    searched, then confirmed."""
    t0 = time.perf_counter()
    b = _BudgetSearch(inputs, req, get_design(design), method, t0)
    if not b.pts:
        least = sum(getattr(b.inputs.machines[m], b.kind) for m in b.d.machines)
        unit = getattr(b.inputs.machines[b.d.prompt_machine], f"{b.kind}_unit")
        return DesignPlan(status="infeasible", note=f"the budget of {b.budget:,.4g} {unit} buys no complete "
                                                    f"{b.d.name} (its least is {least:,.4g} {unit})",
                          seconds=time.perf_counter() - t0, **b.base)
    b.bound()
    b.search()
    b.confirm_rates()
    return b.answer()


class _BudgetSearch:
    """One design's budget points, the rates the search tried (rate steps of ``req.rate_tol``) and the
    points the confirm simulator refused: the state :func:`plan_budget` carries from step to step."""

    def __init__(self, inputs: Inputs, req: PlanRequest, d: Design, method: str, t0: float) -> None:
        self.inputs, self.req, self.d, self.method, self.t0 = inputs, req, d, method, t0
        self.kind = kind = req.objective
        self.budget = budget = parse_budget(req.budget_power if kind == "power" else req.budget_cost, kind,
                                            inputs.machines)
        up, ut = pool_units(inputs, d)
        self.p_max = int(math.floor(budget / up[kind] + 1e-9))
        self.t_max = 0 if d.is_baseline else int(math.floor((budget - up[kind]) / ut[kind] + 1e-9))
        self.pts = budget_points(inputs, d, kind, budget, max(self.p_max, 0), max(self.t_max, 0))
        self.base = dict(design=d.name, short=d.short, grid_size=len(self.pts))
        self.batch = req.batch or default_batch(method, d)
        self.tol = req.rate_tol
        self.streams = len(stream_seeds(inputs, req))   # the streams a search point runs on
        self.threshold = 1.0 - req.margin
        self.over: dict = {}   # rate -> OverSeeds of its search (several streams): what it simulated
        self.cache: dict = {}      # rate -> (evaluator, passing points, candidates)
        self.prefer: list = []     # the points passing at the highest rate passed so far: tried first
        self.r_hi = 0.0            # the capacity model's upper bound of the rate
        self.lo_k = 0              # the search's highest rate step passed
        self.confirm: Confirmer | None = None
        self.refused: dict = {}    # rate step -> points the confirm simulator rejected there
        self.rejected: list = []   # "RATE req/s POINT" of those at or below the search's rate
        self.good = None           # (k, point, worst result): the highest rate step confirmed
        self.bad_k = 0             # the lowest rate step failed above it
        self.attempts = 0

    def bound(self) -> None:
        """The capacity model's ILP: the highest rate any budget point may hold (``r_hi``)."""
        inputs, req, d, kind = self.inputs, self.req, self.d, self.kind
        nominal = req.rps or (inputs.trace.rate if inputs.trace is not None else REFERENCE_RATE)
        sim0 = inputs.simulator(inputs.stream(nominal, req.seed), self.method, search=True)
        cm0 = capacity_model(sim0, d)
        ilp = cm0.ilp_bound(kind, p_max=self.p_max, t_max=None if d.is_baseline else self.t_max,
                            budget=(kind, self.budget), maximize_scale=True)
        self.r_hi = ilp.scale * sim0.stream.rate * cm0.max_load if ilp.feasible else 0.0

    def search(self) -> None:
        """Bisect the rate with the search method, up to ``r_hi``: its highest rate step passed (``lo_k``)."""
        tol = self.tol
        lo_k, hi_k = 0, max(1, int(math.ceil(self.r_hi / tol)))
        while hi_k - lo_k > 1:
            mid = (lo_k + hi_k) // 2
            passing = self._check(mid * tol)
            if passing:
                lo_k = mid
                self.prefer = passing
            else:
                hi_k = mid
        self.lo_k = lo_k

    def _check(self, rate: float):
        """Passing budget points at ``rate`` with the search method: stop at the first passing batch."""
        inputs, req, d, method, pts, batch = self.inputs, self.req, self.d, self.method, self.pts, self.batch
        sim = inputs.simulator(inputs.stream(rate, req.seed), method, search=True)
        cm = capacity_model(sim, d)
        arr = np.asarray(pts)
        ok = cm.feasible(arr[:, 0], arr[:, 1])
        head = cm.max_scale(arr[:, 0], arr[:, 1], hi=8.0, iters=20)
        order = [i for i in np.argsort(-head, kind="stable") if ok[i]]
        cand = [pts[i] for i in order]
        prefer = self.prefer
        cand = [p for p in prefer if p in cand] + [p for p in cand if p not in prefer]
        if self.streams > 1:   # each point's worst over the seeds' streams, as confirmation asks
            seeds = self.over[rate] = OverSeeds(inputs, req, method, sim, rate)
            ev = Evaluator(run=lambda pts: seeds.run_many(d.name, pts), threshold=self.threshold)
        else:
            ev = Evaluator(sim, d.name, method, jobs=max(1, req.jobs if req.jobs > 0 else 1),
                           threshold=self.threshold)
        passing = []
        for k in range(0, len(cand), batch):
            res = ev(cand[k:k + batch])
            passing += [pt for pt, r in zip(cand[k:k + batch], res) if ev.ok(r)]
            if passing:
                break
        self.cache[rate] = (ev, passing, cand)
        return passing

    def simulations(self) -> int:
        """The search's simulations so far, over every rate tried (and each seed's stream)."""
        return sum(ev.evaluations if rate not in self.over else sum(self.over[rate].runs.values())
                   for rate, (ev, _, _) in self.cache.items())

    def _best_at(self, k: int):
        """The budget point with the most headroom at rate k * tol (search method) that the confirm
        simulator has not rejected, or None: a passing one, or where the search passes none the
        nearest to passing, since the confirm simulator may hold more than the search's."""
        rate = k * self.tol
        if rate not in self.cache:
            self._check(rate)
        ev, _, cand = self.cache[rate]
        rest = [p for p in cand if p not in ev.cache]
        if rest:   # see every candidate at this rate to pick the one with most headroom
            ev(rest)
        ranked = sorted((p for p in cand if p not in self.refused.get(k, ())),
                        key=lambda p: tightest_ratio(ev.cache[p]))
        return (ranked[0], ev.cache[ranked[0]]) if ranked else (None, None)

    def _refuse(self, k: int, pt) -> bool:
        """Record a rejected point; True once the rate has had its tries (then it counts as failed):
        the search method's second choice at a rate often holds where its first did not."""
        self.refused.setdefault(k, set()).add(pt)
        if k <= self.lo_k:   # above the search's highest rate, a failure is the oracle's limit, not a rejection
            self.rejected.append(f"{k * self.tol:g} req/s {point_text(self.d, pt)}")
        return len(self.refused[k]) >= _TRIES_PER_RATE

    def _attempt(self, k: int) -> str:
        """Confirm the best point left at rate step k: "held" (then ``good`` is it), "empty" (no
        point left there), "failed" (the rate's tries are spent) or "again" (rejected; another may hold)."""
        pt, res = self._best_at(k)
        if pt is None:
            return "empty"
        ok, worst, _ = self.confirm(self.d.name, pt, k * self.tol, res)
        self.attempts += 1
        if ok:
            self.good = (k, pt, worst)
            return "held"
        return "failed" if self._refuse(k, pt) else "again"

    def confirm_rates(self) -> None:
        """The confirm simulator's highest rate step (``good``) and the lowest it fails above it (``bad_k``).

        The confirm simulator may hold less than the search simulator: gallop down from the
        search's rate until a confirmation passes, then bisect up between the two. A rate
        fails once the confirm simulator has rejected _TRIES_PER_RATE designs there."""
        self.confirm = Confirmer(self.inputs, self.req, self.method, search_over_seeds=True)
        bad_k = self._gallop_down()
        if self.good is not None and self.good[0] == self.lo_k:
            bad_k = self._gallop_up()
        # between the highest rate held and the lowest failed, bisect to the rate resolution: a few steps
        # of at most _TRIES_PER_RATE confirmations each, whatever the gallops spent (max_confirm bounds those)
        while self.good is not None and bad_k - self.good[0] > 1:
            k = (self.good[0] + bad_k) // 2
            if self._attempt(k) in ("empty", "failed"):
                bad_k = k
        self.bad_k = bad_k

    def _gallop_down(self) -> int:
        """From the search's rate down (steps 1, 2, 4, ... as rates fail) until a point holds; the lowest
        rate step failed above the one held."""
        step, k = 1, self.lo_k
        bad_k = self.lo_k + 1 if self.lo_k > 0 else 0
        while k > 0 and self.attempts < self.req.max_confirm:
            outcome = self._attempt(k)
            if outcome == "held":
                break
            if outcome == "empty":
                bad_k, k = k, k - 1
            elif outcome == "failed":
                bad_k, k, step = k, max(0, k - step), step * 2
        return bad_k

    def _gallop_up(self) -> int:
        """The search's highest rate holds: gallop up with the confirm simulator (steps 1, 2, 4, ...)
        until a rate fails, so that the answer is its optimum and not the search's (the baselines'
        TBT P90 sits within a few percent of its limit over a wide range of rates); the rate step failed."""
        step, bad_k = 1, None
        while bad_k is None and self.attempts < self.req.max_confirm:
            k = self.good[0] + step
            outcome = self._attempt(k)
            if outcome == "held":
                step *= 2
            elif outcome != "again":
                bad_k = k
        if bad_k is None:   # out of confirmations: the highest rate held is the answer
            bad_k = self.good[0] + 1
        return bad_k

    def answer(self) -> DesignPlan:
        """The design's answer: the highest rate confirmed, or none (unconfirmed, or infeasible)."""
        tol, lo_k, rejected, confirm = self.tol, self.lo_k, self.rejected, self.confirm
        common = dict(bound=self.r_hi, evaluations=self.simulations(), confirmations=confirm.runs,
                      confirmed=confirm.confirmed(), candidates=len(self.pts))
        if self.good is not None:
            k, pt, worst = self.good
            notes = [f"search rate {lo_k * tol:g} req/s"] if rejected or k != lo_k else []
            if rejected:
                notes.append(f"confirmation rejected {', '.join(rejected)}")
            if k > lo_k:
                notes.append(f"the confirm simulator holds {k * tol:g} and fails {self.bad_k * tol:g} req/s")
            note = "; ".join(notes)
            return DesignPlan(status="ok", prompt=pt[0], token=pt[1], cost=worst.cost, power=worst.power,
                              rate=float(k * tol), result=worst, **common,
                              seconds=time.perf_counter() - self.t0, note=note,
                              evaluated=evaluated_budget_rows(self.cache, first_stream(self.inputs, self.req)),
                              **self.base)
        return DesignPlan(status="unconfirmed" if rejected else "infeasible", **common,
                          seconds=time.perf_counter() - self.t0,
                          note=(f"no confirmed rate within the budget; rejected {', '.join(rejected)}" if rejected
                                else f"holds no rate >= {tol:g} req/s within the budget"),
                          evaluated=evaluated_budget_rows(self.cache, first_stream(self.inputs, self.req)),
                          **self.base)
