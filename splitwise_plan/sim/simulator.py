"""Simulate cluster designs on a request stream: the nine SLO percentiles, cost and power.

``Simulator`` binds the inputs (stream, model, profiles, machines, SLOs) once and
evaluates designs with one of two methods:

- ``"fluid"``: the fluid model (:mod:`splitwise_plan.sim.fluid`), fast: each machine's batches as a fluid;
- ``"events"``: the discrete-event simulator (:mod:`splitwise_plan.sim.events`, also called the oracle), literal.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import signal
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np

from splitwise_plan.errors import SplitwisePlanError, by_name, choices, whole_number
from splitwise_plan.inputs.designs import Design, get_design, parse_tp, pool_size
from splitwise_plan.inputs.machines import BUILTIN_MACHINES, Machine, with_short_names
from splitwise_plan.inputs.models import ModelSpec, get_model
from splitwise_plan.inputs.slos import SLOSet, load_slos
from splitwise_plan.inputs.workloads import RequestStream
from splitwise_plan.perf.latency_model import reference_latencies
from splitwise_plan.perf.profiles import ProfileSet
from splitwise_plan.perf.sources import for_requests, reference_latency, resolve_stack, sourced_latency
from splitwise_plan.sim.cluster import Cluster, Pool, SchedulerConfig, instance_layout
from splitwise_plan.sim.metrics import PERCENTILES, Verdict, percentiles, request_latencies
from splitwise_plan.sim.records import from_json, to_json

METHODS = ("fluid", "events")
_WORKER_MEMORY = 250 * 2**20      # bytes a worker process takes (Python, numpy, the stream, a design's run)
_WORKER_START_S = 0.4             # seconds to start a worker: a run shorter than a few of these stays in-process
_FLUID_S_PER_REQUEST = 2e-6       # CPU seconds the fluid model spends per request and design (70 req/s of coding)
_FLUID_PART = 16                  # designs the fluid model runs between two progress reports
# Where a token instance holds fewer than this many of the stream's mean requests' KV caches (Llama2-70B at
# TP2: about 7 of coding, 10 of conversation; every other shipped model, TP and workload: 38 or more), decodes
# spill onto borrowed prompt machines and the fluid model's borrowing can run away: it can read a Splitwise
# design's SLOs by half again or more (docs/simulators.md, "Known limits of the fluid model")
FEW_CACHES = 20
# Where a stream's busiest 10 s arrive at this many times its mean rate or more (RequestStream.burst: the
# audit's bursty streams read 2.4-9.0x; its Poisson ones, 10-200 req/s, peak at 1.04-1.27x, which it reads as
# chance, 1.0), the fluid model places the longest prompts of a burst otherwise than the reference, and agrees
# on pass/fail near the frontiers less often (README, "Known limits of the fluid model")
BURST = 2.0


def fluid_available() -> bool:
    """True when the fast fluid simulator (``splitwise_plan.sim.fluid``) is importable."""
    try:
        from splitwise_plan.sim.fluid import flow as fluid  # noqa: F401
    except ImportError:
        return False
    return True


def cpu_cores() -> int:
    """The cores this process may run on: "one worker per core"."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# what a terminal sends the whole process group: Ctrl-C, and SIGHUP when it closes
_GROUP_SIGNALS = {signal.SIGINT} | ({signal.SIGHUP} if hasattr(signal, "SIGHUP") else set())


@contextmanager
def starting_workers():
    """Start worker processes inside this block: they are born with SIGINT and SIGHUP blocked and keep them so.

    A terminal signals the whole process group: a Ctrl-C that hit a worker while its Python started
    printed "Fatal Python error" (a traceback, when later), and a SIGHUP killed loky's resource
    trackers (9 tracebacks as they were relaunched). The run stops its workers itself (joblib ends
    them on a Ctrl-C, the CLI on SIGTERM or SIGHUP). A signal meanwhile waits for the block's end.
    """
    if not hasattr(signal, "pthread_sigmask"):   # not POSIX: as before
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
    try:
        # loky starts its resource trackers beside the first worker, and then unblocks SIGINT
        # (SIG_UNBLOCK, not the mask as it was): started first, under the block, and blocked again
        try:
            from multiprocessing import resource_tracker

            from joblib.externals.loky.backend import resource_tracker as loky_tracker
            for tracker in (resource_tracker, loky_tracker):
                tracker.ensure_running()
        except (ImportError, AttributeError, OSError):   # other versions: workers may still see a Ctrl-C
            pass
        signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# the columns of a flat row around its percentiles (see SimulationResult.flat_columns)
_FLAT_HEAD = ("design", "model", "prompt_machines", "token_machines", "machines", "cost", "power", "slo_met",
              "requests", "completed")
_FLAT_TAIL = ("tightest_slo", "tightest_ratio", "utilization", "prompt_utilization", "token_utilization", "oom",
              "overloaded", "stopped_early", "method")


@dataclass(frozen=True)
class SimulationResult:
    """What one design point gives on one request stream."""

    design: str
    model: str
    prompt_machines: int
    token_machines: int
    requests: int
    completed: int
    latency_s: dict = field(repr=False)      # {"ttft": {50: s, 90: s, 99: s}, "tbt": ..., "e2e": ...}
    slowdown: dict = field(repr=False)       # same shape, slowdown against the reference machine
    slo_met: bool
    violations: tuple = ()
    tightest: dict = field(default_factory=dict, repr=False)
    cost: float = 0.0
    power: float = 0.0
    utilization: float = 0.0                 # mean busy fraction of the machines
    prompt_utilization: float = math.nan     # of the prompt pool's machines (a baseline's: all of them)
    token_utilization: float = math.nan      # of the token pool's (NaN for a baseline)
    oom: bool = False                        # a request never got the KV-cache memory it needs (it is unfinished)
    overloaded: bool = False                 # queues grew without bound: the simulation stopped early
    method: str = "fluid"
    stopped_early: bool = False              # stopped once an SLO could no longer hold (``Simulator(stop_early=True)``)
    seed: int | None = field(default=None, compare=False)   # the stream's seed, where the caller tells it (a plan's)

    @property
    def machines(self) -> int:
        return self.prompt_machines + self.token_machines

    @property
    def tightest_slo(self) -> str | None:
        """The tightest SLO as reports name it (``tbt_p90``), or None where there is none."""
        return f"{self.tightest['metric']}_p{self.tightest['percentile']:g}" if self.tightest else None

    def __eq__(self, other) -> bool:
        """Equal results (NaN equals NaN here: a baseline has no token pool to be busy)."""
        if not isinstance(other, SimulationResult):
            return NotImplemented
        return self.to_dict() == other.to_dict() and self.tightest == other.tightest

    __hash__ = None   # a result holds dicts

    def to_record(self) -> dict:
        """The whole result as JSON-able data, every field exact (a checkpoint's line, a stored trial)."""
        return {"type": "SimulationResult",
                "fields": {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}}

    @classmethod
    def from_record(cls, record: dict) -> "SimulationResult":
        """The inverse of :meth:`to_record` (a ``TypeError`` for a record of something else)."""
        if record.get("type") != "SimulationResult":
            raise TypeError("not a simulation result's record")
        values = {k: from_json(v) for k, v in record["fields"].items()}
        values["violations"] = tuple(values.get("violations") or ())
        return cls(**values)

    def to_dict(self) -> dict:
        """The stable JSON schema of ``splitwise-plan simulate --json``."""
        def pcts(d):
            return {m: {f"p{p:g}": _num(v) for p, v in d[m].items()} for m in d}
        return {
            "design": self.design, "model": self.model,
            "prompt_machines": self.prompt_machines, "token_machines": self.token_machines,
            "machines": self.machines, "requests": self.requests, "completed": self.completed,
            "latency_s": pcts(self.latency_s), "slowdown": pcts(self.slowdown),
            "slo": {"met": self.slo_met, "violations": [
                {k: (_num(v) if isinstance(v, float) else v) for k, v in viol.items()}
                for viol in self.violations]},
            "cost": round(self.cost, 6), "power": round(self.power, 6),
            "utilization": round(self.utilization, 6),
            "pool_utilization": {"prompt": _num(round(self.prompt_utilization, 6)),
                                 "token": _num(round(self.token_utilization, 6))},
            "oom": self.oom, "overloaded": self.overloaded,
            "stopped_early": self.stopped_early, "method": self.method,
        }

    def flat(self) -> dict:
        """One flat row for CSV reports, its keys in the order of :meth:`flat_columns`."""
        row = dict(zip(_FLAT_HEAD, (self.design, self.model, self.prompt_machines, self.token_machines,
                                    self.machines, round(self.cost, 6), round(self.power, 6), self.slo_met,
                                    self.requests, self.completed)))
        for kind, d in (("s", self.latency_s), ("slowdown", self.slowdown)):
            for m, by_p in d.items():
                for p, v in by_p.items():
                    row[f"{m}_p{p:g}_{kind}"] = float(v)
        if self.tightest:
            row["tightest_slo"] = self.tightest_slo
            row["tightest_ratio"] = float(self.tightest["ratio"])
        row.update(zip(_FLAT_TAIL[2:], (self.utilization, self.prompt_utilization, self.token_utilization,
                                        self.oom, self.overloaded, self.stopped_early, self.method)))
        return row

    @staticmethod
    def flat_columns(percentiles=PERCENTILES) -> list[str]:
        """The keys a :meth:`flat` row may have, in order, with these percentiles of each metric (a row
        lacks the tightest SLO's two where there is none)."""
        from splitwise_plan.sim.metrics import METRICS
        lat = [f"{m}_p{p:g}_{kind}" for kind in ("s", "slowdown") for m in METRICS for p in percentiles]
        return [*_FLAT_HEAD, *lat, *_FLAT_TAIL]


def overload_wait(slos: SLOSet, reference) -> float:
    """A queueing wait far past every TTFT and E2E limit: a design that makes a request wait longer is overloaded.

    Twice the largest such limit in seconds (a slowdown limit times the median request's
    uncontended latency), and at least 30 s.
    """
    r_ttft, _, r_e2e = reference
    limits = [s.limit * (1.0 if s.unit == "seconds" else float(np.median(r_ttft if s.metric == "ttft" else r_e2e)))
              for s in slos if s.metric in ("ttft", "e2e")]
    return max([30.0] + [2.0 * x for x in limits])


def _num(v):
    v = float(v)
    return v if math.isfinite(v) else None


def _check_method(method) -> str:
    """``method`` if it names a simulator, else a user error."""
    if not isinstance(method, str) or method.lower() not in METHODS:
        raise SplitwisePlanError(f"simulation method {method!r} is unknown; valid: {choices(METHODS)}")
    return method.lower()


def _share(parts: list, run_here, submit, procs: int, report) -> None:
    """Run ``parts`` in this process and ``procs - 1`` worker processes, and ``report(part, results)`` here as
    each is done.

    This process works too, not waiting idle for its workers: one process fewer to start and to
    hold (the 39x39 sweep on 2 cores: 0.95x to 1.0x the wall time, 6-8% less peak memory). The
    parts are dealt out there and back (this process, the workers, the workers again, this
    process...): the costliest first pass and the cheapest last go to the process that starts
    at once. ``submit(executor, part)`` gives a worker its part. A stop (Ctrl-C, an error) first
    reports the parts the workers have finished, so that they are kept, then ends the workers.
    """
    if procs <= 1:
        for part in parts:
            report(part, run_here(part))
        return
    from joblib.externals.loky import get_reusable_executor
    turn = [k % (2 * procs) for k in range(len(parts))]
    turn = [k if k < procs else 2 * procs - 1 - k for k in turn]   # 0: this process
    with starting_workers():   # (the submits start them)
        executor = get_reusable_executor(max_workers=procs - 1)
        theirs = [(part, submit(executor, part)) for part, k in zip(parts, turn) if k]

    def collect(wait: bool) -> None:
        for entry in list(theirs):
            if wait or entry[1].done():
                out = entry[1].result()
                theirs.remove(entry)   # (before its report: a stop during it does not report it twice)
                report(entry[0], out)

    try:
        for part, k in zip(parts, turn):
            if not k:
                report(part, run_here(part))
                collect(wait=False)
        collect(wait=True)
    except BaseException:
        finished = []
        try:
            for part, job in theirs:   # what the workers have finished is kept
                if job.done() and not job.cancelled() and job.exception() is None:
                    finished.append((part, job.result()))
                else:
                    job.cancel()
        finally:   # the workers end first: a second stop (Ctrl-C twice) while the results are kept ends none late
            try:
                executor.shutdown(wait=False, kill_workers=True)
            except Exception:   # (workers a stop signal has ended already)
                pass
        for part, out in finished:
            report(part, out)
        raise


def _point(pt, least: int, most: int, shape: str) -> tuple:
    """A design point as a tuple of ``least`` to ``most`` items, else a user error showing its ``shape``."""
    try:
        items = tuple(pt)
    except TypeError:
        items = None
    if items is None or not least <= len(items) <= most:
        raise SplitwisePlanError(f"a design point is {shape}, got {pt!r}")
    return items


class Simulator:
    """Evaluates designs of one model on one request stream against one SLO set."""

    def __init__(self, stream: RequestStream, model: str | ModelSpec = "bloom-176b", *,
                 tensor_parallel: int = 8, profiles: ProfileSet | None = None,
                 machines: dict[str, Machine] | None = None, slos: SLOSet | None = None,
                 scheduler: SchedulerConfig | None = None, method: str = "fluid",
                 stop_early: bool = False, threads: int = 1, stack=None, slower: Mapping | None = None) -> None:
        method = _check_method(method)
        model = get_model(model)   # BLOOM-176B is bloom-176b; a config.json's path is its architecture
        if machines is not None and (not isinstance(machines, Mapping)
                                     or not all(isinstance(m, Machine) for m in machines.values())):
            raise SplitwisePlanError(f"machines must map names to Machine (see load_machines), got {machines!r:.80}")
        for value, kind, what in ((stream, RequestStream, "stream"), (profiles, ProfileSet, "profiles"),
                                  (slos, SLOSet, "slos"), (scheduler, SchedulerConfig, "scheduler")):
            if not isinstance(value, kind) and (value is not None or what == "stream"):
                raise SplitwisePlanError(f"{what} must be a {kind.__name__} (see its load function), got {value!r:.80}")
        if len(stream) == 0:
            raise SplitwisePlanError("the request stream is empty")
        self.stream = stream
        self.model: ModelSpec = model
        self.profiles = profiles if profiles is not None else ProfileSet.load()
        # the serving stack of estimated latencies (None or "auto": the plan's rule, see resolve_stack), its decodes
        # at the stream's context
        self.stack = for_requests(resolve_stack(stack, self.profiles, model)[0], stream)
        #: each pool's tensor parallelism (the prompt pool's, the token pool's) where a design fixes none
        self.pool_tps = parse_tp(tensor_parallel, "tensor_parallel")
        self.tensor_parallel = self.pool_tps[0]
        self.machines = with_short_names(dict(machines) if machines is not None else dict(BUILTIN_MACHINES))
        self.slos = slos if slos is not None else load_slos()
        self.scheduler = scheduler or SchedulerConfig()
        self.method = method
        #: stop a design once an SLO can no longer hold (its verdict is then final, its percentiles count the
        #: unfinished requests as +inf); designs that pass are unchanged. The fluid model stops Splitwise
        #: designs (on lower bounds of the latencies), the oracle any design (on its finished requests')
        if not isinstance(stop_early, (bool, np.bool_)):   # "no" would be True
            raise SplitwisePlanError(f"stop_early must be True or False, got {stop_early!r}")
        self.stop_early = bool(stop_early)
        #: designs the fluid model runs side by side in a batch (its compiled loop releases the GIL)
        self.threads = whole_number(threads, "threads", 1, 1024)
        #: {GPU (hardware): (prompt, decode)}: how much slower than its source each phase of that GPU runs (0.2: 20%;
        #: a latency error band, see planning/sureness.py); the SLOs' reference keeps its own latencies
        self.slower = {str(k).lower(): tuple(map(float, v)) for k, v in (slower or {}).items()}
        self._latency: dict[str, object] = {}
        self.pcts = tuple(sorted(set(PERCENTILES).union(*self.slos.percentiles().values())))
        ref = reference_latency(self.slos, self.profiles, self.model, self.machines, self.stack)
        self.reference_source = ref.detail   # the reference's latencies: measured, or estimated
        self.reference = reference_latencies(ref.latency, stream.prompt_tokens, stream.output_tokens)
        self.overload_s = overload_wait(self.slos, self.reference)

    # -- inputs -------------------------------------------------------------------
    def machine(self, name: str) -> Machine:
        """The catalog's machine ``name``, in any case (designs name theirs in lower case)."""
        try:
            return by_name(self.machines, name)
        except (KeyError, TypeError):
            raise SplitwisePlanError(f"machine {name!r} is unknown; valid: {choices(self.machines)}") from None

    def pool_tp(self, design: Design, role: str = "prompt") -> int:
        """The tensor parallelism of ``design``'s ``role`` pool (prompt or token): the design's, else the simulator's."""
        tp = design.tp or self.pool_tps
        return tp[0] if role == "prompt" or design.is_baseline else tp[1]

    def pool_machine(self, design: Design, role: str = "prompt") -> Machine:
        """The machine of ``design``'s ``role`` pool (prompt or token); a user error if the model's weights do not
        fit in each instance it runs."""
        m = self.machine(design.prompt_machine if role == "prompt" or design.is_baseline else design.token_machine)
        try:
            self.layout(design, m, role)
        except SplitwisePlanError as exc:
            raise SplitwisePlanError(f"{design.name}: {exc}") from None
        return m

    def layout(self, design: Design, machine: Machine, role: str = "prompt") -> tuple[int, int]:
        """(model instances a machine of ``design``'s ``role`` pool runs at its tensor parallelism, GPUs each);
        a user error if the model's weights do not fit in one."""
        return instance_layout(machine, self.pool_tp(design, role), design.is_baseline, self.model)

    def latency(self, machine: Machine, tp: int | None = None):
        """The latency model of ``machine``'s GPU at ``tp`` (None: the prompt pool's TP): measured when the
        profiles have it, else estimated."""
        return self.latency_source(machine, tp).latency

    def latency_source(self, machine: Machine, tp: int | None = None):
        """:class:`~splitwise_plan.perf.sources.Sourced`: the latency model of ``machine``'s GPU at ``tp`` and whence."""
        key = (machine.hardware, self.tensor_parallel if tp is None else int(tp))
        if key not in self._latency:
            found = sourced_latency(self.profiles, self.model, machine, key[1], self.stack)
            if key[0] in self.slower:
                found = found._replace(latency=found.latency.slowed(*self.slower[key[0]]))
            self._latency[key] = found
        return self._latency[key]

    def pool(self, design: Design, role: str, count: int) -> Pool:
        """``count`` machines of ``design``'s ``role`` pool, with their latencies and instances."""
        m = self.pool_machine(design, role)
        return Pool(m, count, self.latency(m, self.pool_tp(design, role)), *self.layout(design, m, role))

    def cluster(self, design: str | Design, n_prompt: int, n_token: int = 0) -> Cluster:
        """Resolve a design and machine counts to a cluster."""
        d = get_design(design)
        n_prompt = pool_size(n_prompt, f"{d.name}'s {'machine count' if d.is_baseline else 'prompt pool'}")
        prompt = self.pool(d, "prompt", n_prompt)
        token = None
        if d.is_baseline and n_token not in (0, None):   # else silently a smaller cluster than asked for
            raise SplitwisePlanError(f"{d.name} has one pool of {n_prompt} machines: no token machines "
                                     f"({n_token} given)")
        if not d.is_baseline:
            token = self.pool(d, "token", pool_size(n_token, f"{d.name}'s token pool"))
        return Cluster(d.name, self.model, prompt, token, self.scheduler)

    def caches_per_token_instance(self, design: str | Design) -> float:
        """How many of the stream's mean requests' KV caches one token instance of a Splitwise ``design``
        holds beside the weights (inf for a baseline, which has no token pool)."""
        d = get_design(design)
        if d.is_baseline:
            return math.inf
        c = self.cluster(d, 1, 1)
        s = self.stream
        return c.kv_room_of(c.token) / c.kv_bytes(float(np.mean(s.prompt_tokens + s.output_tokens)))

    def auto_method(self, design: str | Design) -> str:
        """The method for a batch of ``design``'s points: fluid, but events where it is not installed or
        reads the design unreliably (a token instance holds fewer than FEW_CACHES mean requests' KV caches)."""
        reliable = fluid_available() and self.caches_per_token_instance(design) >= FEW_CACHES
        return "fluid" if reliable else "events"

    def fluid_caveat(self, design: str | Design, lead: str = "caution",
                     remedy: str = "confirm design points with --method events") -> str:
        """A one-line ``lead``: where the fluid model reads ``design`` unreliably (see FEW_CACHES), or where a
        Splitwise design meets a burst (see BURST), else ''."""
        d = get_design(design)
        n = self.caches_per_token_instance(d)
        if n < FEW_CACHES:
            return (f"{lead}: a token instance of {d.name} holds about {n:.0f} of this stream's mean "
                    f"requests' KV caches (fewer than {FEW_CACHES}): there the fluid model can misread the SLOs by "
                    f"half again or more; {remedy}")
        # (a baseline's bursts are not a known limit of the fluid model: its stream's burst is not read)
        if d.is_baseline or (burst := self.stream.burst()) < BURST:
            return ""
        return (f"{lead}: this stream's busiest 10 s arrive at {burst:.1f}x its mean rate; in bursts the fluid model "
                f"can read TBT P99 low near the SLO frontier (it agreed with the discrete-event oracle's pass/fail "
                f"on 84% of such points, 92% on steadier streams); {remedy}")

    # -- evaluation ---------------------------------------------------------------
    def run(self, design: str | Design, n_prompt: int, n_token: int = 0, method: str | None = None) -> SimulationResult:
        """Simulate one design point: ``n_prompt`` prompt and ``n_token`` token machines (a baseline's
        ``n_prompt`` machines, ``n_token`` 0)."""
        return self.run_many(design, [(n_prompt, n_token)], method=method)[0]

    def compile_kernels(self, designs, methods) -> None:
        """Compile the kernels of ``methods`` (or load them from the cache) before worker processes start, on
        the first of ``designs`` these inputs can build: the workers then load them. Both at once where both
        must compile: the fluid model's in a child process while the event simulator's compile here."""
        from splitwise_plan.sim import jit
        from splitwise_plan.sim.events.engine import compile_ahead as events_ahead
        from splitwise_plan.sim.events.kernels import run_events
        from splitwise_plan.sim.fluid.flow import compile_ahead as fluid_ahead
        from splitwise_plan.sim.fluid.kernels import run_fluid
        cluster = next((c for c in map(self._smallest, designs) if c is not None), None)
        if cluster is None:
            return
        child = None
        if {"events", "fluid"} <= set(methods) and not (jit.in_cache(run_events) or jit.in_cache(run_fluid)):
            import multiprocessing
            jit.before_first_call(run_fluid, "the fluid model")   # (the child process says nothing)
            with starting_workers():
                child = multiprocessing.get_context("spawn").Process(target=fluid_ahead, args=(cluster,), daemon=True)
                child.start()
        try:
            if "events" in methods:
                events_ahead(cluster)
            if child is not None:
                child.join()
            elif "fluid" in methods:
                fluid_ahead(cluster)
        finally:
            if child is not None and child.is_alive():   # (stopped meanwhile)
                child.terminate()

    def _smallest(self, design) -> Cluster | None:
        """The design's smallest cluster, or None where these machines cannot hold it."""
        try:
            return self.cluster(design, 1, 0 if get_design(design).is_baseline else 1)
        except SplitwisePlanError:
            return None

    def run_requests(self, design: str | Design, n_prompt: int, n_token: int = 0,
                     method: str | None = None, on_arrivals=None) -> tuple[SimulationResult, dict]:
        """Simulate one design point: its result and, from the same run, each request's latencies.

        The table (columns of equal length, in stream order): ``request`` (its index), ``arrival_s``,
        ``prompt_tokens``, ``output_tokens``, ``ttft_s``, ``tbt_s``, ``e2e_s`` and their ``*_slowdown``
        against the reference machine; a request that did not finish has NaN latencies and
        ``finished`` False. The discrete-event method tells ``on_arrivals(n)``, now and then, how
        many requests have arrived.
        """
        method = self.method if method is None else _check_method(method)
        clusters = [self.cluster(design, n_prompt, n_token)]
        ttft, e2e, util, oom, over, failed = self._simulate(clusters, method, on_arrivals)
        result = self._results(clusters, ttft, e2e, util, oom, over, method, failed)[0]
        lat = request_latencies(ttft[0], e2e[0], self.stream.output_tokens)
        table = {"request": np.arange(len(self.stream)), "arrival_s": self.stream.arrival_s,
                 "prompt_tokens": self.stream.prompt_tokens, "output_tokens": self.stream.output_tokens}
        table.update({f"{m}_s": lat[m] for m in lat})
        table.update({f"{m}_slowdown": lat[m] / ref for m, ref in zip(("ttft", "tbt", "e2e"), self.reference)})
        table["finished"] = np.isfinite(lat["e2e"])
        return result, table

    def run_many(self, design: str | Design, points: Iterable[Sequence[int]],
                 method: str | None = None, jobs: int = 1, progress=None,
                 on_results=None) -> list[SimulationResult]:
        """Simulate many (prompt, token) machine counts of one design.

        ``jobs > 1`` spreads the points over that many processes, this one and ``jobs - 1`` workers
        (``_share``): runs of consecutive points dealt out in turn, so the parts cost alike (neighbours
        in a grid cost alike); ``progress(n)`` is told as each part of ``n`` points is done (in one
        process: every few fluid runs, each oracle run), and ``on_results(results)`` is given that
        part's results (to keep them as they come).
        """
        method = self.method if method is None else _check_method(method)
        jobs = whole_number(jobs, "jobs", 1)
        points = [_point(pt, 1, 2, "(prompt machines, token machines)") for pt in points]
        clusters = [self.cluster(design, *pt) for pt in points]
        if not clusters:
            return []
        simulate = self._events if method == "events" else self._fluid
        if jobs > 1 and len(points) > 1:
            size = 1 if method == "events" else -(-len(points) // (2 * jobs))   # two parts a process
            parts = []
            for lo in range(0, len(points), size * jobs):   # runs of consecutive points, dealt out in turn
                block = list(range(lo, min(lo + size * jobs, len(points))))
                parts += [block[k::jobs] for k in range(jobs) if block[k::jobs]]
            worker = copy.copy(self)
            worker.profiles = None     # the design's latency models are built: workers need no profile table
            merged: list = [None] * len(points)

            def report(idx, out) -> None:
                for i, r in zip(idx, out):
                    merged[i] = r
                if on_results is not None:
                    on_results(out)
                if progress is not None:
                    progress(len(idx))

            _share(parts, lambda idx: simulate([clusters[i] for i in idx]),
                   lambda ex, idx: ex.submit(worker.run_many, design, [points[i] for i in idx], method),
                   min(jobs, len(parts)), report)
            return merged
        return simulate(clusters, progress, on_results)

    def default_jobs(self, n_points: int, method: str | None = None, design: str | Design | None = None) -> int:
        """The ``jobs`` (processes, this one among them) a ``run_many`` of ``n_points`` is worth when the caller
        names none (``design`` is accepted for callers that name it: a point costs alike whatever its design).

        One per core, no more than the free memory holds, and one (no workers) where splitting the
        work saves less than starting the workers costs.
        """
        method = self.method if method is None else _check_method(method)
        per_point = 0.05 if method == "events" else _FLUID_S_PER_REQUEST * len(self.stream)
        if n_points * per_point < 4 * _WORKER_START_S:
            return 1
        cores = cpu_cores()
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):   # not a POSIX system: trust the cores
            return max(1, cores)
        return max(1, min(cores, free // _WORKER_MEMORY))

    def run_points(self, points: Iterable[Sequence], method: str | None = None) -> list[SimulationResult]:
        """Simulate (design, prompt, token) points of several designs, in order.

        The fluid method runs all Splitwise points in one batch and all baseline points in
        another, whatever their designs: a batch costs little more than one point.
        """
        method = self.method if method is None else _check_method(method)
        if isinstance(points, tuple) and points and isinstance(points[0], str):   # one point
            points = [points]
        points = [points] if isinstance(points, str) else list(points)
        if any(isinstance(x, (str, dict)) for x in points):
            raise SplitwisePlanError("run_points takes a list of (design, prompt machines, token machines) "
                                     "tuples, e.g. [('HH', 27, 3), ('H100', 52, 0)]")
        clusters = [self.cluster(d, *pt) for d, *pt in
                    (_point(x, 2, 3, "(design, prompt machines, token machines)") for x in points)]
        if method == "events":
            return self._events(clusters)
        out: list = [None] * len(clusters)
        for kind in (False, True):
            idx = [i for i, c in enumerate(clusters) if c.is_baseline == kind]
            if idx:
                for i, r in zip(idx, self._fluid([clusters[i] for i in idx])):
                    out[i] = r
        return out

    def _simulate(self, clusters, method: str, on_arrivals=None) -> tuple:
        """Per-request TTFT and E2E (designs x requests) and per design the utilization, memory
        overflow, overload and verdict stop of ``clusters`` (one fluid pass, or one oracle run each)."""
        if method == "events":
            from splitwise_plan.sim.events.engine import simulate_events
            verdict = self._verdict()
            outs = [simulate_events(c, self.stream, overload_s=self.overload_s, on_arrivals=on_arrivals,
                                    verdict=verdict) for c in clusters]

            def busy(o, machines) -> float:
                return float(np.mean(machines) / max(o.horizon_s, 1e-9)) if len(machines) else math.nan

            util = [(busy(o, o.busy_s), busy(o, o.busy_s[:c.prompt.instances]), busy(o, o.busy_s[c.prompt.instances:]))
                    for c, o in zip(clusters, outs)]
            return (np.stack([o.ttft for o in outs]), np.stack([o.e2e for o in outs]), util,
                    [o.oom for o in outs], [o.overloaded for o in outs], [o.failed for o in outs])
        from splitwise_plan.sim.fluid import simulate_fluid
        out = simulate_fluid(clusters, self.stream, self.overload_s, self._verdict(), threads=self.threads)
        util = [(float(u), float(p), float(t)) for u, (p, t) in zip(out.utilization, out.pool_utilization)]
        return (out.ttft, out.e2e, util, list(out.oom), list(out.overloaded), list(out.failed))

    def _verdict(self) -> Verdict | None:
        """What stops a design early (``stop_early``): its SLOs, as soon as they can no longer hold."""
        return Verdict.of(self.slos, self.reference, len(self.stream)) if self.stop_early else None

    def _events(self, clusters, progress=None, on_results=None) -> list[SimulationResult]:
        """Clusters through the oracle, one at a time."""
        results = []
        for c in clusters:
            ttft, e2e, util, oom, over, failed = self._simulate([c], "events")
            results += self._parts_done([c], ttft, e2e, util, oom, over, "events", failed, progress, on_results)
        return results

    def _fluid(self, clusters, progress=None, on_results=None) -> list[SimulationResult]:
        """Clusters of one kind (Splitwise or baseline) through the fluid model, a few at a time."""
        results: list = []
        for lo in range(0, len(clusters), _FLUID_PART):
            part = clusters[lo:lo + _FLUID_PART]
            ttft, e2e, util, oom, over, failed = self._simulate(part, "fluid")
            results += self._parts_done(part, ttft, e2e, util, oom, over, "fluid", failed, progress, on_results)
        return results

    def _parts_done(self, part, ttft, e2e, util, oom, over, method, failed, progress, on_results) -> list:
        """The results of a part of a run, told to ``on_results`` and ``progress``."""
        out = self._results(part, ttft, e2e, util, oom, over, method, failed)
        if on_results is not None:
            on_results(out)
        if progress is not None:
            progress(len(part))
        return out

    def _results(self, clusters, ttft, e2e, util, oom, over, method, failed=None) -> list[SimulationResult]:
        lat = request_latencies(ttft, e2e, self.stream.output_tokens)
        lat_p = percentiles(lat, self.pcts)
        slow_p = {}
        for m, ref in zip(("ttft", "tbt", "e2e"), self.reference):   # one slowdown array at a time: bounded memory
            slow_p.update(percentiles({m: lat[m] / ref}, self.pcts))
        completed = np.sum(np.isfinite(e2e), axis=-1)
        results = []
        for i, c in enumerate(clusters):
            lp = {m: {p: float(v[i]) for p, v in d.items()} for m, d in lat_p.items()}
            sp = {m: {p: float(v[i]) for p, v in d.items()} for m, d in slow_p.items()}
            met, viol = self.slos.evaluate(sp, lp)
            results.append(SimulationResult(
                design=c.design, model=self.model.name, prompt_machines=c.prompt.count,
                token_machines=c.token.count if c.token else 0, requests=len(self.stream),
                completed=int(completed[i]), latency_s=lp, slowdown=sp, slo_met=met,
                violations=tuple(viol), tightest=self.slos.tightest(sp, lp), cost=c.cost,
                power=c.power, utilization=util[i][0], prompt_utilization=util[i][1],
                token_utilization=util[i][2], oom=bool(oom[i]), overloaded=bool(over[i]),
                method=method, stopped_early=bool(failed[i]) if failed is not None else False))
        return results
