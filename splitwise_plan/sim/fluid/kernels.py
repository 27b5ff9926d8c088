"""The fluid model's rules, compiled: the reference's rules, each machine's decode iterations as a fluid.

Routing is the reference scheduler's, as the event simulator runs it (join-the-shortest-queue on pending
prompt tokens, the token pool by scheduled memory, the mixed pool that borrows machines across pools),
and so are a machine's prompt batches: FCFS, formed as a batch starts from the prompts waiting then, at
most ``max_batch_tokens`` (the first always fits), with the decodes that fit beside them riding along (a
mixed batch, ``MIXED_BATCH_FACTOR`` times as long). What is fluid is a machine's run of decode iterations,
so that a request costs a few steps rather than an event per iteration:

- every decode running on a machine makes one token an iteration, so a machine keeps one iteration count
  ``V`` that grows at ``1 / token_time(decodes running)`` between its prompt batches, and by the share of
  decodes riding in one over its span (where the step grows with the KV tokens the decodes hold, they grow by
  one each an iteration: the step is linear in ``V``, and the count its integral's inverse); a decode joins at the next iteration boundary and ends when the
  count has grown by its ``output - 1`` tokens (a heap per machine, by that end);
- a prompt waiting on a machine whose decodes run starts at the run's next iteration boundary, or, too
  long to ride beside them, when the run ends (its first decode does) or another request pauses it;
- a KV transfer starts as the prompt batch ends if the token machine has the memory for it, else tries
  again ``flow_retry_s`` later (the reference's); a decode waits there, FCFS, for memory its decodes free,
  or for a place among them: a machine runs at most ``max_batch_size`` decodes (a batch's most requests;
  where KV caches are small, memory holds more), the others waiting for one of them to end.

The run is a loop over arrivals and five kinds of event (a prompt batch starts or ends, a KV cache moves,
a decode joins its machine, a machine's first decode ends), in time order; arrivals first at equal times.
An arrival costs the logarithm of the machines, not their number: each pool keeps its machines in
tournaments by load (routing reads the winners), and the loop a bound of the longest queue.
"""

from __future__ import annotations

import math

from splitwise_plan.perf.latency_model import MIXED_BATCH_FACTOR
from splitwise_plan.sim.jit import njit, step, unowned
from splitwise_plan.sim.kernel_tools import (
    KV,
    KV_RATE,
    curve_at,
    decode_step,
    inline,
    pool_append,
    pool_remove,
    pop,
    push,
)

# columns of req_f and req_i (requests in arrival order)
ARRIVAL, MEM_P, MEM_T, XFER, TTFT, E2E = range(6)
PROMPT, OUTPUT, SRC, DST, NEXT_IN_BATCH = range(5)
# columns of mf and mi (machines, the prompt pool's first): memory, the decodes' iteration count ``V`` at
# ``V_AT``, busy seconds, the running prompt batch (start, end, share of the decodes riding in it, when the
# next one is planned to start), the KV tokens its decodes hold less ``N_DEC * V`` (their sum of prompt + 1 - the
# count at which each began), ...
MAX_MEM, MEM, SCHED_MEM, V, V_AT, BUSY, B_START, B_END, B_RIDE, PLAN_AT, CTX = range(11)
# ... its role and home pool, JSQ load, its queue of prompts (a ring of request ids), decodes running and
# waiting for memory, the running batch (its tokens and first request; none: -1), plan versions, and its
# place in its pool's order (greater: later)
(CURVE, HOME, MIXED, SCHED_PENDING, Q_HEAD, Q_LEN, N_DEC, VERSION, WAIT_HEAD, WAIT_LEN, WORKED, B_TOK, B_FIRST,
 PLAN_VERSION, RANK) = range(15)
# pools (rows of ``pools``; a baseline's machines are all its prompt pool)
PROMPT_POOL, MIXED_POOL, TOKEN_POOL = range(3)
# event kinds
BATCH_START, BATCH_END, FLOW, JOIN, DECODE_END = range(5)
# counters (the event heap's two first, as kernel_tools reads them)
(COUNTER, HEAP_LEN, NEXT_ARRIVAL, N_BATCHES, EVENTS, OVERLOADED, FAILED, OOM, RETRIES, DEADLOCKED,
 POOL_SIZE) = range(11)
# ... after the three pools' sizes: at least the longest prompt queue, and the next place at a pool's end
LONGEST_QUEUE, NEXT_RANK = POOL_SIZE + 3, POOL_SIZE + 4
N_COUNTERS = POOL_SIZE + 5
NOW, PROGRESS_AT = range(2)
# columns of slos
SLO_METRIC, HAS_REF, NEED, BROKEN = range(4)
TTFT_M, TBT_M, E2E_M = range(3)
# what a run of the kernel ends with
END, GROW = range(2)
EPS = 1e-9


# -- latency --------------------------------------------------------------------------------------------------


@inline
def token_time(curves, curve_n, mf, mi, i, v):
    """One decode-only iteration of the decodes running on machine ``i`` at its iteration count ``v``."""
    j, n = 2 * mi[i, CURVE] + 1, mi[i, N_DEC]
    return decode_step(curves, curve_n[j], j, float(n), mf[i, CTX] + n * v)


@inline
def step_growth(curves, mi, i):
    """How much the decode step of machine ``i`` grows an iteration (its decodes' KV tokens grow by one each)."""
    return curves[2 * mi[i, CURVE] + 1, KV, KV_RATE] * mi[i, N_DEC]


@inline
def batch_time(curves, curve_n, mi, i, tokens, ride):
    """A prompt batch of ``tokens`` with ``ride`` decodes riding in it (a mixed batch if any)."""
    j = 2 * mi[i, CURVE]
    t = curve_at(curves, curve_n[j], j, float(tokens + ride))
    return MIXED_BATCH_FACTOR * t if ride > 0 else t


# -- the global event heap: (time, insertion counter) -----------------------------------------------------------


# -- a machine's decodes: a heap of (iteration count at which it ends, request) ----------------------------------


@inline
def decode_push(dec_v, dec_r, mi, i, v, rid):
    pos = mi[i, N_DEC]
    mi[i, N_DEC] = pos + 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if dec_v[i, parent] <= v:
            break
        dec_v[i, pos] = dec_v[i, parent]
        dec_r[i, pos] = dec_r[i, parent]
        pos = parent
    dec_v[i, pos] = v
    dec_r[i, pos] = rid


@inline
def decode_pop(dec_v, dec_r, mi, i):
    n = mi[i, N_DEC] - 1
    mi[i, N_DEC] = n
    last_v, last_r = dec_v[i, n], dec_r[i, n]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and dec_v[i, child + 1] < dec_v[i, child]:
            child += 1
        if not dec_v[i, child] < last_v:
            break
        dec_v[i, pos] = dec_v[i, child]
        dec_r[i, pos] = dec_r[i, child]
        pos = child
    dec_v[i, pos] = last_v
    dec_r[i, pos] = last_r


# -- a machine's timeline: its running prompt batch and the decodes' iteration count --------------------------------


@inline
def advance(mf, mi, curves, curve_n, i, t):
    """Bring machine ``i``'s iteration count to time ``t``: its decodes make an iteration each token time
    (busy time counted here), and the share of them riding in a running prompt batch one over the batch."""
    cur = mf[i, V_AT]
    if t <= cur:
        return
    mf[i, V_AT] = t
    if mi[i, N_DEC] == 0:
        return
    if mi[i, B_FIRST] >= 0:                 # within the running batch (it started at or before ``cur``)
        stop = min(mf[i, B_END], t)
        mf[i, V] += mf[i, B_RIDE] * (stop - cur) / (mf[i, B_END] - mf[i, B_START])
        cur = stop
    if cur < t:
        step, growth = token_time(curves, curve_n, mf, mi, i, mf[i, V]), step_growth(curves, mi, i)
        if growth == 0.0:
            mf[i, V] += (t - cur) / step
        else:   # the iterations whose steps, growing linearly, add up to t - cur
            mf[i, V] += 2.0 * (t - cur) / (step + math.sqrt(step * step + 2.0 * growth * (t - cur)))
        mf[i, BUSY] += t - cur


@inline
def reaches(mf, mi, curves, curve_n, i, target):
    """When machine ``i``'s iteration count reaches ``target``, if nothing else changes."""
    cur, v = mf[i, V_AT], mf[i, V]
    if mi[i, B_FIRST] >= 0 and mf[i, B_END] > cur:
        span = mf[i, B_END] - mf[i, B_START]
        gain = mf[i, B_RIDE] * (mf[i, B_END] - cur) / span
        if gain > 0.0 and v + gain >= target:
            return cur + (target - v) / mf[i, B_RIDE] * span
        v += gain
        cur = mf[i, B_END]
    left = max(target - v, 0.0)
    return cur + left * (token_time(curves, curve_n, mf, mi, i, v) + 0.5 * step_growth(curves, mi, i) * left)


@inline
def plan_decode_end(mf, mi, dec_v, curves, curve_n, heap_f, heap_i, counters, i):
    """(Re)plan the event of machine ``i``'s first decode ending: older plans become stale."""
    mi[i, VERSION] += 1
    if mi[i, N_DEC]:
        t = reaches(mf, mi, curves, curve_n, i, dec_v[i, 0])
        push(heap_f, heap_i, counters, t, DECODE_END, i, mi[i, VERSION])


@inline
def has_queue(mf, mi, i):
    """The reference's pending queue of machine ``i`` is not empty: a prompt waits, a running batch holds back
    decodes that do not fit beside it, or a decode waits for memory."""
    return mi[i, Q_LEN] > 0 or mi[i, WAIT_LEN] > 0 or (mi[i, B_FIRST] >= 0 and mi[i, N_DEC] > 0 and mf[i, B_RIDE] < 1.0)


# -- pools and routing (the reference's, as sim/events runs them) -----------------------------------------------


# Each pool keeps two tournaments of its machines, rows ``2 * pool`` (by sched_pending) and ``2 * pool + 1``
# (by sched_memory) of ``tour``: a binary tree whose leaf ``half + i`` is machine ``i`` if it is in the pool
# (else -1) and whose every other node is the winner of its two children, the lighter machine (the one earlier
# in the pool on a tie). Node 1 is the pool's machine of least load, and a machine whose load or pool changes
# replays only its own matches: routing costs the log of the machines, not their number.


@inline
def lighter(mf, mi, a, b, by_memory):
    """Whether machine ``a`` goes before machine ``b`` of the same pool (-1: none): less sched_pending (or
    sched_memory), or as much and earlier in the pool."""
    if a < 0 or b < 0:
        return a >= 0 > b
    ka = mf[a, SCHED_MEM] if by_memory else float(mi[a, SCHED_PENDING])
    kb = mf[b, SCHED_MEM] if by_memory else float(mi[b, SCHED_PENDING])
    return ka < kb or (ka == kb and mi[a, RANK] < mi[b, RANK])


@inline
def replay(tour, mf, mi, row, i):
    """Replay machine ``i``'s matches in tournament ``row``, from its leaf to the final."""
    by_memory = row % 2 == 1
    node = (tour.shape[1] // 2 + i) // 2
    while node:
        a, b = tour[row, 2 * node], tour[row, 2 * node + 1]
        tour[row, node] = b if lighter(mf, mi, b, a, by_memory) else a
        node //= 2


@step
def reweigh(tour, mf, mi, i, by_memory):
    """Machine ``i``'s sched_pending (or sched_memory) changed: its pool's tournament learns it."""
    pool = MIXED_POOL if mi[i, MIXED] else mi[i, HOME]
    replay(tour, mf, mi, 2 * pool + by_memory, i)


@step
def seat(pools, counters, tour, mf, mi, pool, i):
    """Machine ``i`` joins ``pool``, at its end."""
    pool_append(pools, counters, POOL_SIZE, pool, i)
    mi[i, RANK] = counters[NEXT_RANK]
    counters[NEXT_RANK] += 1
    for row in (2 * pool, 2 * pool + 1):
        tour[row, tour.shape[1] // 2 + i] = i
        replay(tour, mf, mi, row, i)


@step
def unseat(pools, counters, tour, mf, mi, pool, i):
    """Machine ``i`` leaves ``pool``."""
    pool_remove(pools, counters, POOL_SIZE, pool, i)
    for row in (2 * pool, 2 * pool + 1):
        tour[row, tour.shape[1] // 2 + i] = -1
        replay(tour, mf, mi, row, i)


@njit
def seat_all(pools, counters, tour, mf, mi):
    """Every machine joins its home pool, in the order of the machines (a run's start)."""
    for i in range(mi.shape[0]):
        seat(pools, counters, tour, mf, mi, mi[i, HOME], i)


@inline
def lend_to_mixed(pools, counters, tour, mf, mi, pool, i):
    unseat(pools, counters, tour, mf, mi, pool, i)
    seat(pools, counters, tour, mf, mi, MIXED_POOL, i)
    mi[i, MIXED] = 1
    mi[i, WORKED] = 0


@inline
def least(pools, counters, tour, mf, mi, room, pool, by_memory, need, fits):
    """The first machine of ``pool`` with the least sched_pending (or sched_memory), -1 if none; only
    among those whose KV room holds ``need`` bytes if ``fits``: its tournament's winner, unless that one's
    room is too small (rare: then every machine of the pool is looked at)."""
    best = tour[2 * pool + by_memory, 1]
    if best < 0 or not fits or room[best] >= need:
        return best
    return least_that_fits(pools, counters, mf, mi, room, pool, by_memory, need)


@step
def least_that_fits(pools, counters, mf, mi, room, pool, by_memory, need):
    """The first machine of ``pool`` with the least sched_pending (or sched_memory) among those whose KV room
    holds ``need`` bytes, -1 if none."""
    best, best_key = -1, 0.0
    for k in range(counters[POOL_SIZE + pool]):
        i = pools[pool, k]
        if room[i] < need:
            continue
        v = mf[i, SCHED_MEM] if by_memory else float(mi[i, SCHED_PENDING])
        if best < 0 or v < best_key:
            best, best_key = i, v
    return best


@step
def least_of_every(pools, counters, tour, mf, mi, room, need, fits):
    best, best_key = -1, 0.0
    for pool in (PROMPT_POOL, MIXED_POOL, TOKEN_POOL):
        i = least(pools, counters, tour, mf, mi, room, pool, False, need, fits)
        if i >= 0:
            v = float(mi[i, SCHED_PENDING])
            if best < 0 or v < best_key:
                best, best_key = i, v
    return best


@inline
def route(req_i, mf, mi, room, pools, counters, tour, cfg, rid, mem_p, mem_t):
    """A Splitwise request's prompt machine and token machine, borrowing across pools if need be."""
    fits = mem_p + mem_t > cfg.smallest_kv
    alone = req_i[rid, OUTPUT] <= 1
    prompt = req_i[rid, PROMPT]
    p = -1
    for pool in (PROMPT_POOL, MIXED_POOL):
        cand = least(pools, counters, tour, mf, mi, room, pool, False, mem_p, fits)
        if cand >= 0 and not (mi[cand, SCHED_PENDING] + prompt > cfg.prompt_max_pending_tokens
                              and has_queue(mf, mi, cand)):
            p = cand
            break
    t = -1
    if not alone:
        for pool in (TOKEN_POOL, MIXED_POOL):
            cand = least(pools, counters, tour, mf, mi, room, pool, True, mem_p + mem_t, fits)
            if cand >= 0 and mf[cand, SCHED_MEM] + mem_p + mem_t < mf[cand, MAX_MEM]:
                t = cand
                break
    if cfg.mixed_pool:
        if p < 0 and counters[POOL_SIZE + TOKEN_POOL]:
            p = least(pools, counters, tour, mf, mi, room, TOKEN_POOL, False, mem_p, fits)
            if p >= 0:
                lend_to_mixed(pools, counters, tour, mf, mi, TOKEN_POOL, p)
        if t < 0 and counters[POOL_SIZE + PROMPT_POOL] and not alone:
            t = least(pools, counters, tour, mf, mi, room, PROMPT_POOL, True, mem_p + mem_t, fits)
            if t >= 0:
                lend_to_mixed(pools, counters, tour, mf, mi, PROMPT_POOL, t)
    if alone and p >= 0:
        t = p
    if p < 0 or t < 0:
        if cfg.mixed_pool:
            need = mem_p + mem_t
            for _ in range(2):
                p = least_of_every(pools, counters, tour, mf, mi, room, need, fits)
                if p >= 0:
                    break
                need, fits = 0.0, False
            t = p
        else:
            if p < 0:
                p = least(pools, counters, tour, mf, mi, room, PROMPT_POOL, False, 0.0, False)
            if t < 0:
                t = least(pools, counters, tour, mf, mi, room, TOKEN_POOL, True, 0.0, False)
    return p, t


@step
def send_home(mf, mi, pools, counters, tour):
    """Machines lent to the mixed pool go home once work has been done there and nothing is left."""
    k = 0
    while k < counters[POOL_SIZE + MIXED_POOL]:
        i = pools[MIXED_POOL, k]
        if (mi[i, WORKED] and mi[i, N_DEC] == 0 and mi[i, WAIT_LEN] == 0 and mi[i, Q_LEN] == 0
                and mi[i, B_FIRST] < 0 and mi[i, PLAN_VERSION] <= 0):
            mi[i, MIXED] = 0
            unseat(pools, counters, tour, mf, mi, MIXED_POOL, i)
            seat(pools, counters, tour, mf, mi, mi[i, HOME], i)
        else:
            k += 1


# -- the verdict ---------------------------------------------------------------------------------------------


@inline
def judge(slos, slo_limit, slo_ref, counters, metric, rid, value):
    """Count a final latency against the verdict's SLOs of ``metric``; the design fails once as many
    requests break one as make its percentile break it whatever the others do."""
    for k in range(slos.shape[0]):
        if slos[k, SLO_METRIC] != metric:
            continue
        x = value / slo_ref[k, rid] if slos[k, HAS_REF] else value
        if x >= slo_limit[k]:
            slos[k, BROKEN] += 1
            if slos[k, BROKEN] >= slos[k, NEED]:
                counters[FAILED] = 1


@inline
def finish(req_f, req_i, slos, slo_limit, slo_ref, counters, now, rid):
    e2e = now - req_f[rid, ARRIVAL]
    req_f[rid, E2E] = e2e
    if slos.shape[0]:
        judge(slos, slo_limit, slo_ref, counters, E2E_M, rid, e2e)
        judge(slos, slo_limit, slo_ref, counters, TBT_M, rid, (e2e - req_f[rid, TTFT]) / req_i[rid, OUTPUT])


# -- prompt batches ---------------------------------------------------------------------------------------------


@inline
def plan_batch(mf, mi, dec_v, heap_f, heap_i, counters, curves, curve_n, cfg, i, pauses, now):
    """A request's prompt joins machine ``i``'s queue with no batch running: the next batch starts at once on a
    machine with no decodes running, else at the run's next iteration boundary if the request ``pauses`` the
    run (a prompt within ``max_batch_tokens``, or its decode queued here with it), else when the run ends:
    when its first decode does, or another request pauses it."""
    if mi[i, B_FIRST] >= 0:                 # the running batch's end starts the next
        return
    at = now
    if mi[i, N_DEC]:
        advance(mf, mi, curves, curve_n, i, now)
        v = mf[i, V]
        at = now + (math.ceil(v) - v) * token_time(curves, curve_n, mf, mi, i, v)
        if not pauses:
            at = reaches(mf, mi, curves, curve_n, i, dec_v[i, 0])
    if mi[i, PLAN_VERSION] > 0 and mf[i, PLAN_AT] <= at:
        return                              # planned already, as early
    mi[i, PLAN_VERSION] = abs(mi[i, PLAN_VERSION]) + 1
    mf[i, PLAN_AT] = at
    push(heap_f, heap_i, counters, at, BATCH_START, i, mi[i, PLAN_VERSION])


@inline
def wake(mf, mi, dec_v, heap_f, heap_i, counters, curves, curve_n, cfg, i, now):
    """Memory was freed on machine ``i``: prompts waiting there with no batch running or planned (none had
    the memory) plan their batch."""
    if mi[i, Q_LEN] and mi[i, B_FIRST] < 0 and mi[i, PLAN_VERSION] <= 0:
        plan_batch(mf, mi, dec_v, heap_f, heap_i, counters, curves, curve_n, cfg, i, True, now)


@step
def batch_start(req_f, req_i, mf, mi, ring, dec_v, heap_f, heap_i, counters, curves, curve_n, slos, slo_limit,
                slo_ref, cfg, i, now):
    """Machine ``i`` starts its next prompt batch: its queue's prompts FCFS while they fit in
    ``max_batch_tokens`` (the first always does) and in the machine's memory, then the decodes that fit
    beside them ride along. With no memory for the first, no batch starts: a decode ending here wakes it."""
    mi[i, PLAN_VERSION] = -abs(mi[i, PLAN_VERSION])   # no plan pending
    advance(mf, mi, curves, curve_n, i, now)
    v = mf[i, V]
    if abs(v - round(v)) < 1e-6:            # at an iteration boundary: the batch's decodes make one token
        mf[i, V] = round(v)
    cap = ring.shape[1]
    tokens = count = 0
    memory = mf[i, MEM]
    last = -1
    while mi[i, Q_LEN]:
        rid = ring[i, mi[i, Q_HEAD]]
        s = req_i[rid, PROMPT]
        if count and (tokens + s > cfg.max_batch_tokens or count == cfg.max_batch_size):
            break
        if memory + req_f[rid, MEM_P] > mf[i, MAX_MEM]:
            break
        memory += req_f[rid, MEM_P]
        mi[i, Q_HEAD] = (mi[i, Q_HEAD] + 1) % cap
        mi[i, Q_LEN] -= 1
        if last < 0:
            mi[i, B_FIRST] = rid
        else:
            req_i[last, NEXT_IN_BATCH] = rid
        req_i[rid, NEXT_IN_BATCH] = -1
        last = rid
        tokens += s
        count += 1
    if count == 0:
        return
    nd = mi[i, N_DEC]
    ride = max(min(nd, cfg.max_batch_tokens - tokens, cfg.max_batch_size - count), 0)
    end = now + batch_time(curves, curve_n, mi, i, tokens, ride)
    mf[i, B_START], mf[i, B_END] = now, end
    mf[i, B_RIDE] = ride / nd if nd else 0.0
    mf[i, BUSY] += end - now
    mi[i, B_TOK] = tokens
    rid = mi[i, B_FIRST]
    while rid >= 0:
        ttft = end - req_f[rid, ARRIVAL]
        req_f[rid, TTFT] = ttft
        if slos.shape[0]:
            judge(slos, slo_limit, slo_ref, counters, TTFT_M, rid, ttft)
        mf[i, MEM] += req_f[rid, MEM_P]
        rid = req_i[rid, NEXT_IN_BATCH]
    push(heap_f, heap_i, counters, end, BATCH_END, i, 0)
    if nd:
        plan_decode_end(mf, mi, dec_v, curves, curve_n, heap_f, heap_i, counters, i)


@inline
def batch_end(req_f, req_i, mf, mi, ring, dec_v, tour, heap_f, heap_i, counters, curves, curve_n, slos, slo_limit,
              slo_ref, cfg, i, now):
    """Machine ``i``'s prompt batch ends: its prompts are no longer pending, their KV caches move (or their
    decodes start here), and the queue's next prompts start at once."""
    advance(mf, mi, curves, curve_n, i, now)
    mi[i, SCHED_PENDING] -= mi[i, B_TOK]
    reweigh(tour, mf, mi, i, 0)
    rid = mi[i, B_FIRST]
    mi[i, B_FIRST] = -1
    while rid >= 0:
        kind = JOIN if req_i[rid, DST] == i or req_i[rid, OUTPUT] <= 1 else FLOW
        push(heap_f, heap_i, counters, now, kind, rid, 0)
        rid = req_i[rid, NEXT_IN_BATCH]
    if mi[i, Q_LEN]:
        batch_start(req_f, req_i, mf, mi, ring, dec_v, heap_f, heap_i, counters, curves, curve_n, slos, slo_limit,
                    slo_ref, cfg, i, now)
    elif mi[i, N_DEC]:
        plan_decode_end(mf, mi, dec_v, curves, curve_n, heap_f, heap_i, counters, i)


# -- a request arrives: route it, queue its prompt -------------------------------------------------------------


@step
def arrive(req_f, req_i, mf, mi, room, ring, dec_v, pools, tour, heap_f, heap_i, counters, curves, curve_n,
           slos, slo_limit, slo_ref, cfg, rid, now):
    """Request ``rid`` arrives: route its prompt and decode, book them, queue its prompt."""
    if counters[POOL_SIZE + MIXED_POOL]:
        send_home(mf, mi, pools, counters, tour)
    mem_p, mem_t = req_f[rid, MEM_P], req_f[rid, MEM_T]
    if mem_p + mem_t > cfg.largest_kv:      # no machine ever holds it: never admitted
        counters[OOM] = 1
        for metric in (TTFT_M, TBT_M, E2E_M):
            judge(slos, slo_limit, slo_ref, counters, metric, rid, math.inf)
        return
    alone = req_i[rid, OUTPUT] <= 1
    if cfg.baseline:
        p = d = least(pools, counters, tour, mf, mi, room, PROMPT_POOL, False, 0.0, False)
    else:
        p, d = route(req_i, mf, mi, room, pools, counters, tour, cfg, rid, mem_p, mem_t)
    if mi[p, Q_LEN] and now - req_f[ring[p, mi[p, Q_HEAD]], ARRIVAL] > cfg.overload_s:
        counters[OVERLOADED] = 1
        return
    if cfg.baseline:
        mi[p, SCHED_PENDING] += req_i[rid, PROMPT] + (0 if alone else 1)
    else:
        mi[p, SCHED_PENDING] += req_i[rid, PROMPT]
        mi[d, SCHED_PENDING] += 0 if alone else 1
        if p != d:
            mf[p, SCHED_MEM] += mem_p
            mf[d, SCHED_MEM] += mem_p + mem_t
        else:
            mf[p, SCHED_MEM] += mem_p + mem_t
        reweigh(tour, mf, mi, p, 1)
        reweigh(tour, mf, mi, d, 0)
        reweigh(tour, mf, mi, d, 1)
    reweigh(tour, mf, mi, p, 0)
    req_i[rid, SRC] = p
    req_i[rid, DST] = d
    ring[p, (mi[p, Q_HEAD] + mi[p, Q_LEN]) % ring.shape[1]] = rid
    mi[p, Q_LEN] += 1
    counters[LONGEST_QUEUE] = max(counters[LONGEST_QUEUE], mi[p, Q_LEN])
    mi[p, WORKED] = 1
    pauses = req_i[rid, PROMPT] <= cfg.max_batch_tokens or (d == p and not alone)
    plan_batch(mf, mi, dec_v, heap_f, heap_i, counters, curves, curve_n, cfg, p, pauses, now)


# -- a decode: its KV cache moves, it joins its machine, it ends ------------------------------------------------


@inline
def start_decode(req_i, mf, mi, dec_v, dec_r, heap_f, heap_i, counters, curves, curve_n, d, rid, need, now):
    """The decode of ``rid`` starts on machine ``d``: at once on a machine with no decodes running, else at
    the next iteration boundary; it ends ``output - 1`` iterations later."""
    advance(mf, mi, curves, curve_n, d, now)
    mf[d, MEM] += need
    v = mf[d, V]
    begin = math.ceil(v) if mi[d, N_DEC] else v
    decode_push(dec_v, dec_r, mi, d, begin + (req_i[rid, OUTPUT] - 1), rid)
    mf[d, CTX] += req_i[rid, PROMPT] + 1 - begin
    plan_decode_end(mf, mi, dec_v, curves, curve_n, heap_f, heap_i, counters, d)
    if mi[d, PLAN_VERSION] > 0:             # a long prompt waits for the run to end: the join pauses it
        at = now + (begin - v) * token_time(curves, curve_n, mf, mi, d, v)
        if at < mf[d, PLAN_AT]:
            mi[d, PLAN_VERSION] += 1
            mf[d, PLAN_AT] = at
            push(heap_f, heap_i, counters, at, BATCH_START, d, mi[d, PLAN_VERSION])


@inline
def most_decodes(cfg):
    """The most decodes a machine runs at once: one iteration's batch holds at most ``max_batch_size`` requests
    and ``max_batch_tokens`` tokens (a decode's one a token); the others wait their turn (the reference's)."""
    return min(cfg.max_batch_size, cfg.max_batch_tokens)


@inline
def flow(req_f, req_i, mf, heap_f, heap_i, clock, counters, cfg, rid, now):
    """The prompt of ``rid`` is done on another machine than its decode's: its KV cache moves there if the
    machine has the memory for it, else the transfer tries again ``flow_retry_s`` later (the reference's).
    Once every event left is such a retry, each failed since anything else happened, nothing will free
    memory again: the run is deadlocked (out of memory)."""
    d = req_i[rid, DST]
    if mf[d, MEM] + req_f[rid, MEM_P] <= mf[d, MAX_MEM]:
        mf[d, MEM] += req_f[rid, MEM_P]
        push(heap_f, heap_i, counters, now + req_f[rid, XFER], JOIN, rid, 0)
        return
    counters[RETRIES] += 1
    push(heap_f, heap_i, counters, now + cfg.flow_retry_s, FLOW, rid, 1)
    left = counters[HEAP_LEN] + req_i.shape[0] - counters[NEXT_ARRIVAL]
    if left == counters[RETRIES] and now - clock[PROGRESS_AT] > cfg.flow_retry_s:
        counters[DEADLOCKED] = 1
        counters[OOM] = 1


@inline
def join(req_f, req_i, mf, mi, dec_v, dec_r, wait, tour, heap_f, heap_i, counters, curves, curve_n,
         slos, slo_limit, slo_ref, cfg, rid, now):
    """The prompt of ``rid`` is done and its KV cache moved: it ends (one output token) or its decode
    starts, or waits at its machine for memory."""
    p, d = req_i[rid, SRC], req_i[rid, DST]
    mem_p = req_f[rid, MEM_P]
    if req_i[rid, OUTPUT] <= 1:
        finish(req_f, req_i, slos, slo_limit, slo_ref, counters, now, rid)
        mf[p, MEM] -= mem_p
        mf[p, SCHED_MEM] -= mem_p
        reweigh(tour, mf, mi, p, 1)
        wake(mf, mi, dec_v, heap_f, heap_i, counters, curves, curve_n, cfg, p, now)
        return
    if p != d:                              # the transfer is done: the prompt machine frees the KV cache
        mf[p, MEM] -= mem_p
        mf[p, SCHED_MEM] -= mem_p
        reweigh(tour, mf, mi, p, 1)
        wake(mf, mi, dec_v, heap_f, heap_i, counters, curves, curve_n, cfg, p, now)
    mi[d, WORKED] = 1
    need = req_f[rid, MEM_T]
    if mi[d, WAIT_LEN] or mf[d, MEM] + need > mf[d, MAX_MEM] or mi[d, N_DEC] >= most_decodes(cfg):
        wait[d, (mi[d, WAIT_HEAD] + mi[d, WAIT_LEN]) % wait.shape[1]] = rid
        mi[d, WAIT_LEN] += 1
        return
    start_decode(req_i, mf, mi, dec_v, dec_r, heap_f, heap_i, counters, curves, curve_n, d, rid, need, now)


@step
def decode_end(req_f, req_i, mf, mi, dec_v, dec_r, wait, tour, heap_f, heap_i, counters, curves, curve_n,
               slos, slo_limit, slo_ref, cfg, i, version, now):
    """Machine ``i``'s first decodes end (unless the plan is stale): they free their memory, and decodes
    waiting for it start."""
    if version != mi[i, VERSION]:
        return
    advance(mf, mi, curves, curve_n, i, now)
    while mi[i, N_DEC] and dec_v[i, 0] <= mf[i, V] + 1e-6:
        rid = dec_r[i, 0]
        mf[i, CTX] -= req_i[rid, PROMPT] + 1 - (dec_v[i, 0] - (req_i[rid, OUTPUT] - 1))
        decode_pop(dec_v, dec_r, mi, i)
        if mi[i, N_DEC] == 0:
            mf[i, CTX] = 0.0                # (no sum of many differences left over)
        finish(req_f, req_i, slos, slo_limit, slo_ref, counters, now, rid)
        amount = req_f[rid, MEM_P] + req_f[rid, MEM_T]
        mf[i, MEM] -= amount
        mf[i, SCHED_MEM] -= amount
        mi[i, SCHED_PENDING] -= 1
    reweigh(tour, mf, mi, i, 0)
    reweigh(tour, mf, mi, i, 1)
    cap = wait.shape[1]
    while mi[i, WAIT_LEN]:
        rid = wait[i, mi[i, WAIT_HEAD]]
        need = req_f[rid, MEM_T]
        if mf[i, MEM] + need > mf[i, MAX_MEM] or mi[i, N_DEC] >= most_decodes(cfg):
            break
        mi[i, WAIT_HEAD] = (mi[i, WAIT_HEAD] + 1) % cap
        mi[i, WAIT_LEN] -= 1
        start_decode(req_i, mf, mi, dec_v, dec_r, heap_f, heap_i, counters, curves, curve_n, i, rid, need, now)
    plan_decode_end(mf, mi, dec_v, curves, curve_n, heap_f, heap_i, counters, i)
    wake(mf, mi, dec_v, heap_f, heap_i, counters, curves, curve_n, cfg, i, now)


# -- the loop ---------------------------------------------------------------------------------------------------


@inline
def needs_room(req_i, mi, ring, dec_v, wait, heap_f, heap_i, counters, cfg, arrival_next):
    """Whether the next step may overflow a machine's queue, decode heap or wait list, or the event heap."""
    if heap_f.size - counters[HEAP_LEN] < cfg.max_batch_size + 16:
        return True
    if arrival_next:
        if counters[LONGEST_QUEUE] >= ring.shape[1] - 1:   # (a bound: made exact once it reaches the limit)
            counters[LONGEST_QUEUE] = longest_queue(mi)
        return counters[LONGEST_QUEUE] >= ring.shape[1] - 1
    if heap_i[0, 1] != JOIN:
        return False
    d = req_i[heap_i[0, 2], DST]
    return mi[d, N_DEC] + mi[d, WAIT_LEN] >= min(dec_v.shape[1], wait.shape[1]) - 1


@inline
def longest_queue(mi):
    """The most prompts queued on one machine."""
    longest = 0
    for i in range(mi.shape[0]):
        longest = max(longest, mi[i, Q_LEN])
    return longest


@njit
def run_fluid(req_f, req_i, mf, mi, room, ring, dec_v, dec_r, wait, pools, tour, heap_f, heap_i, clock, counters,
              curves, curve_n, slos, slo_limit, slo_ref, cfg):
    """Arrivals and events in time order until the run ends (END) or a list needs more room (GROW)."""
    # the steps take views whose references are not counted (see jit.unowned): this call's caller holds the arrays
    req_f, req_i, mf, mi, room, ring = unowned(req_f), unowned(req_i), unowned(mf), unowned(mi), unowned(room), unowned(ring)
    dec_v, dec_r, wait, pools, tour = unowned(dec_v), unowned(dec_r), unowned(wait), unowned(pools), unowned(tour)
    heap_f, heap_i, clock, counters = unowned(heap_f), unowned(heap_i), unowned(clock), unowned(counters)
    curves, curve_n, slos, slo_limit, slo_ref = unowned(curves), unowned(curve_n), unowned(slos), unowned(slo_limit), unowned(slo_ref)
    n = req_i.shape[0]
    while not counters[OVERLOADED] and not counters[FAILED] and not counters[DEADLOCKED]:
        k = counters[NEXT_ARRIVAL]
        ta = req_f[k, ARRIVAL] if k < n else math.inf
        arrival_next = k < n and (counters[HEAP_LEN] == 0 or ta <= heap_f[0])
        if not arrival_next and counters[HEAP_LEN] == 0:
            break
        if needs_room(req_i, mi, ring, dec_v, wait, heap_f, heap_i, counters, cfg, arrival_next):
            return GROW
        counters[EVENTS] += 1
        if arrival_next:
            counters[NEXT_ARRIVAL] = k + 1
            clock[NOW] = clock[PROGRESS_AT] = ta
            arrive(req_f, req_i, mf, mi, room, ring, dec_v, pools, tour, heap_f, heap_i, counters, curves, curve_n,
                   slos, slo_limit, slo_ref, cfg, k, ta)
            continue
        t, kind, a, b = heap_f[0], heap_i[0, 1], heap_i[0, 2], heap_i[0, 3]
        pop(heap_f, heap_i, counters)
        clock[NOW] = t
        if kind != FLOW or b == 0:
            clock[PROGRESS_AT] = t
        if kind == BATCH_START:
            if b == mi[a, PLAN_VERSION]:    # (else stale: planned anew since)
                batch_start(req_f, req_i, mf, mi, ring, dec_v, heap_f, heap_i, counters, curves, curve_n, slos,
                            slo_limit, slo_ref, cfg, a, t)
        elif kind == BATCH_END:
            batch_end(req_f, req_i, mf, mi, ring, dec_v, tour, heap_f, heap_i, counters, curves, curve_n, slos,
                      slo_limit, slo_ref, cfg, a, t)
        elif kind == FLOW:
            counters[RETRIES] -= b
            flow(req_f, req_i, mf, heap_f, heap_i, clock, counters, cfg, a, t)
        elif kind == JOIN:
            join(req_f, req_i, mf, mi, dec_v, dec_r, wait, tour, heap_f, heap_i, counters, curves, curve_n,
                 slos, slo_limit, slo_ref, cfg, a, t)
        else:
            decode_end(req_f, req_i, mf, mi, dec_v, dec_r, wait, tour, heap_f, heap_i, counters, curves, curve_n,
                       slos, slo_limit, slo_ref, cfg, a, b, t)
    return END


@njit
def settle(mf, mi, curves, curve_n, now):
    """Every machine's decodes brought to ``now``, the run's end: their busy time counted."""
    for i in range(mi.shape[0]):
        advance(mf, mi, curves, curve_n, i, now)
