"""The event simulator's steps, compiled: the reference simulator's rules over the flat arrays of :mod:`.state`.

Each step is named after the reference's (``arrive``, ``task_arrival``, ``select_batch``, ...) and does
what the engine's objects did, in the same order and with the same arithmetic, so that every request's
times are the same to the last bit. :func:`run_events` handles events until the run ends, a chunk of
events is done (the caller reports progress and resumes), or a machine's lists or the heap need more
room (the caller grows them and resumes).

A machine's lists are rows of ``queue`` with a length: appended to, deleted from and inserted into
as the reference's Python lists are (``insert``, ``remove`` of the first match, ``insort``), so their
order is the reference's.

Each step takes only the arrays it reads, one argument each: :func:`run_events` hands them views whose
references numba does not count (:func:`splitwise_plan.sim.jit.unowned`; a compiled call would count one for every array it is
handed, and a bundle of them costs that for all of them). The call tree is flat: a step that
would end by starting or pausing a machine returns START or PAUSE instead and :func:`run_events` does it,
the step's last act as in the reference. Small helpers are ``@inline``: numba inlines them into each
compiled step rather than compiling them on their own once per caller's argument types (constant
arguments count as types), which takes less time to compile and runs as fast. The steps are ``@step``
(:func:`splitwise_plan.sim.jit.step`): each compiles on its own, once, and LLVM inlines it into
:func:`run_events`, so that calling a step costs nothing (it took half the time of a run as a call).

An arrival costs the logarithm of the machines, not their number: each pool keeps its machines in two
tournaments by load (sched_pending and sched_mem), and routing reads their winners (see :func:`least`).
"""

from __future__ import annotations

import math

from splitwise_plan.perf.latency_model import MIXED_BATCH_FACTOR
from splitwise_plan.sim.events.state import (
    ADDED,
    ARRIVAL,
    ARRIVE,
    ARRIVED,
    BATCH,
    BATCH_TOKENS,
    BATCHED,
    BLOCKED,
    BLOCKED_LIST,
    BROKEN,
    BUSY,
    BUSY_SINCE,
    CHUNK,
    COMPLETE,
    CURVE,
    DEADLOCKED,
    DONE,
    DST,
    E2E,
    END,
    EV_A,
    EV_B,
    EVENTS,
    FAILED,
    FINISHED,
    FLOW_ARRIVAL,
    FLOW_DONE,
    FLOW_RETRY,
    GENERATED,
    GROW,
    HAS_REF,
    HEAP_LEN,
    HOME,
    ITER_DUR,
    KIND,
    MAX_MEM,
    MEM,
    MEMORY,
    MIXED,
    MIXED_POOL,
    N_CONTIG,
    N_TASKS,
    NEED,
    NEW,
    NEXT_ARRIVAL,
    NEXT_RANK,
    NOW,
    NPREM,
    OOM,
    ORDER,
    OUTPUT,
    OVERLOADED,
    PAUSED,
    PENDING,
    PENDING_PROMPTS,
    POOL_ORDER,
    POOL_SIZE,
    PREEMPTED,
    PROGRESS_AT,
    PROMPT,
    PROMPT_POOL,
    QUEUED,
    RANK,
    REQ_E2E,
    REQ_STAMP,
    REQ_TTFT,
    RETRIES,
    ROOM,
    RUN_START,
    RUNNING,
    SCHED_MEM,
    SCHED_PENDING,
    SLO_METRIC,
    SRC,
    STAMP,
    STATE,
    TASK_ARRIVAL,
    TASK_STAMP,
    TBT,
    TOKEN_POOL,
    TTFT,
    VERSION,
    WHERE,
)
from splitwise_plan.sim.jit import njit, step, unowned
from splitwise_plan.sim.kernel_tools import curve_at, decode_step, inline, pool_append, pool_remove, pop, push

BY_PENDING, BY_SCHED_MEM = 0, 1   # the routers' keys: sched_pending, sched_mem
NOTHING, START, PAUSE = range(3)  # what a step asks of the machine it touched, done last (see run_events)

# -- a machine's lists: row ``queue[i, which]`` of length ``queue_len[i, which]`` -------------------------------


@inline
def list_append(queue, queue_len, i, which, x):
    queue[i, which, queue_len[i, which]] = x
    queue_len[i, which] += 1


@inline
def list_insert(queue, queue_len, i, which, pos, x):
    """``list.insert(pos, x)``."""
    j = queue_len[i, which]
    while j > pos:
        queue[i, which, j] = queue[i, which, j - 1]
        j -= 1
    queue[i, which, pos] = x
    queue_len[i, which] += 1


@inline
def list_delete(queue, queue_len, i, which, pos):
    """``del list[pos]``."""
    n = queue_len[i, which]
    for j in range(pos, n - 1):
        queue[i, which, j] = queue[i, which, j + 1]
    queue_len[i, which] = n - 1


@inline
def list_remove(queue, queue_len, i, which, x):
    """``if x in list: list.remove(x)`` (its first place)."""
    for j in range(queue_len[i, which]):
        if queue[i, which, j] == x:
            list_delete(queue, queue_len, i, which, j)
            return


# -- the event heap: (time, insertion counter) ----------------------------------------------------------


@inline
def events_left(req_i, counters):
    """``len(heap)`` of the reference: the heap's events and the arrivals still to come."""
    return counters[HEAP_LEN] + req_i.shape[0] - counters[NEXT_ARRIVAL]


@inline
def next_is_arrival(req_f, req_i, heap_f, counters):
    """Whether the next event is an arrival: arrivals have the first counters, so they win ties."""
    k = counters[NEXT_ARRIVAL]
    if k >= req_i.shape[0]:
        return False
    return counters[HEAP_LEN] == 0 or req_f[req_i[k, ORDER], ARRIVAL] <= heap_f[0]


# -- latency: LatencyModel.iteration_time_at ---------------------------------------------------------------


@inline
def iteration_time(curves, curve_n, c, n_prompt_tokens, n_decode, context):
    """One batch's seconds on a machine of latency curves ``c``: prompt-only, decode-only (its decodes holding
    ``context`` KV tokens in all), or mixed."""
    p, t = 2 * c, 2 * c + 1
    if n_decode <= 0:
        return curve_at(curves, curve_n[p], p, float(n_prompt_tokens))
    if n_prompt_tokens <= 0:
        return decode_step(curves, curve_n[t], t, float(n_decode), context)
    return MIXED_BATCH_FACTOR * curve_at(curves, curve_n[p], p, float(n_prompt_tokens + n_decode))


# -- tasks ------------------------------------------------------------------------------------------------


@inline
def is_prompt(task):
    return task & 1 == 0


@inline
def tokens_per_iteration(req_i, task):
    return req_i[task >> 1, PROMPT] if is_prompt(task) else 1


@inline
def task_size(req_i, task):
    """Tokens the task generates."""
    return 1 if is_prompt(task) else req_i[task >> 1, OUTPUT] - 1


@inline
def first_task(task_i, i, rid):
    """``pool_tasks[rid][0]`` of machine ``i``: the prompt task arrives first wherever both are."""
    return 2 * rid if task_i[2 * rid, WHERE] == i else 2 * rid + 1


@inline
def holds_request(task_i, i, rid):
    """``rid in pool_tasks`` of machine ``i``."""
    return task_i[2 * rid, WHERE] == i or task_i[2 * rid + 1, WHERE] == i


# -- a machine's queues ----------------------------------------------------------------------------------


@inline
def insort_pending(queue, queue_len, task_i, req_f, i, task):
    """``insort(pending, task, key=lambda t: (t.nprem, t.req.arrival))``: a binary search over the queued
    tasks' keys as they are now (counts grow while tasks wait: the queue is not kept sorted)."""
    key_n, key_a = task_i[task, NPREM], req_f[task >> 1, ARRIVAL]
    lo, hi = 0, queue_len[i, PENDING]
    while lo < hi:   # bisect_right: is (key_n, key_a) < the key of pending[mid]?
        mid = (lo + hi) // 2
        other = queue[i, PENDING, mid]
        other_n = task_i[other, NPREM]
        if key_n < other_n or (key_n == other_n and key_a < req_f[other >> 1, ARRIVAL]):
            hi = mid
        else:
            lo = mid + 1
    list_insert(queue, queue_len, i, PENDING, lo, task)


@inline
def add_pending(queue, queue_len, task_i, req_f, i, task, preempted):
    insort_pending(queue, queue_len, task_i, req_f, i, task)
    if preempted:
        list_append(queue, queue_len, i, BLOCKED_LIST, task)
    if is_prompt(task):
        list_append(queue, queue_len, i, PENDING_PROMPTS, task)


@inline
def remove_pending(queue, queue_len, i, task):
    list_remove(queue, queue_len, i, PENDING, task)
    list_remove(queue, queue_len, i, BLOCKED_LIST, task)
    if is_prompt(task):
        list_remove(queue, queue_len, i, PENDING_PROMPTS, task)


@inline
def pool_order_index(queue, queue_len, i, rid):
    """``bisect_right(pool_order, rid)``: request ids are sorted and unique."""
    lo, hi = 0, queue_len[i, POOL_ORDER]
    while lo < hi:
        mid = (lo + hi) // 2
        if rid < queue[i, POOL_ORDER, mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


# -- a machine: tasks arrive, batches run ------------------------------------------------------------------


@step
def task_arrival(req_f, req_i, task_mem, task_i, inst_f, inst_i, queue, queue_len, cfg, i, task):
    """Task ``task`` joins machine ``i``; then START it, PAUSE its run of decodes, or NOTHING."""
    rid = task >> 1
    if not holds_request(task_i, i, rid):
        list_insert(queue, queue_len, i, POOL_ORDER, pool_order_index(queue, queue_len, i, rid), rid)
    task_i[task, WHERE] = i
    inst_i[i, N_TASKS] += 1
    add_pending(queue, queue_len, task_i, req_f, i, task, False)
    n_batch = queue_len[i, BATCH]
    if n_batch == 0:
        return NOTHING if inst_f[i, MEM] + task_mem[task] > inst_f[i, MAX_MEM] else START
    tpi = tokens_per_iteration(req_i, task)
    if n_batch < cfg.max_batch_size and inst_i[i, BATCH_TOKENS] + tpi <= cfg.max_batch_tokens:
        return PAUSE
    if is_prompt(task):
        n_token = 0
        for k in range(n_batch):
            if not is_prompt(queue[i, BATCH, k]):
                n_token += 1
        n_prompt = n_batch - n_token
        if n_prompt < n_batch and inst_i[i, BATCH_TOKENS] - n_token + tpi <= cfg.max_batch_tokens:
            return PAUSE
    return NOTHING


@inline
def pause(inst_f, inst_i, queue, queue_len, heap_f, heap_i, counters, now, i):
    """Stop a run of decode iterations at the next iteration boundary."""
    if inst_i[i, PAUSED]:
        return
    for k in range(queue_len[i, BATCH]):
        if is_prompt(queue[i, BATCH, k]):
            return
    inst_i[i, PAUSED] = 1
    done = (now - inst_f[i, RUN_START]) // inst_f[i, ITER_DUR]
    inst_i[i, N_CONTIG] = int(done) + 1
    inst_i[i, VERSION] += 1
    push(heap_f, heap_i, counters, inst_f[i, RUN_START] + inst_f[i, ITER_DUR] * inst_i[i, N_CONTIG], COMPLETE, i,
         inst_i[i, VERSION])


@inline
def runs_on(req_i, task_i, queue, queue_len, cfg, i):
    """The batch's tokens if nothing else waits on machine ``i`` and its batch still fits (it runs on as
    it is), else -1."""
    n_batch = queue_len[i, BATCH]
    if (queue_len[i, PENDING] or queue_len[i, PENDING_PROMPTS] or queue_len[i, BLOCKED_LIST]
            or queue_len[i, POOL_ORDER] != n_batch or n_batch > cfg.max_batch_size):
        return -1
    bt = 0
    for k in range(n_batch):
        t = queue[i, BATCH, k]
        if first_task(task_i, i, t >> 1) != t:
            return -1
        bt += tokens_per_iteration(req_i, t)
    return bt if bt <= cfg.max_batch_tokens else -1


@inline
def is_full(cfg, n_new, bt, tpi):
    """A scan stops when the batch is full or a task's tokens would not fit (a first task always fits)."""
    return n_new == cfg.max_batch_size or (n_new > 0 and bt + tpi > cfg.max_batch_tokens)


@inline
def take(req_i, task_i, scratch, t, stamp, n_new):
    """Put task ``t`` in the new batch (``in_batch`` holds its request)."""
    scratch[NEW, n_new] = t
    req_i[t >> 1, REQ_STAMP] = stamp
    task_i[t, TASK_STAMP] = stamp
    return n_new + 1


@inline
def scan_queues(req_i, task_mem, task_i, queue, queue_len, scratch, cfg, i, stamp, memory, max_mem):
    """The first three scans: tasks preempted too often, then prompts (FCFS), then preempted decodes.
    Returns (tasks taken, their tokens, the memory they make)."""
    n_new, bt = 0, 0
    for k in range(queue_len[i, PENDING]):                # tasks preempted too often go first
        t = queue[i, PENDING, k]
        if task_i[t, NPREM] < cfg.max_preemptions:
            break
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        if task_i[t, STATE] == BLOCKED:
            n_new = take(req_i, task_i, scratch, t, stamp, n_new)
            bt += tpi
        elif task_mem[t] + memory <= max_mem:
            n_new = take(req_i, task_i, scratch, t, stamp, n_new)
            memory += task_mem[t]
            bt += tpi
    for k in range(queue_len[i, PENDING_PROMPTS]):        # then prompts, FCFS
        t = queue[i, PENDING_PROMPTS, k]
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        if task_mem[t] + memory <= max_mem:
            n_new = take(req_i, task_i, scratch, t, stamp, n_new)
            memory += task_mem[t]
            bt += tpi
        else:
            break
    for k in range(queue_len[i, BLOCKED_LIST]):           # then preempted decodes
        t = queue[i, BLOCKED_LIST, k]
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        n_new = take(req_i, task_i, scratch, t, stamp, n_new)
        bt += tpi
    return n_new, bt, memory


@inline
def scan_machine(req_i, task_mem, task_i, queue, queue_len, scratch, cfg, i, stamp, n_new, bt, memory, max_mem):
    """The last two scans: the running decodes, then anything else, oldest first. Returns (taken, tokens)."""
    for k in range(queue_len[i, BATCH]):                  # then the running decodes
        t = queue[i, BATCH, k]
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        n_new = take(req_i, task_i, scratch, t, stamp, n_new)
        bt += tpi
    for k in range(queue_len[i, POOL_ORDER]):             # then anything else, oldest first
        if n_new == cfg.max_batch_size:
            break
        rid = queue[i, POOL_ORDER, k]
        if req_i[rid, REQ_STAMP] == stamp:
            continue
        t = first_task(task_i, i, rid)
        tpi = tokens_per_iteration(req_i, t)
        if n_new > 0 and bt + tpi > cfg.max_batch_tokens:
            break
        if task_i[t, STATE] == BLOCKED:
            n_new = take(req_i, task_i, scratch, t, stamp, n_new)
            bt += tpi
        elif task_mem[t] + memory <= max_mem:
            n_new = take(req_i, task_i, scratch, t, stamp, n_new)
            memory += task_mem[t]
            bt += tpi
        else:
            break
    return n_new, bt


@step
def select_batch(req_i, task_mem, task_i, inst_f, inst_i, queue, queue_len, scratch, counters, cfg, i):
    """The next batch (the reference's rules): the numbers of tasks it preempts and adds (in the
    PREEMPTED and ADDED scratch rows), or (-1, -1) when the running batch goes on unchanged."""
    bt = runs_on(req_i, task_i, queue, queue_len, cfg, i)
    if bt >= 0:
        inst_i[i, BATCH_TOKENS] = bt
        return -1, -1
    counters[STAMP] += 1
    stamp = counters[STAMP]
    max_mem = inst_f[i, MAX_MEM]
    n_new, bt, memory = scan_queues(req_i, task_mem, task_i, queue, queue_len, scratch, cfg, i, stamp,
                                    inst_f[i, MEM], max_mem)
    n_new, bt = scan_machine(req_i, task_mem, task_i, queue, queue_len, scratch, cfg, i, stamp, n_new, bt, memory,
                             max_mem)
    inst_i[i, BATCH_TOKENS] = bt
    n_preempted = 0
    for k in range(queue_len[i, BATCH]):                  # the old batch's tasks not kept
        t = queue[i, BATCH, k]
        if task_i[t, TASK_STAMP] != stamp:
            scratch[PREEMPTED, n_preempted] = t
            n_preempted += 1
    n_added = 0
    for k in range(n_new):                                # the new batch's tasks not running before
        t = scratch[NEW, k]
        if not task_i[t, BATCHED]:
            scratch[ADDED, n_added] = t
            n_added += 1
    return n_preempted, n_added


@step
def change_batch(req_f, task_i, inst_f, queue, queue_len, scratch, now, i, n_preempted, n_added):
    """Preempt and add the tasks ``select_batch`` chose; count a preemption for each task left waiting."""
    for k in range(n_preempted):
        t = scratch[PREEMPTED, k]
        task_i[t, STATE] = BLOCKED
        list_remove(queue, queue_len, i, BATCH, t)        # leaves the batch
        task_i[t, BATCHED] = 0
        if queue_len[i, BATCH] == 0:
            inst_f[i, BUSY] += now - inst_f[i, BUSY_SINCE]
        add_pending(queue, queue_len, task_i, req_f, i, t, True)
    for k in range(n_added):
        t = scratch[ADDED, k]
        remove_pending(queue, queue_len, i, t)
        if queue_len[i, BATCH] == 0:                      # enters the batch
            inst_f[i, BUSY_SINCE] = now
        list_append(queue, queue_len, i, BATCH, t)
        task_i[t, BATCHED] = 1
    for k in range(queue_len[i, POOL_ORDER]):
        t = first_task(task_i, i, queue[i, POOL_ORDER, k])
        if not task_i[t, BATCHED]:
            task_i[t, NPREM] += 1


@step
def start_iteration(req_f, req_i, task_mem, task_i, inst_f, inst_i, queue, queue_len, scratch, pools, tour, heap_f,
                    heap_i, counters, curves, cfg, now, i):
    n_preempted, n_added = select_batch(req_i, task_mem, task_i, inst_f, inst_i, queue, queue_len, scratch, counters,
                                        cfg, i)
    if n_preempted >= 0:   # else the batch runs on unchanged, every task of the machine in it
        change_batch(req_f, task_i, inst_f, queue, queue_len, scratch, now, i, n_preempted, n_added)
    n_batch = queue_len[i, BATCH]
    if n_batch == 0:
        if queue_len[i, POOL_ORDER] == 0:
            notify_free(pools, counters, tour, inst_f, inst_i, i)
        return
    n_prompt_tokens = n_decode = 0
    least = 0                       # the fewest tokens a task of the batch has left
    context = 0.0                   # the KV tokens the decodes hold (prompt, first token, tokens since)
    for k in range(n_batch):        # one pass: the batch's shape, and its tasks start running
        t = queue[i, BATCH, k]
        if is_prompt(t):
            n_prompt_tokens += tokens_per_iteration(req_i, t)
        else:
            n_decode += 1
            context += req_i[t >> 1, PROMPT] + 1 + task_i[t, GENERATED]
        left = task_size(req_i, t) - task_i[t, GENERATED]
        if k == 0 or left < least:
            least = left
        if task_i[t, STATE] == QUEUED:
            task_i[t, STATE] = RUNNING
            inst_f[i, MEM] += task_mem[t]
            req_f[t >> 1, MEMORY] += task_mem[t]
        elif task_i[t, STATE] == BLOCKED:
            task_i[t, STATE] = RUNNING
    inst_i[i, N_CONTIG] = 1 if n_prompt_tokens else least
    # a run of decode iterations at its middle's context: each grows by a token a decode, so the run's time is exact
    context += 0.5 * n_decode * (inst_i[i, N_CONTIG] - 1)
    inst_f[i, ITER_DUR] = iteration_time(curves, cfg.curve_n, inst_i[i, CURVE], n_prompt_tokens, n_decode, context)
    inst_f[i, RUN_START] = now
    inst_i[i, PAUSED] = 0
    inst_i[i, VERSION] += 1
    push(heap_f, heap_i, counters, now + inst_f[i, ITER_DUR] * inst_i[i, N_CONTIG], COMPLETE, i, inst_i[i, VERSION])


@step
def complete_iteration(req_f, req_i, task_i, inst_f, inst_i, queue, queue_len, scratch, tour, heap_f, heap_i,
                       counters, slos, slo_limit, slo_ref, now, i, version):
    """The machine's run of iterations ends: its finished tasks leave; then START it (or NOTHING: an
    outdated event)."""
    if version != inst_i[i, VERSION]:
        return NOTHING
    n_finished = 0
    for k in range(queue_len[i, BATCH]):
        t = queue[i, BATCH, k]
        task_i[t, GENERATED] += 1 if is_prompt(t) else inst_i[i, N_CONTIG]
        if task_i[t, GENERATED] >= task_size(req_i, t):
            scratch[FINISHED, n_finished] = t
            n_finished += 1
    for k in range(n_finished):
        t = scratch[FINISHED, k]
        task_i[t, STATE] = DONE
        list_remove(queue, queue_len, i, BATCH, t)        # leaves the batch
        task_i[t, BATCHED] = 0
        if queue_len[i, BATCH] == 0:
            inst_f[i, BUSY] += now - inst_f[i, BUSY_SINCE]
        task_i[t, WHERE] = -1
        inst_i[i, N_TASKS] -= 1
        rid = t >> 1
        if not holds_request(task_i, i, rid):
            list_delete(queue, queue_len, i, POOL_ORDER, pool_order_index(queue, queue_len, i, rid) - 1)
        task_done(req_f, req_i, inst_f, inst_i, heap_f, heap_i, counters, slos, slo_limit, slo_ref, now, t, i)
    if n_finished:   # their loads left the machine
        reweigh(tour, inst_f, inst_i, i, BY_PENDING)
        reweigh(tour, inst_f, inst_i, i, BY_SCHED_MEM)
    inst_i[i, PAUSED] = 0
    return START


@inline
def notify_flow_completion(task_mem, inst_f, inst_i, queue, queue_len, cfg, i):
    """The reference's notify_flow_completion: memory was freed on machine ``i``: START it, PAUSE it, or
    NOTHING."""
    if queue_len[i, PENDING] == 0:
        return NOTHING
    t = queue[i, PENDING, 0]
    if queue_len[i, BATCH] == 0:
        return NOTHING if inst_f[i, MEM] + task_mem[t] > inst_f[i, MAX_MEM] else START
    if queue_len[i, BATCH] < cfg.max_batch_size and inst_i[i, BATCH_TOKENS] < cfg.max_batch_tokens:
        return PAUSE
    return NOTHING


# -- pools ------------------------------------------------------------------------------------------------


# Each pool keeps two tournaments of its machines, rows ``2 * pool + key`` of ``tour`` (BY_PENDING,
# BY_SCHED_MEM): a binary tree whose leaf ``half + i`` is machine ``i`` if it is in the pool (else -1) and
# whose every other node is the winner of its two children, the lighter machine (the one earlier in the pool
# on a tie). Node 1 is the pool's machine of least load, and a machine whose load or pool changes replays only
# its own matches: routing costs the log of the machines, not their number.


@inline
def lighter(inst_f, inst_i, a, b, key):
    """Whether machine ``a`` goes before machine ``b`` of the same pool (-1: none): less ``key``, or as
    much and earlier in the pool."""
    if a < 0 or b < 0:
        return a >= 0 > b
    ka = float(inst_i[a, SCHED_PENDING]) if key == BY_PENDING else inst_f[a, SCHED_MEM]
    kb = float(inst_i[b, SCHED_PENDING]) if key == BY_PENDING else inst_f[b, SCHED_MEM]
    return ka < kb or (ka == kb and inst_i[a, RANK] < inst_i[b, RANK])


@inline
def replay(tour, inst_f, inst_i, row, i):
    """Replay machine ``i``'s matches in tournament ``row``, from its leaf up to the final or to a match that
    another machine wins as before (no match above it changes: ``i`` is not in them; another machine whose load
    changed too replays its own matches next)."""
    key = row % 2
    node = (tour.shape[1] // 2 + i) // 2
    while node:
        a, b = tour[row, 2 * node], tour[row, 2 * node + 1]
        winner = b if lighter(inst_f, inst_i, b, a, key) else a
        if winner == tour[row, node] and winner != i:
            return
        tour[row, node] = winner
        node //= 2


@step
def reweigh(tour, inst_f, inst_i, i, key):
    """Machine ``i``'s sched_pending (or sched_mem: ``key``) changed: its pool's tournament learns it."""
    pool = MIXED_POOL if inst_i[i, MIXED] else inst_i[i, HOME]
    replay(tour, inst_f, inst_i, 2 * pool + key, i)


@step
def seat(pools, counters, tour, inst_f, inst_i, pool, i):
    """Machine ``i`` joins ``pool``, at its end."""
    pool_append(pools, counters, POOL_SIZE, pool, i)
    inst_i[i, RANK] = counters[NEXT_RANK]
    counters[NEXT_RANK] += 1
    for row in (2 * pool, 2 * pool + 1):
        tour[row, tour.shape[1] // 2 + i] = i
        replay(tour, inst_f, inst_i, row, i)


@step
def unseat(pools, counters, tour, inst_f, inst_i, pool, i):
    """Machine ``i`` leaves ``pool``."""
    pool_remove(pools, counters, POOL_SIZE, pool, i)
    for row in (2 * pool, 2 * pool + 1):
        tour[row, tour.shape[1] // 2 + i] = -1
        replay(tour, inst_f, inst_i, row, i)


@njit
def seat_all(pools, counters, tour, inst_f, inst_i):
    """Every machine joins its home pool, in the order of the machines (a run's start)."""
    for i in range(inst_i.shape[0]):
        seat(pools, counters, tour, inst_f, inst_i, inst_i[i, HOME], i)


@inline
def lend_to_mixed(pools, counters, tour, inst_f, inst_i, pool, i):
    unseat(pools, counters, tour, inst_f, inst_i, pool, i)
    seat(pools, counters, tour, inst_f, inst_i, MIXED_POOL, i)
    inst_i[i, MIXED] = 1


@inline
def notify_free(pools, counters, tour, inst_f, inst_i, i):
    """An idle machine lent to the mixed pool goes home."""
    if inst_i[i, MIXED]:
        inst_i[i, MIXED] = 0
        unseat(pools, counters, tour, inst_f, inst_i, MIXED_POOL, i)
        seat(pools, counters, tour, inst_f, inst_i, inst_i[i, HOME], i)


@inline
def least(pools, counters, tour, inst_f, inst_i, pool, key, need, fits):
    """``min(pool, key=key)``: the first least-``key`` machine of ``pool`` (-1 if none), only among those
    whose KV room holds ``need`` bytes if ``fits`` (the reference's ``_least``, else ``_least_of_all``): its
    tournament's winner, unless that one's room is too small (rare: then every machine of the pool is looked
    at)."""
    best = tour[2 * pool + key, 1]
    if best < 0 or not fits or inst_f[best, ROOM] >= need:
        return best
    return least_that_fits(pools, counters, inst_f, inst_i, pool, key, need)


@step
def least_that_fits(pools, counters, inst_f, inst_i, pool, key, need):
    """The first least-``key`` machine of ``pool`` among those whose KV room holds ``need`` bytes, -1 if
    none."""
    best, best_key = -1, 0.0
    for k in range(counters[POOL_SIZE + pool]):
        i = pools[pool, k]
        if inst_f[i, ROOM] < need:
            continue
        v = float(inst_i[i, SCHED_PENDING]) if key == BY_PENDING else inst_f[i, SCHED_MEM]
        if best < 0 or v < best_key:
            best, best_key = i, v
    return best


@step
def least_of_every(pools, counters, tour, inst_f, inst_i, need, fits):
    """``least(prompt_pool + mixed_pool + token_pool, key=sched_pending, ...)``."""
    best, best_key = -1, 0.0
    for pool in (PROMPT_POOL, MIXED_POOL, TOKEN_POOL):
        i = least(pools, counters, tour, inst_f, inst_i, pool, BY_PENDING, need, fits)
        if i >= 0:
            v = float(inst_i[i, SCHED_PENDING])
            if best < 0 or v < best_key:
                best, best_key = i, v
    return best


# -- the cluster: routing ---------------------------------------------------------------------------------


@inline
def find_best_prompt_instance(pools, counters, tour, inst_f, inst_i, queue_len, cfg, prompt, mem_p, fits):
    """The least loaded machine of the prompt pool, else of the mixed pool, whose queue is not long; or -1."""
    for pool in (PROMPT_POOL, MIXED_POOL):
        cand = least(pools, counters, tour, inst_f, inst_i, pool, BY_PENDING, mem_p, fits)
        if cand >= 0 and not (queue_len[cand, PENDING] > 0
                              and inst_i[cand, SCHED_PENDING] + prompt > cfg.prompt_max_pending_tokens):
            return cand
    return -1


@inline
def find_best_token_instance(pools, counters, tour, inst_f, inst_i, mem_p, mem_t, fits):
    """The machine of the token pool, else of the mixed pool, with the least memory scheduled, if the
    request's KV cache fits there; or -1."""
    for pool in (TOKEN_POOL, MIXED_POOL):
        cand = least(pools, counters, tour, inst_f, inst_i, pool, BY_SCHED_MEM, mem_p + mem_t, fits)
        if cand >= 0 and inst_f[cand, SCHED_MEM] + mem_p + mem_t < inst_f[cand, MAX_MEM]:
            return cand
    return -1


@inline
def check_overload(req_f, queue, queue_len, counters, cfg, now, i):
    """Overloaded once the oldest prompt waiting on the machine a request is routed to has waited
    longer than ``overload_s``: the run stops."""
    if queue_len[i, PENDING_PROMPTS] and now - req_f[queue[i, PENDING_PROMPTS, 0] >> 1, ARRIVAL] > cfg.overload_s:
        counters[OVERLOADED] = 1


@inline
def reject(req_f, slos, slo_limit, slo_ref, counters, rid):
    """A request no machine ever holds: never admitted (oom), and it breaks every SLO of the verdict."""
    counters[OOM] = 1
    for metric in (TTFT, TBT, E2E):
        judge(slos, slo_limit, slo_ref, counters, metric, rid, math.inf)


@step
def arrive(req_f, req_i, task_mem, inst_f, inst_i, queue, queue_len, pools, tour, heap_f, heap_i, counters, cfg, now,
           rid):
    """Request ``rid`` arrives: route its tasks (False: it can never be admitted)."""
    counters[ARRIVED] += 1
    mem_p = cfg.kv * (req_i[rid, PROMPT] + 1)
    mem_t = cfg.kv * (req_i[rid, OUTPUT] - 1)
    if mem_p + mem_t > cfg.largest_kv:   # no machine ever holds it
        return False
    alone = req_i[rid, OUTPUT] <= 1     # its prompt makes its only token: no token task, no transfer
    if cfg.baseline:   # ``min(instances, key=sched_pending)``: its machines are all its prompt pool
        p = t = least(pools, counters, tour, inst_f, inst_i, PROMPT_POOL, BY_PENDING, 0.0, False)
        check_overload(req_f, queue, queue_len, counters, cfg, now, p)
        inst_i[p, SCHED_PENDING] += req_i[rid, PROMPT] + (0 if alone else 1)
    else:
        p, t = route(req_i, inst_f, inst_i, queue_len, pools, counters, tour, cfg, rid, mem_p, mem_t)
        check_overload(req_f, queue, queue_len, counters, cfg, now, p)
        inst_i[p, SCHED_PENDING] += req_i[rid, PROMPT]
        inst_i[t, SCHED_PENDING] += 0 if alone else 1
    req_i[rid, SRC] = p
    req_i[rid, DST] = t
    task_mem[2 * rid] = mem_p
    task_mem[2 * rid + 1] = mem_t
    if p != t:
        inst_f[p, SCHED_MEM] += mem_p
        inst_f[t, SCHED_MEM] += mem_p + mem_t
    elif not cfg.baseline:
        inst_f[p, SCHED_MEM] += mem_p + mem_t
    if not cfg.baseline:
        reweigh(tour, inst_f, inst_i, p, BY_SCHED_MEM)
        reweigh(tour, inst_f, inst_i, t, BY_SCHED_MEM)
        reweigh(tour, inst_f, inst_i, t, BY_PENDING)
    reweigh(tour, inst_f, inst_i, p, BY_PENDING)
    push(heap_f, heap_i, counters, now, TASK_ARRIVAL, p, 2 * rid)
    if p == t and not alone:            # else the prompt makes the only token (see task_done)
        push(heap_f, heap_i, counters, now, TASK_ARRIVAL, p, 2 * rid + 1)
    return True


@inline
def route(req_i, inst_f, inst_i, queue_len, pools, counters, tour, cfg, rid, mem_p, mem_t):
    """A Splitwise request's prompt machine and token machine, borrowing across pools if need be."""
    # where machines differ in memory and some cannot hold this request, only those that can are candidates
    fits = mem_p + mem_t > cfg.smallest_kv
    alone = req_i[rid, OUTPUT] <= 1
    p = find_best_prompt_instance(pools, counters, tour, inst_f, inst_i, queue_len, cfg, req_i[rid, PROMPT], mem_p,
                                  fits)
    t = -1 if alone else find_best_token_instance(pools, counters, tour, inst_f, inst_i, mem_p, mem_t, fits)
    if cfg.mixed_pool:
        if p < 0 and counters[POOL_SIZE + TOKEN_POOL]:
            p = least(pools, counters, tour, inst_f, inst_i, TOKEN_POOL, BY_PENDING, mem_p, fits)
            if p >= 0:
                lend_to_mixed(pools, counters, tour, inst_f, inst_i, TOKEN_POOL, p)
        if t < 0 and counters[POOL_SIZE + PROMPT_POOL] and not alone:
            t = least(pools, counters, tour, inst_f, inst_i, PROMPT_POOL, BY_SCHED_MEM, mem_p + mem_t, fits)
            if t >= 0:
                lend_to_mixed(pools, counters, tour, inst_f, inst_i, PROMPT_POOL, t)
    if alone and p >= 0:
        t = p
    if p < 0 or t < 0:
        if cfg.mixed_pool:   # the least loaded machine of any pool that holds it, else of any pool
            need = mem_p + mem_t
            for _ in range(2):
                p = least_of_every(pools, counters, tour, inst_f, inst_i, need, fits)
                if p >= 0:
                    break
                need, fits = 0.0, False
            t = p
        else:   # strict pools: queue on the least loaded machine of each pool
            if p < 0:
                p = least(pools, counters, tour, inst_f, inst_i, PROMPT_POOL, BY_PENDING, 0.0, False)
            if t < 0:
                t = least(pools, counters, tour, inst_f, inst_i, TOKEN_POOL, BY_SCHED_MEM, 0.0, False)
    return p, t


# -- the cluster: tasks and transfers end ------------------------------------------------------------------


@inline
def judge(slos, slo_limit, slo_ref, counters, metric, rid, value):
    """Count a final latency against the verdict's SLOs of ``metric``: once as many finished requests
    break one as make its percentile break it whatever the others do, the design has failed."""
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
    """Request ``rid`` has its last token now: its E2E (and TBT) are final."""
    e2e = now - req_f[rid, ARRIVAL]
    req_f[rid, REQ_E2E] = e2e
    if slos.shape[0]:
        judge(slos, slo_limit, slo_ref, counters, E2E, rid, e2e)
        judge(slos, slo_limit, slo_ref, counters, TBT, rid, (e2e - req_f[rid, REQ_TTFT]) / req_i[rid, OUTPUT])


@inline
def free(inst_f, i, amount):
    inst_f[i, MEM] -= amount
    inst_f[i, SCHED_MEM] -= amount


@inline
def task_done(req_f, req_i, inst_f, inst_i, heap_f, heap_i, counters, slos, slo_limit, slo_ref, now, t, i):
    rid = t >> 1
    if is_prompt(t):
        inst_i[i, SCHED_PENDING] -= req_i[rid, PROMPT]
        ttft = now - req_f[rid, ARRIVAL]
        req_f[rid, REQ_TTFT] = ttft
        if slos.shape[0]:
            judge(slos, slo_limit, slo_ref, counters, TTFT, rid, ttft)
        if req_i[rid, OUTPUT] <= 1:   # done: routed to this machine alone, with no token task (see arrive)
            finish(req_f, req_i, slos, slo_limit, slo_ref, counters, now, rid)
            free(inst_f, i, req_f[rid, MEMORY])
            req_f[rid, MEMORY] = 0.0
            return
        if req_i[rid, DST] != i:
            push(heap_f, heap_i, counters, now, FLOW_ARRIVAL, rid, 0)
    else:
        inst_i[i, SCHED_PENDING] -= 1
        free(inst_f, i, req_f[rid, MEMORY])
        req_f[rid, MEMORY] = 0.0
        finish(req_f, req_i, slos, slo_limit, slo_ref, counters, now, rid)


@step
def flow_arrival(req_f, req_i, inst_f, heap_f, heap_i, counters, cfg, now, progress_at, rid):
    d = req_i[rid, DST]
    memory = req_f[rid, MEMORY]
    if inst_f[d, MEM] + memory <= inst_f[d, MAX_MEM]:
        inst_f[d, MEM] += memory
        size = cfg.kv * req_i[rid, PROMPT]
        push(heap_f, heap_i, counters, now + size / cfg.bandwidth, FLOW_DONE, rid, 0)
    else:   # it waits, as in the reference (not an overflow: see DEADLOCKED)
        counters[RETRIES] += 1
        push(heap_f, heap_i, counters, now + cfg.flow_retry_s, FLOW_RETRY, rid, 0)
        if events_left(req_i, counters) == counters[RETRIES] and now - progress_at > cfg.flow_retry_s:
            # every pending event is a transfer retrying for memory, each failed since anything else
            # happened: nothing will free memory again, so the waiting requests never finish
            counters[DEADLOCKED] = 1
            counters[OOM] = 1


@inline
def flow_done(req_f, req_i, inst_f, inst_i, tour, heap_f, heap_i, counters, now, rid):
    """The KV cache of request ``rid`` has moved: its prompt machine frees it (see notify_flow_completion)."""
    free(inst_f, req_i[rid, SRC], req_f[rid, MEMORY])
    reweigh(tour, inst_f, inst_i, req_i[rid, SRC], BY_SCHED_MEM)
    push(heap_f, heap_i, counters, now, TASK_ARRIVAL, req_i[rid, DST], 2 * rid + 1)


# -- the event loop ---------------------------------------------------------------------------------------


@inline
def needs_room(queue, heap_f, heap_i, inst_i, counters, arrival_next):
    """Whether the next event may overflow a machine's lists or the heap: the caller grows them first."""
    capacity = queue.shape[2]
    if heap_f.size - counters[HEAP_LEN] < capacity + 8:
        return True
    if arrival_next or heap_i[0, KIND] != TASK_ARRIVAL:
        return False
    return inst_i[heap_i[0, EV_A], N_TASKS] >= capacity


@njit
def run_events(req_f, req_i, task_mem, task_i, inst_f, inst_i, queue, queue_len, scratch, pools, tour, heap_f, heap_i,
               clock, counters, curves, slos, slo_limit, slo_ref, cfg, chunk):
    """Handle events until the run ends (END), ``chunk`` more events are done (CHUNK: the count is a
    multiple of ``chunk``), or the next event needs more room (GROW). A step that touches a machine
    last asks to START its next iteration or PAUSE its run of decodes: done here, the step's last act."""
    # the steps take views whose references are not counted (see unowned): this call's caller holds the arrays
    req_f, req_i, task_mem, task_i = unowned(req_f), unowned(req_i), unowned(task_mem), unowned(task_i)
    inst_f, inst_i, queue, queue_len = unowned(inst_f), unowned(inst_i), unowned(queue), unowned(queue_len)
    scratch, pools, tour = unowned(scratch), unowned(pools), unowned(tour)
    heap_f, heap_i = unowned(heap_f), unowned(heap_i)
    clock, counters, curves = unowned(clock), unowned(counters), unowned(curves)
    slos, slo_limit, slo_ref = unowned(slos), unowned(slo_limit), unowned(slo_ref)
    while events_left(req_i, counters) and not counters[OVERLOADED] and not counters[DEADLOCKED] and not counters[FAILED]:
        arrival_next = next_is_arrival(req_f, req_i, heap_f, counters)
        if needs_room(queue, heap_f, heap_i, inst_i, counters, arrival_next):
            return GROW
        if arrival_next:
            kind, a, b = ARRIVE, req_i[counters[NEXT_ARRIVAL], ORDER], 0
            t = req_f[a, ARRIVAL]
            counters[NEXT_ARRIVAL] += 1
        else:
            t, kind, a, b = heap_f[0], heap_i[0, KIND], heap_i[0, EV_A], heap_i[0, EV_B]
            pop(heap_f, heap_i, counters)
        if t > cfg.limit:
            return END
        clock[NOW] = t
        if kind != FLOW_RETRY:
            clock[PROGRESS_AT] = t
        action, i = NOTHING, a
        if kind == ARRIVE:          # the event
            if not arrive(req_f, req_i, task_mem, inst_f, inst_i, queue, queue_len, pools, tour, heap_f, heap_i,
                          counters, cfg, t, a):
                reject(req_f, slos, slo_limit, slo_ref, counters, a)
        elif kind == TASK_ARRIVAL:
            action = task_arrival(req_f, req_i, task_mem, task_i, inst_f, inst_i, queue, queue_len, cfg, a, b)
        elif kind == COMPLETE:
            action = complete_iteration(req_f, req_i, task_i, inst_f, inst_i, queue, queue_len, scratch, tour, heap_f,
                                        heap_i, counters, slos, slo_limit, slo_ref, t, a, b)
        elif kind == FLOW_ARRIVAL or kind == FLOW_RETRY:
            if kind == FLOW_RETRY:
                counters[RETRIES] -= 1
            flow_arrival(req_f, req_i, inst_f, heap_f, heap_i, counters, cfg, t, clock[PROGRESS_AT], a)
        else:
            flow_done(req_f, req_i, inst_f, inst_i, tour, heap_f, heap_i, counters, t, a)
            i = req_i[a, SRC]
            action = notify_flow_completion(task_mem, inst_f, inst_i, queue, queue_len, cfg, i)
        if action == START:
            start_iteration(req_f, req_i, task_mem, task_i, inst_f, inst_i, queue, queue_len, scratch, pools, tour,
                            heap_f, heap_i, counters, curves, cfg, t, i)
        elif action == PAUSE:
            pause(inst_f, inst_i, queue, queue_len, heap_f, heap_i, counters, t, i)
        counters[EVENTS] += 1
        if counters[EVENTS] % chunk == 0:
            return CHUNK
    return END
