"""The event simulator's steps, compiled: the reference simulator's rules over the flat arrays of :mod:`.state`.

Each step is named after the reference's (``arrive``, ``task_arrival``, ``select_batch``, ...) and does
what the engine's objects did, in the same order and with the same arithmetic, so that every request's
times are the same to the last bit. :func:`run_events` handles events until the run ends, a chunk of
events is done (the caller reports progress and resumes), or a machine's lists or the heap need more
room (the caller grows them and resumes).

A machine's lists are rows of ``sim.queue`` with a length: appended to, deleted from and inserted into
as the reference's Python lists are (``insert``, ``remove`` of the first match, ``insort``), so their
order is the reference's. Small helpers take the arrays they read rather than the whole state: a
compiled call counts a reference to every array it is handed.
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
    COUNTER,
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
    FLOOR,
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
    REQ_E2E,
    REQ_STAMP,
    REQ_TTFT,
    RETRIES,
    ROOM,
    RUN_START,
    RUNNING,
    SCHED_MEM,
    SCHED_PENDING,
    SEQ,
    SLO_METRIC,
    SLOPES,
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
    XS,
    YS,
)
from splitwise_plan.sim.jit import njit

BY_PENDING, BY_SCHED_MEM = 0, 1   # the routers' keys: sched_pending, sched_mem

# -- a machine's lists: row ``queue[i, which]`` of length ``queue_len[i, which]`` -------------------------------


@njit
def list_append(queue, queue_len, i, which, x):
    queue[i, which, queue_len[i, which]] = x
    queue_len[i, which] += 1


@njit
def list_insert(queue, queue_len, i, which, pos, x):
    """``list.insert(pos, x)``."""
    j = queue_len[i, which]
    while j > pos:
        queue[i, which, j] = queue[i, which, j - 1]
        j -= 1
    queue[i, which, pos] = x
    queue_len[i, which] += 1


@njit
def list_delete(queue, queue_len, i, which, pos):
    """``del list[pos]``."""
    n = queue_len[i, which]
    for j in range(pos, n - 1):
        queue[i, which, j] = queue[i, which, j + 1]
    queue_len[i, which] = n - 1


@njit
def list_remove(queue, queue_len, i, which, x):
    """``if x in list: list.remove(x)`` (its first place)."""
    for j in range(queue_len[i, which]):
        if queue[i, which, j] == x:
            list_delete(queue, queue_len, i, which, j)
            return


# -- the event heap: (time, insertion counter) ----------------------------------------------------------


@njit
def push(sim, t, kind, a, b):
    """``heapq.heappush`` of an event at ``t``, after every event pushed before it at ``t``."""
    heap_f, heap_i, counters = sim.heap_f, sim.heap_i, sim.counters
    seq = counters[COUNTER]
    counters[COUNTER] = seq + 1
    pos = counters[HEAP_LEN]
    counters[HEAP_LEN] = pos + 1
    while pos > 0:
        parent = (pos - 1) >> 1
        if heap_f[parent] < t or (heap_f[parent] == t and heap_i[parent, SEQ] < seq):
            break
        heap_f[pos] = heap_f[parent]
        for c in range(4):
            heap_i[pos, c] = heap_i[parent, c]
        pos = parent
    heap_f[pos] = t
    heap_i[pos, SEQ] = seq
    heap_i[pos, KIND] = kind
    heap_i[pos, EV_A] = a
    heap_i[pos, EV_B] = b


@njit
def pop(heap_f, heap_i, counters):
    """Remove the heap's first event (read at slot 0 before)."""
    n = counters[HEAP_LEN] - 1
    counters[HEAP_LEN] = n
    last_t, last_seq = heap_f[n], heap_i[n, SEQ]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= n:
            break
        if child + 1 < n and (heap_f[child + 1] < heap_f[child] or (
                heap_f[child + 1] == heap_f[child] and heap_i[child + 1, SEQ] < heap_i[child, SEQ])):
            child += 1
        if not (heap_f[child] < last_t or (heap_f[child] == last_t and heap_i[child, SEQ] < last_seq)):
            break
        heap_f[pos] = heap_f[child]
        for c in range(4):
            heap_i[pos, c] = heap_i[child, c]
        pos = child
    heap_f[pos] = last_t
    for c in range(4):
        heap_i[pos, c] = heap_i[n, c]


@njit
def events_left(sim):
    """``len(heap)`` of the reference: the heap's events and the arrivals still to come."""
    return sim.counters[HEAP_LEN] + sim.req_i.shape[0] - sim.counters[NEXT_ARRIVAL]


@njit
def next_is_arrival(req_f, req_i, heap_f, counters):
    """Whether the next event is an arrival: arrivals have the first counters, so they win ties."""
    k = counters[NEXT_ARRIVAL]
    if k >= req_i.shape[0]:
        return False
    return counters[HEAP_LEN] == 0 or req_f[req_i[k, ORDER], ARRIVAL] <= heap_f[0]


# -- latency: LatencyModel.iteration_time_at ---------------------------------------------------------------


@njit
def curve_at(curves, n, j, x):
    """``PhaseCurve.at(x)`` of curve ``j`` (of ``n`` points)."""
    lo, hi = 0, n
    while lo < hi:   # bisect_right
        mid = (lo + hi) // 2
        if x < curves[j, XS, mid]:
            hi = mid
        else:
            lo = mid + 1
    seg = min(max(lo - 1, 0), n - 2)
    v = curves[j, YS, seg] + curves[j, SLOPES, seg] * (x - curves[j, XS, seg])
    return max(v, curves[j, FLOOR, 0])


@njit
def iteration_time(sim, i, n_prompt_tokens, n_decode):
    """One batch's seconds on machine ``i``: prompt-only, decode-only, or mixed."""
    c = 2 * sim.inst_i[i, CURVE]
    n = sim.cfg.curve_n
    if n_decode <= 0:
        return curve_at(sim.curves, n[c], c, float(n_prompt_tokens))
    if n_prompt_tokens <= 0:
        return curve_at(sim.curves, n[c + 1], c + 1, float(n_decode))
    return MIXED_BATCH_FACTOR * curve_at(sim.curves, n[c], c, float(n_prompt_tokens + n_decode))


# -- tasks ------------------------------------------------------------------------------------------------


@njit
def is_prompt(task):
    return task & 1 == 0


@njit
def tokens_per_iteration(req_i, task):
    return req_i[task >> 1, PROMPT] if is_prompt(task) else 1


@njit
def task_size(req_i, task):
    """Tokens the task generates."""
    return 1 if is_prompt(task) else req_i[task >> 1, OUTPUT] - 1


@njit
def first_task(task_i, i, rid):
    """``pool_tasks[rid][0]`` of machine ``i``: the prompt task arrives first wherever both are."""
    return 2 * rid if task_i[2 * rid, WHERE] == i else 2 * rid + 1


@njit
def holds_request(task_i, i, rid):
    """``rid in pool_tasks`` of machine ``i``."""
    return task_i[2 * rid, WHERE] == i or task_i[2 * rid + 1, WHERE] == i


# -- a machine's queues ----------------------------------------------------------------------------------


@njit
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


@njit
def add_pending(queue, queue_len, task_i, req_f, i, task, preempted):
    insort_pending(queue, queue_len, task_i, req_f, i, task)
    if preempted:
        list_append(queue, queue_len, i, BLOCKED_LIST, task)
    if is_prompt(task):
        list_append(queue, queue_len, i, PENDING_PROMPTS, task)


@njit
def remove_pending(queue, queue_len, i, task):
    list_remove(queue, queue_len, i, PENDING, task)
    list_remove(queue, queue_len, i, BLOCKED_LIST, task)
    if is_prompt(task):
        list_remove(queue, queue_len, i, PENDING_PROMPTS, task)


@njit
def enter_batch(queue, queue_len, task_i, inst_f, now, i, task):
    if queue_len[i, BATCH] == 0:
        inst_f[i, BUSY_SINCE] = now
    list_append(queue, queue_len, i, BATCH, task)
    task_i[task, BATCHED] = 1


@njit
def leave_batch(queue, queue_len, task_i, inst_f, now, i, task):
    list_remove(queue, queue_len, i, BATCH, task)
    task_i[task, BATCHED] = 0
    if queue_len[i, BATCH] == 0:
        inst_f[i, BUSY] += now - inst_f[i, BUSY_SINCE]


@njit
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


@njit
def task_arrival(sim, i, task):
    inst_f, inst_i, queue_len, cfg = sim.inst_f, sim.inst_i, sim.queue_len, sim.cfg
    rid = task >> 1
    if not holds_request(sim.task_i, i, rid):
        list_insert(sim.queue, queue_len, i, POOL_ORDER, pool_order_index(sim.queue, queue_len, i, rid), rid)
    sim.task_i[task, WHERE] = i
    inst_i[i, N_TASKS] += 1
    add_pending(sim.queue, queue_len, sim.task_i, sim.req_f, i, task, False)
    n_batch = queue_len[i, BATCH]
    if n_batch == 0:
        if inst_f[i, MEM] + sim.task_mem[task] > inst_f[i, MAX_MEM]:
            return
        start_iteration(sim, i)
        return
    tpi = tokens_per_iteration(sim.req_i, task)
    if n_batch < cfg.max_batch_size and inst_i[i, BATCH_TOKENS] + tpi <= cfg.max_batch_tokens:
        pause(sim, i)
        return
    if is_prompt(task):
        n_token = 0
        for k in range(n_batch):
            if not is_prompt(sim.queue[i, BATCH, k]):
                n_token += 1
        n_prompt = n_batch - n_token
        if n_prompt < n_batch and inst_i[i, BATCH_TOKENS] - n_token + tpi <= cfg.max_batch_tokens:
            pause(sim, i)


@njit
def pause(sim, i):
    """Stop a run of decode iterations at the next iteration boundary."""
    inst_f, inst_i = sim.inst_f, sim.inst_i
    if inst_i[i, PAUSED]:
        return
    for k in range(sim.queue_len[i, BATCH]):
        if is_prompt(sim.queue[i, BATCH, k]):
            return
    inst_i[i, PAUSED] = 1
    done = (sim.clock[NOW] - inst_f[i, RUN_START]) // inst_f[i, ITER_DUR]
    inst_i[i, N_CONTIG] = int(done) + 1
    inst_i[i, VERSION] += 1
    push(sim, inst_f[i, RUN_START] + inst_f[i, ITER_DUR] * inst_i[i, N_CONTIG], COMPLETE, i, inst_i[i, VERSION])


@njit
def runs_on(queue, queue_len, task_i, req_i, cfg, i):
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


@njit
def is_full(cfg, n_new, bt, tpi):
    """A scan stops when the batch is full or a task's tokens would not fit (a first task always fits)."""
    return n_new == cfg.max_batch_size or (n_new > 0 and bt + tpi > cfg.max_batch_tokens)


@njit
def take(sim, t, stamp, n_new):
    """Put task ``t`` in the new batch (``in_batch`` holds its request)."""
    sim.scratch[NEW, n_new] = t
    sim.req_i[t >> 1, REQ_STAMP] = stamp
    sim.task_i[t, TASK_STAMP] = stamp
    return n_new + 1


@njit
def scan_queues(sim, i, stamp):
    """The first three scans: tasks preempted too often, then prompts (FCFS), then preempted decodes.
    Returns (tasks taken, their tokens, the memory they make)."""
    queue, task_i, task_mem, req_i, cfg = sim.queue, sim.task_i, sim.task_mem, sim.req_i, sim.cfg
    max_mem = sim.inst_f[i, MAX_MEM]
    n_new, bt, memory = 0, 0, sim.inst_f[i, MEM]
    for k in range(sim.queue_len[i, PENDING]):            # tasks preempted too often go first
        t = queue[i, PENDING, k]
        if task_i[t, NPREM] < cfg.max_preemptions:
            break
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        if task_i[t, STATE] == BLOCKED:
            n_new = take(sim, t, stamp, n_new)
            bt += tpi
        elif task_mem[t] + memory <= max_mem:
            n_new = take(sim, t, stamp, n_new)
            memory += task_mem[t]
            bt += tpi
    for k in range(sim.queue_len[i, PENDING_PROMPTS]):    # then prompts, FCFS
        t = queue[i, PENDING_PROMPTS, k]
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        if task_mem[t] + memory <= max_mem:
            n_new = take(sim, t, stamp, n_new)
            memory += task_mem[t]
            bt += tpi
        else:
            break
    for k in range(sim.queue_len[i, BLOCKED_LIST]):       # then preempted decodes
        t = queue[i, BLOCKED_LIST, k]
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        n_new = take(sim, t, stamp, n_new)
        bt += tpi
    return n_new, bt, memory


@njit
def scan_machine(sim, i, stamp, n_new, bt, memory):
    """The last two scans: the running decodes, then anything else, oldest first. Returns (taken, tokens)."""
    queue, task_i, task_mem, req_i, cfg = sim.queue, sim.task_i, sim.task_mem, sim.req_i, sim.cfg
    for k in range(sim.queue_len[i, BATCH]):              # then the running decodes
        t = queue[i, BATCH, k]
        tpi = tokens_per_iteration(req_i, t)
        if is_full(cfg, n_new, bt, tpi):
            break
        if req_i[t >> 1, REQ_STAMP] == stamp:
            continue
        n_new = take(sim, t, stamp, n_new)
        bt += tpi
    for k in range(sim.queue_len[i, POOL_ORDER]):         # then anything else, oldest first
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
            n_new = take(sim, t, stamp, n_new)
            bt += tpi
        elif task_mem[t] + memory <= sim.inst_f[i, MAX_MEM]:
            n_new = take(sim, t, stamp, n_new)
            memory += task_mem[t]
            bt += tpi
        else:
            break
    return n_new, bt


@njit
def select_batch(sim, i):
    """The next batch (the reference's rules): the numbers of tasks it preempts and adds (in the
    PREEMPTED and ADDED scratch rows), or (-1, -1) when the running batch goes on unchanged."""
    bt = runs_on(sim.queue, sim.queue_len, sim.task_i, sim.req_i, sim.cfg, i)
    if bt >= 0:
        sim.inst_i[i, BATCH_TOKENS] = bt
        return -1, -1
    sim.counters[STAMP] += 1
    stamp = sim.counters[STAMP]
    n_new, bt, memory = scan_queues(sim, i, stamp)
    n_new, bt = scan_machine(sim, i, stamp, n_new, bt, memory)
    sim.inst_i[i, BATCH_TOKENS] = bt
    scratch, task_i = sim.scratch, sim.task_i
    n_preempted = 0
    for k in range(sim.queue_len[i, BATCH]):              # the old batch's tasks not kept
        t = sim.queue[i, BATCH, k]
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


@njit
def change_batch(sim, i, n_preempted, n_added):
    """Preempt and add the tasks ``select_batch`` chose; count a preemption for each task left waiting."""
    task_i = sim.task_i
    for k in range(n_preempted):
        t = sim.scratch[PREEMPTED, k]
        task_i[t, STATE] = BLOCKED
        leave_batch(sim.queue, sim.queue_len, task_i, sim.inst_f, sim.clock[NOW], i, t)
        add_pending(sim.queue, sim.queue_len, task_i, sim.req_f, i, t, True)
    for k in range(n_added):
        t = sim.scratch[ADDED, k]
        remove_pending(sim.queue, sim.queue_len, i, t)
        enter_batch(sim.queue, sim.queue_len, task_i, sim.inst_f, sim.clock[NOW], i, t)
    for k in range(sim.queue_len[i, POOL_ORDER]):
        t = first_task(task_i, i, sim.queue[i, POOL_ORDER, k])
        if not task_i[t, BATCHED]:
            task_i[t, NPREM] += 1


@njit
def start_iteration(sim, i):
    inst_f, inst_i, task_i = sim.inst_f, sim.inst_i, sim.task_i
    n_preempted, n_added = select_batch(sim, i)
    if n_preempted >= 0:   # else the batch runs on unchanged, every task of the machine in it
        change_batch(sim, i, n_preempted, n_added)
    n_batch = sim.queue_len[i, BATCH]
    if n_batch == 0:
        if sim.queue_len[i, POOL_ORDER] == 0:
            notify_free(sim, i)
        return
    n_prompt_tokens = n_decode = 0
    least = 0                       # the fewest tokens a task of the batch has left
    for k in range(n_batch):        # one pass: the batch's shape, and its tasks start running
        t = sim.queue[i, BATCH, k]
        if is_prompt(t):
            n_prompt_tokens += tokens_per_iteration(sim.req_i, t)
        else:
            n_decode += 1
        left = task_size(sim.req_i, t) - task_i[t, GENERATED]
        if k == 0 or left < least:
            least = left
        if task_i[t, STATE] == QUEUED:
            task_i[t, STATE] = RUNNING
            inst_f[i, MEM] += sim.task_mem[t]
            sim.req_f[t >> 1, MEMORY] += sim.task_mem[t]
        elif task_i[t, STATE] == BLOCKED:
            task_i[t, STATE] = RUNNING
    inst_f[i, ITER_DUR] = iteration_time(sim, i, n_prompt_tokens, n_decode)
    inst_i[i, N_CONTIG] = 1 if n_prompt_tokens else least
    inst_f[i, RUN_START] = sim.clock[NOW]
    inst_i[i, PAUSED] = 0
    inst_i[i, VERSION] += 1
    push(sim, inst_f[i, RUN_START] + inst_f[i, ITER_DUR] * inst_i[i, N_CONTIG], COMPLETE, i, inst_i[i, VERSION])


@njit
def complete_iteration(sim, i, version):
    inst_i, task_i = sim.inst_i, sim.task_i
    if version != inst_i[i, VERSION]:
        return
    n_finished = 0
    for k in range(sim.queue_len[i, BATCH]):
        t = sim.queue[i, BATCH, k]
        task_i[t, GENERATED] += 1 if is_prompt(t) else inst_i[i, N_CONTIG]
        if task_i[t, GENERATED] >= task_size(sim.req_i, t):
            sim.scratch[FINISHED, n_finished] = t
            n_finished += 1
    for k in range(n_finished):
        t = sim.scratch[FINISHED, k]
        task_i[t, STATE] = DONE
        leave_batch(sim.queue, sim.queue_len, task_i, sim.inst_f, sim.clock[NOW], i, t)
        task_i[t, WHERE] = -1
        inst_i[i, N_TASKS] -= 1
        rid = t >> 1
        if not holds_request(task_i, i, rid):
            list_delete(sim.queue, sim.queue_len, i, POOL_ORDER, pool_order_index(sim.queue, sim.queue_len, i, rid) - 1)
        task_done(sim, t, i)
    inst_i[i, PAUSED] = 0
    start_iteration(sim, i)


@njit
def free(inst_f, i, amount):
    inst_f[i, MEM] -= amount
    inst_f[i, SCHED_MEM] -= amount


@njit
def notify_flow_completion(sim, i):
    """The reference's notify_flow_completion: memory was freed on machine ``i``, maybe start."""
    if sim.queue_len[i, PENDING] == 0:
        return
    t = sim.queue[i, PENDING, 0]
    if sim.queue_len[i, BATCH] == 0:
        if sim.inst_f[i, MEM] + sim.task_mem[t] > sim.inst_f[i, MAX_MEM]:
            return
        start_iteration(sim, i)
    elif sim.queue_len[i, BATCH] < sim.cfg.max_batch_size and sim.inst_i[i, BATCH_TOKENS] < sim.cfg.max_batch_tokens:
        pause(sim, i)


# -- pools ------------------------------------------------------------------------------------------------


@njit
def pool_remove(pools, counters, pool, i):
    """``pool.remove(i)``."""
    n = counters[POOL_SIZE + pool]
    j = 0
    while pools[pool, j] != i:
        j += 1
    for k in range(j, n - 1):
        pools[pool, k] = pools[pool, k + 1]
    counters[POOL_SIZE + pool] = n - 1


@njit
def pool_append(pools, counters, pool, i):
    pools[pool, counters[POOL_SIZE + pool]] = i
    counters[POOL_SIZE + pool] += 1


@njit
def lend_to_mixed(sim, pool, i):
    pool_remove(sim.pools, sim.counters, pool, i)
    pool_append(sim.pools, sim.counters, MIXED_POOL, i)
    sim.inst_i[i, MIXED] = 1


@njit
def notify_free(sim, i):
    """An idle machine lent to the mixed pool goes home."""
    if sim.inst_i[i, MIXED]:
        sim.inst_i[i, MIXED] = 0
        pool_remove(sim.pools, sim.counters, MIXED_POOL, i)
        pool_append(sim.pools, sim.counters, sim.inst_i[i, HOME], i)


@njit
def least(sim, pool, key, need, fits):
    """``min(pool, key=key)``: the first least-``key`` machine of ``pool`` (-1 if none), only among those
    whose KV room holds ``need`` bytes if ``fits`` (the reference's ``_least``, else ``_least_of_all``)."""
    inst_f, inst_i = sim.inst_f, sim.inst_i
    best, best_key = -1, 0.0
    for k in range(sim.counters[POOL_SIZE + pool]):
        i = sim.pools[pool, k]
        if fits and inst_f[i, ROOM] < need:
            continue
        v = float(inst_i[i, SCHED_PENDING]) if key == BY_PENDING else inst_f[i, SCHED_MEM]
        if best < 0 or v < best_key:
            best, best_key = i, v
    return best


@njit
def least_of_every(sim, key, need, fits):
    """``least(prompt_pool + mixed_pool + token_pool, ...)``."""
    best, best_key = -1, 0.0
    for pool in (PROMPT_POOL, MIXED_POOL, TOKEN_POOL):
        i = least(sim, pool, key, need, fits)
        if i >= 0:
            v = float(sim.inst_i[i, SCHED_PENDING]) if key == BY_PENDING else sim.inst_f[i, SCHED_MEM]
            if best < 0 or v < best_key:
                best, best_key = i, v
    return best


# -- the cluster: routing ---------------------------------------------------------------------------------


@njit
def is_queue_long(sim, i, prompt):
    return sim.queue_len[i, PENDING] > 0 and sim.inst_i[i, SCHED_PENDING] + prompt > sim.cfg.prompt_max_pending_tokens


@njit
def find_best_prompt_instance(sim, rid, mem_p, fits):
    """The least loaded machine of the prompt pool, else of the mixed pool, whose queue is not long; or -1."""
    for pool in (PROMPT_POOL, MIXED_POOL):
        cand = least(sim, pool, BY_PENDING, mem_p, fits)
        if cand >= 0 and not is_queue_long(sim, cand, sim.req_i[rid, PROMPT]):
            return cand
    return -1


@njit
def find_best_token_instance(sim, mem_p, mem_t, fits):
    """The machine of the token pool, else of the mixed pool, with the least memory scheduled, if the
    request's KV cache fits there; or -1."""
    for pool in (TOKEN_POOL, MIXED_POOL):
        cand = least(sim, pool, BY_SCHED_MEM, mem_p + mem_t, fits)
        if cand >= 0 and sim.inst_f[cand, SCHED_MEM] + mem_p + mem_t < sim.inst_f[cand, MAX_MEM]:
            return cand
    return -1


@njit
def check_overload(sim, i):
    """Overloaded once the oldest prompt waiting on the machine a request is routed to has waited
    longer than ``overload_s``: the run stops."""
    if sim.queue_len[i, PENDING_PROMPTS] and (
            sim.clock[NOW] - sim.req_f[sim.queue[i, PENDING_PROMPTS, 0] >> 1, ARRIVAL] > sim.cfg.overload_s):
        sim.counters[OVERLOADED] = 1


@njit
def chain(sim, rid, i, mem_p, mem_t, add_sched_mem):
    """Both tasks of request ``rid`` on machine ``i``."""
    sim.req_i[rid, SRC] = sim.req_i[rid, DST] = i
    if add_sched_mem:
        sim.inst_f[i, SCHED_MEM] += mem_p + mem_t
    sim.task_mem[2 * rid] = mem_p
    sim.task_mem[2 * rid + 1] = mem_t
    push(sim, sim.clock[NOW], TASK_ARRIVAL, i, 2 * rid)
    if sim.req_i[rid, OUTPUT] > 1:      # else the prompt makes the only token (see task_done)
        push(sim, sim.clock[NOW], TASK_ARRIVAL, i, 2 * rid + 1)


@njit
def least_instance(inst_i):
    """``min(instances, key=sched_pending)`` of a baseline."""
    best = 0
    for i in range(1, inst_i.shape[0]):
        if inst_i[i, SCHED_PENDING] < inst_i[best, SCHED_PENDING]:
            best = i
    return best


@njit
def arrive(sim, rid):
    cfg = sim.cfg
    sim.counters[ARRIVED] += 1
    mem_p = cfg.kv * (sim.req_i[rid, PROMPT] + 1)
    mem_t = cfg.kv * (sim.req_i[rid, OUTPUT] - 1)
    if mem_p + mem_t > cfg.largest_kv:   # no machine ever holds it: never admitted (oom)
        sim.counters[OOM] = 1
        for metric in (TTFT, TBT, E2E):  # and it breaks every SLO of the verdict: it never finishes
            judge(sim, metric, rid, math.inf)
        return
    if cfg.baseline:
        i = least_instance(sim.inst_i)
        check_overload(sim, i)
        sim.inst_i[i, SCHED_PENDING] += sim.req_i[rid, PROMPT] + (1 if sim.req_i[rid, OUTPUT] > 1 else 0)
        chain(sim, rid, i, mem_p, mem_t, False)
        return
    route(sim, rid, mem_p, mem_t)


@njit
def route(sim, rid, mem_p, mem_t):
    """A Splitwise request: its prompt machine and token machine, borrowing across pools if need be."""
    cfg, inst_f, inst_i = sim.cfg, sim.inst_f, sim.inst_i
    # where machines differ in memory and some cannot hold this request, only those that can are candidates
    fits = mem_p + mem_t > cfg.smallest_kv
    alone = sim.req_i[rid, OUTPUT] <= 1     # its prompt makes its only token: no token machine, no transfer
    p = find_best_prompt_instance(sim, rid, mem_p, fits)
    t = -1 if alone else find_best_token_instance(sim, mem_p, mem_t, fits)
    if cfg.mixed_pool:
        if p < 0 and sim.counters[POOL_SIZE + TOKEN_POOL]:
            p = least(sim, TOKEN_POOL, BY_PENDING, mem_p, fits)
            if p >= 0:
                lend_to_mixed(sim, TOKEN_POOL, p)
        if t < 0 and sim.counters[POOL_SIZE + PROMPT_POOL] and not alone:
            t = least(sim, PROMPT_POOL, BY_SCHED_MEM, mem_p + mem_t, fits)
            if t >= 0:
                lend_to_mixed(sim, PROMPT_POOL, t)
    if alone and p >= 0:
        t = p
    if p < 0 or t < 0:
        if cfg.mixed_pool:
            p = least_of_every(sim, BY_PENDING, mem_p + mem_t, fits)
            if p < 0:
                p = least_of_every(sim, BY_PENDING, 0.0, False)
            t = p
        else:   # strict pools: queue on the least loaded machine of each pool
            if p < 0:
                p = least(sim, PROMPT_POOL, BY_PENDING, 0.0, False)
            if t < 0:
                t = least(sim, TOKEN_POOL, BY_SCHED_MEM, 0.0, False)
    check_overload(sim, p)
    inst_i[p, SCHED_PENDING] += sim.req_i[rid, PROMPT]
    inst_i[t, SCHED_PENDING] += 0 if alone else 1
    if p == t:
        chain(sim, rid, p, mem_p, mem_t, True)
        return
    sim.req_i[rid, SRC] = p
    sim.req_i[rid, DST] = t
    inst_f[p, SCHED_MEM] += mem_p
    inst_f[t, SCHED_MEM] += mem_p + mem_t
    sim.task_mem[2 * rid] = mem_p
    sim.task_mem[2 * rid + 1] = mem_t
    push(sim, sim.clock[NOW], TASK_ARRIVAL, p, 2 * rid)


# -- the cluster: tasks and transfers end ------------------------------------------------------------------


@njit
def judge(sim, metric, rid, value):
    """Count a final latency against the verdict's SLOs of ``metric``: once as many finished requests
    break one as make its percentile break it whatever the others do, the design has failed."""
    slos = sim.slos
    for k in range(slos.shape[0]):
        if slos[k, SLO_METRIC] != metric:
            continue
        x = value / sim.slo_ref[k, rid] if slos[k, HAS_REF] else value
        if x >= sim.slo_limit[k]:
            slos[k, BROKEN] += 1
            if slos[k, BROKEN] >= slos[k, NEED]:
                sim.counters[FAILED] = 1


@njit
def finish(sim, rid):
    """Request ``rid`` has its last token now: its E2E (and TBT) are final."""
    e2e = sim.clock[NOW] - sim.req_f[rid, ARRIVAL]
    sim.req_f[rid, REQ_E2E] = e2e
    if sim.slos.shape[0]:
        judge(sim, E2E, rid, e2e)
        judge(sim, TBT, rid, (e2e - sim.req_f[rid, REQ_TTFT]) / sim.req_i[rid, OUTPUT])


@njit
def task_done(sim, t, i):
    req_f, req_i, now = sim.req_f, sim.req_i, sim.clock[NOW]
    rid = t >> 1
    if is_prompt(t):
        sim.inst_i[i, SCHED_PENDING] -= req_i[rid, PROMPT]
        ttft = now - req_f[rid, ARRIVAL]
        req_f[rid, REQ_TTFT] = ttft
        if sim.slos.shape[0]:
            judge(sim, TTFT, rid, ttft)
        if req_i[rid, OUTPUT] <= 1:   # done: routed to this machine alone, with no token task (see arrive)
            finish(sim, rid)
            free(sim.inst_f, i, req_f[rid, MEMORY])
            req_f[rid, MEMORY] = 0.0
            return
        if req_i[rid, DST] != i:
            push(sim, now, FLOW_ARRIVAL, rid, 0)
    else:
        sim.inst_i[i, SCHED_PENDING] -= 1
        free(sim.inst_f, i, req_f[rid, MEMORY])
        req_f[rid, MEMORY] = 0.0
        finish(sim, rid)


@njit
def flow_arrival(sim, rid):
    cfg, inst_f, counters, now = sim.cfg, sim.inst_f, sim.counters, sim.clock[NOW]
    d = sim.req_i[rid, DST]
    memory = sim.req_f[rid, MEMORY]
    if inst_f[d, MEM] + memory <= inst_f[d, MAX_MEM]:
        inst_f[d, MEM] += memory
        size = cfg.kv * sim.req_i[rid, PROMPT]
        push(sim, now + size / cfg.bandwidth, FLOW_DONE, rid, 0)
    else:   # it waits, as in the reference (not an overflow: see DEADLOCKED)
        counters[RETRIES] += 1
        push(sim, now + cfg.flow_retry_s, FLOW_RETRY, rid, 0)
        if events_left(sim) == counters[RETRIES] and now - sim.clock[PROGRESS_AT] > cfg.flow_retry_s:
            # every pending event is a transfer retrying for memory, each failed since anything else
            # happened: nothing will free memory again, so the waiting requests never finish
            counters[DEADLOCKED] = 1
            counters[OOM] = 1


@njit
def flow_retry(sim, rid):
    sim.counters[RETRIES] -= 1
    flow_arrival(sim, rid)


@njit
def flow_done(sim, rid):
    src = sim.req_i[rid, SRC]
    free(sim.inst_f, src, sim.req_f[rid, MEMORY])
    push(sim, sim.clock[NOW], TASK_ARRIVAL, sim.req_i[rid, DST], 2 * rid + 1)
    notify_flow_completion(sim, src)


# -- the event loop ---------------------------------------------------------------------------------------


@njit
def needs_room(queue, heap_f, heap_i, inst_i, counters, arrival_next):
    """Whether the next event may overflow a machine's lists or the heap: the caller grows them first."""
    capacity = queue.shape[2]
    if heap_f.size - counters[HEAP_LEN] < capacity + 8:
        return True
    if arrival_next or heap_i[0, KIND] != TASK_ARRIVAL:
        return False
    return inst_i[heap_i[0, EV_A], N_TASKS] >= capacity


@njit
def run_events(sim, chunk):
    """Handle events until the run ends (END), ``chunk`` more events are done (CHUNK: the count is a
    multiple of ``chunk``), or the next event needs more room (GROW)."""
    counters, req_f, req_i, heap_f, heap_i = sim.counters, sim.req_f, sim.req_i, sim.heap_f, sim.heap_i
    while events_left(sim) and not counters[OVERLOADED] and not counters[DEADLOCKED] and not counters[FAILED]:
        arrival_next = next_is_arrival(req_f, req_i, heap_f, counters)
        if needs_room(sim.queue, heap_f, heap_i, sim.inst_i, counters, arrival_next):
            return GROW
        if arrival_next:
            kind, a, b = ARRIVE, req_i[counters[NEXT_ARRIVAL], ORDER], 0
            t = req_f[a, ARRIVAL]
            counters[NEXT_ARRIVAL] += 1
        else:
            t, kind, a, b = heap_f[0], heap_i[0, KIND], heap_i[0, EV_A], heap_i[0, EV_B]
            pop(heap_f, heap_i, counters)
        if t > sim.cfg.limit:
            return END
        sim.clock[NOW] = t
        if kind != FLOW_RETRY:
            sim.clock[PROGRESS_AT] = t
        if kind == ARRIVE:          # the event
            arrive(sim, a)
        elif kind == TASK_ARRIVAL:
            task_arrival(sim, a, b)
        elif kind == COMPLETE:
            complete_iteration(sim, a, b)
        elif kind == FLOW_ARRIVAL:
            flow_arrival(sim, a)
        elif kind == FLOW_RETRY:
            flow_retry(sim, a)
        else:
            flow_done(sim, a)
        counters[EVENTS] += 1
        if counters[EVENTS] % chunk == 0:
            return CHUNK
    return END
