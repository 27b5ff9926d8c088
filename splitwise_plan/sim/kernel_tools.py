"""Small compiled helpers both simulators' kernels share: the event heap, the pools and the latency curves.

A pool is a row of ``pools`` (machine indices in the pool's order) whose length is
``counters[size_at + pool]``. The heap orders events by (time, insertion counter) in two arrays, ``heap_f`` (times) and ``heap_i``
(counter, kind, two arguments); ``counters[0]`` is the next insertion counter and ``counters[1]`` the heap's
length. A latency curve is ``PhaseCurve``'s points, slopes and floor as rows of ``curves``; a token curve's row
``KV`` holds how its decode step grows with the batch's context (``LatencyModel.kv_s_per_token`` and
``context_tokens``: 0 for a measured profile, whose steps read no context).
"""

from __future__ import annotations

from splitwise_plan.sim import jit

SEQ, KIND, EV_A, EV_B = range(4)    # columns of heap_i
COUNTER, HEAP_LEN = range(2)        # the heap's entries of counters
XS, YS, SLOPES, FLOOR, KV = range(5)   # rows of a curve (``curves[curve, row]``)
KV_RATE, KV_CONTEXT = range(2)         # columns of row KV


def latency_curves(cluster) -> tuple:
    """The latency curves of ``cluster`` as rows of one array ``[curve, XS | YS | SLOPES | FLOOR | KV, point]``
    (curve ``2c`` the prompt phase of pool ``c``, ``2c + 1`` its token phase; a baseline's one pool twice), and
    each curve's number of points."""
    import numpy as np

    pools = (cluster.prompt, cluster.token if cluster.token is not None else cluster.prompt)
    curves = [c for pool in pools for c in (pool.latency.prompt, pool.latency.token)]
    out = np.zeros((4, 5, max(max(c.xs.size for c in curves), 2)))
    for j, c in enumerate(curves):
        out[j, XS, :c.xs.size] = c.xs
        out[j, YS, :c.ys.size] = c.ys
        out[j, SLOPES, :c.xs.size - 1] = c._slopes   # the very numbers PhaseCurve.at reads
        out[j, FLOOR, 0] = c._floor
    for j, pool in ((1, pools[0]), (3, pools[1])):
        out[j, KV, KV_RATE] = pool.latency.kv_s_per_token
        out[j, KV, KV_CONTEXT] = pool.latency.context_tokens
    return out, tuple(int(c.xs.size) for c in curves)


def inline(fn):
    """A small helper, inlined into each compiled caller (numba's IR) rather than compiled on its own
    once per caller's argument types: compiling takes less time, running the same."""
    if jit.numba is None:
        return fn
    jit.share_inline_copies()
    return jit.numba.njit(inline="always", cache=jit.CACHED)(fn)


@inline
def push(heap_f, heap_i, counters, t, kind, a, b):
    """``heapq.heappush`` of an event at ``t``, after every event pushed before it at ``t``."""
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


@inline
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


@inline
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


@inline
def decode_step(curves, n, j, decodes, context):
    """``LatencyModel.token_time(decodes, context)`` of token curve ``j`` (of ``n`` points): its step of ``decodes``
    sequences, grown (or shrunk) by the KV tokens ``context`` they hold in all beyond the curve's own context."""
    t = curve_at(curves, n, j, decodes)
    rate = curves[j, KV, KV_RATE]
    if rate == 0.0:
        return t
    return max(t + rate * (context - decodes * curves[j, KV, KV_CONTEXT]), curves[j, FLOOR, 0])


@inline
def pool_remove(pools, counters, size_at, pool, i):
    """``pool.remove(i)``."""
    n = counters[size_at + pool]
    j = 0
    while pools[pool, j] != i:
        j += 1
    for k in range(j, n - 1):
        pools[pool, k] = pools[pool, k + 1]
    counters[size_at + pool] = n - 1


@inline
def pool_append(pools, counters, size_at, pool, i):
    """``pool.append(i)``."""
    pools[pool, counters[size_at + pool]] = i
    counters[size_at + pool] += 1
