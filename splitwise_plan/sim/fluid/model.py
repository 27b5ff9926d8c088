"""The fast simulator: a vectorized queue model that evaluates many designs in one pass.

It walks the request stream once and advances every candidate design at the same
time (numpy arrays over designs x machines), so a batch of designs costs little
more than one. Per design it keeps:

- every machine's prompt queue as FCFS (Kiefer-Wolfowitz recursion): requests queued
  behind the same busy machine share one batch of at most ``max_batch_tokens`` tokens;
- every machine's booked KV memory and decodes (the reference scheduler's accounting:
  ``kv(prompt + output)`` from routing to the last token), released through a ring of
  time buckets (moved later when prompt batches on the machine delay its decodes), its
  pending prompt tokens, and its role: prompt pool, token pool or mixed pool. Routing
  follows the reference's cluster-level rules (JSQ on pending prompt tokens plus booked
  decodes, long prompt queues borrow token machines, full token machines borrow prompt
  machines, borrowed machines go home once nothing runs on them after work has ended there,
  though decodes routed there may still be on their way; a machine that can never hold a
  request is no candidate for it, and a request of one output token stays on its prompt machine);
- each machine's busy state (decodes running there, or prompt work queued), sampled at every
  bucket boundary for the design's utilization;
- decoding as ``output - 1`` iterations of the token-phase time at its machine's batch
  size, plus part of an iteration to join a running batch, after the KV transfer, which
  waits where the machine's booked memory leaves no room until its releases free enough;
- mixed batches as the machine-level scheduler builds them: prompts first, then the
  decodes that fit in ``max_batch_tokens`` (1.1x batch time); a decode loses the
  batch time less one iteration when it rides along, all of it when pre-empted. A prompt
  longer than ``max_batch_tokens`` does not stop a running decode run (the reference pauses
  a run only for what fits beside it): it waits until the run's first decode ends, a decode
  joins, or a shorter prompt arrives. On
  baselines that delay is applied per machine as batches are scheduled (a prompt waits
  for the machine's iteration boundary; only the decodes running at the batch start
  ride), so routing sees each machine's true decode count; on Splitwise pools each
  decode afterwards waits out every prompt batch of its machine (``_MachineBusy``).

A design whose queue makes a request wait longer than ``overload_s`` is stopped there
and dropped from the batch (its later requests are unfinished). It is an approximation
of the discrete-event rules in :mod:`splitwise_plan.sim.events`; benchmarks and tests measure how close.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.perf.latency_model import MIXED_BATCH_FACTOR
from splitwise_plan.sim.cluster import Cluster, SchedulerConfig
from splitwise_plan.sim.metrics import Verdict

_RING_S = 0.25         # time resolution of the per-machine release ring
_RING = 512            # buckets in the ring at most: releases up to 128 s ahead (see _Run.ring_buckets)
_PENDING = 16          # prompt batches remembered per machine for JSQ and the queue-length rule (a power of two)
_POSTPONE = 64         # buckets after a prompt batch whose releases it postpones (16 s)
_BLOCK_BITS = 3
_BLOCK = 1 << _BLOCK_BITS   # buckets a machine keeps side by side in its rings (a block of 2 s)
_PROMPT, _TOKEN, _MIXED, _ABSENT = 0, 1, 2, 3   # machine roles
PASS_MEMORY = 400 * 2**20   # bytes a pass may hold: its arrays grow with designs x requests
_REQUEST_BYTES = 100        # a pass's bytes per request and design at its peak (75-99 measured)
_MACHINE_BYTES = 10 * _RING + 512   # and per machine and design at most: the rings, queues and counters
_MAX_PASS = 512             # designs in a pass at most: by then they share the loop's per-request cost
_DECODE_SLOTS = 8       # decodes tracked per baseline machine at first (doubled whenever all are busy)
_FEW_SLOTS = 32         # at most, in a first pass: the designs that need more leave it for a pass of their own,
_STAY = 48              # where as many designs stay, and more than leave (else a second pass costs more than it saves)
_MAX_DECODES = 4096     # decode batch sizes tabulated for the token-time lookup
_CHECK = 256            # requests between two verdict checks
_LAG = 128              # and how many requests later a baseline's are checked (see baseline)
_POPCOUNT = getattr(np, "bitwise_count", None)   # numpy >= 2.0: counts decode slots fast (see _count)
_REFERENCE_ONLY = ("max_batch_size", "max_preemptions", "flow_retry_s")   # scheduler fields it does not model
_RUN_WINDOW = 32        # buckets ahead (8 s) searched for the end of a decode run (a multiple of _BLOCK)
_FREE_WINDOW = 128      # buckets ahead (32 s) searched first for the memory a transfer waits for (a multiple of _BLOCK)
_NO_ROOM = 1e18         # a stopped design's last batches' tokens: nothing joins them
_POST_DESIGNS = 32      # designs whose decode waits are worked out together (see splitwise's end)
_POST_BYTES = 32 * 2**20   # and the bytes their rows may take at most: fewer designs on long streams
_QUIET = 16             # buckets between two arrivals past which advance() skips the empty ones


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


def simulate_fluid(clusters: list[Cluster], stream, overload_s: float = math.inf,
                   verdict: Verdict | None = None) -> FluidOutcome:
    """Simulate clusters (designs and machine counts) of one model on one stream, in one pass.

    All Splitwise or all baseline: the designs of a kind share the loop (each with its own
    hardware's latency tables), so a batch of several designs costs little more than one.
    A design whose prompt queue makes a request wait more than ``overload_s`` is
    overloaded: its simulation stops there and its later requests are unfinished (NaN),
    so a batch spends its time on the designs that can still meet SLOs. With a
    ``verdict``, a design also stops once one of its SLOs can no longer hold
    (``failed``): the designs that pass run to the end and are unchanged.
    """
    first = clusters[0]
    for c in clusters:
        if c.is_baseline != first.is_baseline or c.model != first.model or c.scheduler != first.scheduler:
            raise ValueError("simulate_fluid batches clusters of one kind (Splitwise or baseline), model and scheduler")
    reference = SchedulerConfig()
    fixed = [f for f in _REFERENCE_ONLY if getattr(first.scheduler, f) != getattr(reference, f)]
    if fixed:   # it would silently keep the reference's values
        raise SplitwisePlanError(f"the fluid model keeps the reference's {', '.join(fixed)} (a decode batch is bounded by "
                                 "memory, a mixed batch has no preemption limit, a transfer waiting for memory starts "
                                 "as it is freed, not at a retry); simulate with the events method to change them")
    # a request whose KV cache exceeds the free HBM of every machine of a design never runs there (as in the
    # oracle and the reference): it holds no machine, no memory and no queue; it is unfinished, and the design
    # is flagged oom. Designs of one KV room share their passes over the requests they can hold
    mem = first.kv_bytes(np.asarray(stream.prompt_tokens, dtype=np.float64) + stream.output_tokens)
    rooms = np.array([c.kv_room for c in clusters])
    if np.count_nonzero(mem > rooms.min()) == 0:
        return _passes(clusters, stream, None, overload_s, verdict)
    outs, order = [], []
    for room in np.unique(rooms):
        idx = (rooms == room).nonzero()[0]
        keep = mem <= room
        part = [clusters[k] for k in idx]
        if not np.count_nonzero(keep):   # nothing it can hold: every request unfinished
            nan = np.full((idx.size, keep.size), np.nan)
            pools = np.array([[0.0, 0.0 if c.token else np.nan] for c in part])
            out = FluidOutcome(nan, nan.copy(), np.zeros(idx.size), pools,
                               np.ones(idx.size, dtype=bool), np.zeros(idx.size, dtype=bool), np.zeros(idx.size, dtype=bool))
        else:
            out = _passes(part, stream, keep.nonzero()[0], overload_s,
                          None if verdict is None else verdict.of_requests(keep))
            ttft, e2e = (np.full((idx.size, keep.size), np.nan) for _ in range(2))
            ttft[:, keep], e2e[:, keep] = out.ttft, out.e2e
            out = replace(out, ttft=ttft, e2e=e2e, oom=out.oom | ~keep.all())
        outs.append(out)
        order.append(idx)
    back = np.argsort(np.concatenate(order), kind="stable")
    return _concat(outs, back)


def _concat(outs: list[FluidOutcome], order=None) -> FluidOutcome:
    """Outcomes of consecutive parts of a batch as one (its designs taken in ``order`` if given)."""
    if len(outs) == 1 and order is None:
        return outs[0]
    return FluidOutcome(*(np.concatenate([getattr(o, f.name) for o in outs])[slice(None) if order is None else order]
                          for f in fields(FluidOutcome)))


def _passes(clusters: list[Cluster], stream, requests, overload_s, verdict) -> FluidOutcome:
    """Clusters of one kind in passes of bounded memory (designs x requests arrays), on the ``requests``
    of the stream (indices; None: all)."""
    outs = []
    n = len(stream.arrival_s) if requests is None else len(requests)
    size = pass_size(len(clusters), n, machines=max(c.n_instances for c in clusters))
    for lo in range(0, len(clusters), size):
        part = clusters[lo:lo + size]
        run = _Run(part, stream, overload_s, verdict, requests)
        if not part[0].is_baseline:
            outs.append(run.splitwise())
            continue
        out = run.baseline(_FEW_SLOTS)
        moved = run.evicted.nonzero()[0]
        if moved.size:   # the designs that needed more decode slots, in a pass of their own: their rows from it
            again = _Run([part[k] for k in moved], stream, overload_s, verdict, requests).baseline()
            rows = np.arange(len(part))
            rows[moved] = len(part) + np.arange(moved.size)
            out = _concat([out, again], rows)
        outs.append(out)
    return _concat(outs)


def pass_size(n_designs: int, n_requests: int, parts_of: int = 1, machines: int = 0) -> int:
    """Designs a pass takes so that ``n_designs`` split into passes of alike size, each within
    ``PASS_MEMORY`` for ``n_requests`` requests (at least 16 designs) and again for designs of up to
    ``machines`` machines (at least one design), their number a multiple of ``parts_of``.

    The loop's cost per request is mostly shared by its designs, so passes are as large as
    memory allows; passes of alike size leave no small last one to pay that cost alone.
    """
    cap = min(_MAX_PASS, max(16, PASS_MEMORY // (max(n_requests, 1) * _REQUEST_BYTES)))
    if machines:   # the per-machine state (release rings above all) of clusters of thousands of machines
        cap = min(cap, max(1, PASS_MEMORY // (machines * _MACHINE_BYTES)))
    parts = -(-max(n_designs, 1) // cap)
    parts = -(-parts // parts_of) * parts_of
    return max(1, -(-n_designs // parts))


class _Run:
    def __init__(self, clusters: list[Cluster], stream, overload_s: float = math.inf,
                 verdict: Verdict | None = None, requests: np.ndarray | None = None) -> None:
        """``requests``: the indices of the stream's requests simulated (None: all), in order."""
        c0 = clusters[0]
        self.overload_s = float(overload_s)
        self.verdict = verdict
        self.cfg = c0.scheduler
        kv = self.kv = float(c0.model.kv_bytes_per_token)
        picked = slice(None) if requests is None else requests
        self.a, self.s, self.n = (np.asarray(x, dtype=np.float64)[picked]
                                  for x in (stream.arrival_s, stream.prompt_tokens, stream.output_tokens))
        self.mem = kv * (self.s + self.n)                       # KV bytes held while decoding
        # KV-cache transfer time; a request of one output token ends with its prompt: no transfer, no decode
        self.xfer = np.where(self.n > 1, kv * self.s / self.cfg.effective_bandwidth, 0.0)
        self.D = len(clusters)
        # columns are model instances: a machine's own when it runs several (see cluster.instance_layout)
        self.cp = np.array([c.prompt.instances for c in clusters], dtype=np.int64)
        self.ct = np.array([c.token.instances if c.token else 0 for c in clusters], dtype=np.int64)
        self.C = int(self.cp.max())
        self.machines = self.cp + self.ct
        weights = float(c0.model.weights_bytes)
        # integer-indexed lookup tables of the latency curves, one row per hardware pair
        # (prompt pool, token pool) of the batch: one gather per use in the hot loop
        top = int(self.s.max()) + self.cfg.max_batch_tokens + self.cfg.max_batch_size + 2
        x_p, x_t = np.arange(top + 1, dtype=np.float64), np.arange(_MAX_DECODES + 1, dtype=np.float64)
        pairs: dict = {}
        grp = [pairs.setdefault((id(c.prompt.latency), id(c.token.latency) if c.token else None), (len(pairs), c))[0]
               for c in clusters]
        hw = [c for _, c in sorted(pairs.values(), key=lambda x: x[0])]
        lat_p = [c.prompt.latency for c in hw]
        lat_t = [c.token.latency if c.token else c.prompt.latency for c in hw]
        ptab_p = np.stack([np.asarray(lp.prompt_time(x_p)) for lp in lat_p])
        ptab_t = np.stack([np.asarray(lt.prompt_time(x_p)) if lt is not lp else ptab_p[g]
                           for g, (lp, lt) in enumerate(zip(lat_p, lat_t))])
        # token time by (hardware pair, on a token machine?, batch size)
        ttab = np.stack([np.stack([np.asarray(lp.token_time(x_t)), np.asarray(lt.token_time(x_t))])
                         for lp, lt in zip(lat_p, lat_t)])
        ttab[:, :, 0] = ttab[:, :, 1]           # a batch of no decodes as one: lookups need no lower clamp
        self.other_hw = any(lt is not lp for lp, lt in zip(lat_p, lat_t))   # borrowed machines of other hardware
        self.ptab_p, self.ptab_t, self.ttab = ptab_p.ravel(), ptab_t.ravel(), ttab.ravel()
        self.T, self.K = ptab_p.shape[1], ttab.shape[2]
        self.grp = np.asarray(grp, dtype=np.int64)
        self.poff = self.grp * self.T           # each design's row of the prompt-time tables
        self.toff = self.grp * 2 * self.K       # and of the token-time table
        self.cap_p = np.array([float(c.prompt.instance_hbm_bytes) - weights for c in hw])[self.grp]
        self.cap_t = np.array([float((c.token or c.prompt).instance_hbm_bytes) - weights for c in hw])[self.grp]
        # converts a prompt backlog (seconds) to pending tokens for JSQ routing
        mbt = self.cfg.max_batch_tokens
        self.tokens_per_s = np.array([mbt / float(lp.prompt_time(mbt)) for lp in lat_p])[self.grp]
        self.batch_factor = np.array([1.0, MIXED_BATCH_FACTOR])   # a batch's time: plain, mixed
        # where in a running iteration each request joins: uniform on (0, 1), low-discrepancy
        # (by the request's place in the stream: leaving out requests no machine holds moves no other's)
        place = np.arange(len(stream.arrival_s))[picked]
        self.u = np.modf(0.5 + place * 0.6180339887498949)[0]
        self.iters = np.where(self.n > 1, self.n - 1.0 + self.u, 0.0)   # decode iterations alone: joining, then output - 1
        self.prompt = self.s.tolist()           # prompt tokens per request (Python floats index fast)
        if verdict is not None:
            # the least a batch holding x prompt tokens can take, on any machine of the design
            least = np.minimum(ptab_p, ptab_t)
            self.least_prompt = np.minimum.accumulate(least[:, ::-1], axis=1)[:, ::-1].ravel()
            self.broken = np.zeros((len(verdict.slos), self.D), dtype=np.int64)   # requests past each limit
            self.need = np.array([x[3] for x in verdict.slos])[:, None]           # how many break each SLO

    def ring_buckets(self) -> int:
        """Buckets of the release ring: enough for the longest a request can hold memory, from its
        routing to its last token (the overload wait, its KV transfer and the longest output at
        the slowest full-batch token time, with a quarter more for prompt batches that delay it),
        at most ``_RING``; a shorter ring is a smaller loop state."""
        if not math.isfinite(self.overload_s):
            return _RING
        tau = self.ttab.reshape(-1, self.K)[:, min(self.cfg.max_batch_size, self.K - 1)].max()
        longest = self.overload_s + float(self.xfer.max()) + 1.25 * float(self.n.max()) * float(tau)
        # and a prompt batch up to the overload wait ahead must still find its postpone window
        buckets = max(longest, self.overload_s + (_POSTPONE + _BLOCK) * _RING_S) / _RING_S
        if not buckets < _RING:   # (an SLO limit near the largest float makes the overload wait inf)
            return _RING
        return int(min(_RING, _BLOCK * math.ceil(buckets / _BLOCK)))

    def _hopeless(self, lo: int, hi: int, pq, cols, tau_req, pmach=None, dmach=None, ends=None,
                  now: float = 0.0, waiting=None, mem_wait=None) -> np.ndarray:
        """Columns among ``cols`` whose SLOs of ``self.verdict`` can no longer all hold, given requests lo..hi.

        Lower bounds of each request's latencies, which the rest of the run only lengthens:
        TTFT from its batch start (fixed once set) plus the least time of its own prompt;
        TBT and E2E add the KV transfer (unless the prompt and token machines are one) and
        its undelayed decode iterations (a baseline's, with no machines given: ``output - 1``
        at ``tau_req`` from the end of its prompt batch, and no transfer). A baseline also
        gives its decodes' last tokens as they stand ``now`` (``ends``, requests x ``cols``):
        final once ended, and later prompt batches only delay one still running; where a
        request's prompt batch has started by ``now``, its TTFT is final too. A Splitwise design
        gives ``waiting`` (the flat mask of its machines, a row of them a design, whose last batch
        waits for a decode run to end): such a batch may yet be pulled earlier, though not before now,
        and ``mem_wait`` (requests x designs, or None: none yet), how long each decode waits for KV
        memory, final once routed.
        """
        c = cols[None, :]
        lead = pq.rb[lo:hi][:, cols]
        start = pq.bstart[lead, c]
        if waiting is not None:
            row, j = np.arange(cols.size)[None, :], pmach[lo:hi][:, cols]
            movable = waiting.reshape(cols.size, -1)[row, j] & (pq.ob_id[row, j] == lead)
            start = np.where(movable, np.minimum(start, now), start)
        arrival, n = self.a[lo:hi, None], self.n[lo:hi, None]
        ttft = start - arrival + self.least_prompt.take(self.poff[cols][None, :] + self.s[lo:hi].astype(np.int64)[:, None])
        if pmach is None:
            dec = tau_req[lo:hi][:, cols] * (n - 1.0)
        else:
            dec = (tau_req[lo:hi][:, cols] * self.iters[lo:hi, None]
                   + np.where(pmach[lo:hi][:, cols] == dmach[lo:hi][:, cols], 0.0, self.xfer[lo:hi, None]))
            if mem_wait is not None:
                dec += mem_wait[lo:hi][:, cols]
        lb = {"ttft": ttft, "tbt": dec / n, "e2e": ttft + dec}
        if ends is not None:
            started = start <= now
            ttft_now = start + pq.bdur[lead, c] - arrival
            e2e = np.maximum(lb["e2e"], ends - arrival)
            lb = {"ttft": np.where(started, ttft_now, ttft), "e2e": e2e,
                  "tbt": np.where(started, np.maximum(lb["tbt"], (e2e - ttft_now) / n), lb["tbt"])}
        for k, (metric, ref, limit, _) in enumerate(self.verdict.slos):
            v = lb[metric] if ref is None else lb[metric] / ref[lo:hi, None]
            self.broken[k, cols] += (v >= limit).sum(axis=0)
        return (self.broken[:, cols] >= self.need).any(axis=0)

    # -- prompt pool ------------------------------------------------------------------
    def _batch_cost(self, tokens, decodes, poff, on_token=None):
        """Time of a batch of ``tokens`` prompt tokens (per design, or one float for all) on a machine
        with ``decodes`` decoding requests.

        As the machine-level scheduler: prompts first, then as many decodes as fit in
        ``max_batch_tokens`` (one token each); a batch with decodes is a mixed batch.
        ``poff`` is each design's row of the prompt-time tables. Returns (seconds, do decodes
        ride along?). The tables need no clamp: a batch holds one prompt or prompts that fit in
        ``max_batch_tokens``, and decodes ride only below it, so at most max(longest prompt,
        ``max_batch_tokens``) tokens, within the tables (see ``__init__``).
        """
        mixed = np.count_nonzero(decodes)   # else plain prompt batches on every machine
        if mixed:
            ride = np.minimum(decodes, np.maximum(self.cfg.max_batch_tokens - tokens, 0.0))
            idx = poff + (tokens + ride).astype(np.int64)
        else:
            ride = decodes
            idx = poff + (int(tokens) if isinstance(tokens, float) else tokens.astype(np.int64))
        secs = self.ptab_p.take(idx)
        if on_token is not None and self.other_hw and np.count_nonzero(on_token):   # borrowed token machines of other hardware
            secs = np.where(on_token, self.ptab_t.take(idx), secs)
        rides = ride > 0
        return (self.batch_factor.take(rides.view(np.int8)) * secs if mixed else secs), rides

    # -- Splitwise ----------------------------------------------------------------------
    def splitwise(self) -> FluidOutcome:
        """Prompt and token pools with the reference's cluster-level rules, machine by machine.

        Columns are machines: each design's prompt pool first, then its token pool. Each
        machine has a role (prompt pool, token pool or mixed pool), booked KV memory and
        booked decodes, released through a ring of time buckets. A prompt goes to the
        prompt pool's least-loaded machine unless its queue is long, then to the mixed
        pool, then borrows a token machine; a decode goes to the token machine with the
        least booked memory that fits, then to the mixed pool, then borrows a prompt
        machine. Borrowed machines return to their pool once nothing runs on them and work has
        ended there since (decodes booked there whose prompt or KV transfer is still running do
        not hold them; one borrowed idle waits for its first work, as the reference frees a
        machine as a batch ends).
        Prompt batches on any machine delay the decodes running there (``_MachineBusy``).
        """
        D, N = self.D, len(self.a)
        cfg = self.cfg
        M = int(self.machines.max())            # each design's machines, the pass's widest
        pq = _PromptQueues(self, M)
        rows, W, act = pq.rows, pq.W, pq.cols   # designs still simulated (all but the overloaded)
        col = np.arange(M)[None, :]
        on_token_col = col >= self.cp[:, None]  # (and the columns past its machines: absent)
        exists = col < self.machines[:, None]
        home = np.where(on_token_col, _TOKEN, _PROMPT) + np.zeros((D, 1), dtype=np.int8)
        role = np.where(exists, home, _ABSENT).astype(np.int8)
        cap = np.where(on_token_col, self.cap_t[:, None], self.cap_p[:, None])   # KV bytes each machine holds
        least_room = float(cap[exists].min())   # a request above it may not fit on every machine
        smem = np.zeros((D, M))                 # booked KV bytes (the reference's sched_memory)
        ndec = np.zeros((D, M))                 # booked decodes
        L = self.ring_buckets()
        # releases by time bucket, memory + 1j * decodes (a pair moves as one number), in blocks
        # of _BLOCK buckets a machine: releasing a bucket of every machine reads memory in order,
        # and moving a machine's releases later touches a few blocks
        B = _BLOCK
        ring = np.zeros((L // B, D, M, B), dtype=np.complex64)
        ring_flat = ring.reshape(-1)            # a view: the ring is never reallocated
        # booked decodes that have started (their prompt and KV transfer done) and not ended: only
        # these keep a borrowed machine in the mixed pool (the reference frees it once nothing runs
        # there); counted up at their start, by time bucket, and down with the ring's releases
        running = np.zeros((D, M))
        # the reference frees a borrowed machine as a batch ends on it with nothing left, not while it
        # waits idle for the decodes routed to it: so only once work has ended there since it was
        # borrowed (prompt work queued past that time, or a decode started there since, or running then)
        borrowed_at = np.zeros((D, M))
        decoded = np.zeros((D, M), dtype=bool)
        starts = np.zeros(ring.shape, dtype=np.int16)   # laid out as the release ring
        # buckets (mod L) that may hold releases or starts: a long quiet spell of a sparse trace
        # walks only these, not every bucket of every machine (see advance); kept only where the
        # stream has such a spell (``advance`` reads it nowhere else: a dense one saves its upkeep)
        spells = np.diff(np.maximum.accumulate(np.trunc(self.a / _RING_S)), prepend=0.0)
        occupied = np.zeros(L, dtype=bool) if np.count_nonzero(spells > _QUIET) else None
        # utilization, sampled at every bucket boundary: a machine is busy while decodes run on it
        # or its prompt queue has work; busy_s keeps the seconds of designs since dropped (by home
        # pool: prompt, token), and sampled_s how long a stopped design was sampled
        busy = np.zeros((D, M))
        busy_s = np.zeros((D, 2))
        sampled_s = np.full(D, np.nan)
        starts_flat = starts.reshape(-1)
        R = _PENDING
        q_end = np.full((D * M, R), np.inf)     # the last prompt batches queued on each machine (inf: a free slot)
        q_tok = np.zeros((D * M, R))
        # slots as flat indices into q_end/q_tok (machine * R + slot): the oldest batch of each
        # machine not yet done, and the slot the next batch takes (the ring is full if it is not free)
        q_head = np.arange(D * M, dtype=np.int64) * R
        q_tail = q_head.copy()

        # the slot after each flat slot in its machine's ring (R is a power of two): one gather is
        # ~5x faster than the four operations that compute it (after compaction, the rows left are a prefix)
        slot_after = np.arange(D * M * R, dtype=np.int64)
        slot_after = (slot_after & -R) | ((slot_after + 1) & (R - 1))

        def next_slot(x):
            """The slot after flat slots ``x`` in their machines' rings."""
            return slot_after.take(x)

        def prev_slot(x):
            """The slot before flat slots ``x`` in their machines' rings."""
            return (x & -R) | ((x - 1) & (R - 1))

        q_next = np.full(D * M, np.inf)             # when the oldest of them is done
        # machines whose last batch is a prompt too long to pause their decode run: it waits for
        # the run to end, or for a shorter prompt that pauses it (see run_end and pull)
        waiting = np.zeros(D * M, dtype=bool)
        ptok = np.zeros((D, M))                     # their tokens: the reference's pending prompt tokens
        tau_req = np.zeros((N, D))              # requests x designs: the loop writes rows in order
        dmach = np.zeros((N, D), dtype=np.int32)
        pmach = np.zeros((N, D), dtype=np.int32)
        oom = np.zeros(D, dtype=bool)
        stop = np.full(D, N)                    # the first request each design does not finish
        failed = np.zeros(D, dtype=bool)        # stopped by the verdict: an SLO can no longer hold
        checked = 0                             # requests counted by the verdict so far
        dying = np.zeros(D, dtype=bool)
        ttab, K = self.ttab, self.K             # token time by (hardware, on a token machine?, batch size)
        # each machine's row of it (each design's pair, on a token machine or not), flat
        tofs = (self.toff[:, None] + on_token_col * K).ravel()
        ttab_next = ttab[1:]                    # at one decode more: ttab_next.take(x) is ttab.take(x + 1)
        DM = D * M                              # machines of the rings (they keep every design's rows)
        ring_off = None                         # once designs are dropped: each row's offset to its rows of the rings
                                                # (twice over: book's prompt and token machines)

        win_blocks = np.arange(_POSTPONE // B + 1)[None, :]   # blocks a postpone window spans
        win_buckets = np.arange(win_blocks.size * B)[None, :]   # and their buckets
        # which of them the window holds, by the offset of its first bucket in its block
        in_window = (win_buckets >= np.arange(B)[:, None]) & (win_buckets < np.arange(B)[:, None] + _POSTPONE)
        win_first = np.arange(D) * win_buckets.size   # where each machine's window starts in postpone's windows

        # the flat index of bucket b of flat machine f in the blocked rings is (b % L // B * DM + f) * B + b % B:
        # tabulated for machine 0 (add f * B) by bucket from ``lap()`` on, one gather instead of five
        # operations, and so the ring row of each block (add f). Four laps of the ring cover every
        # bucket the loop reads or writes (from a block before ``last`` to a block past ``last + L``)
        bucket_cell = np.arange(4 * L) % L
        bucket_cell = (bucket_cell // B * DM) * B + bucket_cell % B
        block_row = np.arange(4 * L // B) % (L // B) * DM

        def lap():
            """The first bucket of the lap before ``last``'s (a multiple of ``L``): where the tables start."""
            return last - last % L - L

        max_pending = cfg.prompt_max_pending_tokens
        max_tokens = cfg.max_batch_tokens
        mixed_on = cfg.mixed_pool
        last = 0
        inf = np.inf

        def penalties():
            return tuple(np.where(role == r, 0.0, inf) for r in (_PROMPT, _TOKEN, _MIXED))

        def keys():
            """JSQ bias of the prompt pool (one token per booked decode) and booked memory of the token pool, inf off the pool."""
            return ndec + pen_p, smem + pen_t

        pen_p, pen_t, pen_m = penalties()
        pkey, tkey = keys()                     # kept up to date by book(); rebuilt when roles change
        absent = np.where(exists, 0.0, inf)
        any_mixed = False
        any_waiting = False
        wait_until = 0.0                        # when the last of the waiting batches starts at the latest

        # keys of the cluster-level scheduler, for designs r (all their machines)
        def jsq(r):
            """The reference's sched_pending: prompt tokens routed and not yet done (the running
            batch included) plus one per booked decode."""
            return ptok.take(r, axis=0) + ndec.take(r, axis=0)

        def memory(r):
            booked = smem.take(r, axis=0)
            return booked if corr is None else booked + corr.take(r, axis=0)

        def decodes(r):
            return ndec.take(r, axis=0)

        def pick(r, pen, key):
            """Least ``key`` among the machines of designs r whose penalty is 0 (the others have inf):
            the machines, their flat indices, and whether they have penalty 0. Over whole rows, also
            for a pool (its penalty is inf off it): contiguous rows are faster than column slices."""
            j = (key(r) + pen.take(r, axis=0)).argmin(axis=1)
            f = r * M + j
            return j, f, pen.reshape(-1)[f] == 0.0

        def has_queue(r, f):
            """Is the queue of flat machines ``f`` of designs ``r`` not empty? It is while a prompt waits,
            or while a prompt batch too large for them to ride in holds the machine's decodes back."""
            return (pq.ob_start_f[f] > t) | (
                (ndec_f[f] >= 0.5) & (W_f[f] > t) & (pq.bcred_f[pq.ob_id_f[f] * pq.ND + act[r]] <= 0.0))

        def long_queue(r, f, s):
            """The reference's rule: the machine (flat indices ``f`` of designs ``r``) has a queue and its
            sched_pending (with this prompt) exceeds the limit."""
            out = ptok_f[f] + ndec_f[f] + s > max_pending
            q = out.nonzero()[0]
            if q.size:   # the load is over the limit: is there a queue?
                out[q] = has_queue(r[q], f[q])
            return out

        def fits(f, m):
            """Do ``m`` more KV bytes fit on flat machines ``f``?"""
            return held_at(f) + m < cap.reshape(-1)[f]

        def held_at(f):
            """Booked KV bytes on flat machines ``f`` now (the releases of the buckets either side interpolated)."""
            booked = smem.reshape(-1)[f]
            return booked if corr is None else booked + corr.reshape(-1)[f]

        def mixed(bad, pen, key, j, ok, check):
            """Designs ``bad`` try the mixed pool's least-``key`` machine (penalty ``pen``: ``pen_m`` and any
            machine that cannot hold the request); returns those still without one."""
            mj, fm, ok_m = pick(bad, pen, key)
            ok_m &= check(bad, fm)
            got = bad[ok_m]
            j[got] = mj[ok_m]
            ok[got] = True
            return bad[~ok_m]

        def borrow(bad, pen, key, j, ok):
            """Designs ``bad`` lend the least-``key`` machine of the pool of penalty ``pen`` to the mixed
            pool and use it; returns those still without one."""
            nonlocal any_mixed
            bj, fb, ok_b = pick(bad, pen, key)
            r, c = bad[ok_b], bj[ok_b]
            if r.size:
                f = fb[ok_b]
                role.ravel()[f] = _MIXED
                borrowed_at.ravel()[f] = t
                decoded.ravel()[f] = running.ravel()[f] >= 0.5
                for x in (pen_p, pen_t, pkey, tkey, tk):
                    x.ravel()[f] = inf
                pen_m.ravel()[f] = 0.0
                any_mixed = True
            j[r] = c
            ok[r] = True
            return bad[~ok_b]

        def book(fp, sent, ready, ft, m, end, decode=True):
            """Book ``sent`` KV bytes on the prompt machines until ``ready``, ``m`` and a decode on the token machines until ``end``
            (no decode for a request of one output token: its prompt makes it, and ``ft`` is ``fp``).

            ``fp`` and ``ft`` are flat (design, machine) indices. (Where both are one machine
            ``sent`` is 0, so the duplicate index loses nothing.) The keys change only where they are
            finite: ``tkey`` not on the prompt machines (off the token pool, or ``sent`` is 0 where a
            stuck design uses one machine), ``pkey`` not on the token machines (off the prompt pool)
            but where a stuck design decodes on a prompt machine (the caller adds it there).
            """
            f = np.concatenate((fp, ft))
            booked = np.empty(2 * D, dtype=np.complex128)   # memory + 1j * decodes
            booked[:D] = sent
            booked[D:] = complex(m, float(decode))
            amount = booked.real
            fb = (f if ring_off is None else f + ring_off) * B   # their rows of the rings, in cells
            # released at the bucket boundary nearest the time (not up to a bucket late), from lap() on
            b_lap = lap()
            b = np.rint(np.concatenate((ready, end)) / _RING_S).astype(np.int64) - (b_lap + 1)
            b = np.minimum(np.maximum(b, last - b_lap), last - b_lap + L - 1)
            cell = bucket_cell.take(b) + fb     # (ready, prompt machine) and (end, token machine)
            ring_flat[cell] += booked
            if occupied is not None:
                occupied[b % L] = True
            if decode:
                starts_flat[bucket_cell.take(b[:D]) + fb[D:]] += 1   # (ready, token machine)
                ndec.ravel()[ft] += 1.0
            smem.ravel()[f] += amount
            tkey.ravel()[ft] += m
            if tk is not tkey:
                tk.ravel()[ft] += m

        def window_rows(rr, jj, b0, blocks):
            """Ring rows (one block of ``B`` buckets each) of machines ``jj`` of designs ``rr``, for
            ``blocks`` from block ``b0`` on (counted from ``lap()``): (machines, blocks); and the machines' flat rows."""
            f = (rr if ring_off is None else act[rr]) * M + jj
            return block_row.take(b0 + blocks) + f[:, None], f

        def postpone(rr, jj, start, loss):
            """Move the releases booked on machines ``jj`` of designs ``rr`` in the ``_POSTPONE``
            buckets after ``start`` later by ``loss`` seconds (farther ones stay where they are)."""
            shift = np.rint(loss / _RING_S).astype(np.int64)
            first = np.maximum((start / _RING_S).astype(np.int64) + 1, last)
            b_lap = lap()
            first -= b_lap                      # buckets and blocks from lap() on (the tables')
            inside = first + shift <= last - b_lap + L - _POSTPONE   # else the batch is too far ahead for the ring: leave it
            if np.count_nonzero(inside) < inside.size:
                rr, jj, shift, first = rr[inside], jj[inside], shift[inside], first[inside]
            # the window holds few releases (one a decode): move only the buckets that hold any,
            # reading the window as whole blocks of the machine (64 bytes each)
            b0 = first >> _BLOCK_BITS
            rows_b, f = window_rows(rr, jj, b0[:, None], win_blocks)
            win = ring.reshape(-1, B).take(rows_b, axis=0).reshape(-1)
            held = win.view(np.int64).reshape(-1, win_buckets.size) != 0
            nz = (held & in_window.take(first & (B - 1), axis=0)).reshape(-1).nonzero()[0]
            if not nz.size:
                return
            # nz = k * (window buckets) + (bucket in machine k's window): its bucket is machine k's
            # b0 * B, plus nz less the k windows before it; its target that plus the machine's shift
            k = nz // win_buckets.size
            src = (b0 * B - win_first[:b0.size]).take(k) + nz
            moved = src + shift.take(k)
            if occupied is not None:
                occupied[moved % L] = True
            dst = bucket_cell.take(moved)       # distinct: one shift per machine
            fb = (f * B).take(k)
            src = bucket_cell.take(src) + fb
            dst += fb
            vals = win[nz]
            ring_flat[src] = 0.0
            ring_flat[dst] += vals

        run_blocks = np.arange(_RUN_WINDOW // B)[None, :]
        ring_blocks = np.arange(L // B)[None, :]
        near_blocks = ring_blocks[:, :_FREE_WINDOW // B]
        mem_wait = None                         # requests x designs: how long a decode waited for KV memory
        # booked KV memory between two boundaries: the releases of the last and of the next boundary, the
        # correction to the booked memory now, the quarter of the bucket it is for (-1: none yet), tkey + corr
        recent = coming = corr = None
        quarter = -1
        tk = tkey
        recent_buf, coming_buf, corr_buf, tk_buf = (np.zeros((D, M)) for _ in range(4))

        def freed_at(rr, jj, need):
            """When the releases booked on machines ``jj`` of designs ``rr`` have freed ``need`` bytes, at the
            rings' resolution (the reference's transfer waits for memory at its token machine); the ring's
            horizon where they never do within it. The next ``_FREE_WINDOW`` buckets first, where most
            waits end, then the whole ring for the others."""
            b0 = (last - lap()) >> _BLOCK_BITS
            enough = released(rr, jj, need, b0, near_blocks)
            at = enough.argmax(axis=1)          # (past buckets of the first block are empty)
            far = (~enough[:, -1]).nonzero()[0]
            if far.size:
                enough = released(rr[far], jj[far], need[far], b0, ring_blocks)
                at[far] = np.where(enough[:, -1], enough.argmax(axis=1), L)
            return ((last & -B) + at + 1) * _RING_S

        def released(rr, jj, need, b0, blocks):
            """Machines ``jj`` of designs ``rr`` x the buckets of ``blocks`` from block ``b0`` on: have the
            releases booked there freed ``need`` bytes by the end of that bucket?"""
            rows_b, _ = window_rows(rr, jj, b0, blocks)
            return ring.reshape(-1, B).take(rows_b, axis=0).reshape(rr.size, -1).real.cumsum(axis=1) >= need[:, None]

        def unstarted(rr, jj, ff, when):
            """How many decodes booked on machines ``jj`` of designs ``rr`` (flat ``ff``) start after ``when``,
            at the rings' resolution (those starting past ``_RUN_WINDOW`` buckets ahead count as starting then)."""
            rows_b, f = window_rows(rr, jj, (last - lap()) >> _BLOCK_BITS, run_blocks)
            began = starts.reshape(-1, B).take(rows_b, axis=0).reshape(f.size, -1).cumsum(axis=1)
            at = np.clip(np.rint(when / _RING_S).astype(np.int64) - 1 - (last & -B), 0, began.shape[1] - 1)
            return np.maximum(ndec_f[ff] - running.reshape(-1)[ff] - began[np.arange(f.size), at], 0.0)

        def run_end(rr, jj):
            """When the run of decode iterations on machines ``jj`` of designs ``rr`` ends, as the
            reference plans it: when its first decode ends, or a decode joins (a pause), whichever
            comes first; read off the rings at their resolution, at most ``_RUN_WINDOW`` buckets ahead."""
            rows_b, f = window_rows(rr, jj, (last - lap()) >> _BLOCK_BITS, run_blocks)
            ends = ring.reshape(-1, B).take(rows_b, axis=0).reshape(f.size, -1).imag != 0
            joins = starts.reshape(-1, B).take(rows_b, axis=0).reshape(f.size, -1) != 0
            hit = ends | joins                  # past buckets of the first block are empty
            hit[:, -1] = True                   # none within the window: its last bucket
            first = hit.argmax(axis=1)
            return ((last & -B) + first + 1) * _RING_S

        def pull(ff, when):
            """A prompt short enough to pause the decode run arrives on flat machines ``ff`` (one per
            design row): a long prompt waiting there for the run's end (``waiting``) starts at ``when``."""
            k = waiting[ff].nonzero()[0]
            if not k.size:
                return
            fk = ff[k]
            waiting[fk] = False                 # the machine's last batch will be this prompt's
            dk = pq.ob_start_f[fk] - when[k]
            ok = dk > 0                         # else the long prompt has started
            k, fk, dk = k[ok], fk[ok], dk[ok]
            pq.bstart_f[pq.ob_id_f[fk] * pq.ND + act[k]] -= dk
            W_f[fk] -= dk
            pq.ob_start_f[fk] -= dk
            q_end_f[prev_slot(q_tail[fk])] -= dk   # its prompt: the machine's latest
            q_next[fk] = q_end_f[q_head[fk]]

        def bank(rows, seen):
            """Add the busy samples ``seen`` of ``rows`` to their designs' busy seconds, by pool."""
            on_token = home[rows] == _TOKEN     # (a design's columns past its machines hold no samples)
            by_pool = [(seen * ~on_token).sum(axis=1), (seen * on_token).sum(axis=1)]
            busy_s[act[rows]] += np.stack(by_pool, axis=1) * _RING_S

        def flush_busy():
            """Bank the busy samples of the designs still going (a stopped one's were banked as it stopped)."""
            live = ~dying
            bank(live, busy[live])

        def halt(gone):
            """Stop the designs at rows ``gone`` (a mask) now: bank their busy samples (one stopped before the
            first bucket boundary is sampled once: which machines got work) and let none of their later
            requests change an earlier one's prompt batch, so what they report does not depend on when the
            pass drops them (which the designs beside them decide)."""
            nonlocal n_dying
            seen = busy[gone] if last else busy[gone] + ((running[gone] >= 0.5) | (W[gone] > 0.0))
            bank(gone, seen)
            sampled_s[act[gone]] = max(last, 1) * _RING_S
            pq.ob_tok[gone] = _NO_ROOM      # no later prompt joins a batch of theirs
            waiting.reshape(-1, M)[gone] = False   # nor pulls a waiting one forward
            dying[gone] = True
            n_dying = np.count_nonzero(dying)

        def overload(over):
            """Stop the designs at rows ``over`` (a mask; those stopped already stay as they are) as overloaded:
            request ``i`` is their last."""
            over &= ~dying
            halt(over)
            stop[act[over]] = i + 1

        def compact():
            """Drop the stopped designs (overloaded, or failed by the verdict) from the loop's arrays."""
            nonlocal D, rows, W, act, home, role, absent, smem, ndec, running, borrowed_at, decoded, ring_off
            nonlocal q_end, q_tok, pen_p, pen_t, pen_m, pkey, tkey, dying
            nonlocal q_head, q_tail, q_next, ptok, cap, tofs, n_dying, busy, waiting
            nonlocal recent, coming, quarter, tk, recent_buf, coming_buf, corr_buf, tk_buf
            keep = (~dying).nonzero()[0]
            recent_buf, coming_buf = (x.take(keep, axis=0) for x in (recent_buf, coming_buf))
            recent, coming = (None if x is None else buf for x, buf in ((recent, recent_buf), (coming, coming_buf)))
            corr_buf, tk_buf = np.zeros((keep.size, M)), np.zeros((keep.size, M))
            quarter = -1                        # the next request makes corr and tk anew, as they were
            flush_busy()
            busy = np.zeros((keep.size, M))
            pq.compact(keep)
            D, rows, W, act = keep.size, pq.rows, pq.W, pq.cols
            home, role, absent, smem, ndec, pen_p, pen_t, pen_m, pkey, tkey = (
                x.take(keep, axis=0) for x in (home, role, absent, smem, ndec, pen_p, pen_t, pen_m, pkey, tkey))
            running, borrowed_at, decoded = (x.take(keep, axis=0) for x in (running, borrowed_at, decoded))
            ring_off = np.tile((act - rows) * M, 2)   # the rings keep the dropped designs' rows: no copy
            q_end, q_tok = (x.reshape(-1, M, R).take(keep, axis=0).reshape(-1, R) for x in (q_end, q_tok))
            q_head, q_tail, q_next, waiting = (x.reshape(-1, M).take(keep, axis=0).ravel()
                                               for x in (q_head, q_tail, q_next, waiting))
            q_head = (q_head & (R - 1)) + np.arange(q_head.size) * R   # the slots of the machines' new rows
            q_tail = (q_tail & (R - 1)) + np.arange(q_tail.size) * R
            ptok, cap = ptok.take(keep, axis=0), cap.take(keep, axis=0)
            tk = tkey
            tofs = tofs.reshape(-1, M).take(keep, axis=0).ravel()
            dying = np.zeros(D, dtype=bool)
            n_dying = 0

        def flat_views():
            """Flat views of the arrays the step indexes by flat (design, machine); new after compaction."""
            return ptok.reshape(-1), ndec.reshape(-1), W.reshape(-1), q_end.reshape(-1), q_tok.reshape(-1)

        def advance(cur):
            """Release the ring's buckets from ``last`` up to ``cur``, sampling after each which machines are busy;
            a long spell walks only the buckets that hold anything and counts the quiet ones between at once."""
            nonlocal recent, coming
            recent = None
            stop = min(cur, last + L)
            ks = range(last, stop)
            if stop - last > _QUIET and occupied is not None:
                ks = (last + np.flatnonzero(occupied.take(np.arange(last, stop) % L))).tolist()
            k0 = last                           # the first bucket not yet sampled
            for k in ks:
                if k > k0:
                    quiet(k0, k)
                blk, pos = k % L // B, k % B
                if occupied is not None:
                    occupied[k % L] = False
                bucket = ring[blk, :, :, pos]
                due = bucket if ring_off is None else bucket[act]   # the designs still simulated
                if k == cur - 1:   # released at the boundary before ``cur``'s bucket
                    np.copyto(recent_buf, due.real)
                    recent = recent_buf
                np.subtract(smem, due.real, out=smem)
                np.subtract(ndec, due.imag, out=ndec)
                np.subtract(running, due.imag, out=running)
                bucket[...] = 0.0
                began = starts[blk, :, :, pos]
                now_began = began if ring_off is None else began[act]
                np.add(running, now_began, out=running)
                if any_mixed:
                    np.logical_or(decoded, now_began > 0, out=decoded)
                began[...] = 0
                np.add(busy, (running >= 0.5) | (W > (k + 1) * _RING_S), out=busy)
                k0 = k + 1
            if cur > k0:   # nothing changes meanwhile
                quiet(k0, cur)
            nb = ring[cur % L // B, :, :, cur % B].real   # and due at the next boundary (as booked by now)
            np.copyto(coming_buf, nb if ring_off is None else nb[act])
            coming = coming_buf

        def quiet(k0, k1):
            """Sample buckets k0..k1-1, which release nothing: the decodes running stay, the prompt queues drain."""
            queued = np.clip(np.ceil(W / _RING_S) - 1.0, k0, k1) - k0   # boundaries with W > (k + 1) * _RING_S
            np.add(busy, np.where(running >= 0.5, float(k1 - k0), queued), out=busy)

        ptok_f, ndec_f, W_f, q_end_f, q_tok_f = flat_views()
        n_dying = 0
        # per request as Python floats: cheaper to index and to combine with arrays than numpy scalars
        prompt = self.prompt
        arrival, held, iters_l, join_l, xfer_l = (x.tolist() for x in (self.a, self.mem, self.iters, self.u, self.xfer))
        one_token_l = (self.n <= 1).tolist()
        for i in range(N):
            # (the bounds as each request is routed: a closer reading stops narrow failures sooner, and the
            # planner's walk down then loses the near misses it tries; tests/planning/test_planner.py, near misses)
            if self.verdict is not None and i - checked >= _CHECK:
                gone = self._hopeless(checked, i, pq, act, tau_req, pmach, dmach, now=arrival[i],
                                      waiting=waiting if any_waiting else None, mem_wait=mem_wait) & ~dying
                checked = i
                if np.count_nonzero(gone):
                    halt(gone)
                    failed[act[gone]] = True
                    stop[act[gone]] = i
            if n_dying:   # dropped at once: a stopped design left in the arrays would still take the loop's
                compact()   # slow paths (no room, memory waits) for every request, for the whole pass
                if D == 0:
                    break
                ptok_f, ndec_f, W_f, q_end_f, q_tok_f = flat_views()
            t, s, m = arrival[i], prompt[i], held[i]
            if any_waiting and t >= wait_until:   # every waiting batch has started
                waiting[:] = False
                any_waiting = False
            cur = int(t / _RING_S)
            if cur > last:
                advance(cur)
                last = cur
                if mixed_on and any_mixed:   # a borrowed machine goes home once nothing runs on it
                    idle = (role == _MIXED) & (running < 0.5) & (W <= t) & ((W > borrowed_at) | decoded)
                    if idle.any():
                        role = np.where(idle, home, role)
                        pen_p, pen_t, pen_m = penalties()
                        any_mixed = bool((role == _MIXED).any())
                pkey, tkey = keys()
                quarter = -1
            f = (q_next <= t).nonzero()[0]
            while f.size:   # retire the batches done by now, oldest first (FCFS: in end order)
                fh = q_head[f]
                ptok_f[f] -= q_tok_f[fh]
                q_end_f[fh] = inf                   # a free slot again
                q_head[f] = fh = next_slot(fh)
                q_next[f] = nxt = q_end_f[fh]       # inf when none is left
                f = f[nxt <= t]                     # only these machines may have more done
            # prompt machine: the prompt pool's least loaded (the reference's sched_pending:
            # prompt tokens not yet done, the running batch included, plus booked decodes)
            # unless its queue is long; whole rows (pkey is inf off the prompt pool): contiguous is faster
            kp = ptok + pkey
            pens = pen_m, pen_t, pen_m, pen_p, absent   # the pools' penalties for its prompt, then its decode
            if m > least_room:   # some machine can never hold this request: it is no candidate (the reference's
                # rule: a long prompt there would block its queue for ever), for the prompt's KV cache, then the whole
                no_p, no_t = (np.where(cap >= need, 0.0, inf) for need in (self.kv * (s + 1.0), m))
                kp = kp + no_p
                pens = pen_m + no_p, pen_t + no_p, pen_m + no_t, pen_p + no_t, absent + no_t
            pj = kp.argmin(axis=1)
            fp = pq.flat(pj)
            load = kp.reshape(-1)[fp]               # inf off the prompt pool
            ok_p = load < inf
            q = ((load + s > max_pending) & ok_p).nonzero()[0]
            if q.size:   # over the limit (load is ptok + ndec there, as in long_queue): long if the machine has a queue
                ok_p[q] = ~has_queue(q, fp[q])
            # token machine: least booked memory that still fits (tkey is inf off the token pool)
            # releases land on the boundary nearest their time: between two, interpolate the booked memory
            # (the last boundary released those due until the middle of this bucket, the next releases
            # those due from its middle on), by quarters of the bucket (kept up to date by book() meanwhile).
            # That is each machine's expected booked memory: where a token instance holds only a few requests'
            # KV caches (simulator.FEW_CACHES) they are freed in lumps, and the least of the expectations is
            # above the expected least, so a large decode fits a token machine less often than in the reference
            qt = int((t / _RING_S - last) * 4.0)
            if qt != quarter:
                quarter = qt
                half = 0.375 - 0.25 * qt   # 0.5 less the middle of the quarter (in buckets)
                edge = recent if half > 0.0 else coming
                if edge is None:
                    corr, tk = None, tkey
                else:
                    corr = np.multiply(edge, half, out=corr_buf)
                    tk = np.add(tkey, corr, out=tk_buf)
            tj = tk.argmin(axis=1)
            ft = pq.flat(tj)
            ok_t = tk.reshape(-1)[ft] + m < cap.reshape(-1)[ft]
            one_token = one_token_l[i]
            if one_token:   # one output token: the prompt makes it, no token machine (its memory stays with the prompt)
                ok_t = np.ones(D, dtype=bool)
            short_t = False   # a token pool without room: where the decode goes may lack it (see below)
            if mixed_on:
                okb = ok_p & ok_t
                if np.count_nonzero(okb) < D:
                    bad_p, bad_t = (~ok_p).nonzero()[0], (~ok_t).nonzero()[0]
                    new_p, new_t = bad_p.size, bad_t.size   # machines that change
                    short_t = new_t > 0
                    mixed_p, borrow_p, mixed_t, borrow_t, anywhere = pens
                    if any_mixed:   # then the mixed pool
                        if bad_p.size:
                            bad_p = mixed(bad_p, mixed_p, jsq, pj, ok_p, lambda r, f: ~long_queue(r, f, s))
                        if bad_t.size:
                            bad_t = mixed(bad_t, mixed_t, memory, tj, ok_t, lambda r, f: fits(f, m))
                    if bad_p.size:   # then borrow a token machine for prompts
                        bad_p = borrow(bad_p, borrow_p, decodes, pj, ok_p)
                    if bad_t.size:   # and a prompt machine for decodes
                        bad_t = borrow(bad_t, borrow_t, memory, tj, ok_t)
                    # those still bad (in order, as ~(ok_p & ok_t)): often of one kind or none
                    stuck = bad_p if not bad_t.size else bad_t if not bad_p.size else (~(ok_p & ok_t)).nonzero()[0]
                    if stuck.size:   # nowhere to go: prompt and decode on the least loaded machine that can hold it
                        short_t = True
                        fj, ff, fit = pick(stuck, anywhere, jsq)
                        if anywhere is not absent and np.count_nonzero(fit) < stuck.size:   # none can: any of them
                            fj = np.where(fit, fj, pick(stuck, absent, jsq)[0])
                            ff = stuck * M + fj
                        pj[stuck] = fj
                        tj[stuck] = fj
                        if not one_token:
                            pkey.ravel()[ff] += 1.0   # their decode is booked there (see book)
                        new_p = new_t = True
                    if new_p:
                        fp = pq.flat(pj)
                    if new_t:
                        ft = pq.flat(tj)
            else:
                short_t = np.count_nonzero(ok_t) < D
            if one_token:
                tj, ft = pj, fp
            # (where no machine has room the reference's transfer waits for memory, and so does this model's
            # decode, below: not an overflow, which is a request that never gets memory; see _outcome)
            apart = pj != tj                        # the KV cache moves from the prompt to the token machine
            # the prompt, on its machine's queue; it stops a running decode batch at the next iteration
            d_p = ndec_f[fp]
            tok_p = home.reshape(-1).take(fp) == _TOKEN if self.other_hw else None   # (only _batch_cost's other hardware needs it)
            if np.count_nonzero(d_p):
                tau_p = ttab.take(tofs.take(fp) + np.minimum(d_p, _MAX_DECODES).astype(np.int64))
                h = ((d_p > 0) & (W_f[fp] <= t)).nonzero()[0]   # an idle machine that is decoding
                if h.size:
                    W_f[fp[h]] = t + join_l[i] * tau_p[h]
                if s > max_tokens:   # too long to pause the run (unless its own decode, there too, does)
                    if any_waiting:
                        waiting[fp] = False     # the machine's last batch will be this prompt's
                    g = h[(pj[h] != tj[h]) & (running.reshape(-1)[fp[h]] >= 0.5)]
                    if g.size:   # it waits for the run's end
                        fg = fp[g]
                        W_f[fg] = wait = np.maximum(W_f[fg], run_end(g, pj[g]))
                        waiting[fg] = True
                        any_waiting = True
                        wait_until = max(wait_until, float(wait.max()))
                elif any_waiting:   # short enough to pause the run where a long prompt waits
                    pull(fp, t + join_l[i] * tau_p)
                start, delta, fresh, ride, end_p = pq.step(i, t, pj, d_p, tok_p, credit=tau_p, fj=fp)
                # the decodes booked on that machine wait out the batch time it adds (less one iteration
                # when they ride in a new mixed batch): their memory and decode-count releases move later
                loss = delta - tau_p * (fresh & ride)
                late = ((d_p >= 0.5) & (loss > 0.5 * _RING_S)).nonzero()[0]
                if late.size:
                    postpone(late, pj[late], start[late], loss[late])
            else:   # no decodes there: plain prompt batches
                start, delta, fresh, ride, end_p = pq.step(i, t, pj, d_p, tok_p, credit=0.0, fj=fp)
                if any_waiting:
                    waiting[fp] = False         # the machine's last batch is this prompt's
            if start[start.argmax()] - t > self.overload_s:
                overload(start - t > self.overload_s)
            qh, fk = q_head[fp], q_tail[fp]         # the next slot of the machine's prompt ring
            nk = next_slot(fk)
            tok = s
            if pq.joined:                           # some join their machine's last batch (not started, so not
                # retired): they add to its slot, which ends as the grown batch does, and so do the prompts
                # queued in it before them (the reference retires a batch's prompts as one)
                grow = ~fresh
                nk = np.where(grow, fk, nk)         # the ring does not advance
                fk = np.where(grow, prev_slot(fk), fk)
                tok = s + q_tok_f[fk] * grow
                full = (q_end_f[fk] < inf) & fresh
            else:
                full = q_end_f[fk] < inf            # its R slots all hold batches not yet done
            if np.count_nonzero(full):              # forget the oldest batch remembered
                ptok_f[fp] += s - q_tok_f[fk] * full
                qh = np.where(full, nk, qh)
                q_head[fp] = qh
            else:
                ptok_f[fp] += s
            q_tail[fp] = nk
            q_end_f[fk] = end_p
            q_tok_f[fk] = tok
            q_next[fp] = q_end_f[qh]
            ready = end_p + apart * xfer_l[i]
            # the decode: output-1 iterations at its machine's batch size, after joining a batch
            # at ndec + 1 decodes (ndec is a whole number >= 0), at most _MAX_DECODES
            d_t = ndec_f[ft]
            tau = ttab_next.take(tofs.take(ft) + np.minimum(d_t, _MAX_DECODES - 1).astype(np.int64))
            if iters_l[i] > 0.0 and np.count_nonzero(d_t) < D:   # an idle token machine: no running iteration to join
                tau = tau * np.where(d_t > 0.0, 1.0, 1.0 - join_l[i] / iters_l[i])   # (tau_req: per iteration)
            if short_t:   # the decode's machine lacks room as booked: it starts once enough is released
                lack = held_at(ft) + m - cap.reshape(-1)[ft]
                k = (lack > 0.0).nonzero()[0]
                lack = lack[k]
                moving = apart[k]             # those whose KV cache moves to another machine
                moved = k[moving]
                if moved.size:   # the reference's transfer waits for the memory in use as it starts: the decodes
                    # booked there that start later hold none yet (at their machine's mean booked bytes a decode).
                    # (A prompt and decode on one machine keep the booked rule: there the prompt, not the
                    # decode, waits for memory, and the queue behind it, which this model does not hold up)
                    fm = ft[moved]
                    per_decode = smem.reshape(-1)[fm] / np.maximum(ndec_f[fm], 1.0)
                    lack[moving] -= unstarted(moved, tj[moved], fm, ready[moved]) * per_decode
                    short = lack > 0.0
                    k, lack = k[short], lack[short]
                if k.size:
                    wait = np.maximum(freed_at(k, tj[k], lack) - ready[k], 0.0)
                    ready[k] += wait            # (the prompt machine keeps the KV cache meanwhile)
                    if mem_wait is None:
                        mem_wait = np.zeros((N, self.D))
                    mem_wait[i, act[k]] = wait
                    if ready[k].max() - t > self.overload_s:   # waiting past every limit: overloaded, as a queue
                        over = np.zeros(D, dtype=bool)
                        over[k] = ready[k] - t > self.overload_s
                        overload(over)
            end = ready + tau * iters_l[i]
            book(fp, apart * (self.kv * (s + 1.0)), ready, ft, m, end, not one_token)   # prompt KV freed after the transfer
            pq.put(i, (tau_req, tau), (pmach, pj), (dmach, tj))
        if D:   # the machines work on after the last arrival: sample until nothing runs or is queued
            end = last + L
            live = ~dying                       # a stopped design's queue may reach far ahead
            while last < end and ((running[live] >= 0.5).any() or (W[live] > last * _RING_S).any()):
                advance(last + 1)
                last += 1
            flush_busy()
        ring = ring_flat = starts = starts_flat = q_end = q_tok = q_end_f = q_tok_f = None   # free the loop's state first
        ttft = pq.ttft()
        decoding = self.n > 1                   # a request of one output token has no decode to delay

        # one design at a time, on its own axis: the last token if no prompt batch delayed the decode,
        # then plus the waits for the prompt batches run on its machine meanwhile. Its numbers are
        # then its own, whatever designs shared its pass (a common axis rounds each by its neighbours).
        # A few designs' columns at a time are copied to rows first: a column of requests x designs
        # arrays is read with a stride of a whole row
        alone = np.empty_like(ttft)
        group = max(1, min(_POST_DESIGNS, _POST_BYTES // (N * 80)))   # (9 rows of 8 bytes a request, and a mask)
        for c0 in range(0, ttft.shape[1], group):
            cols = slice(c0, c0 + group)
            ttft_c, pm_c, dm_c, tau_c, bstart_c, bdur_c, bcred_c = (np.ascontiguousarray(x[:, cols].T) for x in (
                ttft, pmach, dmach, tau_req, pq.bstart, pq.bdur, pq.bcred))
            lead_c = np.ascontiguousarray(pq.leaders(cols).T)
            wait_c = None if mem_wait is None else np.ascontiguousarray(mem_wait[:, cols].T)
            out_c = np.empty(ttft_c.shape)
            for k, d in enumerate(range(c0, c0 + ttft_c.shape[0])):
                # when each decode starts (after the KV transfer) and its undelayed time
                t1 = self.a + ttft_c[k] + np.where(pm_c[k] == dm_c[k], 0.0, self.xfer)
                if wait_c is not None:
                    t1 += wait_c[k]
                base = tau_c[k] * self.iters
                out_c[k] = t1 + base
                n = int(stop[d])                # its requests (those of a stopped design before it stopped)
                if not n:
                    continue
                # a machine's stretch of the decode-wait axis holds its batches and any decode's end
                prompts_end = max(float(np.max(bstart_c[k, :n] + bdur_c[k, :n])), 0.0)
                span = 2.0 * prompts_end + max(float(np.nanmax(out_c[k, :n])), 0.0) + 10.0
                waits = _MachineBusy(*(x[k, :n, None] for x in (bstart_c, bdur_c, bcred_c, lead_c)),
                                     int(self.machines[d]), pm_c[k, :n, None], dm_c[k, :n, None], span)
                out_c[k, :n] += waits.delays(t1[:n, None], base[:n, None])[:, 0] * decoding[:n]
            alone[:, cols] = out_c.T
        del pmach, dmach, tau_req
        pq.free("bstart", "bcred", "rb", "bdur")   # what the outcome no longer needs
        return self._outcome(busy_s, ttft, alone, oom, stop, failed, sampled_s)

    def _outcome(self, busy_s, ttft, last_token, oom, stop, failed, sampled_s=None) -> FluidOutcome:
        """Per-request TTFT and E2E (designs x requests) and each design's utilization: its
        machines' busy seconds (``busy_s``, designs x (prompt pool, token pool)) over their time
        to the last token or, for a stopped design, over the time it was simulated (``sampled_s``).

        Works in place on ``ttft`` and ``last_token`` (requests x designs, the caller's own).
        """
        for d in (stop < len(self.a)).nonzero()[0]:   # a stopped design's later requests are unfinished
            ttft[stop[d]:, d] = np.nan
            last_token[stop[d]:, d] = np.nan
        horizon = np.fmax.reduce(last_token, axis=0)   # skips NaN; NaN where none finished
        if sampled_s is not None:
            horizon = np.where(np.isnan(sampled_s), horizon, sampled_s)
        horizon = np.maximum(np.nan_to_num(horizon), 1e-9)
        util = np.clip(busy_s.sum(axis=1) / (self.machines * horizon), 0.0, 1.0)
        counts = np.stack([self.cp, self.ct], axis=1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):   # a baseline has no token pool: NaN
            pools = np.clip(np.where(counts > 0, busy_s / (counts * horizon[:, None]), np.nan), 0.0, 1.0)
        ttft_t = np.ascontiguousarray(ttft.T)
        del ttft
        last_token -= self.a[:, None]           # E2E
        return FluidOutcome(ttft_t, np.ascontiguousarray(last_token.T), util, pools, oom,
                            (stop < len(self.a)) & ~failed, failed)

    # -- baselines ----------------------------------------------------------------------
    def baseline(self, most_slots: int | None = None) -> FluidOutcome:
        """Every machine runs both phases; decodes are tracked per machine (``_DECODE_SLOTS`` slots, doubled as needed).

        Each prompt batch scheduled on a machine delays the decodes running there at its
        start, as it happens: by the batch time less one decode iteration when they ride
        along in the mixed batch, by the whole batch time when the prompt leaves them no
        room. So the JSQ routing sees each machine's true decode count. A prompt that finds
        the machine decoding starts at the next boundary of its iteration grid (iterations
        run back to back from the end of the last prompt batch or decode there), and only
        the decodes still running at the batch start ride in it (mixed batch, 1.1x).
        A design that stops (overloaded, or failed by ``verdict``) leaves the loop at once,
        and the decode slots shrink to what the designs left need. Every design pays for the
        slots of the busiest machine: past ``most_slots`` a design that needs more leaves the
        loop unfinished, flagged in ``evicted`` (for a pass of its own), where at least ``_STAY``
        designs stay and more stay than leave.
        """
        N = len(self.a)
        pq = _PromptQueues(self, self.C)
        rows, W, act = pq.rows, pq.W, pq.cols   # loop rows, and each one's design
        present = np.arange(self.C)[None, :] < self.cp[:, None]   # machines of each design
        D, K = self.D, _DECODE_SLOTS
        dend = np.zeros((D, self.C, K))        # end times of the decodes on each machine
        dready = np.zeros((D, self.C, K))      # when their prompt batch ends and they start decoding
        dtau = np.zeros((D, self.C, K))        # their decode iteration times
        dreq = np.full((D, self.C, K), -1, dtype=np.int64)
        # decodes per machine (slots whose decode ends after now) and the earliest of their ends, when the
        # count next changes: each request counts afresh only the machines where a decode ended since
        dec = np.zeros((D, self.C), dtype=np.int64)
        nxt = np.full((D, self.C), np.inf)
        ended_at = np.zeros((D, self.C))       # when the last decode that has ended on each machine ended
        done = np.zeros((N + 1, D))            # last-token times; row N takes empty slots
        ttab, toff = self.ttab, self.toff       # token time on the machine (row 0 of each design's pair)
        inv_tps = np.repeat((1.0 / self.tokens_per_s)[:, None], self.C, axis=1)   # seconds a token, each machine
        dk = dec * inv_tps + np.where(present, 0.0, np.inf)   # JSQ's pending decode work: one token a decode (inf off the design)
        eps = 1e-9
        busy = np.zeros((D, self.C))           # utilization, sampled as in splitwise()
        busy_s = np.zeros((D, 2))              # one pool: busy seconds of the designs stopped, then of all
        sampled_s = np.full(D, np.nan)         # how long a stopped design was sampled
        sampled = 0                             # bucket boundaries sampled so far
        last_end = np.zeros((D, self.C))       # when each machine's last decode ends
        stop = np.full(D, N)                    # the first request each design does not finish
        failed = np.zeros(D, dtype=bool)        # stopped by the verdict: an SLO can no longer hold
        gone = np.zeros(D, dtype=bool)          # loop rows to drop after this request
        tau_req = np.zeros((N, D)) if self.verdict is not None else None   # each decode's iteration time
        checked = 0
        self.evicted = np.zeros(D, dtype=bool)

        def sample(upto):
            """Which machines are busy at each bucket boundary up to ``upto``: a decode has not ended
            (one whose prompt is not done yet has its prompt batch queued) or prompt work is queued."""
            nonlocal sampled
            if upto > sampled:   # boundaries k in (sampled, upto] with k * _RING_S < work_end, counted
                last_busy = np.ceil(np.maximum(last_end, W) / _RING_S) - 1.0
                np.add(busy, np.clip(last_busy, sampled, upto) - sampled, out=busy)
                sampled = upto

        dend_f = dready_f = dtau_f = dreq_f = dec_f = nxt_f = ended_at_f = last_end_f = dk_f = inv_f = None

        def views():
            """Make the flat views of the (designs x machines[ x slots]) arrays anew (after they change): one
            index a machine, the cheapest gathers and scatters. (All are C-contiguous: reshape is a view.)"""
            nonlocal dend_f, dready_f, dtau_f, dreq_f, dec_f, nxt_f, ended_at_f, last_end_f, dk_f, inv_f
            dend_f, dready_f, dtau_f, dreq_f = (x.reshape(-1, K) for x in (dend, dready, dtau, dreq))
            dec_f, nxt_f, ended_at_f, last_end_f, dk_f, inv_f = (
                x.reshape(-1) for x in (dec, nxt, ended_at, last_end, dk, inv_tps))

        def record(r, sel):
            """Record the last tokens of the decodes in slots ``sel`` (a mask over the slots of loop rows ``r``)."""
            done[dreq[r][sel], np.broadcast_to(act[r][:, None, None], sel.shape)[sel]] = dend[r][sel]

        def recount(at, slots, count=None):
            """Count the decodes of machines ``at`` (flat indices, each a machine of its design) afresh from their
            ``slots`` (unless the ``count`` is known), and when the next of them ends; returns which slots still run."""
            on = slots > t
            if count is None:
                count = _count(on)
            dec_f[at] = count
            dk_f[at] = count * inv_f.take(at)
            nxt_f[at] = np.where(on, slots, np.inf).min(axis=1)
            return on

        def drop(t):
            """Take the designs of rows ``gone`` out of the loop (their requests up to their stop are final:
            no later prompt batch delays them), then keep only the decode slots the others need."""
            nonlocal rows, W, act, dend, dready, dtau, dreq, dec, nxt, ended_at, busy, last_end, toff, inv_tps, dk, K, gone
            g = gone.nonzero()[0]
            record(g, dreq[g] >= 0)
            busy_s[act[g], 0] = busy[g].sum(axis=1) * _RING_S
            sampled_s[act[g]] = max(sampled, 1) * _RING_S
            # the rows kept past the new end fill the holes below it: the slot arrays (designs x machines x
            # slots, large) then copy only those rows and keep a view of the rest
            n = gone.size - g.size
            holes, movers = g[g < n], n + (~gone[n:]).nonzero()[0]
            keep = np.arange(n)
            keep[holes] = movers
            pq.compact(keep)
            rows, W, act = pq.rows, pq.W, pq.cols
            dec, nxt, ended_at, busy, last_end, toff, inv_tps, dk = (
                x[keep] for x in (dec, nxt, ended_at, busy, last_end, toff, inv_tps, dk))
            for x in (dend, dready, dtau, dreq):
                x[holes] = x[movers]
            dend, dready, dtau, dreq = dend[:n], dready[:n], dtau[:n], dreq[:n]
            gone = np.zeros(n, dtype=bool)
            need = _DECODE_SLOTS   # room for twice the busiest machine's decodes: they may soon grow again
            while dec.size and need < 2 * (dec.max() + 1):
                need *= 2
            if need < K:
                # ended decodes are final (ended_at keeps the last end): running ones move to the front
                ended_at = np.maximum(ended_at, np.where(dend <= t, dend, 0.0).max(axis=2))
                record(slice(None), (dend <= t) & (dreq >= 0))
                order = np.argsort(dend <= t, axis=2, kind="stable")[:, :, :need]
                dend, dready, dtau, dreq = (np.take_along_axis(x, order, axis=2) for x in (dend, dready, dtau, dreq))
                free = dend <= t
                dend[free] = dready[free] = dtau[free] = 0.0
                dreq[free] = -1
                K = need

        views()
        for i in range(N):
            t = self.a[i]
            if tau_req is not None and i - checked >= _CHECK + _LAG:
                # the verdict reads its requests _LAG later, by then mostly done: their last tokens as they
                # stand (recorded now; the final ones overwrite them) bound their E2E and TBT closely
                hi = i - _LAG
                record(slice(None), (dreq >= checked) & (dreq < hi))
                hopeless = self._hopeless(checked, hi, pq, act, tau_req, ends=done[checked:hi][:, act], now=t)
                checked = hi
                if np.count_nonzero(hopeless):
                    failed[act[hopeless]] = True
                    stop[act[hopeless]] = i
                    gone |= hopeless
                    drop(t)
                    if not rows.size:
                        break
                    views()
            sample(int(t / _RING_S))
            ended = np.flatnonzero(nxt <= t)
            if ended.size:
                slots = dend_f.take(ended, axis=0)
                on = recount(ended, slots)
                ended_at_f[ended] = np.maximum(ended_at_f.take(ended), np.where(on, 0.0, slots).max(axis=1))
            # JSQ on pending work: queued prompt time plus one token per decode
            key = np.maximum(W, t)
            key += dk
            j = key.argmin(axis=1)
            fj = pq.flat(j)
            n_j = dec_f.take(fj)
            tau = ttab.take(toff + n_j)
            if n_j[n_j.argmax()] >= K:   # a machine decodes in every slot
                needy = n_j >= K
                stay = needy.size - np.count_nonzero(needy | gone)   # the designs that would stay in the pass
                if (most_slots is not None and K >= most_slots and stay >= _STAY
                        and np.count_nonzero(needy) + np.count_nonzero(self.evicted) <= stay):
                    # its designs leave for a pass of their own: they stop here, unfinished, their results no one's
                    self.evicted[act[needy]] = True
                    gone |= needy
                    stop[act[needy]] = i
                else:   # track twice as many
                    dend, dready, dtau = (np.concatenate([x, np.zeros_like(x)], axis=2) for x in (dend, dready, dtau))
                    dreq = np.concatenate([dreq, np.full_like(dreq, -1)], axis=2)
                    K *= 2
                    views()
            # a prompt stops a running decode batch at its next iteration boundary: the machine's
            # decode iterations run back to back since its last prompt batch ended (at W) or,
            # later, since the last decode there ended (a new run of the smaller batch starts)
            W_f = pq.W_f
            Wj = W_f[fj]
            grid = np.maximum(Wj, ended_at_f.take(fj))
            W_f[fj] = np.where((Wj <= t) & (n_j > 0), grid + (np.floor((t - grid) / tau) + 1.0) * tau, Wj)
            # the decodes that share the batch: those decoding when it starts (their prompt done,
            # their last token not yet), not the ones that finish before it nor its own prompts.
            # Decodes end on the machine's iteration grid, as batches start: one that ends within
            # half an iteration of the start ends at that boundary, before the batch.
            ends, rdy = dend_f.take(fj, axis=0), dready_f.take(fj, axis=0)
            join = pq.join(i, t, fj)
            at = pq.batch_start(t, fj, join)[:, None]
            running = ends > at + 0.5 * tau[:, None]   # decoding at the batch start (where step starts it)
            riding = _count((rdy <= at + eps) & running).astype(np.float64)
            start, delta, fresh, ride, ready = pq.step(i, t, j, riding, fj=fj, join=join)
            if start[start.argmax()] - t > self.overload_s:   # overloaded, as in splitwise(): its later requests
                over = start - t > self.overload_s            # are unfinished, and it leaves the loop
                stop[act[over]] = i + 1
                gone |= over
            # the machine's running decodes wait out the new batch time
            loss = delta[:, None] - np.where((fresh & ride)[:, None], dtau_f.take(fj, axis=0), 0.0)
            ends += running * np.maximum(loss, 0.0)   # (products, not np.where: the same sums, faster)
            rdy += (rdy > at) * delta[:, None]        # a joined batch grew
            slot = ends.argmin(axis=1)
            fs = rows * K + slot                # the slot in ends and rdy
            gs = fj * K + slot                  # and in the (designs x machines x slots) arrays
            old = dreq_f.reshape(-1).take(gs)
            done[np.where(old >= 0, old, N), act] = ends.reshape(-1).take(fs)
            ends.reshape(-1)[fs] = ready + tau * (self.n[i] - 1.0)   # decoding starts with the next iteration
            rdy.reshape(-1)[fs] = ready
            dend_f[fj] = ends
            dready_f[fj] = rdy
            dtau_f.reshape(-1)[gs] = tau
            dreq_f.reshape(-1)[gs] = i
            recount(fj, ends, n_j + 1)   # (its decodes were counted at t: none has ended since, and one more runs)
            last_end_f[fj] = ends.max(axis=1)
            if tau_req is not None:
                pq.put(i, (tau_req, tau))
            if np.count_nonzero(gone):
                drop(t)
                if not rows.size:
                    break
                views()
        if rows.size:
            sample(int(max(dend.max(), W.max()) / _RING_S))   # the machines work on after the last arrival
            record(rows, dreq >= 0)
            busy_s[act, 0] = busy.sum(axis=1) * _RING_S
        return self._outcome(busy_s, pq.ttft(), done[:N], np.zeros(self.D, dtype=bool), stop, failed, sampled_s)


def _count(flags) -> np.ndarray:
    """True flags along the last axis (decode slots): with ``_DECODE_SLOTS`` a multiple of 8
    they are whole 64-bit words, and one popcount over all the words then a sum a row is
    ~4x faster than a short-axis sum of 128 flags (and than a popcount a word at a time)."""
    if _POPCOUNT is None or flags.shape[-1] % 8:
        return flags.sum(axis=-1)
    return _POPCOUNT(flags.view(np.uint64)).sum(axis=-1, dtype=np.int64)   # (uint8 counts: summed as int64)


def _by_machine(machine, bound: int) -> np.ndarray:
    """The stable order that groups ``machine`` ids (0 <= id < ``bound``), each group in its own
    order: a radix sort when the ids fit 16 bits, ~8x faster than sorting float keys."""
    return np.argsort(machine.astype(np.int16 if bound <= np.iinfo(np.int16).max else np.int64), kind="stable")


class _PromptQueues:
    """Every (design, machine)'s FCFS prompt queue and the batches it forms.

    ``W`` is when each machine's queued work ends; a request joins the machine's last
    batch while that batch has not started and has room (``max_batch_tokens``), else
    it opens a new batch behind it. A batch is kept in the row of the request that
    opened it, its leader (``rb`` maps each request to its leader); arrays over
    requests are requests x designs, so the step writes one contiguous row.
    """

    def __init__(self, run: _Run, C: int) -> None:
        D, N = run.D, len(run.a)
        self.run = run
        self.C = C
        self.ND = D                             # columns of the arrays over requests
        self.max_tokens = float(run.cfg.max_batch_tokens)
        self.prompt = run.prompt
        self.rows = np.arange(D)                # the designs simulated: rows of the loop arrays
        self.row_base = self.rows * C           # + machine: flat (design, machine) index into them
        self.cols = np.arange(D)                # and their columns in the arrays over requests
        self.poff = run.poff                    # and their rows of the prompt-time tables
        self.whole = True                       # every design still simulated
        self.joined = False                     # did a request of the last step join a batch (on any design)?
        self.W = np.zeros((D, C))
        self.ob_tok = np.zeros((D, C))          # the last batch of each machine: tokens, start, id
        self.ob_start = np.zeros((D, C))
        self.ob_id = np.zeros((D, C), dtype=np.int64)
        self.bstart = np.zeros((N, D))
        self.bdur = np.zeros((N, D))
        self.bcred = np.zeros((N, D))   # what a riding decode gets back, its own iteration (0: no decode rides)
        self.rb = np.zeros((N, D), dtype=np.int32)
        # flat views for the step's gathers and scatters (indexing a flat view is the cheapest numpy call)
        self.bstart_f, self.bdur_f, self.bcred_f = (x.reshape(-1) for x in (self.bstart, self.bdur, self.bcred))
        self._machine_views()

    def free(self, *names) -> None:
        """Drop these arrays over requests (and their flat views): their memory goes back."""
        for name in names:
            setattr(self, name, None)
            if hasattr(self, name + "_f"):
                setattr(self, name + "_f", None)

    def _machine_views(self) -> None:
        self.W_f, self.ob_tok_f, self.ob_start_f, self.ob_id_f = (
            x.reshape(-1) for x in (self.W, self.ob_tok, self.ob_start, self.ob_id))

    def flat(self, j):
        """Flat indices of machines ``j`` (one per design) into the (designs x machines) arrays."""
        return self.row_base + j

    def join(self, i, t, fj):
        """(machine's last batch's start and tokens, may request i join that batch?) for flat machines ``fj``.

        A batch that starts after ``t`` has tokens and its machine's queue ends after it.
        """
        ostart = self.ob_start_f[fj]
        otok = self.ob_tok_f[fj]
        return ostart, otok, (ostart > t) & (otok + self.prompt[i] <= self.max_tokens)

    def batch_start(self, t, fj, join):
        """When a request's prompt batch would start on flat machines ``fj`` (as ``step``), given its ``join``."""
        ostart, _, joinable = join
        return np.where(joinable, ostart, np.maximum(self.W_f[fj], t))

    def step(self, i, t, j, decodes, on_token=None, credit=None, fj=None, join=None):
        """Queue request i on machine ``j`` (flat index ``fj``, and its ``join``, if known) of each design.

        Returns (batch start, added batch time, new batch?, decodes ride along?, prompt end).
        """
        run = self.run
        s = self.prompt[i]
        if fj is None:
            fj = self.flat(j)
        ostart, otok, joinable = self.join(i, t, fj) if join is None else join
        self.joined = bool(np.count_nonzero(joinable))
        if not self.joined:
            return self._open(i, t, fj, s, decodes, on_token, credit, joinable)
        new_tok = s + otok * joinable
        new_cost, rides = run._batch_cost(new_tok, decodes, self.poff, on_token)
        bid = np.where(joinable, self.ob_id_f[fj], i)
        fb = bid * self.ND + self.cols          # flat (request, design) of each batch's leader
        old_cost = self.bdur_f[fb] * joinable   # a new batch's row is still empty
        # the machine's queue ends with this batch (joined: it grows; new: it starts when the queue ends)
        start = np.where(joinable, ostart, np.maximum(self.W_f[fj], t))
        end = start + new_cost
        self.W_f[fj] = end
        self.bstart_f[fb] = start
        self.bdur_f[fb] = new_cost
        if credit is not None:
            self.bcred_f[fb] = credit * rides if isinstance(credit, np.ndarray) else credit
        self.put(i, (self.rb, bid))
        self.ob_tok_f[fj] = new_tok
        self.ob_start_f[fj] = start
        self.ob_id_f[fj] = bid
        return start, new_cost - old_cost, ~joinable, rides, end

    def _open(self, i, t, fj, s, decodes, on_token, credit, joinable):
        """``step`` where no design joins a batch (most requests of lightly loaded designs): each opens
        one of ``s`` tokens in request i's own row (still empty: no batch time to take back), written
        as a row rather than scattered."""
        new_cost, rides = self.run._batch_cost(s, decodes, self.poff, on_token)
        start = np.maximum(self.W_f[fj], t)
        end = start + new_cost
        self.W_f[fj] = end
        # (a float credit of 0.0 is there already: the request's row is written here first)
        cred = credit * rides if isinstance(credit, np.ndarray) else credit or None
        self.put(i, (self.bstart, start), (self.bdur, new_cost), (self.rb, i))
        if cred is not None:
            self.put(i, (self.bcred, cred))
        self.ob_tok_f[fj] = s
        self.ob_start_f[fj] = start
        self.ob_id_f[fj] = i
        return start, new_cost, ~joinable, rides, end

    def put(self, i, *pairs) -> None:
        """Write request i's row of each (requests x designs array, value per design simulated): the
        whole row while every design is, else the columns of those still simulated (a row, then its
        columns: cheaper than ``[i, cols]``)."""
        if self.whole:
            for arr, value in pairs:
                arr[i] = value
        else:
            for arr, value in pairs:
                arr[i][self.cols] = value

    def compact(self, keep) -> None:
        """Go on simulating only the designs at rows ``keep``."""
        self.cols = self.cols[keep]
        self.rows = np.arange(self.cols.size)
        self.row_base = self.rows * self.C
        self.whole = False
        self.poff = self.poff[keep]
        self.W, self.ob_tok, self.ob_start, self.ob_id = (
            x[keep] for x in (self.W, self.ob_tok, self.ob_start, self.ob_id))
        self._machine_views()

    def ttft(self) -> np.ndarray:
        """Arrival to the end of each request's prompt batch (requests x designs)."""
        at = np.multiply(self.rb, self.rb.shape[1], dtype=np.int64) + np.arange(self.rb.shape[1])   # flat (leader, design)
        return self.bstart.ravel().take(at) + self.bdur.ravel().take(at) - self.run.a[:, None]

    def leaders(self, sl: slice) -> np.ndarray:
        """Requests x designs ``sl``: True where the request opened its batch."""
        return self.rb[:, sl] == np.arange(self.rb.shape[0], dtype=np.int32)[:, None]


class _MachineBusy:
    """The time prompt batches take from the decodes of each (design, machine), vectorized.

    The prompt batches on machines that also decode, of all designs, lie on one axis
    (key = (design x machines + machine) x span + start) with the running sum of what
    they take from decodes, so a decode's end on its machine is two binary searches.
    """

    def __init__(self, bstart, bdur, bcred, leaders, C: int, prompt_machine, token_machine, span: float) -> None:
        """Requests x designs: each batch's start, duration and credit (at its leader request),
        the leaders, each request's prompt and token machine; ``span``: the axis per machine.

        Works on flat (request, design) indices: a count per machine and gathers by index cost
        a fraction of boolean masks and 2-D fancy indexing over these column slices."""
        N, D = prompt_machine.shape
        cols = np.arange(D)[None, :]
        self.C = C
        self.span = span
        pm = (cols * C + prompt_machine).ravel()   # flat (design, machine) of each request's prompt
        tm = (cols * C + token_machine).ravel()    # and of its decode
        ran_prompts = np.bincount(pm, minlength=D * C) > 0
        ran_decodes = np.bincount(tm, minlength=D * C) > 0
        self.tm = tm
        self.mask = ran_prompts.take(tm)       # only these decodes can wait for prompt batches
        batch = np.flatnonzero(np.ravel(leaders) & ran_decodes.take(pm))
        machine = pm.take(batch)
        order = _by_machine(machine, D * C)    # a machine's batches are in time order (FCFS)
        at = batch.take(order)                 # flat (request, design) of each batch, machine by machine
        keys = machine.take(order).astype(np.float64) * self.span + np.ravel(bstart).take(at)
        if np.count_nonzero(keys[1:] < keys[:-1]):   # never seen; sort them if it happens
            o2 = np.argsort(keys, kind="stable")
            at, keys = at[o2], keys[o2]
        self.k_start = keys
        self.k_len = np.ravel(bdur).take(at)
        # what each batch takes from the decodes of its machine: all of it, less one decode
        # iteration in a mixed batch they ride in; and the machine's idle (decode) time before it
        self.eff = np.maximum(self.k_len - np.ravel(bcred).take(at), 0.0)
        self.eff_cum = np.concatenate([[0.0], np.cumsum(self.eff)])
        self.idle_at = self.k_start - self.eff_cum[:-1]

    def delays(self, t1, base):
        """How long each decode (from ``t1``, ``base`` seconds alone) waits for its machine's prompt batches.

        Exact inverse of the machine's idle-time curve (time less the pre-emption of its prompt
        batches, which are disjoint in time): the decode needs ``base`` seconds of the machine
        and waits out every prompt batch run there meanwhile (prompts go first), however many
        come back to back; no fixed-point rounds.
        """
        out = np.zeros(t1.shape)
        mask = self.mask & np.isfinite(t1).ravel()
        if self.k_start.size == 0 or not mask.any():
            return out
        # the queries machine by machine, each machine's in request order (nearly in time order):
        # the binary searches then walk the axis forward (a stable sort of small integers is cheap)
        q = np.flatnonzero(mask)                # flat (request, design) of each query
        machine = self.tm.take(q)
        order = _by_machine(machine, t1.shape[1] * self.C)
        q = q.take(order)
        a = machine.take(order).astype(np.float64) * self.span + np.ravel(t1).take(q)
        work = np.ravel(base).take(q)
        idx = np.searchsorted(self.k_start, a, side="right") - 1
        prev = np.maximum(idx, 0)
        taken = np.where(idx >= 0, self.eff_cum[prev] + np.clip(a - self.k_start[prev], 0.0, self.eff[prev]), 0.0)
        target = a - taken + work               # idle-time coordinate to reach
        k = np.searchsorted(self.idle_at, target, side="left")
        out.ravel()[q] = target + self.eff_cum[k] - a - work   # the end lies in the idle gap before batch k
        return out
