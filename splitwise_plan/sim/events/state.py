"""The event simulator's state as flat arrays, for the compiled kernels (:mod:`.kernels`).

Everything the reference keeps in objects lives here in a few numpy arrays of float64 and int64, one
row per request, task or machine and one named column per attribute (``sim.inst_f[i, MEM]``,
``sim.req_f[rid, ARRIVAL]``). :class:`Sim` bundles them for Python; the kernel takes them as separate
arguments, in the order of its fields (``run_events(*sim, chunk)``), and each compiled step only those it
reads.

- requests by id (``req_f``, ``req_i``), and their tasks by task id (``task_i``, ``task_mem``): request
  ``rid`` has the prompt task ``2 * rid`` and the token task ``2 * rid + 1``;
- machines by index, the prompt pool's first (``inst_f``, ``inst_i``), and their lists
  (``queue[i, PENDING]``, ``PENDING_PROMPTS``, ``BLOCKED``, ``BATCH``, ``POOL_ORDER``, with their lengths in
  ``queue_len``): ``capacity`` slots each, the most tasks one machine holds; it grows (:func:`grow`)
  between two runs of the kernel when a machine is about to hold more;
- the three pools (``pools``: prompt, mixed, token) as ordered lists of machines, in the reference's order
  (a machine's RANK: its place, greater later), and each pool's two tournaments of its machines by load
  (``tour``: by sched_pending and by sched_mem, see :func:`.kernels.least`);
- the event heap (``heap_f``, ``heap_i``), keyed by (time, insertion counter); the arrivals wait outside
  it, in arrival order, with the counters the reference gives them (0 to n - 1, before any other event's);
- the run's scalars (``clock``, ``counters``), the constants (``Config``), the latency curves
  (``curves``) and the verdict's SLOs (``slos``, ``slo_limit``, ``slo_ref``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from splitwise_plan.sim.kernel_tools import latency_curves
from splitwise_plan.sim.metrics import METRICS

# task states, as the reference's
QUEUED, RUNNING, BLOCKED, DONE = range(4)
# the pools (rows of ``pools``); a machine's HOME is the pool it returns to (a baseline's machines are all
# its prompt pool)
PROMPT_POOL, MIXED_POOL, TOKEN_POOL = range(3)
# event kinds (an arrival is not in the heap)
ARRIVE, TASK_ARRIVAL, COMPLETE, FLOW_ARRIVAL, FLOW_RETRY, FLOW_DONE = range(6)
# the verdict's metrics, in METRICS order
TTFT, TBT, E2E = (METRICS.index(m) for m in ("ttft", "tbt", "e2e"))
# rows of ``scratch``: the lists one machine builds while it picks or ends a batch
NEW, PREEMPTED, ADDED, FINISHED = range(4)
# what a run of the kernel ends with
END, CHUNK, GROW = range(3)

# columns of req_f and req_i
ARRIVAL, MEMORY, REQ_TTFT, REQ_E2E = range(4)
PROMPT, OUTPUT, SRC, DST, REQ_STAMP, ORDER = range(6)       # ORDER: request ids in arrival order (a list)
# columns of task_i
GENERATED, NPREM, STATE, WHERE, BATCHED, TASK_STAMP = range(6)
# columns of inst_f and inst_i
MAX_MEM, ROOM, MEM, SCHED_MEM, ITER_DUR, RUN_START, BUSY, BUSY_SINCE = range(8)
CURVE, HOME, MIXED, SCHED_PENDING, BATCH_TOKENS, N_CONTIG, PAUSED, VERSION, N_TASKS, RANK = range(10)
# a machine's lists (``queue[i, list]``)
PENDING, PENDING_PROMPTS, BLOCKED_LIST, BATCH, POOL_ORDER = range(5)
# columns of heap_i
SEQ, KIND, EV_A, EV_B = range(4)
# clock and counters
NOW, PROGRESS_AT = range(2)
(COUNTER, HEAP_LEN, NEXT_ARRIVAL, ARRIVED, RETRIES, EVENTS, STAMP, OVERLOADED, DEADLOCKED, OOM, FAILED,
 POOL_SIZE) = range(12)   # POOL_SIZE + pool: the pool's length
NEXT_RANK = POOL_SIZE + 3   # ... after the three pools' lengths: the next place at a pool's end
N_COUNTERS = POOL_SIZE + 4
# columns of slos
SLO_METRIC, HAS_REF, NEED, BROKEN = range(4)

INITIAL_CAPACITY = 64      # tasks a machine holds before its lists grow
INITIAL_HEAP = 1024        # events


class Config(NamedTuple):
    max_batch_tokens: int
    max_batch_size: int
    max_preemptions: int
    prompt_max_pending_tokens: int
    bandwidth: float         # effective KV-cache transfer bytes a second
    flow_retry_s: float
    mixed_pool: bool
    baseline: bool
    kv: float                # KV-cache bytes a token
    largest_kv: float
    smallest_kv: float
    overload_s: float
    limit: float             # ``until``
    curve_n: tuple           # points of each curve


class Sim(NamedTuple):
    """The state; its fields in the order of :func:`.kernels.run_events`' arguments."""

    req_f: np.ndarray        # [rid, ARRIVAL | MEMORY | REQ_TTFT | REQ_E2E]
    req_i: np.ndarray        # [rid, PROMPT | OUTPUT | SRC | DST | REQ_STAMP | ORDER]
    task_mem: np.ndarray     # [task]: KV-cache bytes the task adds
    task_i: np.ndarray       # [task, GENERATED | NPREM | STATE | WHERE | BATCHED | TASK_STAMP]
    inst_f: np.ndarray       # [i, MAX_MEM ... BUSY_SINCE]
    inst_i: np.ndarray       # [i, CURVE ... N_TASKS]
    queue: np.ndarray        # [i, list, slot]: task ids (request ids in POOL_ORDER)
    queue_len: np.ndarray    # [i, list]
    scratch: np.ndarray      # [NEW | PREEMPTED | ADDED | FINISHED, slot]
    pools: np.ndarray        # [pool, k]: machines in the pool's order; lengths in counters[POOL_SIZE + pool]
    tour: np.ndarray         # [2 * pool + by sched_mem, node]: each pool's tournaments of its machines by load
    heap_f: np.ndarray       # [slot]: event time
    heap_i: np.ndarray       # [slot, SEQ | KIND | EV_A | EV_B]
    clock: np.ndarray        # [NOW | PROGRESS_AT]
    counters: np.ndarray     # [COUNTER ... NEXT_RANK]
    curves: np.ndarray       # [curve, XS | YS | SLOPES | FLOOR | KV, point] (kernel_tools.latency_curves)
    slos: np.ndarray         # [slo, SLO_METRIC | HAS_REF | NEED | BROKEN]
    slo_limit: np.ndarray    # [slo]
    slo_ref: np.ndarray      # [slo, rid]: per-request reference seconds of a slowdown SLO
    cfg: Config


def _requests(stream) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = len(stream)
    req_f = np.full((n, 4), np.nan)
    req_f[:, ARRIVAL] = stream.arrival_s
    req_f[:, MEMORY] = 0.0
    req_i = np.full((n, 6), -1, np.int64)
    req_i[:, PROMPT] = stream.prompt_tokens
    req_i[:, OUTPUT] = stream.output_tokens
    req_i[:, REQ_STAMP] = 0
    req_i[:, ORDER] = np.argsort(req_f[:, ARRIVAL], kind="stable")
    task_i = np.zeros((2 * n, 6), np.int64)
    task_i[:, STATE] = QUEUED
    task_i[:, WHERE] = -1
    return req_f, req_i, np.zeros(2 * n), task_i


def _instances(cluster) -> tuple[np.ndarray, np.ndarray]:
    pools = [(cluster.prompt, 0, PROMPT_POOL)]
    if cluster.token is not None:
        pools.append((cluster.token, 1, TOKEN_POOL))
    curve, home, max_mem = [], [], []
    for pool, kind, where in pools:
        curve += [kind] * pool.instances
        home += [where] * pool.instances
        max_mem += [float(pool.instance_hbm_bytes)] * pool.instances
    weights = float(cluster.model.weights_bytes)
    inst_f = np.zeros((len(curve), 8))
    inst_f[:, MAX_MEM] = max_mem
    inst_f[:, ROOM] = inst_f[:, MAX_MEM] - weights
    inst_f[:, MEM] = inst_f[:, SCHED_MEM] = weights
    inst_i = np.zeros((len(curve), RANK + 1), np.int64)
    inst_i[:, CURVE] = curve
    inst_i[:, HOME] = home
    return inst_f, inst_i


def _slos(verdict, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    slos = verdict.slos if verdict is not None else ()
    table = np.zeros((len(slos), 4), np.int64)
    ref = np.full((len(slos), n), np.nan)
    for k, (metric, r, _, need) in enumerate(slos):
        table[k, SLO_METRIC] = METRICS.index(metric)
        table[k, HAS_REF] = r is not None
        table[k, NEED] = int(need)
        if r is not None:
            r = np.asarray(r, dtype=np.float64)[:n]
            ref[k, :r.size] = r
    return table, np.array([float(s[2]) for s in slos], np.float64), ref


def build(cluster, stream, until: float | None, overload_s: float, verdict) -> Sim:
    """The state at the start of a run of ``cluster`` on ``stream``: every machine idle, no event yet, the
    pools empty (:func:`.kernels.seat_all` seats every machine in its home pool)."""
    req_f, req_i, task_mem, task_i = _requests(stream)
    inst_f, inst_i = _instances(cluster)
    m = inst_i.shape[0]
    pools = np.full((3, m), -1, np.int64)
    tour = np.full((6, 2 << (m - 1).bit_length()), -1, np.int64)   # (its second half: a leaf a machine)
    counters = np.zeros(N_COUNTERS, np.int64)
    counters[COUNTER] = len(stream)     # the arrivals have the counters 0 to n - 1
    curves, curve_n = latency_curves(cluster)
    cfg = cluster.scheduler
    config = Config(int(cfg.max_batch_tokens), int(cfg.max_batch_size), int(cfg.max_preemptions),
                    int(cfg.prompt_max_pending_tokens), float(cfg.effective_bandwidth), float(cfg.flow_retry_s),
                    bool(cfg.mixed_pool), bool(cluster.is_baseline), float(cluster.model.kv_bytes_per_token),
                    float(cluster.kv_room), float(inst_f[:, ROOM].min()), float(overload_s),
                    math.inf if until is None else float(until), curve_n)
    slos, slo_limit, slo_ref = _slos(verdict, len(stream))
    return Sim(req_f, req_i, task_mem, task_i, inst_f, inst_i, np.zeros((m, 5, INITIAL_CAPACITY), np.int64),
               np.zeros((m, 5), np.int64), np.zeros((4, INITIAL_CAPACITY), np.int64), pools, tour,
               np.zeros(INITIAL_HEAP), np.zeros((INITIAL_HEAP, 4), np.int64), np.zeros(2), counters,
               curves, slos, slo_limit, slo_ref, config)


def heap_room(sim: Sim) -> int:
    """Free heap slots an event needs: one push per task that can finish on a machine, and a few more."""
    return sim.queue.shape[2] + 8


def grow(sim: Sim) -> Sim:
    """``sim`` with twice the room where the kernel ran short: the machines' lists, or the event heap."""
    capacity = sim.queue.shape[2]
    if int(sim.inst_i[:, N_TASKS].max(initial=0)) >= capacity:
        queue = np.zeros(sim.queue.shape[:2] + (2 * capacity,), np.int64)
        queue[:, :, :capacity] = sim.queue
        sim = sim._replace(queue=queue, scratch=np.zeros((4, 2 * capacity), np.int64))
    free = sim.heap_f.size - int(sim.counters[HEAP_LEN])
    if free < heap_room(sim):
        size = 2 * sim.heap_f.size + heap_room(sim)
        heap_f, heap_i = np.zeros(size), np.zeros((size, 4), np.int64)
        heap_f[:sim.heap_f.size] = sim.heap_f
        heap_i[:sim.heap_f.size] = sim.heap_i
        sim = sim._replace(heap_f=heap_f, heap_i=heap_i)
    return sim
