"""The fast simulator: a vectorized queue model that evaluates many designs in one pass.

It walks the request stream once and advances every candidate design at the same
time (numpy arrays over designs x machines), so a batch of designs costs little
more than one. Per design it keeps:

- the prompt pool as a multi-server FCFS queue (Kiefer-Wolfowitz recursion): each
  request joins the machine that frees first; requests queued behind the same busy
  machine share one batch of at most ``max_batch_tokens`` prompt tokens;
- the token pool as a fluid of KV-cache memory: a request holds ``kv(prompt +
  output)`` bytes from its arrival until its last token (the reference scheduler's
  accounting); when the token pool is full the mixed pool borrows prompt machines;
- decoding as ``output - 1`` iterations of the token-phase time at the pool's
  batch size, plus half an iteration to join a running batch, after the KV transfer;
- on baselines, every machine runs both phases: prompt batches are mixed batches
  (1.1x) and a decoding request also waits out every prompt batch that its machine
  runs before its last token.

It is an approximation of the discrete-event rules in ``oracle.py``; benchmarks and
tests measure how close.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cluster import Cluster
from .latency_model import MIXED_BATCH_FACTOR

_BUCKET_S = 0.1        # time resolution of the memory-release ledger
_CHUNK = 256          # designs simulated together (memory grows with designs x requests)
_DECODE_SLOTS = 16
_MAX_DECODES = 4096     # decode batch sizes tabulated for the token-time lookup     # decodes tracked per baseline machine (more only when overloaded)


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
        kv = float(c0.model.kv_bytes_per_token)
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
        self.machines = self.cp + self.ct
        # where in a running iteration each request joins: uniform on (0, 1), low-discrepancy
        self.u = np.modf(0.5 + np.arange(len(self.a)) * 0.6180339887498949)[0]
        # Memory-release ledger over the whole run (designs x time buckets).
        horizon = self.a[-1] + 4.0 * float(self.token_lat.token_time(512)) * self.n.max() + 60.0
        self.nb = int(horizon / _BUCKET_S) + 2

    # -- prompt pool ------------------------------------------------------------------
    def _batch_cost(self, tokens, decodes):
        """Time of a batch of ``tokens`` prompt tokens on a machine with ``decodes`` decoding requests.

        As the machine-level scheduler: prompts first, then as many decodes as fit in
        ``max_batch_tokens`` (one token each); a batch with decodes is a mixed batch.
        Returns (seconds, decodes that ride along).
        """
        ride = np.minimum(decodes, np.maximum(self.cfg.max_batch_tokens - tokens, 0.0))
        ptab = self.ptab_p
        idx = np.minimum((tokens + ride).astype(np.int64), ptab.size - 1)
        return np.where(ride > 0, MIXED_BATCH_FACTOR, 1.0) * ptab[idx], ride

    def _prompt_step(self, rows, W, ob_tok, ob_start, ob_id, nbatch, bstart, btok, bdur, bride, rb,
                     avail, i, t, decodes):
        """Queue request i on the machine of each design that frees first; batch it if possible."""
        D = self.D
        s = self.s[i]
        backlog = np.where(avail, W - t, np.inf)
        j = np.argmin(backlog, axis=1)
        wait = backlog[rows, j]
        idle = wait <= 0.0
        otok = ob_tok[rows, j]
        ostart = ob_start[rows, j]
        joinable = (~idle) & (otok > 0) & (ostart > t) & (otok + s <= self.cfg.max_batch_tokens)
        # cost of the batch on this machine (mixed batches where decodes ride along)
        old_cost = np.where(joinable, self._batch_cost(otok, decodes)[0], 0.0)
        new_tok = np.where(joinable, otok + s, s)
        new_cost, ride = self._batch_cost(new_tok, decodes)
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
        return j, start, new_cost - old_cost, ride > 0, start + new_cost

    def _prompt_state(self):
        D, N, C = self.D, len(self.a), self.C
        W = np.zeros((D, C))
        avail = np.arange(C)[None, :] < self.cp[:, None]
        return dict(
            rows=np.arange(D), W=W, ob_tok=np.zeros((D, C)), ob_start=np.zeros((D, C)),
            ob_id=np.zeros((D, C), dtype=np.int64), nbatch=np.zeros(D, dtype=np.int64),
            bstart=np.zeros((D, N)), btok=np.zeros((D, N)), bdur=np.zeros((D, N)),
            bride=np.zeros((D, N), dtype=bool),
            rb=np.zeros((D, N), dtype=np.int64), avail=avail)

    # -- Splitwise ----------------------------------------------------------------------
    def splitwise(self) -> FluidOutcome:
        D, N = self.D, len(self.a)
        st = self._prompt_state()
        rows = st["rows"]
        cap_t_pool = self.ct * self.cap_t
        occ_t = np.zeros(D)                    # KV bytes booked on the token pool
        occ_m = np.zeros(D)                    # KV bytes booked on borrowed (mixed) machines
        rel_t = np.zeros((D, self.nb))
        rel_m = np.zeros((D, self.nb))
        borrowed = np.zeros(D, dtype=np.int64)
        tau_req = np.zeros((D, N))
        dmach = np.full((D, N), -1, dtype=np.int64)   # borrowed machine a request decodes on
        pmach = np.zeros((D, N), dtype=np.int64)      # prompt machine of each request
        oom = np.zeros(D, dtype=bool)
        last = 0
        ttab_t, ttab_p = self.ttab_t, self.ttab_p
        mixed_on = self.cfg.mixed_pool
        arange_c = np.arange(self.C)[None, :]
        inv_t = 1.0 / (self.mean_mem * np.maximum(self.ct, 1))
        for i in range(N):
            t = self.a[i]
            cur = int(t / _BUCKET_S)
            if cur > last:
                occ_t -= rel_t[:, last:cur].sum(axis=1)
                occ_m -= rel_m[:, last:cur].sum(axis=1)
                last = cur
                if mixed_on:   # borrowed machines go home once their decodes are done
                    borrowed = np.minimum(borrowed, np.ceil(np.maximum(occ_m, 0.0) / self.cap_p - 1e-9).astype(np.int64))
            m = self.mem[i]
            to_token = occ_t + m < cap_t_pool
            if mixed_on:
                to_mixed = ~to_token & (occ_m + m < borrowed * self.cap_p)
                borrow = ~to_token & ~to_mixed & (borrowed < self.cp - 1)
                borrowed += borrow
                to_mixed |= borrow
                to_token |= ~to_mixed     # nothing free: wait for memory on the token pool
            else:
                to_mixed = np.zeros(D, dtype=bool)
            oom |= to_token & (occ_t + m >= cap_t_pool)
            st["avail"] = arange_c < (self.cp - borrowed)[:, None]
            pmach[:, i], _, _, _, ready = self._prompt_step(t=t, i=i, decodes=0.0, **st)
            ready = ready + self.xfer[i]
            # decode: output-1 iterations at the pool's current batch size, after joining a batch
            nd_t = np.clip(occ_t * inv_t, 1, _MAX_DECODES).astype(np.int64)
            nd_m = np.clip(occ_m / (self.mean_mem * np.maximum(borrowed, 1)), 1, _MAX_DECODES).astype(np.int64)
            tau = np.where(to_mixed, ttab_p[nd_m], ttab_t[nd_t])
            tau_req[:, i] = tau
            dmach[:, i] = np.where(to_mixed, self.cp - 1 - i % np.maximum(borrowed, 1), -1)
            end = ready + tau * (self.n[i] - 1.0 + self.u[i])
            over = np.maximum(occ_t + m - cap_t_pool, 0.0)          # wait for memory to free up
            end = end + np.where(to_token & (over > 0), over / np.maximum(cap_t_pool, 1.0) * 1.0, 0.0)
            b = np.minimum((end / _BUCKET_S).astype(np.int64), self.nb - 1)
            occ_t += np.where(to_token, m, 0.0)
            occ_m += np.where(to_mixed, m, 0.0)
            rel_t[rows, b] += np.where(to_token, m, 0.0)
            rel_m[rows, b] += np.where(to_mixed, m, 0.0)
        ttft = self._ttft(st)
        t1 = self.a[None, :] + ttft + self.xfer[None, :]
        base = tau_req * (self.n[None, :] - 1.0 + self.u[None, :])
        t2 = t1 + base
        if np.any(dmach >= 0):
            busy = _MachineBusy(st, self.C, pmach)
            on_mixed = dmach >= 0
            for _ in range(3):
                t2 = t1 + base + busy.between(dmach, t1, t2, credit=tau_req, mask=on_mixed)
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
        K = _DECODE_SLOTS
        dend = np.zeros((D, self.C, K))        # end times of the decodes on each machine
        dtau = np.zeros((D, self.C, K))        # their decode iteration times
        dreq = np.full((D, self.C, K), -1, dtype=np.int64)
        done = np.zeros((D, N + 1))            # last-token times; column N takes empty slots
        tau_req = np.zeros((D, N))
        ttab = self.ttab_p
        tokens_per_s = self.cfg.max_batch_tokens / float(self.prompt_lat.prompt_time(self.cfg.max_batch_tokens))
        only = np.zeros_like(st["avail"])
        for i in range(N):
            t = self.a[i]
            dec = (dend > t).sum(axis=2)                           # decodes per machine
            # JSQ on pending tokens: queued prompt tokens (from the backlog) plus one per decode
            key = np.maximum(st["W"] - t, 0.0) * tokens_per_s + dec
            key = np.where(st["avail"], key, np.inf)
            j = np.argmin(key, axis=1)
            d_j = dec[rows, j].astype(np.float64)
            tau = ttab[np.maximum(dec[rows, j], 1)]
            # a prompt stops a running decode batch at its next iteration boundary
            W = st["W"]
            idle = W[rows, j] <= t
            W[rows, j] = np.where(idle & (d_j > 0), t + self.u[i] * tau, W[rows, j])
            only[:] = False
            only[rows, j] = True
            saved = st["avail"]
            st["avail"] = only
            _, start, delta, ride, ready = self._prompt_step(t=t, i=i, decodes=d_j, **st)
            st["avail"] = saved
            # the machine's running decodes wait out the new batch time
            ends = dend[rows, j]
            fresh = st["ob_tok"][rows, j] == self.s[i]
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
