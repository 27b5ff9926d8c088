"""The fast simulator: a vectorized queue model that evaluates many designs in one pass.

It walks the request stream once and advances every candidate design at the same
time (numpy arrays over designs x machines), so a batch of designs costs little
more than one. Per design it keeps:

- every machine's prompt queue as FCFS (Kiefer-Wolfowitz recursion): requests queued
  behind the same busy machine share one batch of at most ``max_batch_tokens`` tokens;
- every machine's booked KV memory and decodes (the reference scheduler's accounting:
  ``kv(prompt + output)`` from routing to the last token), released through a ring of
  time buckets, and its role: prompt pool, token pool or mixed pool. Routing follows
  the reference's cluster-level rules (JSQ, long prompt queues borrow token machines,
  full token machines borrow prompt machines, borrowed machines go home when empty);
- decoding as ``output - 1`` iterations of the token-phase time at its machine's batch
  size, plus part of an iteration to join a running batch, after the KV transfer;
- mixed batches as the machine-level scheduler builds them: prompts first, then the
  decodes that fit in ``max_batch_tokens`` (1.1x batch time); a decode loses the
  batch time less one iteration when it rides along, all of it when pre-empted. On
  baselines that delay is applied per machine as batches are scheduled, so routing
  sees each machine's true decode count; on Splitwise pools it is added afterwards
  from the prompt batches of each decode's machine (``_MachineBusy``).

It is an approximation of the discrete-event rules in ``oracle.py``; benchmarks and
tests measure how close.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cluster import Cluster
from .latency_model import MIXED_BATCH_FACTOR

_RING_S = 0.25         # time resolution of the per-machine release ring
_RING = 512            # buckets in the ring: releases up to 128 s ahead
_PENDING = 8           # prompts remembered per machine for the queue-length rule
_PROMPT, _TOKEN, _MIXED, _ABSENT = 0, 1, 2, 3   # machine roles
_CHUNK = 256          # designs simulated together (memory grows with designs x requests)
_DECODE_SLOTS = 16      # decodes tracked per baseline machine (more only when overloaded)
_MAX_DECODES = 4096     # decode batch sizes tabulated for the token-time lookup


@dataclass(frozen=True)
class FluidOutcome:
    """Per-request TTFT and E2E (designs x requests) and per-design utilization."""

    ttft: np.ndarray
    e2e: np.ndarray
    utilization: np.ndarray
    oom: np.ndarray


def simulate_fluid(clusters: list[Cluster], stream) -> FluidOutcome:
    """Simulate clusters of one design (differing machine counts) on one stream."""
    first = clusters[0]
    for c in clusters:
        if c.design != first.design or c.model != first.model or c.scheduler != first.scheduler:
            raise ValueError("simulate_fluid batches clusters of one design, model and scheduler")
    outs = []
    for lo in range(0, len(clusters), _CHUNK):   # bounded memory: designs x requests arrays per chunk
        run = _Run(clusters[lo:lo + _CHUNK], stream)
        outs.append(run.baseline() if first.is_baseline else run.splitwise())
    if len(outs) == 1:
        return outs[0]
    return FluidOutcome(*(np.concatenate([getattr(o, f) for o in outs])
                          for f in ("ttft", "e2e", "utilization", "oom")))


class _Run:
    def __init__(self, clusters: list[Cluster], stream) -> None:
        c0 = clusters[0]
        self.cfg = c0.scheduler
        self.prompt_lat = c0.prompt.latency
        self.token_lat = c0.token.latency if c0.token else c0.prompt.latency
        kv = self.kv = float(c0.model.kv_bytes_per_token)
        self.a = np.asarray(stream.arrival_s, dtype=np.float64)
        self.s = np.asarray(stream.prompt_tokens, dtype=np.float64)
        self.n = np.asarray(stream.output_tokens, dtype=np.float64)
        self.mem = kv * (self.s + self.n)                       # KV bytes held while decoding
        self.xfer = kv * self.s / self.cfg.effective_bandwidth  # KV-cache transfer time
        self.D = len(clusters)
        self.cp = np.array([c.prompt.count for c in clusters], dtype=np.int64)
        self.ct = np.array([c.token.count if c.token else 0 for c in clusters], dtype=np.int64)
        self.C = int(self.cp.max())
        weights = float(c0.model.weights_bytes)
        self.cap_p = float(c0.prompt.machine.hbm_bytes) - weights
        self.cap_t = (float(c0.token.machine.hbm_bytes) - weights) if c0.token else self.cap_p
        self.mean_mem = float(self.mem.mean())
        # integer-indexed lookup tables of the latency curves: one gather per use in the hot loop
        top = int(self.s.max()) + self.cfg.max_batch_tokens + self.cfg.max_batch_size + 2
        self.ptab_p = np.asarray(self.prompt_lat.prompt_time(np.arange(top + 1, dtype=np.float64)))
        self.ttab_t = np.asarray(self.token_lat.token_time(np.arange(_MAX_DECODES + 1, dtype=np.float64)))
        self.ttab_p = np.asarray(self.prompt_lat.token_time(np.arange(_MAX_DECODES + 1, dtype=np.float64)))
        same_hw = c0.token is None or c0.token.latency is c0.prompt.latency
        self.ptab_t = None if same_hw else np.asarray(
            self.token_lat.prompt_time(np.arange(top + 1, dtype=np.float64)))
        self.machines = self.cp + self.ct
        # converts a prompt backlog (seconds) to pending tokens for JSQ routing
        self.tokens_per_s = self.cfg.max_batch_tokens / float(self.prompt_lat.prompt_time(self.cfg.max_batch_tokens))
        # where in a running iteration each request joins: uniform on (0, 1), low-discrepancy
        self.u = np.modf(0.5 + np.arange(len(self.a)) * 0.6180339887498949)[0]

    # -- prompt pool ------------------------------------------------------------------
    def _batch_cost(self, tokens, decodes, on_token=None):
        """Time of a batch of ``tokens`` prompt tokens on a machine with ``decodes`` decoding requests.

        As the machine-level scheduler: prompts first, then as many decodes as fit in
        ``max_batch_tokens`` (one token each); a batch with decodes is a mixed batch.
        Returns (seconds, decodes that ride along).
        """
        ride = np.minimum(decodes, np.maximum(self.cfg.max_batch_tokens - tokens, 0.0))
        idx = np.minimum((tokens + ride).astype(np.int64), self.ptab_p.size - 1)
        secs = self.ptab_p[idx]
        if on_token is not None and self.ptab_t is not None:   # a borrowed token machine of other hardware
            secs = np.where(on_token, self.ptab_t[idx], secs)
        return np.where(ride > 0, MIXED_BATCH_FACTOR, 1.0) * secs, ride

    def _prompt_step(self, rows, W, ob_tok, ob_start, ob_id, nbatch, bstart, btok, bdur, bride, rb,
                     i, t, j, decodes, on_token=None):
        """Queue request i on machine ``j`` of each design; join its next batch if it has not started.

        Returns (batch start, added batch time, new batch?, decodes ride along?, prompt end).
        """
        s = self.s[i]
        idle = W[rows, j] <= t
        otok = ob_tok[rows, j]
        ostart = ob_start[rows, j]
        joinable = (~idle) & (otok > 0) & (ostart > t) & (otok + s <= self.cfg.max_batch_tokens)
        # cost of the batch on this machine (mixed batches where decodes ride along)
        old_cost = np.where(joinable, self._batch_cost(otok, decodes, on_token)[0], 0.0)
        new_tok = np.where(joinable, otok + s, s)
        new_cost, ride = self._batch_cost(new_tok, decodes, on_token)
        start = np.where(idle, t, np.where(joinable, ostart, W[rows, j]))
        W[rows, j] = np.where(idle, t, W[rows, j]) + new_cost - old_cost
        bid = np.where(joinable, ob_id[rows, j], nbatch)
        fresh = ~joinable
        nbatch += fresh
        bstart[rows, bid] = start
        btok[rows, bid] = new_tok
        bdur[rows, bid] = new_cost
        bride[rows, bid] = ride > 0
        rb[:, i] = bid
        # the next joinable batch of the machine: only one that has not started yet
        ob_tok[rows, j] = np.where(idle, 0.0, new_tok)
        ob_start[rows, j] = start
        ob_id[rows, j] = bid
        return start, new_cost - old_cost, fresh, ride > 0, start + new_cost

    def _prompt_state(self, C: int | None = None):
        D, N = self.D, len(self.a)
        C = self.C if C is None else C
        W = np.zeros((D, C))
        return dict(
            rows=np.arange(D), W=W, ob_tok=np.zeros((D, C)), ob_start=np.zeros((D, C)),
            ob_id=np.zeros((D, C), dtype=np.int64), nbatch=np.zeros(D, dtype=np.int64),
            bstart=np.zeros((D, N)), btok=np.zeros((D, N)), bdur=np.zeros((D, N)),
            bride=np.zeros((D, N), dtype=bool),
            rb=np.zeros((D, N), dtype=np.int64))

    # -- Splitwise ----------------------------------------------------------------------
    def splitwise(self) -> FluidOutcome:
        """Prompt and token pools with the reference's cluster-level rules, machine by machine.

        Columns are machines: the prompt pool first, then the token pool. Each machine
        has a role (prompt pool, token pool or mixed pool), booked KV memory and booked
        decodes, released through a ring of time buckets. A prompt goes to the prompt
        pool's least-loaded machine unless its queue is long, then to the mixed pool,
        then borrows a token machine; a decode goes to the token machine with the least
        booked memory that fits, then to the mixed pool, then borrows a prompt machine.
        Borrowed machines return to their pool once they have nothing booked. Prompt
        batches on any machine delay the decodes running there (``_MachineBusy``).
        """
        D, N = self.D, len(self.a)
        cfg = self.cfg
        Cp, Ct = self.C, int(self.ct.max())
        M = Cp + Ct
        st = self._prompt_state(M)
        rows = st["rows"]
        W = st["W"]
        col = np.arange(M)[None, :]
        on_token_col = col >= Cp
        exists = np.where(on_token_col, (col - Cp) < self.ct[:, None], col < self.cp[:, None])
        home = np.where(on_token_col, _TOKEN, _PROMPT) + np.zeros((D, 1), dtype=np.int8)
        role = np.where(exists, home, _ABSENT).astype(np.int8)
        cap = np.where(on_token_col, self.cap_t, self.cap_p)[0]
        smem = np.zeros((D, M))                 # booked KV bytes (the reference's sched_memory)
        ndec = np.zeros((D, M))                 # booked decodes
        L = _RING
        rel_mem = np.zeros((D, M, L), dtype=np.float32)
        rel_dec = np.zeros((D, M, L), dtype=np.float32)
        R = _PENDING
        q_start = np.zeros((D, M, R))           # the last prompts queued on each machine
        q_end = np.zeros((D, M, R))
        q_tok = np.zeros((D, M, R))
        q_ptr = np.zeros((D, M), dtype=np.int64)
        tau_req = np.zeros((D, N))
        dmach = np.zeros((D, N), dtype=np.int64)
        pmach = np.zeros((D, N), dtype=np.int64)
        oom = np.zeros(D, dtype=bool)
        ttab_t, ttab_p = self.ttab_t, self.ttab_p
        mixed_on = cfg.mixed_pool
        last = 0
        inf = np.inf

        def pick(pen, key):
            """Least ``key`` among the machines whose penalty is 0 (the others have inf)."""
            j = np.argmin(key + pen, axis=1)
            return j, pen[rows, j] == 0.0

        def penalties():
            return tuple(np.where(role == r, 0.0, inf) for r in (_PROMPT, _TOKEN, _MIXED))

        pen_p, pen_t, pen_m = penalties()
        any_mixed = False

        def lend(where_, j):
            """Move machine j of the designs in ``where_`` to the mixed pool."""
            r, c = rows[where_], j[where_]
            role[r, c] = _MIXED
            pen_p[r, c] = inf
            pen_t[r, c] = inf
            pen_m[r, c] = 0.0

        def borrow(pen, key, j, ok):
            """Where ``ok`` fails, lend the pool's least-``key`` machine to the mixed pool and use it."""
            nonlocal any_mixed
            bj, ok_b = pick(pen, key)
            ok_b &= ~ok
            if ok_b.any():
                lend(ok_b, bj)
                any_mixed = True
            return np.where(ok_b, bj, j), ok | ok_b

        def long_queue(j, s):
            if not (W[rows, j] > t).any():   # no machine busy: no queue anywhere
                return np.zeros(D, dtype=bool)
            pending = (q_tok[rows, j] * (q_end[rows, j] > t)).sum(axis=1)
            queued = (q_start[rows, j] > t).any(axis=1)
            return queued & (pending + s > cfg.prompt_max_pending_tokens)

        def book(j, amount, count, when):
            b = np.minimum((when / _RING_S).astype(np.int64), last + L - 1) % L
            smem[rows, j] += amount
            rel_mem[rows, j, b] += amount
            if count:
                ndec[rows, j] += 1.0
                rel_dec[rows, j, b] += 1.0

        for i in range(N):
            t = self.a[i]
            s, m = self.s[i], self.mem[i]
            cur = int(t / _RING_S)
            if cur > last:
                idx = np.arange(last, cur) % L
                smem -= rel_mem[:, :, idx].sum(axis=2)
                ndec -= rel_dec[:, :, idx].sum(axis=2)
                rel_mem[:, :, idx] = 0.0
                rel_dec[:, :, idx] = 0.0
                last = cur
                if mixed_on:   # a borrowed machine goes home once nothing is booked on it
                    idle = (role == _MIXED) & (ndec < 0.5) & (W <= t)
                    if idle.any():
                        role = np.where(idle, home, role)
                        pen_p, pen_t, pen_m = penalties()
                        any_mixed = bool((role == _MIXED).any())
            # prompt machine: the prompt pool's least loaded unless its queue is long, then the mixed
            # pool (least loaded: the machine that frees first, one token per booked decode)
            key = np.maximum(W - t, 0.0) * self.tokens_per_s + ndec
            pj, ok_p = pick(pen_p, key)
            ok_p &= ~long_queue(pj, s)
            # token machine: least booked memory that still fits, token pool then mixed pool
            tj, ok_t = pick(pen_t, smem)
            ok_t &= smem[rows, tj] + m < cap[tj]
            if mixed_on:
                if any_mixed:
                    need = ~ok_p
                    if need.any():
                        mj, ok_m = pick(pen_m, key)
                        ok_m &= ~long_queue(mj, s) & need
                        pj = np.where(ok_m, mj, pj)
                        ok_p |= ok_m
                    need = ~ok_t
                    if need.any():
                        mj, ok_m = pick(pen_m, smem)
                        ok_m &= (smem[rows, mj] + m < cap[mj]) & need
                        tj = np.where(ok_m, mj, tj)
                        ok_t |= ok_m
                if not ok_p.all():   # borrow a token machine for prompts
                    pj, ok_p = borrow(pen_t, ndec, pj, ok_p)
                if not ok_t.all():   # borrow a prompt machine for decodes
                    tj, ok_t = borrow(pen_p, smem, tj, ok_t)
                stuck = ~(ok_p & ok_t)
                if stuck.any():   # nowhere to go: prompt and decode on the least loaded machine
                    fj, _ = pick(np.where(exists, 0.0, inf), key)
                    pj = np.where(stuck, fj, pj)
                    tj = np.where(stuck, fj, tj)
                    oom |= stuck & (smem[rows, fj] + m >= cap[fj])
            else:   # strict pools: wait for memory on the token pool
                oom |= ~ok_t
            same = pj == tj
            # the prompt, on its machine's queue; it stops a running decode batch at the next iteration
            d_p = ndec[rows, pj]
            tok_p = pj >= Cp
            tau_p = np.where(tok_p, ttab_t[np.clip(d_p, 1, _MAX_DECODES).astype(np.int64)],
                             ttab_p[np.clip(d_p, 1, _MAX_DECODES).astype(np.int64)])
            W[rows, pj] = np.where((W[rows, pj] <= t) & (d_p > 0), t + self.u[i] * tau_p, W[rows, pj])
            start, _, _, _, end_p = self._prompt_step(t=t, i=i, decodes=d_p, on_token=tok_p, j=pj, **st)
            k = q_ptr[rows, pj]
            q_start[rows, pj, k] = start
            q_end[rows, pj, k] = end_p
            q_tok[rows, pj, k] = s
            q_ptr[rows, pj] = (k + 1) % R
            ready = end_p + np.where(same, 0.0, self.xfer[i])
            # the decode: output-1 iterations at its machine's batch size, after joining a batch
            nd = np.clip(ndec[rows, tj] + 1.0, 1, _MAX_DECODES).astype(np.int64)
            tau = np.where(tj >= Cp, ttab_t[nd], ttab_p[nd])
            end = ready + tau * (self.n[i] - 1.0 + self.u[i])
            book(pj, np.where(same, 0.0, self.kv * (s + 1.0)), False, ready)   # freed after the transfer
            book(tj, m, True, end)
            tau_req[:, i] = tau
            pmach[:, i] = pj
            dmach[:, i] = tj
        ttft = self._ttft(st)
        t1 = self.a[None, :] + ttft + np.where(pmach == dmach, 0.0, self.xfer[None, :])
        base = tau_req * (self.n[None, :] - 1.0 + self.u[None, :])
        busy = _MachineBusy(st, M, pmach)
        ran_prompts = np.zeros((D, M), dtype=bool)
        ran_prompts[rows[:, None], pmach] = True
        hit = ran_prompts[rows[:, None], dmach]     # only these decodes can wait for prompt batches
        t2 = t1 + base
        for _ in range(3):   # a decode also waits out the prompt batches of its machine
            t2 = t1 + base + busy.between(dmach, t1, t2, credit=tau_req, mask=hit)
        e2e = t2 - self.a[None, :]
        util = self._utilization(st, tau_req, e2e)
        return FluidOutcome(ttft, e2e, util, oom)

    def _ttft(self, st) -> np.ndarray:
        rows = st["rows"][:, None]
        rb = st["rb"]
        return st["bstart"][rows, rb] + st["bdur"][rows, rb] - self.a[None, :]

    def _utilization(self, st, tau_req, e2e) -> np.ndarray:
        horizon = np.maximum(np.nanmax(self.a[None, :] + e2e, axis=1), 1e-9)
        prompt_busy = st["bdur"].sum(axis=1)
        # decode busy time: iterations of the pool, shared by the batch
        decode_busy = np.minimum((tau_req * (self.n[None, :] - 1)).sum(axis=1) / 32.0,
                                 np.maximum(self.ct, 1) * horizon)
        return np.clip((prompt_busy + decode_busy) / (self.machines * horizon), 0.0, 1.0)

    # -- baselines ----------------------------------------------------------------------
    def baseline(self) -> FluidOutcome:
        """Every machine runs both phases; decodes are tracked per machine (``_DECODE_SLOTS`` each).

        Each prompt batch scheduled on a machine delays the decodes running there at its
        start, as it happens: by the batch time less one decode iteration when they ride
        along in the mixed batch, by the whole batch time when the prompt leaves them no
        room. So the JSQ routing sees each machine's true decode count.
        """
        D, N = self.D, len(self.a)
        st = self._prompt_state()
        rows = st["rows"]
        present = np.arange(self.C)[None, :] < self.cp[:, None]   # machines of each design
        K = _DECODE_SLOTS
        dend = np.zeros((D, self.C, K))        # end times of the decodes on each machine
        dtau = np.zeros((D, self.C, K))        # their decode iteration times
        dreq = np.full((D, self.C, K), -1, dtype=np.int64)
        done = np.zeros((D, N + 1))            # last-token times; column N takes empty slots
        tau_req = np.zeros((D, N))
        ttab = self.ttab_p
        for i in range(N):
            t = self.a[i]
            dec = (dend > t).sum(axis=2)                           # decodes per machine
            # JSQ on pending tokens: queued prompt tokens (from the backlog) plus one per decode
            key = np.maximum(st["W"] - t, 0.0) * self.tokens_per_s + dec
            key = np.where(present, key, np.inf)
            j = np.argmin(key, axis=1)
            d_j = dec[rows, j].astype(np.float64)
            tau = ttab[np.maximum(dec[rows, j], 1)]
            # a prompt stops a running decode batch at its next iteration boundary
            W = st["W"]
            idle = W[rows, j] <= t
            W[rows, j] = np.where(idle & (d_j > 0), t + self.u[i] * tau, W[rows, j])
            start, delta, fresh, ride, ready = self._prompt_step(t=t, i=i, decodes=d_j, j=j, **st)
            # the machine's running decodes wait out the new batch time
            ends = dend[rows, j]
            loss = delta[:, None] - np.where((fresh & ride)[:, None], dtau[rows, j], 0.0)
            dend[rows, j] = ends + np.where(ends > start[:, None], np.maximum(loss, 0.0), 0.0)
            tau_req[:, i] = tau
            slot = np.argmin(dend[rows, j], axis=1)
            old = dreq[rows, j, slot]
            done[rows, np.where(old >= 0, old, N)] = dend[rows, j, slot]
            dend[rows, j, slot] = ready + tau * (self.n[i] - 1.0)   # decoding starts with the next iteration
            dtau[rows, j, slot] = tau
            dreq[rows, j, slot] = i
        live = dreq >= 0
        done[np.broadcast_to(rows[:, None, None], dreq.shape)[live], dreq[live]] = dend[live]
        ttft = self._ttft(st)
        e2e = done[:, :N] - self.a[None, :]
        util = self._utilization(st, tau_req, e2e)
        return FluidOutcome(ttft, e2e, util, np.zeros(D, dtype=bool))


class _MachineBusy:
    """Prompt-batch busy time of each (design, machine) between two instants, vectorized."""

    def __init__(self, st, C: int, prompt_machine) -> None:
        nbatch = st["nbatch"]
        self.C = C
        self.span = float(np.max(st["bstart"]) + np.max(st["bdur"]) + 10.0)
        valid = np.arange(st["bstart"].shape[1])[None, :] < nbatch[:, None]
        self.valid = valid
        self.st = st
        self.build(prompt_machine)

    def build(self, machine) -> None:
        """Index the batches by (design, machine, start); ``machine`` is each request's prompt machine."""
        st = self.st
        D, N = machine.shape
        rows = np.arange(D)[:, None]
        bm = np.full(st["bstart"].shape, -1, dtype=np.int64)
        bm[rows, st["rb"]] = machine
        ok = self.valid & (bm >= 0)
        d_idx = np.broadcast_to(np.arange(D)[:, None], bm.shape)[ok]
        key_base = (d_idx * self.C + bm[ok]).astype(np.float64) * self.span
        starts = st["bstart"][ok]
        durs = st["bdur"][ok]
        order = np.argsort(key_base + starts, kind="stable")
        self.k_start = (key_base + starts)[order]
        self.k_end = (key_base + starts + durs)[order]
        self.cum = np.concatenate([[0.0], np.cumsum(durs[order])])
        self.cum_ride = np.concatenate([[0], np.cumsum(st["bride"][ok][order])])

    def _cum_at(self, key):
        """Busy time of the machine before absolute key (machine offset + time)."""
        idx = np.searchsorted(self.k_start, key, side="right")
        prev = np.maximum(idx - 1, 0)
        partial = np.clip(key - self.k_start[prev], 0.0, self.k_end[prev] - self.k_start[prev])
        return np.where(idx > 0, self.cum[prev] + partial, 0.0)

    def _before(self, a, b):
        return self._cum_at(b) - self._cum_at(a)

    def between(self, machine, t1, t2, credit=0.0, mask=None):
        """Busy time of each request's machine in [t1, t2], less ``credit`` per mixed batch begun in it.

        A decoding request that rides in a mixed batch still gets its token, so it loses
        only the batch time beyond one decode iteration (``credit``); a prompt batch with
        no room for decodes pre-empts them for its whole length. Only entries where
        ``mask`` holds are computed; the others are 0.
        """
        mask = np.ones(machine.shape, dtype=bool) if mask is None else mask
        D = machine.shape[0]
        base = ((np.arange(D)[:, None] * self.C + machine).astype(np.float64) * self.span)[mask]
        a, b = base + t1[mask], base + t2[mask]
        busy = self._before(a, b)
        begun = self.cum_ride[np.searchsorted(self.k_start, b)] - self.cum_ride[np.searchsorted(self.k_start, a)]
        out = np.zeros(machine.shape)
        credit = np.broadcast_to(credit, machine.shape)[mask]
        out[mask] = np.maximum(busy - credit * begun, 0.0)
        return out
