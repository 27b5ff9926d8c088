"""Analytic capacity model of a design on a request stream, and the PuLP ILP bound.

The model never says a design *works*; it says when one *cannot*: it gives every
pool its best case (full 2048-token prompt batches, the cheapest decode iteration
per token, memory as tight as the prompt plus the first token) and asks whether
the stream's work still fits. What does not fit, even with a ``max_load``
allowance for the finite stream's backlog, is pruned; what fits is left to the
simulator. Because the reference scheduler's mixed pool lets machines of one pool
serve the other pool's queue, the work of each phase may be split freely across
both pools (two continuous split variables), so a small token pool is never
pruned merely for being small (the reference passes Splitwise-HH 28+1 and 29+1).

Work is counted in machine-seconds per second of the stream, per machine type:

- prompt work ``a``: a prompt of P <= 2048 tokens costs P times the cheapest
  per-token time of a prompt batch of at most 2048 tokens; a larger prompt runs
  alone and costs ``prompt(P)``;
- decode work ``b``: each of the O - 1 decode tokens costs the cheapest per-token
  time of a decode iteration (``token(n)/n`` at the largest batch) or of a mixed
  batch (``1.1 prompt(x)/x``), whichever is less;
- memory ``kv``: byte-seconds per second of KV cache: a request decodes for at
  least (O - 1) times the shortest iteration and holds at least (P + 1) tokens of
  KV while it does; a machine offers HBM minus the weights.

For a Splitwise design with ``p`` prompt and ``t`` token machines it is feasible
when there are shares f (prompt work on the prompt pool) and g (decode work on
the token pool) in [0, 1] with::

    f a_P + (1 - g) b_P <= L p          (1 - f) a_T + g b_T <= L t
    p M_P + t M_T >= kv / L

where ``L`` is ``max_load``. A baseline pool must hold ``a + b <= L n`` and
``n M >= kv / L``. The same constraints, with integer ``p`` and ``t`` and the
goal's objective, form the small ILP solved with PuLP for the lower bound.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.designs import Design, get_design
from splitwise_plan.inputs.machines import Machine
from splitwise_plan.inputs.models import ModelSpec
from splitwise_plan.inputs.workloads import RequestStream
from splitwise_plan.perf.latency_model import MIXED_BATCH_FACTOR, LatencyModel
from splitwise_plan.sim.cluster import SchedulerConfig

#: Objectives the capacity ILP and the search know.
OBJECTIVES = ("cost", "power")


def default_max_load(duration_s: float) -> float:
    """Overload a finite stream may carry and still meet the SLOs: 1 + 4 s / duration.

    A stream ``L`` times heavier than the cluster's best-case capacity leaves about
    ``(L - 1) * duration`` seconds of backlog by its end; beyond a few seconds the
    median TTFT (limit: 2x a ~0.4 s prompt) cannot hold. Shorter streams get more
    allowance, which only makes the pruning more cautious.
    """
    return 1.0 + 4.0 / max(float(duration_s), 1e-9)


@dataclass(frozen=True)
class PhaseWork:
    """Best-case work of one phase class on one machine type, machine-seconds per second."""

    prompt: float        # a: prompt work
    decode: float        # b: decode work (pure decode or piggy-backed on a mixed batch)
    mem_free: float      # M: a machine's HBM minus its instances' weights, bytes


@dataclass(frozen=True)
class CapacityModel:
    """Lower-bound capacity constraints of one design on one stream (see the module doc)."""

    design: Design
    prompt_machine: Machine
    token_machine: Machine | None
    prompt_side: PhaseWork
    token_side: PhaseWork | None
    kv_byte_s: float                   # KV byte-seconds per second the stream needs at least
    max_load: float
    mixed_pool: bool = True
    rate: float = field(default=float("nan"))

    # -- machine prices ----------------------------------------------------------
    def unit(self, objective: str) -> tuple[float, float]:
        """(per prompt machine, per token machine) value of ``objective`` (cost or power)."""
        if objective not in OBJECTIVES:
            raise SplitwisePlanError(f"objective {objective!r} is unknown; valid: {', '.join(OBJECTIVES)}")
        up = getattr(self.prompt_machine, objective)
        ut = getattr(self.token_machine, objective) if self.token_machine is not None else 0.0
        return float(up), float(ut)

    # -- feasibility ---------------------------------------------------------------
    def feasible(self, p, t=0, scale: float = 1.0) -> np.ndarray:
        """Whether (p, t) can carry the stream's work times ``scale`` (vectorized over p, t)."""
        p = np.asarray(p, dtype=np.float64)
        t = np.asarray(t, dtype=np.float64)
        p, t = np.broadcast_arrays(p, t)
        L = self.max_load
        P, T = self.prompt_side, self.token_side
        if T is None:  # baseline: one pool runs both phases
            ok_work = scale * (P.prompt + P.decode) <= L * p + 1e-12
            ok_mem = p * P.mem_free * L >= scale * self.kv_byte_s - 1e-6
            return ok_work & ok_mem & (p >= 1)
        ok_mem = (p * P.mem_free + t * T.mem_free) * L >= scale * self.kv_byte_s - 1e-6
        base = (p >= 1) & (t >= 1) & ok_mem
        if not self.mixed_pool:
            return base & (scale * P.prompt <= L * p + 1e-12) & (scale * T.decode <= L * t + 1e-12)
        # scale * work <= capacity  <=>  work <= capacity / scale (scale may be an array)
        inv = 1.0 / np.maximum(np.asarray(scale, dtype=np.float64), 1e-300)
        return base & _split_feasible(P.prompt, P.decode, T.prompt, T.decode, L * p * inv, L * t * inv)

    def min_token(self, p_values, t_max: int) -> np.ndarray:
        """Smallest feasible token count for each prompt count (t_max + 1 where none is)."""
        p_values = np.asarray(p_values, dtype=np.int64)
        if self.token_side is None:
            return np.where(self.feasible(p_values), 0, t_max + 1)
        # feasibility is monotone in t: bisect each prompt count's first feasible t, p x log2(t_max)
        # evaluations instead of the p x t grid (millions of points at thousands of requests a second)
        lo = np.zeros(p_values.shape, dtype=np.int64)            # t <= lo: infeasible
        hi = np.full(p_values.shape, t_max + 1, dtype=np.int64)  # t >= hi: feasible (t_max + 1: none is)
        while (open_ := hi - lo > 1).any():
            mid = (lo + hi) // 2
            ok = self.feasible(p_values, mid)
            hi = np.where(open_ & ok, mid, hi)
            lo = np.where(open_ & ~ok, mid, lo)
        return hi

    def max_scale(self, p, t=0, hi: float = 64.0, iters: int = 40) -> np.ndarray:
        """Largest work multiplier (x the stream's rate) that (p, t) can carry, by bisection."""
        p = np.asarray(p, dtype=np.float64)
        t = np.asarray(t, dtype=np.float64)
        p, t = np.broadcast_arrays(p, t)
        lo = np.zeros(p.shape)
        up = np.full(p.shape, hi)
        for _ in range(iters):
            mid = 0.5 * (lo + up)
            ok = self.feasible(p, t, mid)
            lo = np.where(ok, mid, lo)
            up = np.where(ok, up, mid)
        return lo

    # -- the ILP ---------------------------------------------------------------------
    def ilp_bound(self, objective: str = "cost", *, p_max: int | None = None, t_max: int | None = None,
                  budget: tuple[str, float] | None = None, maximize_scale: bool = False) -> "ILPBound":
        """Solve the capacity ILP with PuLP.

        Minimize ``objective`` over integer machine counts that satisfy the capacity
        constraints (the lower bound of the goal's objective and its arg-min); or,
        with ``maximize_scale``, maximize the rate multiplier ``s`` that fits within
        ``budget`` = (cost|power, limit) (an upper bound on the throughput).
        """
        import pulp

        base = self.design.is_baseline
        L = self.max_load
        P, T = self.prompt_side, self.token_side
        prob = pulp.LpProblem("capacity", pulp.LpMaximize if maximize_scale else pulp.LpMinimize)
        p = _var(prob, "p", 1, p_max, "Integer")
        t = None if base else _var(prob, "t", 1, t_max, "Integer")
        s = _var(prob, "s", 0) if maximize_scale else 1.0
        up, ut = self.unit(objective)
        value = up * p + (ut * t if t is not None else 0)
        if maximize_scale:
            prob += s
            if budget is None:
                raise SplitwisePlanError("maximizing throughput needs a budget")
            bkind, blimit = budget
            bp, bt = self.unit(bkind)
            prob += bp * p + (bt * t if t is not None else 0) <= blimit
        else:
            prob += value
        if base:
            prob += (P.prompt + P.decode) * s <= L * p
            prob += P.mem_free * L * p >= self.kv_byte_s * s
        else:
            # x = s*f and y = s*g keep the constraints linear when s is a variable.
            x = _var(prob, "x", 0)
            y = _var(prob, "y", 0)
            prob += x <= s
            prob += y <= s
            if not self.mixed_pool:
                prob += x == s
                prob += y == s
            prob += P.prompt * x + P.decode * (s - y) <= L * p
            prob += T.prompt * (s - x) + T.decode * y <= L * t
            prob += (P.mem_free * p + T.mem_free * t) * L >= self.kv_byte_s * s
        status = prob.solve(_solver())
        if pulp.LpStatus[status] != "Optimal":
            return ILPBound(feasible=False, objective=objective, value=math.inf, prompt=0, token=0,
                            scale=0.0, status=pulp.LpStatus[status])
        pv = int(round(p.value()))
        tv = int(round(t.value())) if t is not None else 0
        sv = float(s.value()) if maximize_scale else 1.0
        return ILPBound(feasible=True, objective=objective, value=up * pv + ut * tv, prompt=pv, token=tv,
                        scale=sv, status="Optimal")


def _var(prob, name: str, low=None, up=None, cat: str = "Continuous"):
    """A PuLP variable attached to ``prob`` (PuLP >= 3.3 API when present)."""
    import pulp

    if hasattr(prob, "add_variable"):
        return prob.add_variable(name, low, up, cat=cat)
    return pulp.LpVariable(name, lowBound=low, upBound=up, cat=cat)


def _solver():
    """CBC through PuLP: a system ``cbc`` (COIN_CMD) when present, else the one bundled with PuLP.

    PuLP 3 warns that its 4.0 drops the bundled CBC (pyproject keeps PuLP below 4): the warning is
    declined where the solver is made, not filtered (a filter is process-wide, and the planner
    makes solvers in several threads at once, where ``catch_warnings`` lets warnings through).
    """
    import pulp

    coin = pulp.COIN_CMD(msg=False)
    if coin.available():
        return coin
    try:
        return pulp.PULP_CBC_CMD(msg=False, _skip_v4_deprecation=True)
    except TypeError:   # a PuLP without that argument: PuLP 2 has no such warning; any other's is filtered here
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return pulp.PULP_CBC_CMD(msg=False)


@dataclass(frozen=True)
class ILPBound:
    """Solution of the capacity ILP: the objective's lower bound (or the rate multiplier's upper bound)."""

    feasible: bool
    objective: str
    value: float
    prompt: int
    token: int
    scale: float
    status: str


def _split_feasible(aP, bP, aT, bT, capP, capT) -> np.ndarray:
    """Is there f, g in [0, 1] with f aP + (1-g) bP <= capP and (1-f) aT + g bT <= capT?

    Vertex enumeration of the 2-D polygon (6 half-planes), vectorized over the
    right-hand sides: a bounded non-empty polygon has a vertex on two of its lines.
    """
    capP = np.asarray(capP, dtype=np.float64)
    capT = np.asarray(capT, dtype=np.float64)
    # rows: coefficients (f, g) and right-hand sides
    A = np.array([[aP, -bP], [-aT, bT], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])
    zeros, ones = np.zeros_like(capP), np.ones_like(capP)
    rhs = np.stack([capP - bP, capT - aT, zeros, ones, zeros, zeros + 1.0], axis=-1)
    del ones
    tol = 1e-9 * (1.0 + np.abs(rhs))
    found = np.zeros(capP.shape, dtype=bool)
    for i, j in itertools.combinations(range(6), 2):
        m = A[[i, j]]
        det = m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
        if abs(det) < 1e-15:
            continue
        bi, bj = rhs[..., i], rhs[..., j]
        f = (bi * m[1, 1] - m[0, 1] * bj) / det
        g = (m[0, 0] * bj - bi * m[1, 0]) / det
        lhs = A[:, 0] * f[..., None] + A[:, 1] * g[..., None]
        found |= np.all(lhs <= rhs + tol, axis=-1)
    return found


# --- building the model -----------------------------------------------------------

def _cheapest_prompt_token_s(lm: LatencyModel, max_batch_tokens: int) -> float:
    """Cheapest time per token of a prompt batch of at most ``max_batch_tokens`` tokens."""
    x = np.arange(1, max_batch_tokens + 1, dtype=np.float64)
    per = np.asarray(lm.prompt_time(x)) / x
    per = per[per > 0]
    return float(per.min()) if per.size else 0.0


def _cheapest_decode_token_s(lm: LatencyModel, max_batch_size: int) -> float:
    """Cheapest time per decode token of a decode-only iteration of up to ``max_batch_size``."""
    n = np.arange(1, max_batch_size + 1, dtype=np.float64)
    per = np.asarray(lm.token_time(n)) / n
    per = per[per > 0]
    return float(per.min()) if per.size else 0.0


def _shortest_iteration_s(lm: LatencyModel, sched: SchedulerConfig) -> float:
    n = np.arange(1, sched.max_batch_size + 1, dtype=np.float64)
    x = np.arange(1, sched.max_batch_tokens + 1, dtype=np.float64)
    vals = np.concatenate([np.asarray(lm.token_time(n)), np.asarray(lm.prompt_time(x))])
    vals = vals[vals > 0]
    return float(vals.min()) if vals.size else 0.0


def phase_work(lm: LatencyModel, machine: Machine, model: ModelSpec, stream: RequestStream,
               sched: SchedulerConfig, duration_s: float, instances: int = 1, gpus: int = 0) -> PhaseWork:
    """Best-case prompt and decode work of ``stream`` on machines of one type, each running
    ``instances`` model instances of ``gpus`` GPUs (0: all) side by side."""
    B = sched.max_batch_tokens
    P = stream.prompt_tokens.astype(np.float64)
    D = (stream.output_tokens - 1).astype(np.float64)
    per_prompt_tok = _cheapest_prompt_token_s(lm, B)
    big = P > B
    prompt_s = np.where(big, np.asarray(lm.prompt_time(np.where(big, P, 1.0))), P * per_prompt_tok)
    per_decode = min(_cheapest_decode_token_s(lm, sched.max_batch_size), MIXED_BATCH_FACTOR * per_prompt_tok)
    return PhaseWork(prompt=float(prompt_s.sum()) / duration_s / instances,
                     decode=float(D.sum()) * per_decode / duration_s / instances,
                     mem_free=float(instances * (machine.hbm_of(gpus) - model.weights_bytes)))


def capacity_model(sim, design: str | Design, *, max_load: float | None = None) -> CapacityModel:
    """The capacity model of ``design`` on a ``Simulator``'s stream, model, machines and profiles."""
    d = get_design(design)
    stream: RequestStream = sim.stream
    duration = stream.duration_s if stream.duration_s > 0 else 1.0
    sched: SchedulerConfig = sim.scheduler
    model: ModelSpec = sim.model
    pm = sim.pool_machine(d, "prompt")
    tm = None if d.is_baseline else sim.pool_machine(d, "token")
    lp = sim.latency(pm, sim.pool_tp(d, "prompt"))
    prompt_side = phase_work(lp, pm, model, stream, sched, duration, *sim.layout(d, pm, "prompt"))
    it_min = _shortest_iteration_s(lp, sched)
    token_side = None
    if tm is not None:
        lt = sim.latency(tm, sim.pool_tp(d, "token"))
        token_side = phase_work(lt, tm, model, stream, sched, duration, *sim.layout(d, tm, "token"))
        it_min = min(it_min, _shortest_iteration_s(lt, sched))
    P = stream.prompt_tokens.astype(np.float64)
    D = (stream.output_tokens - 1).astype(np.float64)
    kv = float(np.sum((P + 1.0) * D)) * float(model.kv_bytes_per_token) * it_min / duration
    return CapacityModel(design=d, prompt_machine=pm, token_machine=tm, prompt_side=prompt_side,
                         token_side=token_side, kv_byte_s=kv,
                         max_load=default_max_load(duration) if max_load is None else float(max_load),
                         mixed_pool=bool(sched.mixed_pool), rate=float(stream.rate))
