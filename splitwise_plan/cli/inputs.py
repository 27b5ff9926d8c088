"""The inputs of the simulation commands (simulate, sweep, check, capacity): the stream, the model and
the catalogs, loaded and checked once, and the design's machine counts.
"""

from __future__ import annotations

import dataclasses
import math
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from splitwise_plan.cli.options import AUTO, check_positive
from splitwise_plan.cli.output import note
from splitwise_plan.cli.progress import progress
from splitwise_plan.errors import SplitwisePlanError, plural
from splitwise_plan.inputs.designs import Design, parse_tp, pool_size
from splitwise_plan.perf.sources import stack_label
from splitwise_plan.planning.explain import method_words
from splitwise_plan.sim.cluster import SchedulerConfig


@dataclass
class Inputs:
    """Everything the simulator is built from, resolved and validated, plus its report echo."""

    stream: object
    model: str
    tensor_parallel: int | str   # 8, or "4:2": the prompt pool's, the token pool's
    workload: Optional[str]
    trace: Optional[Path]
    rate: float
    duration_s: float
    seed: Optional[int]
    slo_file: Optional[Path]
    slos: object
    machines_file: Optional[Path]
    machines: dict
    profiles_file: Optional[Path]
    profiles: object
    method: str
    scheduler: SchedulerConfig = SchedulerConfig()   # the KV transfer among them
    source: object = None   # the loaded workload the streams are drawn from (None for a trace)
    trace_rate: Optional[float] = None   # a trace time-scaled to ``rate`` (--trace with --rps): its own rate
    trace_stream: object = None   # the trace as loaded (its own rate), which ``stream_at`` time-scales
    model_spec: object = None     # the model's architecture (ModelSpec): ``model`` names it, or its config's path
    stack: object = None          # the serving stack of estimated latencies (None: the shipped default)
    stack_why: str = ""           # why ``--stack auto`` chose it ('' where the user named it)

    def simulator(self, stream=None, stop_early: bool = False):
        from splitwise_plan.sim.simulator import Simulator
        return Simulator(stream if stream is not None else self.stream, self.model_spec or self.model,
                         tensor_parallel=self.tensor_parallel, profiles=self.profiles,
                         machines=self.machines, slos=self.slos, scheduler=self.scheduler,
                         method=self.method, stop_early=stop_early, stack=self.stack)

    def csv_row(self, result, rate: float | None = None) -> dict:
        """A result's CSV row, led by its stream as the planner's rows are (``rate``: if not the inputs')."""
        return {"rate_rps": self.rate if rate is None else rate, "seed": self.seed, **result.flat()}

    def latency_sources(self, design) -> dict:
        """{machine: where its latencies come from} for ``design``'s pools, and the slowdown reference's."""
        from splitwise_plan.inputs.models import get_model
        from splitwise_plan.perf.sources import reference_latency, sourced_latency

        spec = self.model_spec or get_model(self.model)
        pools = list(zip(design.machines, design.tp or parse_tp(self.tensor_parallel)))
        several = {m for m, _ in pools if len({tp for n, tp in pools if n == m}) > 1}   # one type at two TPs
        out = {self.machines[m].name + (f"@tp{tp}" if m in several else ""):
               sourced_latency(self.profiles, spec, self.machines[m], tp, self.stack).detail for m, tp in pools}
        return {**out, "reference": reference_latency(self.slos, self.profiles, spec, self.machines, self.stack).detail}

    def report(self, design=None, **extra) -> dict:
        """The inputs block of a report; with ``design``, also where its pools' latencies come from."""
        from splitwise_plan.inputs.models import get_model
        from splitwise_plan.inputs.summary import report_inputs

        if design is not None:
            extra["latency_sources"] = self.latency_sources(design)
        if self.model_spec is not None and self.model_spec.dtype != get_model(self.model).dtype:
            extra["dtype"] = self.model_spec.dtype   # (only when asked for: reports of the defaults read as before)
        if stack_label(self.stack, self.stack_why):
            extra["stack"] = stack_label(self.stack, self.stack_why)
        return report_inputs(model=self.model, tensor_parallel=self.tensor_parallel, workload=self.workload,
                             trace=self.trace, rate=self.rate, duration_s=self.duration_s, seed=self.seed,
                             requests=len(self.stream) if self.stream is not None else None,
                             slo_file=self.slo_file, slos=self.slos, machines_file=self.machines_file,
                             machines=self.machines, profiles_file=self.profiles_file,
                             method=self.method, kv_transfer=self.scheduler.kv_transfer(), **extra)

    def describe(self) -> str:
        src = (f"{self.workload} at {self.rate:g} req/s, {self.duration_s:g} s, seed {self.seed}" if not self.trace else
               f"trace {self.trace}" if self.trace_rate is None else
               f"trace {self.trace} time-scaled from {self.trace_rate:.4g} to {self.rate:g} req/s")
        n = f", {plural(len(self.stream), 'request')}" if self.stream is not None else ""
        return (f"{src}{n}; {self.model} TP{self.tensor_parallel}, {self.scheduler.describe()}; "
                f"simulated with {method_words(self.method)}")


def stream_at(inp: Inputs, rate: Optional[float], seed: Optional[int] = None):
    """The stream of ``inp`` at ``rate`` req/s: the trace time-scaled to it (None: the trace as it is), or
    a stream drawn from the workload over the inputs' duration with ``seed`` (a user error when it
    holds no request, or more than this machine's memory simulates)."""
    from splitwise_plan.inputs.workloads import nonempty
    if inp.trace is not None:
        base = inp.trace_stream
        return base if rate is None or rate == base.rate else base.at_rate(rate)
    seed = inp.seed if seed is None else seed
    return nonempty(inp.source.generate(rate, duration_s=inp.duration_s, seed=seed), rate, inp.duration_s, seed)


def with_stream(inp: Inputs, rate: Optional[float], seed: Optional[int] = None, stream=None) -> Inputs:
    """A copy of ``inp`` whose stream is ``stream`` (default: :func:`stream_at` ``rate`` and ``seed``), and
    its rate and seed that stream's (a trace: its rate, no seed)."""
    stream = stream_at(inp, rate, seed) if stream is None else stream
    if inp.trace is not None:
        scaled = stream is not inp.trace_stream
        return dataclasses.replace(inp, stream=stream, rate=stream.rate, duration_s=stream.duration_s,
                                   trace_rate=inp.trace_stream.rate if scaled else None)
    return dataclasses.replace(inp, stream=stream, rate=rate, seed=inp.seed if seed is None else seed)


#: The analytic bound is the capacity model's best case (see :mod:`splitwise_plan.search.bound`) times
#: this: a rate above it cannot hold, with room for the sampling of a drawn stream's sizes (a probe of
#: BOUND_PROBE_REQUESTS draws them within 1% of the stream's own; 5% seed to seed at 2,000 requests).
BOUND_SAFETY = 1.1
BOUND_PROBE_REQUESTS = 200_000
#: Streams of at most this many requests are simulated whatever the bound says (that is quick, and
#: the sizes of a short stream can stray further from the workload's than the safety allows).
BOUND_MIN_REQUESTS = 100_000


def rate_bound(inp: Inputs, design: Design, prompt: int, token: int, rate: Optional[float],
               seed: Optional[int] = None) -> float:
    """A rate (req/s) that ``prompt`` + ``token`` machines of ``design`` cannot carry however they schedule
    it: :data:`BOUND_SAFETY` times the most that the capacity model lets them carry (best-case work and
    memory), on the trace time-scaled to ``rate`` itself, or on a probe of :data:`BOUND_PROBE_REQUESTS`
    drawn from the workload over the inputs' duration (whose best case scales with the rate). Infinite
    where the stream has no span to measure a rate over."""
    if inp.trace is not None:
        probe = stream_at(inp, rate)
    else:
        probe = inp.source.generate(BOUND_PROBE_REQUESTS / inp.duration_s, duration_s=inp.duration_s,
                                    seed=inp.seed if seed is None else seed)
    return BOUND_SAFETY * best_case_rate(inp, design, prompt, token, probe)


def best_case_rate(inp: Inputs, design: Design, prompt: int, token: int, probe) -> float:
    """The most req/s that ``prompt`` + ``token`` machines of ``design`` carry on stream ``probe`` (time-scaled)
    by the capacity model (best-case work and memory, :mod:`splitwise_plan.search.bound`); infinite where
    the stream has no span to measure a rate over."""
    from splitwise_plan.search import capacity_model
    if len(probe) == 0 or not probe.duration_s > 0:
        return math.inf
    cm = capacity_model(inp.simulator(probe), design)
    return float(cm.max_scale(prompt, token, hi=1e6, iters=64)) * probe.rate


def expected_requests(inp: Inputs, rate: Optional[float]) -> float:
    """The requests a stream of ``inp`` at ``rate`` holds (about, for a drawn one)."""
    if inp.trace is not None:
        return float(len(inp.trace_stream))
    return float(rate) * inp.duration_s


def above_bound(inp: Inputs, design: Design, prompt: int, token: int, rate: Optional[float],
                seed: Optional[int] = None) -> Optional[float]:
    """The analytic bound of :func:`rate_bound` when ``rate`` (a trace: its rate at it) is above it and
    the stream is large enough to be bounded (:data:`BOUND_MIN_REQUESTS`), else None: simulate it."""
    if expected_requests(inp, rate) <= BOUND_MIN_REQUESTS:
        return None
    asked = rate if rate is not None else inp.trace_stream.rate
    bound = rate_bound(inp, design, prompt, token, rate, seed)
    return bound if asked > bound else None


def bound_line(rate: float, bound: float, label: str) -> str:
    """Why a rate fails without a simulation: it is above what the cluster can carry at most."""
    return (f"{rate:.10g} req/s is above the {bound:.4g} req/s {label} can carry at most (analytic bound, "
            "not simulated)")


def worst_of(results: list, threshold: float = 1.0) -> tuple:
    """(the worst of ``results`` (one per seed), whether every one holds with the margin ``1 - threshold``):
    the first that fails, else the one with the tightest SLO nearest its limit."""
    from splitwise_plan.search import passes
    failing = [r for r in results if not passes(r, threshold)]
    if failing:
        return failing[0], False
    return max(results, key=lambda r: r.tightest.get("ratio", 0.0) if r.tightest else 0.0), True


#: Seconds a request takes to simulate, about, by method (a cluster that keeps up; measured at 60 req/s
#: on a 2-core machine: 2.7 us event by event, 1.3 us with the fluid model); a longer run is said first.
SECONDS_PER_REQUEST = {"events": 3e-6, "fluid": 1.5e-6}
LONG_RUN_S = 60.0


def long_run_note(n: int, method: str, runs: int = 1) -> None:
    """Say so, even with --quiet, when ``runs`` simulations of ``n`` requests will take over a minute."""
    est = n * runs * SECONDS_PER_REQUEST.get(method, 3e-6)
    if est > LONG_RUN_S:
        faster = "; --method fluid is faster" if method == "events" else ""
        note(f"note: {plural(n, 'request')}{f' x {runs} runs' if runs > 1 else ''} to simulate ({method}): about "
             f"{est / 60:.0f} min{faster}", False)


def check_method(method: str, auto: bool = False) -> str:
    """``--method`` in lower case; ``auto`` (where ``auto`` is allowed) stays ``auto``."""
    from splitwise_plan.sim.simulator import METHODS, fluid_available
    m = (method or "").strip().lower()
    valid = (*METHODS, AUTO) if auto else METHODS
    if m not in valid:
        raise SplitwisePlanError(f"--method {method!r} is unknown; valid: {', '.join(valid)}")
    if m == "fluid" and not fluid_available():
        raise SplitwisePlanError("the fluid simulator is not available in this build; use --method events")
    return m


def auto_method(inp: "Inputs", design: Design) -> "Inputs":
    """The inputs of ``--method auto`` (``Simulator.auto_method``); where that is events because the
    fluid model reads ``design`` unreliably, it says so, even with --quiet (as the caution does)."""
    from splitwise_plan.sim.simulator import fluid_available
    sim = inp.simulator()
    method = sim.auto_method(design)
    if method == "events" and fluid_available():   # there, but unreliable for this design
        note(sim.fluid_caveat(design, lead="note", remedy=(
            "this grid is simulated event by event (--method fluid for the fast queue model)")), False)
    return dataclasses.replace(inp, method=method)


def resolve_inputs(*, model: str, tp: int, workload: str, rps: Optional[float], trace: Optional[Path],
                   duration: float, seed: int, slo: Optional[Path], machines_file: Optional[Path],
                   profiles: Optional[Path], method: str, need_stream: bool = True,
                   allow_trace: bool = True, transfer: str = "serialized", bandwidth: float = 200.0,
                   quiet: bool = True, dtype: Optional[str] = None, stack: Optional[Path] = None) -> Inputs:
    """Validate the shared inputs cheaply first (names, numbers), then load the files and the stream
    (a large trace with a progress bar, unless ``quiet``)."""
    from splitwise_plan.inputs.machines import load_machines, with_short_names
    from splitwise_plan.inputs.models import BUILTIN_MODELS, get_model
    from splitwise_plan.inputs.slos import load_slos
    from splitwise_plan.inputs.workloads import load_trace, load_workload, nonempty
    from splitwise_plan.perf.profiles import ProfileSet
    from splitwise_plan.perf.sources import for_requests, reference_latency, resolve_stack

    spec = get_model(model, dtype=dtype)   # a built-in by its name as the profiles spell it, whatever the case
    model = spec.name if spec.name in BUILTIN_MODELS and not os.path.exists(str(model)) else str(model)
    if isinstance(tp, str) and tp.strip().lower() == "auto":
        raise SplitwisePlanError("--tp auto is the planner's (it chooses each pool's TP); here give one for every "
                                 "pool (8) or the prompt pool's and the token pool's (4:2)")
    pair = parse_tp(tp)
    tp = pair[0] if pair[0] == pair[1] else f"{pair[0]}:{pair[1]}"
    method = check_method(method)
    scheduler = SchedulerConfig.with_transfer(transfer, bandwidth)
    check_positive(duration, "--duration")
    if trace is not None and not allow_trace:
        raise SplitwisePlanError("--trace is not supported here (the rate varies); "
                                 "use --workload FILE to draw request sizes from a trace")
    if rps is not None:
        check_positive(rps, "--rps")
    elif trace is None and need_stream:
        raise SplitwisePlanError("give --rps R (requests per second) or --trace FILE")
    slos = load_slos(slo)
    machines = with_short_names(load_machines(machines_file))   # H200 names dgx-h200 (unless the file has an h200)
    profileset = ProfileSet.load(profiles)
    stack, stack_why = resolve_stack(stack, profileset, spec)   # (auto: the paper's stack for its models, else vllm)
    reference_latency(slos, profileset, spec, machines, stack)   # slowdowns need it: fail now, in one line
    stream, wl, wl_name, trace_rate, trace_stream = None, None, None, None, None
    if trace is not None:
        stream = _load_with_bar(load_trace, trace, "loading trace", quiet)
        trace_stream = stream
        if rps is not None:   # the trace time-scaled to that rate, as a plan over a trace replays it at each rate
            trace_rate, stream = stream.rate, stream.at_rate(rps)
        rate, dur, seed_used = stream.rate, stream.duration_s, None
    else:
        wl = _load_with_bar(load_workload, workload, "loading workload", quiet)
        wl_name = wl.name
        rate, dur, seed_used = rps, duration, seed
        if need_stream:
            stream = nonempty(wl.generate(rps, duration_s=duration, seed=seed), rps, duration)
    stack = for_requests(stack, trace_stream if trace_stream is not None else wl)   # (a decode's context, where read)
    return Inputs(stream, model, tp, wl_name, trace, rate, dur, seed_used, slo, slos, machines_file,
                  machines, profiles, profileset, method, scheduler, wl, trace_rate=trace_rate,
                  trace_stream=trace_stream, model_spec=spec, stack=stack, stack_why=stack_why)


def _load_with_bar(load, path, what: str, quiet: bool):
    """``load(path, on_progress)`` with a bar over the file's bytes (MB) once it lasts a second."""
    with progress(None, f"{what} {path}", quiet=quiet) as bar:
        def on_progress(done: int, total: int) -> None:
            if bar.total is None:
                bar.total = total / 1e6
            bar.update(completed=done / 1e6, description=f"{what} {path} ({total / 1e6:,.0f} MB)")
        return load(path, on_progress)


def resolve_counts(design: Design, prompt: Optional[int], token: Optional[int],
                   machines: Optional[int]) -> tuple[int, int]:
    """(prompt, token) machine counts for a design from --prompt/--token or --machines."""
    if design.is_baseline:
        if prompt is not None or token is not None:
            raise SplitwisePlanError(f"{design.name} is a baseline (one pool): give --machines N, "
                                     "not --prompt/--token")
        if machines is None:
            raise SplitwisePlanError(f"{design.name} needs --machines N (the number of machines)")
        return pool_size(machines, "--machines"), 0
    if machines is not None:
        raise SplitwisePlanError(f"{design.name} has a prompt and a token pool: give --prompt P --token T, "
                                 "not --machines")
    missing = [f for f, v in (("--prompt", prompt), ("--token", token)) if v is None]
    if missing:
        raise SplitwisePlanError(f"{design.name} needs {' and '.join(missing)} (machine counts of each pool)")
    return pool_size(prompt, "--prompt"), pool_size(token, "--token")


def parse_counts(text: str, flag: str) -> list[int]:
    """Machine counts from ``a:b`` (inclusive), ``a:b:step``, a comma list ``4,8,16`` or one number."""
    s = (text or "").strip()
    if not s:
        raise SplitwisePlanError(f"{flag} is empty; give a count, a range a:b[:step] or a list a,b,c")
    values: list[int] = []
    for part in s.split(","):
        part = part.strip()
        try:
            nums = [int(x) for x in part.split(":")]
        except ValueError:
            raise SplitwisePlanError(f"{flag} {text!r}: {part!r} is not a whole number or a range a:b[:step]") from None
        if len(nums) == 1:
            values.append(pool_size(nums[0], f"{flag} {text!r}: each count"))
            continue
        if len(nums) not in (2, 3):
            raise SplitwisePlanError(f"{flag} {text!r}: a range is a:b or a:b:step")
        a, b, step = nums[0], nums[1], nums[2] if len(nums) == 3 else 1
        if step < 1:
            raise SplitwisePlanError(f"{flag} {text!r}: the step must be at least 1")
        if b < a:
            raise SplitwisePlanError(f"{flag} {text!r}: the range end {b} is below its start {a}")
        for v in (a, b):   # so every count of the range is a pool size
            pool_size(v, f"{flag} {text!r}: each count")
        values.extend(range(a, b + 1, step))
    return sorted(set(values))


def fluid_caution(sim, design) -> None:
    """Say so where the fluid method reads ``design`` unreliably (few KV caches a token instance),
    even with --quiet: it bears on whether the numbers can be trusted."""
    caveat = sim.fluid_caveat(design) if sim.method == "fluid" else ""
    if caveat:
        note(caveat, quiet=False)


@contextmanager
def arrivals_bar(inp: Inputs, what: str, quiet: bool, stream=None):
    """A bar over the requests of ``stream`` (the inputs' own by default) for one discrete-event run
    (a spinner for the fluid model); yields the callback the run reports its arrivals to."""
    events = inp.method == "events"
    n = len(stream if stream is not None else inp.stream)
    long_run_note(n, inp.method)
    with progress(n if events else None, f"{what} ({inp.method})", quiet=quiet) as bar:
        yield (lambda k: bar.update(completed=k)) if events else None
        if events:
            bar.update(completed=n)   # the run is over (an overloaded one stops early)
