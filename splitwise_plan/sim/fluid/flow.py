"""The fluid model's Python side: build the flat arrays of a design, run the compiled loop, collect the outcome.

:func:`simulate_fluid` takes designs and runs each through :func:`.kernels.run_fluid` in turn (a design
costs as much alone as beside others); the per-request times, utilization and stops come back as one
:class:`FluidOutcome`, designs x requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.sim import jit
from splitwise_plan.sim.cluster import Cluster, SchedulerConfig
from splitwise_plan.sim.fluid import kernels as k
from splitwise_plan.sim.kernel_tools import latency_curves
from splitwise_plan.sim.metrics import METRICS, Verdict

_REFERENCE_ONLY = ("max_batch_size", "max_preemptions")   # scheduler fields the fluid model keeps
_RING = 64          # prompts a machine queues at first (doubled as needed)
_DECODES = 256      # decodes running or waiting on a machine at first (doubled as needed)


@dataclass(frozen=True)
class FluidOutcome:
    """Per-request TTFT and E2E (designs x requests) and per-design utilization, of all its machines
    and of each pool (designs x 2: the prompt pool, the token pool; NaN for a baseline's)."""

    ttft: np.ndarray
    e2e: np.ndarray
    utilization: np.ndarray
    pool_utilization: np.ndarray
    oom: np.ndarray
    overloaded: np.ndarray      # stopped: a request queued longer than ``overload_s``; the rest unfinished (NaN)
    failed: np.ndarray          # stopped: an SLO of ``Verdict`` could no longer hold; the rest unfinished (NaN)


class Config(NamedTuple):
    max_batch_tokens: int
    max_batch_size: int
    prompt_max_pending_tokens: int
    mixed_pool: bool
    baseline: bool
    largest_kv: float
    smallest_kv: float
    overload_s: float
    flow_retry_s: float


def simulate_fluid(clusters: list[Cluster], stream, overload_s: float = math.inf,
                   verdict: Verdict | None = None, threads: int = 1) -> FluidOutcome:
    """Simulate clusters (designs and machine counts) of one model on one stream, one after another.

    A design whose prompt queue makes a request wait more than ``overload_s`` is overloaded: its run stops
    there and its later requests are unfinished (NaN). With a ``verdict``, a design also stops once one
    of its SLOs can no longer hold (``failed``): the designs that pass run to the end and are unchanged.
    """
    reference = SchedulerConfig()
    for c in clusters:
        fixed = [f for f in _REFERENCE_ONLY if getattr(c.scheduler, f) != getattr(reference, f)]
        if fixed:   # it would silently keep the reference's values
            raise SplitwisePlanError(f"the fluid model keeps the reference's {', '.join(fixed)} (it caps a "
                                     "machine's running decodes at the reference's batch size, and a mixed batch "
                                     "has no preemption limit); simulate with the events method to change them")
    order = np.argsort(np.asarray(stream.arrival_s, dtype=np.float64), kind="stable")
    slos = _slos(verdict, order)
    jit.before_first_call(k.run_fluid, "the fluid model")
    threads = max(1, min(threads, len(clusters)))
    if threads == 1:
        rows = [_run(c, stream, order, overload_s, slos) for c in clusters]
    else:   # the compiled loop releases the GIL: the designs run side by side, each on its own
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(threads) as ex:
            rows = list(ex.map(lambda c: _run(c, stream, order, overload_s, slos), clusters))
    n = len(order)
    ttft, e2e = np.full((len(rows), n), np.nan), np.full((len(rows), n), np.nan)
    for j, r in enumerate(rows):
        ttft[j, order], e2e[j, order] = r[0], r[1]
    return FluidOutcome(ttft, e2e, np.array([r[2] for r in rows]), np.array([r[3] for r in rows]),
                        np.array([r[4] for r in rows]), np.array([r[5] for r in rows]), np.array([r[6] for r in rows]))


def _requests(cluster: Cluster, stream, order) -> tuple[np.ndarray, np.ndarray]:
    kv = float(cluster.model.kv_bytes_per_token)
    prompt = np.asarray(stream.prompt_tokens, dtype=np.int64)[order]
    output = np.asarray(stream.output_tokens, dtype=np.int64)[order]
    req_f = np.full((prompt.size, 6), np.nan)
    req_f[:, k.ARRIVAL] = np.asarray(stream.arrival_s, dtype=np.float64)[order]
    req_f[:, k.MEM_P] = kv * (prompt + 1)
    req_f[:, k.MEM_T] = kv * (output - 1)
    req_f[:, k.XFER] = kv * prompt / cluster.scheduler.effective_bandwidth
    req_i = np.full((prompt.size, 5), -1, np.int64)
    req_i[:, k.PROMPT], req_i[:, k.OUTPUT] = prompt, output
    return req_f, req_i


def _machines(cluster: Cluster) -> tuple:
    """Per machine: floats, ints, KV room; the pools (empty: :func:`.kernels.seat_all` fills them); the latency
    curves and their sizes (:func:`~splitwise_plan.sim.kernel_tools.latency_curves`)."""
    pools = [(cluster.prompt, 0, k.PROMPT_POOL)]   # (a baseline's machines are all its prompt pool)
    if cluster.token is not None:
        pools.append((cluster.token, 1, k.TOKEN_POOL))
    curve = np.concatenate([np.full(p.instances, kind) for p, kind, _ in pools])
    home = np.concatenate([np.full(p.instances, where) for p, _, where in pools])
    hbm = np.concatenate([np.full(p.instances, float(p.instance_hbm_bytes)) for p, _, _ in pools])
    weights = float(cluster.model.weights_bytes)
    mf = np.zeros((curve.size, k.CTX + 1))
    mf[:, k.MAX_MEM] = hbm
    mf[:, k.MEM] = mf[:, k.SCHED_MEM] = weights
    mi = np.zeros((curve.size, k.RANK + 1), np.int64)
    mi[:, k.CURVE], mi[:, k.HOME] = curve, home
    mi[:, k.B_FIRST] = -1
    curves, curve_n = latency_curves(cluster)
    return mf, mi, hbm - weights, np.full((3, curve.size), -1, np.int64), (curves, np.array(curve_n, np.int64))


def _slos(verdict: Verdict | None, order) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    slos = verdict.slos if verdict is not None else ()
    table = np.zeros((len(slos), 4), np.int64)
    ref = np.full((len(slos), len(order)), np.nan)
    for j, (metric, r, _, need) in enumerate(slos):
        table[j, k.SLO_METRIC] = METRICS.index(metric)
        table[j, k.HAS_REF] = r is not None
        table[j, k.NEED] = int(need)
        if r is not None:
            ref[j] = np.asarray(r, dtype=np.float64)[order]
    return table, np.array([float(s[2]) for s in slos], np.float64), ref


class State(NamedTuple):
    """A design's run: the arrays of :func:`.kernels.run_fluid`, in the order of its arguments."""

    req_f: np.ndarray       # [request, ARRIVAL ... E2E], requests in arrival order
    req_i: np.ndarray       # [request, PROMPT ... NEXT_IN_BATCH]
    mf: np.ndarray          # [machine, MAX_MEM ... PLAN_AT]
    mi: np.ndarray          # [machine, CURVE ... PLAN_VERSION]
    room: np.ndarray        # [machine]: KV bytes beside the weights
    ring: np.ndarray        # [machine, slot]: the prompts queued (request ids), a ring
    dec_v: np.ndarray       # [machine, slot]: the decodes running, a heap by the iteration count they end at
    dec_r: np.ndarray       # [machine, slot]: and their requests
    wait: np.ndarray        # [machine, slot]: decodes waiting for memory (request ids), a ring
    pools: np.ndarray       # [pool, k]: the machines of the prompt, mixed and token pools, in order
    tour: np.ndarray        # [2 * pool + by memory, node]: each pool's tournaments of its machines by load
    heap_f: np.ndarray      # [slot]: event times
    heap_i: np.ndarray      # [slot, (insertion counter, kind, a, b)]
    clock: np.ndarray       # [NOW | PROGRESS_AT]
    counters: np.ndarray    # [COUNTER ... POOL_SIZE + 2]
    curves: np.ndarray      # [curve, XS | YS | SLOPES | FLOOR | KV, point]
    curve_n: np.ndarray     # [curve]: its points
    slos: np.ndarray        # [slo, SLO_METRIC | HAS_REF | NEED | BROKEN]
    slo_limit: np.ndarray   # [slo]
    slo_ref: np.ndarray     # [slo, request]
    cfg: Config


def _run(cluster: Cluster, stream, order, overload_s: float, slos) -> tuple:
    """One design: (ttft, e2e) in arrival order, utilization of all machines and of each pool, and whether
    it ran out of memory, was overloaded, or failed the verdict."""
    req_f, req_i = _requests(cluster, stream, order)
    mf, mi, room, pools, curves = _machines(cluster)
    m, n = mf.shape[0], req_f.shape[0]
    cfg = cluster.scheduler
    config = Config(int(cfg.max_batch_tokens), int(cfg.max_batch_size), int(cfg.prompt_max_pending_tokens),
                    bool(cfg.mixed_pool), bool(cluster.is_baseline), float(cluster.kv_room), float(room.min()),
                    float(overload_s), float(cfg.flow_retry_s))
    counters = np.zeros(k.N_COUNTERS, np.int64)
    tour = np.full((6, 2 << (m - 1).bit_length()), -1, np.int64)   # (its second half: a leaf a machine)
    k.seat_all(pools, counters, tour, mf, mi)
    table, limit, ref = (x.copy() for x in slos)
    heap = 2 * n + 4 * m + 1024
    state = State(req_f, req_i, mf, mi, room, np.zeros((m, _RING), np.int64), np.zeros((m, _DECODES)),
                  np.zeros((m, _DECODES), np.int64), np.zeros((m, _DECODES), np.int64), pools, tour, np.zeros(heap),
                  np.zeros((heap, 4), np.int64), np.zeros(2), counters, *curves,
                  table, limit, ref, config)
    while k.run_fluid(*state) == k.GROW:
        state = _grow(state)
    now = float(state.clock[k.NOW])
    k.settle(mf, mi, state.curves, state.curve_n, now)
    ttft = np.where(req_f[:, k.ARRIVAL] + req_f[:, k.TTFT] <= now, req_f[:, k.TTFT], np.nan)
    e2e = req_f[:, k.E2E]
    busy = np.minimum(mf[:, k.BUSY], now) / max(now, 1e-9)   # (a run stopped mid-batch counted the batch whole)
    pp = cluster.prompt.instances
    pool_util = (float(busy[:pp].mean()), float(busy[pp:].mean()) if cluster.token is not None else math.nan)
    stopped = bool(counters[k.OVERLOADED] or counters[k.FAILED])
    oom = bool(counters[k.OOM]) or (not stopped and bool(np.isnan(e2e).any()))
    return ttft, e2e, float(busy.mean()), pool_util, oom, bool(counters[k.OVERLOADED]), bool(counters[k.FAILED])


def _grow(state: State) -> State:
    """``state`` with twice the room where the loop ran short: the machines' queues, decode heaps and wait
    lists, or the event heap."""
    mi = state.mi
    if int(mi[:, k.Q_LEN].max()) >= state.ring.shape[1] - 1:
        state = state._replace(ring=_unrolled(state.ring, mi, k.Q_HEAD, k.Q_LEN))
    if int((mi[:, k.N_DEC] + mi[:, k.WAIT_LEN]).max()) >= min(state.dec_v.shape[1], state.wait.shape[1]) - 1:
        state = state._replace(dec_v=np.concatenate([state.dec_v, np.zeros_like(state.dec_v)], axis=1),
                               dec_r=np.concatenate([state.dec_r, np.zeros_like(state.dec_r)], axis=1),
                               wait=_unrolled(state.wait, mi, k.WAIT_HEAD, k.WAIT_LEN))
    if state.heap_f.size - state.counters[k.HEAP_LEN] < state.cfg.max_batch_size + 16:
        state = state._replace(heap_f=np.concatenate([state.heap_f, np.zeros(state.heap_f.size)]),
                               heap_i=np.concatenate([state.heap_i, np.zeros_like(state.heap_i)]))
    return state


def _unrolled(ring: np.ndarray, mi: np.ndarray, head: int, length: int) -> np.ndarray:
    """A ring (one row a machine, from ``mi[:, head]`` for ``mi[:, length]``) in twice the room, each row from 0."""
    cap = ring.shape[1]
    out = np.zeros((ring.shape[0], 2 * cap), np.int64)
    for i in range(ring.shape[0]):
        idx = (mi[i, head] + np.arange(mi[i, length])) % cap
        out[i, :idx.size] = ring[i, idx]
        mi[i, head] = 0
    return out


def compile_ahead(cluster: Cluster) -> None:
    """Compile the fluid model's loop in this process, or load it from the cache, on one request through
    ``cluster``: worker processes started afterwards load it. Nothing to do where it is not kept between
    processes (no writable cache), or is compiled here already, or runs as plain Python."""
    if not jit.CACHED or not getattr(k.run_fluid, "py_func", None) or k.run_fluid.signatures:
        return
    from splitwise_plan.inputs.workloads import RequestStream
    simulate_fluid([cluster], RequestStream(np.zeros(1), np.ones(1, dtype=np.int64), np.full(1, 2, dtype=np.int64),
                                            name="compile"))
