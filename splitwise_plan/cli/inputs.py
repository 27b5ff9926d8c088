"""The inputs of the simulation commands (simulate, sweep, check, capacity): the stream, the model and
the catalogs, loaded and checked once, and the design's machine counts.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from splitwise_plan.cli.options import AUTO, check_positive
from splitwise_plan.cli.output import note
from splitwise_plan.cli.progress import progress
from splitwise_plan.errors import SplitwisePlanError, plural
from splitwise_plan.inputs.designs import Design, pool_size
from splitwise_plan.sim.cluster import SchedulerConfig


@dataclass
class Inputs:
    """Everything the simulator is built from, resolved and validated, plus its report echo."""

    stream: object
    model: str
    tensor_parallel: int
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

    def simulator(self, stream=None, stop_early: bool = False):
        from splitwise_plan.sim.simulator import Simulator
        return Simulator(stream if stream is not None else self.stream, self.model,
                         tensor_parallel=self.tensor_parallel, profiles=self.profiles,
                         machines=self.machines, slos=self.slos, scheduler=self.scheduler,
                         method=self.method, stop_early=stop_early)

    def csv_row(self, result, rate: float | None = None) -> dict:
        """A result's CSV row, led by its stream as the planner's rows are (``rate``: if not the inputs')."""
        return {"rate_rps": self.rate if rate is None else rate, "seed": self.seed, **result.flat()}

    def report(self, **extra) -> dict:
        from splitwise_plan.inputs.summary import report_inputs
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
                f"simulated with method {self.method}")


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
                   allow_trace: bool = True, transfer: str = "serialized", bandwidth: float = 200.0) -> Inputs:
    """Validate the shared inputs cheaply first (names, numbers), then load the files and the stream."""
    from splitwise_plan.inputs.machines import load_machines
    from splitwise_plan.inputs.models import get_model
    from splitwise_plan.inputs.slos import load_slos
    from splitwise_plan.inputs.workloads import load_trace, load_workload, nonempty
    from splitwise_plan.perf.profiles import ProfileSet

    model = get_model(model).name   # its name as the profiles spell it, whatever the case typed
    if tp is None or tp < 1:
        raise SplitwisePlanError(f"--tp must be a positive integer, got {tp}")
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
    machines = load_machines(machines_file)
    profileset = ProfileSet.load(profiles)
    slos.reference_model(profileset, model)
    stream, wl, wl_name, trace_rate = None, None, None, None
    if trace is not None:
        stream = load_trace(trace)
        if rps is not None:   # the trace time-scaled to that rate, as a plan over a trace replays it at each rate
            trace_rate, stream = stream.rate, stream.at_rate(rps)
        rate, dur, seed_used = stream.rate, stream.duration_s, None
    else:
        wl = load_workload(workload)
        wl_name = wl.name
        rate, dur, seed_used = rps, duration, seed
        if need_stream:
            stream = nonempty(wl.generate(rps, duration_s=duration, seed=seed), rps, duration)
    return Inputs(stream, model, int(tp), wl_name, trace, rate, dur, seed_used, slo, slos, machines_file,
                  machines, profiles, profileset, method, scheduler, wl, trace_rate=trace_rate)


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
    with progress(n if events else None, f"{what} ({inp.method})", quiet=quiet) as bar:
        yield (lambda k: bar.update(completed=k)) if events else None
        if events:
            bar.update(completed=n)   # the run is over (an overloaded one stops early)
