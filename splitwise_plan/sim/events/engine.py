"""Discrete-event simulator of a Splitwise or baseline cluster: the oracle.

Slow, simple and literal: it follows the rules of the paper's reference simulator
one event at a time (join-the-shortest-queue routing, the mixed pool, FCFS prompt
batches of at most 2048 tokens, continuous token batching bounded by memory,
mixed batching with preemption on baseline and borrowed machines, KV-cache
transfer). The fast fluid simulator is checked against it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from bisect import insort
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from splitwise_plan.sim.cluster import Cluster, Pool
from splitwise_plan.sim.metrics import METRICS, Verdict

if TYPE_CHECKING:
    from splitwise_plan.inputs.workloads import RequestStream

_QUEUED, _RUNNING, _BLOCKED, _DONE = range(4)
_PENDING, _SCHED_MEM = attrgetter("sched_pending"), attrgetter("sched_mem")   # the routers' keys
_PROGRESS_EVERY = 8192  # events between two reports to ``on_arrivals``


def _least_of_all(group, key, need: float):
    """The least-``key`` machine of ``group`` (None if it is empty): every machine holds ``need`` bytes."""
    return min(group, key=key) if group else None


def _least(group, key, need: float):
    """The least-``key`` machine of ``group`` whose KV room holds ``need`` bytes, or None."""
    return min((i for i in group if i.room >= need), key=key, default=None)


@dataclass(frozen=True)
class RequestTimes:
    """Per-request outcome of a simulation, in seconds from each request's arrival."""

    ttft: np.ndarray      # NaN where the prompt phase never finished
    e2e: np.ndarray       # NaN where the request never finished
    busy_s: np.ndarray    # busy seconds of each machine (prompt pool first)
    horizon_s: float      # when the last event happened
    oom: bool = False     # a request never got the KV-cache memory it needs: more than any machine holds, or
                          # memory that waiting transfers hold (a deadlock)
    overloaded: bool = False   # stopped: a prompt waited longer than ``overload_s``; later requests unfinished (NaN)
    failed: bool = False       # stopped: finished requests already break an SLO of the verdict; the rest unfinished


class _Task:
    __slots__ = ("req", "is_prompt", "tpi", "size", "generated", "nprem", "state",
                 "mem", "key", "order")

    def __init__(self, req: "_Req", is_prompt: bool, mem: float) -> None:
        self.req = req
        self.is_prompt = is_prompt
        self.tpi = req.prompt if is_prompt else 1          # tokens per iteration
        self.size = 1 if is_prompt else req.output - 1     # tokens this task generates
        self.generated = 0
        self.nprem = 0
        self.state = _QUEUED
        self.mem = mem
        self.order = 0


class _Req:
    __slots__ = ("rid", "arrival", "prompt", "output", "prompt_task", "token_task",
                 "src", "dst", "memory")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.memory = 0.0


class _Instance:
    """One machine: queues, the running batch and memory, as the reference keeps them."""

    def __init__(self, sim: "_Sim", idx: int, pool: Pool, home: str | None) -> None:
        self.sim = sim
        self.idx = idx
        self.lat = pool.latency
        self.home = home
        self.mixed = False
        self.max_mem = float(pool.instance_hbm_bytes)
        weights = float(sim.cluster.model.weights_bytes)
        self.room = self.max_mem - weights  # KV-cache bytes it can ever hold
        self.mem = weights
        self.sched_mem = weights
        self.sched_pending = 0
        self.pending: list[_Task] = []
        self.pending_prompts: list[_Task] = []
        self.blocked: list[_Task] = []
        self.batch: list[_Task] = []
        self.pool_tasks: dict[int, list[_Task]] = {}
        self.pool_order: list[int] = []                # request ids ordered by arrival
        self.batch_tokens = 0
        self.iter_dur = 0.0
        self.n_contig = 0
        self.run_start = 0.0
        self.paused = False
        self.version = 0
        self.busy = 0.0

    # -- queues ---------------------------------------------------------------
    def _add_pending(self, task: _Task, preempted: bool = False) -> None:
        # placed by binary search on each queued task's preemption count as it is now, as the
        # reference does: counts grow while tasks wait, so the queue is not kept sorted and where
        # a task lands follows the reference's order (most preempted first, then by arrival)
        insort(self.pending, task, key=lambda t: (t.nprem, t.req.arrival))
        if preempted:
            self.blocked.append(task)
        if task.is_prompt:
            self.pending_prompts.append(task)

    def _remove_pending(self, task: _Task) -> None:
        for i, t in enumerate(self.pending):
            if t is task:
                del self.pending[i]
                break
        if task in self.blocked:
            self.blocked.remove(task)
        if task.is_prompt:
            self.pending_prompts.remove(task)

    def task_arrival(self, task: _Task) -> None:
        rid = task.req.rid
        if rid not in self.pool_tasks:
            insort(self.pool_order, rid)
            self.pool_tasks[rid] = [task]
        else:
            self.pool_tasks[rid].append(task)
        self._add_pending(task)
        cfg = self.sim.cfg
        if not self.batch:
            if self.mem + task.mem > self.max_mem:
                return
            self.start_iteration()
            return
        if len(self.batch) < cfg.max_batch_size and self.batch_tokens + task.tpi <= cfg.max_batch_tokens:
            self.pause()
            return
        if task.is_prompt:
            n_token = sum(1 for t in self.batch if not t.is_prompt)
            n_prompt = len(self.batch) - n_token
            if n_prompt < len(self.batch) and self.batch_tokens - n_token + task.tpi <= cfg.max_batch_tokens:
                self.pause()

    def pause(self) -> None:
        """Stop a run of decode iterations at the next iteration boundary."""
        if self.paused or any(t.is_prompt for t in self.batch):
            return
        self.paused = True
        now = self.sim.now
        done = (now - self.run_start) // self.iter_dur
        self.n_contig = int(done) + 1
        self.version += 1
        self.sim.push(self.run_start + self.iter_dur * self.n_contig, self._complete, self.version)

    # -- batching -------------------------------------------------------------
    def _select_batch(self) -> tuple[list[_Task] | None, list[_Task] | None]:
        """The next batch (the reference's rules): (preempted, added), or (None, None) when the
        running batch goes on unchanged because nothing else waits on the machine."""
        cfg = self.sim.cfg
        old = self.batch
        if (not self.pending and not self.pending_prompts and not self.blocked
                and len(self.pool_order) == len(old) and len(old) <= cfg.max_batch_size):
            first, bt = self.pool_tasks, 0
            for t in old:
                if first[t.req.rid][0] is not t:
                    break
                bt += t.tpi
            else:
                if bt <= cfg.max_batch_tokens:   # nothing waits and the batch still fits: it runs on as it is
                    self.batch_tokens = bt
                    return None, None
        # a scan stops when the batch is full or a task's tokens would not fit (a first task always fits)
        cap_n, cap_tok, max_mem = cfg.max_batch_size, cfg.max_batch_tokens, self.max_mem
        new: list[_Task] = []
        in_batch: set[int] = set()
        bt = 0
        memory = self.mem
        for t in self.pending:                         # tasks preempted too often go first
            if t.nprem < cfg.max_preemptions:
                break
            if len(new) == cap_n or (new and bt + t.tpi > cap_tok):
                break
            if t.req.rid in in_batch:
                continue
            if t.state == _BLOCKED:
                new.append(t); in_batch.add(t.req.rid); bt += t.tpi
            elif t.mem + memory <= max_mem:
                new.append(t); in_batch.add(t.req.rid); memory += t.mem; bt += t.tpi
        for t in self.pending_prompts:                  # then prompts, FCFS
            if len(new) == cap_n or (new and bt + t.tpi > cap_tok):
                break
            if t.req.rid in in_batch:
                continue
            if t.mem + memory <= max_mem:
                new.append(t); in_batch.add(t.req.rid); memory += t.mem; bt += t.tpi
            else:
                break
        for t in self.blocked:                          # then preempted decodes
            if len(new) == cap_n or (new and bt + t.tpi > cap_tok):
                break
            if t.req.rid in in_batch:
                continue
            new.append(t); in_batch.add(t.req.rid); bt += t.tpi
        for t in old:                                   # then the running decodes
            if len(new) == cap_n or (new and bt + t.tpi > cap_tok):
                break
            if t.req.rid in in_batch:
                continue
            new.append(t); in_batch.add(t.req.rid); bt += t.tpi
        first = self.pool_tasks
        for rid in self.pool_order:                     # then anything else, oldest first
            if len(new) == cap_n:
                break
            if rid in in_batch:
                continue
            t = first[rid][0]
            if new and bt + t.tpi > cap_tok:
                break
            if t.state == _BLOCKED:
                new.append(t); in_batch.add(rid); bt += t.tpi
            elif t.mem + memory <= max_mem:
                new.append(t); in_batch.add(rid); memory += t.mem; bt += t.tpi
            else:
                break
        self.batch_tokens = bt
        kept, had = set(new), set(old)                  # tasks hash by identity
        return [t for t in old if t not in kept], [t for t in new if t not in had]

    def start_iteration(self) -> None:
        preempted, added = self._select_batch()
        if preempted is not None:   # else the batch runs on unchanged, every task of the machine in it
            for t in preempted:
                t.state = _BLOCKED
                self._leave_batch(t)
                self._add_pending(t, preempted=True)
            for t in added:
                self._remove_pending(t)
                self._enter_batch(t)
            running = set(self.batch)
            for rid in self.pool_order:
                t = self.pool_tasks[rid][0]
                if t not in running:
                    t.nprem += 1
        if not self.batch:
            if not self.pool_order:
                self.sim.notify_free(self)
            return
        n_prompt_tokens = n_decode = 0
        least = None                    # the fewest tokens a task of the batch has left
        for t in self.batch:            # one pass: the batch's shape, and its tasks start running
            if t.is_prompt:
                n_prompt_tokens += t.tpi
            else:
                n_decode += 1
            left = t.size - t.generated
            if least is None or left < least:
                least = left
            if t.state == _QUEUED:
                t.state = _RUNNING
                self.mem += t.mem
                t.req.memory += t.mem
            elif t.state == _BLOCKED:
                t.state = _RUNNING
        self.iter_dur = self.sim.iteration_time(self.lat, n_prompt_tokens, n_decode)
        self.n_contig = 1 if n_prompt_tokens else least
        self.run_start = self.sim.now
        self.paused = False
        self.version += 1
        self.sim.push(self.run_start + self.iter_dur * self.n_contig, self._complete, self.version)

    def _enter_batch(self, t: _Task) -> None:
        if not self.batch:
            self._busy_since = self.sim.now
        self.batch.append(t)

    def _leave_batch(self, t: _Task) -> None:
        self.batch.remove(t)
        if not self.batch:
            self.busy += self.sim.now - self._busy_since

    def _complete(self, version: int) -> None:
        if version != self.version:
            return
        finished = []
        for t in self.batch:
            t.generated += 1 if t.is_prompt else self.n_contig
            if t.generated >= t.size:
                finished.append(t)
        for t in finished:
            t.state = _DONE
            self._leave_batch(t)
            tasks = self.pool_tasks[t.req.rid]
            tasks.remove(t)
            if not tasks:
                del self.pool_tasks[t.req.rid]
                self.pool_order.remove(t.req.rid)
            self.sim.task_done(t, self)
        self.paused = False
        self.start_iteration()

    def free(self, amount: float) -> None:
        self.mem -= amount
        self.sched_mem -= amount

    def flow_done(self) -> None:
        """The reference's notify_flow_completion: memory was freed, maybe start."""
        if not self.pending:
            return
        t = self.pending[0]
        cfg = self.sim.cfg
        if not self.batch:
            if self.mem + t.mem > self.max_mem:
                return
            self.start_iteration()
        elif len(self.batch) < cfg.max_batch_size and self.batch_tokens < cfg.max_batch_tokens:
            self.pause()


class _Sim:
    def __init__(self, cluster: Cluster, overload_s: float = float("inf"), verdict: Verdict | None = None) -> None:
        self.cluster = cluster
        self.overload_s = overload_s
        self.overloaded = False
        self.failed = False     # stopped by the verdict
        # per metric: (SLO index, per-request reference seconds or None, limit) of the verdict's SLOs
        self.judged: dict = {m: [] for m in METRICS}
        self.broken: list = []  # finished requests at or past each SLO's limit
        self.need: list = []    # how many certainly break it
        for k, (metric, ref, limit, need) in enumerate(verdict.slos if verdict is not None else ()):
            self.judged[metric].append((k, None if ref is None else ref.tolist(), limit))
            self.broken.append(0)
            self.need.append(need)
        self.arrived = 0        # requests routed so far
        self.cfg = cluster.scheduler
        self.kv = float(cluster.model.kv_bytes_per_token)
        self.now = 0.0
        self.heap: list = []
        self.counter = itertools.count()
        self.instances: list[_Instance] = []
        home_p = None if cluster.is_baseline else "prompt"
        for _ in range(cluster.prompt.instances):
            self.instances.append(_Instance(self, len(self.instances), cluster.prompt, home_p))
        if cluster.token is not None:
            for _ in range(cluster.token.instances):
                self.instances.append(_Instance(self, len(self.instances), cluster.token, "token"))
        self.prompt_pool = [i for i in self.instances if i.home == "prompt"]
        self.token_pool = [i for i in self.instances if i.home == "token"]
        self.mixed_pool: list[_Instance] = []
        self.oom = False
        self.retries = 0            # transfers waiting for memory: their retries in the event heap
        self.progress_at = 0.0      # when the last event other than such a retry happened
        self.deadlocked = False     # only retries were left, none of which can succeed: the run ends
        # the most KV-cache bytes any machine holds: a request needing more never runs (flagged as oom)
        self.largest_kv = cluster.kv_room
        # and the fewest any machine holds: a request needing more is routed only where it fits
        self.smallest_kv = min(i.room for i in self.instances)
        self._iter_times: dict = {}

    def iteration_time(self, lat, n_prompt_tokens, n_decode) -> float:
        """``lat.iteration_time`` of one batch, memoized: batches repeat."""
        k = (id(lat), n_prompt_tokens, n_decode)
        v = self._iter_times.get(k)
        if v is None:
            v = self._iter_times[k] = lat.iteration_time_at(n_prompt_tokens, n_decode)
        return v

    def push(self, t: float, fn, *args) -> None:
        heapq.heappush(self.heap, (t, next(self.counter), fn, args))

    # -- cluster-level scheduling ------------------------------------------------
    def arrive(self, req: _Req) -> None:
        cfg = self.cfg
        self.arrived += 1
        mem_p = self.kv * (req.prompt + 1)
        mem_t = self.kv * (req.output - 1)
        if mem_p + mem_t > self.largest_kv:   # no machine ever holds it: never admitted (unfinished, and said
            self.oom = True                   # so), so it blocks no queue and holds no memory of the others'
            if self.broken:                   # (and it breaks every SLO of the verdict: it never finishes)
                for metric in METRICS:
                    self._judge(metric, req.rid, math.inf)
            return
        if self.cluster.is_baseline:
            inst = min(self.instances, key=_PENDING)
            self._check_overload(inst)
            inst.sched_pending += req.prompt + (req.output > 1)
            self._chain(req, inst, mem_p, mem_t, add_sched_mem=False)
            return
        # where machines differ in memory and some cannot hold this request, only those that can
        # are candidates (the reference's clusters never meet this: a machine that never holds a
        # prompt's KV cache would block its queue forever behind it)
        least = _least if mem_p + mem_t > self.smallest_kv else _least_of_all
        alone = req.output <= 1     # its prompt makes its only token: no token machine, no transfer
        p_inst = None
        for group in (self.prompt_pool, self.mixed_pool):
            cand = least(group, _PENDING, mem_p)
            if cand is not None:
                long = cand.pending and cand.sched_pending + req.prompt > cfg.prompt_max_pending_tokens
                if not long:
                    p_inst = cand
                    break
        t_inst = None
        for group in (self.token_pool, self.mixed_pool) if not alone else ():
            cand = least(group, _SCHED_MEM, mem_p + mem_t)
            if cand is not None and cand.sched_mem + mem_p + mem_t < cand.max_mem:
                t_inst = cand
                break
        if cfg.mixed_pool:
            if p_inst is None and self.token_pool:
                p_inst = least(self.token_pool, _PENDING, mem_p)
                if p_inst is not None:
                    self.token_pool.remove(p_inst)
                    self.mixed_pool.append(p_inst)
                    p_inst.mixed = True
            if t_inst is None and self.prompt_pool and not alone:
                t_inst = least(self.prompt_pool, _SCHED_MEM, mem_p + mem_t)
                if t_inst is not None:
                    self.prompt_pool.remove(t_inst)
                    self.mixed_pool.append(t_inst)
                    t_inst.mixed = True
        if alone and p_inst is not None:
            t_inst = p_inst
        if p_inst is None or t_inst is None:
            if cfg.mixed_pool:
                every = self.prompt_pool + self.mixed_pool + self.token_pool
                p_inst = t_inst = least(every, _PENDING, mem_p + mem_t) or min(every, key=_PENDING)
            else:   # strict pools: queue on the least loaded machine of each pool
                p_inst = p_inst or min(self.prompt_pool, key=_PENDING)
                t_inst = t_inst or min(self.token_pool, key=_SCHED_MEM)
        self._check_overload(p_inst)
        p_inst.sched_pending += req.prompt
        t_inst.sched_pending += not alone
        if p_inst is t_inst:
            self._chain(req, p_inst, mem_p, mem_t, add_sched_mem=True)
            return
        req.src, req.dst = p_inst, t_inst
        p_inst.sched_mem += mem_p
        t_inst.sched_mem += mem_p + mem_t
        req.prompt_task = _Task(req, True, mem_p)
        req.token_task = _Task(req, False, mem_t)
        self.push(self.now, p_inst.task_arrival, req.prompt_task)

    def _check_overload(self, inst: _Instance) -> None:
        """Overloaded once the oldest prompt waiting on the machine a request is routed to has waited
        longer than ``overload_s`` (the fluid model's rule, seen from the queue's head): the run stops."""
        if inst.pending_prompts and self.now - inst.pending_prompts[0].req.arrival > self.overload_s:
            self.overloaded = True

    def _chain(self, req: _Req, inst: _Instance, mem_p: float, mem_t: float, add_sched_mem: bool) -> None:
        req.src = req.dst = inst
        if add_sched_mem:
            inst.sched_mem += mem_p + mem_t
        req.prompt_task = _Task(req, True, mem_p)
        req.token_task = _Task(req, False, mem_t)
        self.push(self.now, inst.task_arrival, req.prompt_task)
        if req.output > 1:      # else the prompt makes the only token (see task_done)
            self.push(self.now, inst.task_arrival, req.token_task)

    def notify_free(self, inst: _Instance) -> None:
        if inst.mixed:
            inst.mixed = False
            self.mixed_pool.remove(inst)
            (self.prompt_pool if inst.home == "prompt" else self.token_pool).append(inst)

    # -- task and transfer completion ---------------------------------------------
    def task_done(self, task: _Task, inst: _Instance) -> None:
        req = task.req
        if task.is_prompt:
            inst.sched_pending -= req.prompt
            self.ttft[req.rid] = ttft = self.now - req.arrival
            if self.broken:
                self._judge("ttft", req.rid, ttft)
            if req.output <= 1:   # done: routed to this machine alone, with no token task (see arrive)
                self._finish(req)
                inst.free(req.memory)
                req.memory = 0.0
                return
            if req.dst is not inst:
                self.push(self.now, self._flow_arrival, req)
        else:
            inst.sched_pending -= 1
            inst.free(req.memory)
            req.memory = 0.0
            self._finish(req)

    def _finish(self, req: _Req) -> None:
        """Request ``req`` has its last token now: its E2E (and TBT) are final."""
        self.e2e[req.rid] = e2e = self.now - req.arrival
        if self.broken:
            self._judge("e2e", req.rid, e2e)
            self._judge("tbt", req.rid, (e2e - self.ttft[req.rid]) / req.output)

    def _judge(self, metric: str, rid: int, value: float) -> None:
        """Count a final latency against the verdict's SLOs of ``metric``: once as many finished requests
        break one as make its percentile break it whatever the others do, the design has failed."""
        for k, ref, limit in self.judged[metric]:
            if (value if ref is None else value / ref[rid]) >= limit:
                self.broken[k] += 1
                if self.broken[k] >= self.need[k]:
                    self.failed = True

    def _flow_arrival(self, req: _Req) -> None:
        dst = req.dst
        if dst.mem + req.memory <= dst.max_mem:
            dst.mem += req.memory
            size = self.kv * req.prompt
            self.push(self.now + size / self.cfg.effective_bandwidth, self._flow_done, req)
        else:   # it waits, as in the reference (not an overflow: see deadlocked)
            self.retries += 1
            self.push(self.now + self.cfg.flow_retry_s, self._flow_retry, req)
            if len(self.heap) == self.retries and self.now - self.progress_at > self.cfg.flow_retry_s:
                # every pending event is a transfer retrying for memory, each failed since anything
                # else happened: nothing will free memory again (the reservations of transfers fill
                # the token machines their decodes need), so the waiting requests never finish
                self.deadlocked = self.oom = True

    def _flow_retry(self, req: _Req) -> None:
        self.retries -= 1
        self._flow_arrival(req)

    def _flow_done(self, req: _Req) -> None:
        src = req.src
        src.free(req.memory)
        self.push(self.now, req.dst.task_arrival, req.token_task)
        src.flow_done()

    def run(self, stream: RequestStream, until: float | None, on_arrivals=None) -> RequestTimes:
        n = len(stream)
        self.ttft = np.full(n, np.nan)
        self.e2e = np.full(n, np.nan)
        arrivals = stream.arrival_s
        prompts = stream.prompt_tokens
        outputs = stream.output_tokens
        for rid in range(n):
            req = _Req(rid, float(arrivals[rid]), int(prompts[rid]), int(outputs[rid]))
            self.push(req.arrival, self.arrive, req)
        limit = np.inf if until is None else until
        events = 0
        retry = self._flow_retry
        while self.heap and not self.overloaded and not self.deadlocked and not self.failed:
            t, _, fn, args = heapq.heappop(self.heap)
            if t > limit:
                break
            self.now = t
            if fn != retry:
                self.progress_at = t
            fn(*args)
            events += 1
            if on_arrivals is not None and not events % _PROGRESS_EVERY:
                on_arrivals(self.arrived)
        if not self.heap and np.isnan(self.e2e).any():
            # the events ran out with requests unfinished: each waits for KV-cache memory that nothing
            # will free (a machine's queue behind a task it cannot hold), never a silent loss
            self.oom = True
        busy = np.array([i.busy for i in self.instances])
        return RequestTimes(self.ttft, self.e2e, busy, self.now, self.oom, self.overloaded, self.failed)


def simulate_events(cluster: Cluster, stream: RequestStream, until: float | None = None,
                    overload_s: float = float("inf"), on_arrivals=None, verdict: Verdict | None = None) -> RequestTimes:
    """Run the discrete-event simulation of ``cluster`` on ``stream`` to the end (or ``until``), or
    until a prompt has waited longer than ``overload_s`` (then ``overloaded``), or, with a ``verdict``,
    until finished requests already break one of its SLOs (then ``failed``: the verdict is certain,
    and a design that holds its SLOs runs to the end). ``on_arrivals(n)``, if given, hears now and
    then how many requests have arrived (for a progress bar)."""
    return _Sim(cluster, overload_s, verdict).run(stream, until, on_arrivals)
