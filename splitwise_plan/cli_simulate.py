"""CLI commands that simulate given clusters: ``simulate`` and ``sweep``, and the options and inputs
they share with ``check`` and ``capacity`` (:mod:`splitwise_plan.cli_check`).

They hang off the ``app`` of :mod:`splitwise_plan.cli` (imported at its end). Every bad
input is a ``SplitwisePlanError`` (one line, exit 2), including option parsing errors,
which :class:`ReportCommand` converts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from typer.core import TyperCommand

from .cli import USAGE_ERROR, app, console, opt_bandwidth, opt_transfer, reject_stream_options
from .cluster import SchedulerConfig, pool_size
from .designs import Design, get_design
from .errors import SplitwisePlanError, positive_number
from .progress import progress
from .reports import machine_counts, plural

AUTO = "auto"   # --method of a grid: fluid where it reads the design reliably, else events

STDOUT = "-"
MAX_GRID_POINTS = 200_000


OUTPUT_OPTIONS = ("--json", "--csv", "--plot", "--requests")


def optional_values(args, options=("--json",)) -> list:
    """Command-line ``args`` with ``-`` (standard output) after each of ``options`` given with no value.

    An output path that ends in ``/`` names a folder: a user error here, before click makes it a
    ``Path`` (which drops the slash, and the report would be written as a file of the folder's name).
    """
    args, out = list(args), []
    for i, a in enumerate(args):
        flag, eq, value = a.partition("=")
        if not eq:
            value = args[i + 1] if i + 1 < len(args) else ""
        if flag in OUTPUT_OPTIONS and value.endswith(("/", os.sep)) and len(value) > 1:
            raise SplitwisePlanError(f"{flag} {value} names a folder (it ends with /); give a file name")
    for i, a in enumerate(args):
        out.append(a)
        if a in options:
            nxt = args[i + 1] if i + 1 < len(args) else None
            if nxt is None or (nxt.startswith("-") and nxt != STDOUT):
                out.append(STDOUT)
    return out


class ReportCommand(TyperCommand):
    """A command whose ``--json`` takes an optional FILE (bare ``--json`` = stdout) and whose
    option-parsing errors become one-line user errors (exit 2) instead of a usage box."""

    def parse_args(self, ctx, args):
        try:
            rest = super().parse_args(ctx, optional_values(args))
        except USAGE_ERROR as exc:
            raise SplitwisePlanError(exc.format_message()) from None
        reject_stream_options(ctx)
        return rest


# --- shared options ------------------------------------------------------------------

ADV = "Advanced"
OUT = "Output"


def _opt_workload():
    return typer.Option("coding", "--workload", "-w", metavar="NAME|FILE",
                        help="Request sizes: coding, conversation, or a trace CSV to draw sizes from.")


def _opt_trace():
    return typer.Option(None, "--trace", metavar="FILE",
                        help="Replay this trace CSV exactly (Azure or reference format) instead of a generated stream.")


def _opt_duration():
    return typer.Option(120.0, "--duration", metavar="S", help="Length of the generated stream, seconds.")


def _opt_model():
    return typer.Option("bloom-176b", "--model", help=(
        "Model: bloom-176b or llama2-70b (the architectures the tool knows; profiles may be your own)."))


def _opt_tp():
    return typer.Option(8, "--tp", help="Tensor parallelism.")


def _opt_seed():
    return typer.Option(0, "--seed", help="Seed of the generated stream.")


def _opt_slo():
    return typer.Option(None, "--slo", "--slos", metavar="FILE", help="SLO TOML file. Default: the paper's Table VI.")


def _opt_machines_file():
    return typer.Option(None, "--machines-file", metavar="FILE",
                        help="Machine TOML file overriding or extending the builtin machine catalog.")


def _opt_profiles():
    return typer.Option(None, "--profiles", metavar="FILE", help="Profile CSV. Default: the shipped perf_model.csv.")


def _opt_method(default: str):
    """``--method``: commands that simulate one design point at a time default to the discrete-event
    simulation (the reference's rules, under a second for 2 minutes at 70 req/s), a grid to ``auto``:
    the fluid model (a batch of designs per pass) where it reads the design reliably."""
    auto = default == AUTO
    return typer.Option(default, "--method", metavar="events|fluid" + "|auto" * auto, rich_help_panel=ADV,
                        help=f"Simulator: events (discrete-event, the reference simulator's rules one event at a "
                             f"time) or fluid (the vectorized queue model: fast in batches, within a few % of "
                             f"events)" + (", or auto: fluid, but events where a token instance holds few requests' "
                                           "KV caches (there the fluid model can read the SLOs 2-3x)" if auto else "")
                             + f". Default here: {default}.")


def _opt_json(instead_of: str = "the table"):
    return typer.Option(None, "--json", metavar="[FILE]", rich_help_panel=OUT,
                        help=f"Write the JSON report to FILE; bare --json prints JSON to stdout instead of {instead_of}.")


def _opt_csv(row: str = "design point"):
    return typer.Option(None, "--csv", metavar="FILE", rich_help_panel=OUT, help=f"Write one CSV row per {row}.")


def _opt_quiet():
    return typer.Option(False, "--quiet", "-q", rich_help_panel=OUT, help="No progress bar and no 'wrote FILE' notes.")


# --- inputs ---------------------------------------------------------------------------

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
        from .simulator import Simulator
        return Simulator(stream if stream is not None else self.stream, self.model,
                         tensor_parallel=self.tensor_parallel, profiles=self.profiles,
                         machines=self.machines, slos=self.slos, scheduler=self.scheduler,
                         method=self.method, stop_early=stop_early)

    def csv_row(self, result, rate: float | None = None) -> dict:
        """A result's CSV row, led by its stream as the planner's rows are (``rate``: if not the inputs')."""
        return {"rate_rps": self.rate if rate is None else rate, "seed": self.seed, **result.flat()}

    def report(self, **extra) -> dict:
        from .reports import report_inputs
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
    from .simulator import METHODS, fluid_available
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
    from .simulator import fluid_available
    sim = inp.simulator()
    method = sim.auto_method(design)
    if method == "events" and fluid_available():   # there, but unreliable for this design
        _note(sim.fluid_caveat(design, lead="note", remedy=(
            "this grid is simulated event by event (--method fluid for the fast queue model)")), False)
    return dataclasses.replace(inp, method=method)


def check_positive(value: float, flag: str) -> float:
    """A required option's positive finite value, or a user error naming ``flag``."""
    if value is None:
        raise SplitwisePlanError(f"{flag} is required")
    return positive_number(value, flag)


def resolve_inputs(*, model: str, tp: int, workload: str, rps: Optional[float], trace: Optional[Path],
                   duration: float, seed: int, slo: Optional[Path], machines_file: Optional[Path],
                   profiles: Optional[Path], method: str, need_stream: bool = True,
                   allow_trace: bool = True, transfer: str = "serialized", bandwidth: float = 200.0) -> Inputs:
    """Validate the shared inputs cheaply first (names, numbers), then load the files and the stream."""
    from .machines import load_machines
    from .models import get_model
    from .profiles import ProfileSet
    from .slos import load_slos
    from .workloads import load_trace, load_workload, nonempty

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


def _json_target(json_out: Optional[str]) -> Optional[str]:
    if json_out is None or json_out == STDOUT:
        return json_out
    from .reports import check_writable
    check_writable(json_out, "JSON report")
    return json_out


def stdout_taken(*outputs) -> bool:
    """Does a report go to standard output (``--json -``, or a path that is stdout, /dev/stdout)? Then the
    tables and lines for people go to stderr: stdout carries the report alone, for the tool that reads it."""
    from .reports import is_stdout
    return any(o is not None and (str(o) == STDOUT or is_stdout(o)) for o in outputs)


def _check_outputs(json_out: Optional[str], csv_out: Optional[Path], plot: Optional[Path] = None,
                   requests: Optional[Path] = None, inputs: Optional[dict] = None) -> None:
    """Fail now, with one line, on an output path that could not be written, that two outputs share,
    that is standard output twice, or that names one of the command's ``inputs`` ({option: path})."""
    from .reports import check_outputs, is_stdout
    files = {"--json": None if json_out == STDOUT else json_out, "--csv": csv_out, "--plot": plot,
             "--requests": requests}
    to_stdout = ["--json -"] if json_out == STDOUT else []
    for flag, p in files.items():
        if p is not None and str(p) == STDOUT:
            raise SplitwisePlanError(f"{flag} needs a file name: '-' (standard output) is for --json only")
        if p is not None and is_stdout(p):
            to_stdout.append(f"{flag} {p}")
    if len(to_stdout) > 1:
        *first, last = to_stdout
        raise SplitwisePlanError(f"{', '.join(first)} and {last} {'both' if len(first) == 1 else 'all'} write to "
                                 f"standard output: give {last.split()[0]} a file")
    check_outputs(files, inputs)


def _input_files(**options) -> dict:
    """The files a command reads, by option (``machines_file`` is --machines-file): what no output may overwrite."""
    names = {"cluster": "CLUSTER_FILE", "workload": "--workload"}
    return {names.get(k, "--" + k.replace("_", "-")): v for k, v in options.items() if v is not None}


def _print_json(doc) -> None:
    """The report on standard output, written to its file descriptor until all of it is taken: a
    buffered write of more than a pipe holds ends silently (exit 0) when the reader goes away, where
    the rest of the run must see BrokenPipeError (exit 141)."""
    from .reports import dumps
    text = dumps(doc)
    sys.stdout.flush()
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):   # not a file (a test's captured output)
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = memoryview(text.encode(sys.stdout.encoding or "utf-8"))
    while data:
        data = data[os.write(fd, data):]


def _note(msg: str, quiet: bool) -> None:
    if not quiet:
        sys.stderr.write(msg + "\n")


def fluid_caution(sim, design) -> None:
    """Say so where the fluid method reads ``design`` unreliably (few KV caches a token instance),
    even with --quiet: it bears on whether the numbers can be trusted."""
    caveat = sim.fluid_caveat(design) if sim.method == "fluid" else ""
    if caveat:
        _note(caveat, quiet=False)


# --- simulate ------------------------------------------------------------------------

def _fmt(v: float, digits: int = 4) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def result_table(result, slos, title: str, caption: str = "") -> Table:
    """The nine percentiles (raw seconds and slowdown), each SLO's limit and whether it holds."""
    by_key = {(s["metric"], s["percentile"], s["unit"]): s for s in slos.assess(result.slowdown, result.latency_s)}
    table = Table(title=title, caption=caption)
    for col in ("metric", "percentile", "latency, s", "slowdown", "SLO limit", "margin", "holds"):
        table.add_column(col, justify="left" if col in ("metric", "holds") else "right")
    for metric in ("ttft", "tbt", "e2e"):
        for p in sorted(result.latency_s.get(metric, {})):
            lat, slow = result.latency_s[metric][p], result.slowdown[metric][p]
            rows = [s for (m, q, _), s in by_key.items() if m == metric and q == p]
            if not rows:
                table.add_row(metric.upper(), f"P{p:g}", _fmt(lat), _fmt(slow), "", "", "")
            for s in rows:
                unit = "x" if s["unit"] == "slowdown" else " s"
                table.add_row(metric.upper(), f"P{p:g}", _fmt(lat), _fmt(slow), f"< {s['limit']:g}{unit}",
                              _fmt(s["margin"], 3), "[green]yes[/]" if s["met"] else "[bold red]NO[/]")
    return table


def _counts_label(result) -> str:
    return f"{result.design}, {machine_counts(result.prompt_machines, result.token_machines)}"


@contextmanager
def _arrivals_bar(inp: Inputs, what: str, quiet: bool, stream=None):
    """A bar over the requests of ``stream`` (the inputs' own by default) for one discrete-event run
    (a spinner for the fluid model); yields the callback the run reports its arrivals to."""
    events = inp.method == "events"
    n = len(stream if stream is not None else inp.stream)
    with progress(n if events else None, f"{what} ({inp.method})", quiet=quiet) as bar:
        yield (lambda k: bar.update(completed=k)) if events else None
        if events:
            bar.update(completed=n)   # the run is over (an overloaded one stops early)


def _slo_verdict(result, n_slos: int) -> str:
    if result.slo_met:
        return f"[green]all {n_slos} SLOs hold[/]"
    return f"[bold red]{len(result.violations)} of {n_slos} SLOs violated[/]"


@app.command("simulate", cls=ReportCommand)
def simulate_cmd(
    design: str = typer.Option(..., "--design", "-d", help=(
        "splitwise-aa|hh|ha|hhcap, baseline-a100|h100, or AA, HH, HA, HHcap, A100, H100; "
        "machine types of --machines-file as PROMPT:TOKEN or baseline:MACHINE.")),
    prompt: Optional[int] = typer.Option(None, "--prompt", "-p", help="Prompt machines (Splitwise designs)."),
    token: Optional[int] = typer.Option(None, "--token", "-t", help="Token machines (Splitwise designs)."),
    machines: Optional[int] = typer.Option(None, "--machines", "-m", help="Machines (baselines)."),
    rps: Optional[float] = typer.Option(None, "--rps", help=(
        "Request rate of the generated stream, req/s; with --trace, the trace time-scaled to this rate.")),
    workload: str = _opt_workload(),
    model: str = _opt_model(),
    tp: int = _opt_tp(),
    trace: Optional[Path] = _opt_trace(),
    duration: float = _opt_duration(),
    seed: int = _opt_seed(),
    slo: Optional[Path] = _opt_slo(),
    machines_file: Optional[Path] = _opt_machines_file(),
    profiles: Optional[Path] = _opt_profiles(),
    json_out: Optional[str] = _opt_json(),
    csv_out: Optional[Path] = _opt_csv(),
    requests_out: Optional[Path] = typer.Option(
        None, "--requests", metavar="FILE", rich_help_panel=OUT,
        help="Write one CSV row per request: arrival, prompt and output tokens, TTFT, TBT and E2E in seconds "
             "and as slowdowns, finished (an unfinished request's latencies are nan)."),
    quiet: bool = _opt_quiet(),
    method: str = _opt_method("events"),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
) -> None:
    """Simulate one cluster design: the nine SLO percentiles, cost and power (exit 0 either way)."""
    from .reports import build_report, write_csv, write_json

    d = get_design(design)
    n_prompt, n_token = resolve_counts(d, prompt, token, machines)
    _check_outputs(json_out, csv_out, requests=requests_out, inputs=_input_files(
        trace=trace, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    inp = resolve_inputs(model=model, tp=tp, workload=workload, rps=rps, trace=trace, duration=duration,
                         seed=seed, slo=slo, machines_file=machines_file, profiles=profiles, method=method,
                         transfer=transfer, bandwidth=bandwidth)
    sim = inp.simulator()
    fluid_caution(sim, d)
    with _arrivals_bar(inp, f"simulating {d.name}", quiet) as on_arrivals:
        result, per_request = sim.run_requests(d, n_prompt, n_token, on_arrivals=on_arrivals)
    if csv_out is not None:
        write_csv(csv_out, [inp.csv_row(result)])
    if requests_out is not None:
        cols = list(per_request)
        write_csv(requests_out, (dict(zip(cols, row)) for row in zip(*(per_request[c].tolist() for c in cols))),
                  cols, what="per-request CSV")
    if json_out not in (None, STDOUT):
        write_json(json_out, build_report("simulate", inp.report(), [result]))
    if json_out == STDOUT:
        _print_json(result.to_dict())
        return
    c = console(stderr=stdout_taken(json_out, csv_out, requests_out))
    c.print(result_table(result, inp.slos, title=_counts_label(result)))
    c.print(inp.describe())
    c.print(f"{plural(result.requests, 'request')}, {result.completed:,} completed"
            + (f"; [yellow]overloaded: a prompt waited over {sim.overload_s:.0f} s, the run stopped there[/]"
               if result.overloaded else "")
            + ("; [yellow]memory overflow: a request never got its KV-cache memory (larger than any machine's, or held by waiting transfers)[/]" if result.oom else ""))
    pools = (f" (prompt pool {result.prompt_utilization:.0%}, token pool {result.token_utilization:.0%})"
             if result.token_machines else "")
    c.print(f"cost {result.cost:.4g}, power {result.power:.4g}, utilization {result.utilization:.0%}{pools}; "
            f"{_slo_verdict(result, len(inp.slos))}")
    for p in (json_out, csv_out, requests_out):
        if p not in (None, STDOUT):
            _note(f"wrote {p}", quiet)


# --- sweep ------------------------------------------------------------------------------

def run_grid(sim, design: Design, points: list[tuple[int, int]], *, quiet: bool = False,
             label: str = "sweep", jobs: int = 1, on_results=None) -> list:
    """Evaluate design points with ``run_many`` (over ``jobs`` processes), with a progress bar
    that moves as each fluid pass, oracle run or worker's part is done (``on_results`` gets its results)."""
    with progress(len(points), f"{label} {design.name} ({sim.method})", quiet=quiet) as bar:
        return sim.run_many(design, points, jobs=max(1, jobs), progress=bar.advance, on_results=on_results)


def _resumable_grid(sim, inp, design: Design, grid: list, where: Optional[Path], *, jobs: Optional[int],
                    quiet: bool, stop_early: bool) -> tuple[list, Optional[object], list]:
    """``run_grid`` over the points a checkpoint at ``where`` does not hold yet, keeping each part's
    results there as it finishes: a stopped sweep goes on where it stopped. Returns the results in
    grid order, the checkpoint (to finish once the outputs are written) and the points it holds that
    this grid does not (kept for the sweep that names them)."""
    from . import __version__
    from .checkpoint import Checkpoint, fingerprint, stopped_note
    from .simulator import cpu_cores

    ckpt, done, others = None, {}, []
    if where is not None:   # its notes say what becomes of the user's files: printed even with --quiet
        ckpt = Checkpoint(where, fingerprint(inp.report(), inp.stream, design.name, stop_early=stop_early,
                                             version=__version__), say=lambda why: _note(why, False))
        loaded = ckpt.load()
        wanted = set(grid)
        done = {pt: r for pt, r in loaded.items() if pt in wanted}
        others = [pt for pt in loaded if pt not in wanted]
        if done:
            _note(f"resuming: {len(done):,} of {len(grid):,} design points kept in {where}", False)
    todo = [pt for pt in grid if pt not in done]
    if jobs is None:
        jobs = sim.default_jobs(len(todo), design=design)
    try:
        fresh = run_grid(sim, design, todo, quiet=quiet, jobs=jobs or cpu_cores(),
                         on_results=ckpt.keep if ckpt is not None else None) if todo else []
    except KeyboardInterrupt:
        note = stopped_note(ckpt, len(grid), "sweep", "design points", len(others))
        if note:
            sys.stderr.write(note + "\n")
        raise
    done.update(zip(todo, fresh))
    return [done[pt] for pt in grid], ckpt, others


@app.command("sweep", cls=ReportCommand)
def sweep_cmd(
    design: str = typer.Option(..., "--design", "-d", help=(
        "Design name or short form (HH, HA, AA, HHcap, A100, H100), or PROMPT:TOKEN, baseline:MACHINE.")),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", metavar="RANGE",
                                         help="Prompt machines: 20:30 (inclusive), 20:40:2 (a step), or 20,24,28."),
    token: Optional[str] = typer.Option(None, "--token", "-t", metavar="RANGE", help="Token machines (same forms)."),
    machines: Optional[str] = typer.Option(None, "--machines", "-m", metavar="RANGE", help="Machines (baselines)."),
    rps: Optional[float] = typer.Option(None, "--rps", help=(
        "Request rate of the generated stream, req/s; with --trace, the trace time-scaled to this rate.")),
    workload: str = _opt_workload(),
    model: str = _opt_model(),
    tp: int = _opt_tp(),
    trace: Optional[Path] = _opt_trace(),
    duration: float = _opt_duration(),
    seed: int = _opt_seed(),
    slo: Optional[Path] = _opt_slo(),
    machines_file: Optional[Path] = _opt_machines_file(),
    profiles: Optional[Path] = _opt_profiles(),
    json_out: Optional[str] = _opt_json(),
    csv_out: Optional[Path] = _opt_csv(),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE", rich_help_panel=OUT,
                                        help="Design-space map (like the paper's Fig. 12): .png, .svg or .html."),
    quiet: bool = _opt_quiet(),
    method: str = _opt_method(AUTO),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help=(
        "Processes that simulate, this one and its workers (default: one per core when the grid is "
        "worth it and memory allows; 0: one per core; 1: this process only).")),
    stop_early: bool = typer.Option(False, "--stop-early", help=(
        "Stop a design once an SLO can no longer hold: same verdicts and passing rows, faster; "
        "failing rows then count their unfinished requests as +inf.")),
) -> None:
    """Simulate a grid of machine counts of one design: one CSV row per design point (the paper's Fig. 12)."""
    from .checkpoint import path_for
    from .plots import design_point, optimum, rank_key, write_plot
    from .reports import build_report, write_csv, write_json

    d = get_design(design)
    if d.is_baseline:
        if prompt is not None or token is not None:
            raise SplitwisePlanError(f"{d.name} is a baseline (one pool): give --machines RANGE, not --prompt/--token")
        if machines is None:
            raise SplitwisePlanError(f"{d.name} needs --machines RANGE (e.g. 10:40)")
        grid = [(m, 0) for m in parse_counts(machines, "--machines")]
    else:
        if machines is not None:
            raise SplitwisePlanError(f"{d.name} has a prompt and a token pool: give --prompt and --token ranges, "
                                     "not --machines")
        missing = [f for f, v in (("--prompt", prompt), ("--token", token)) if v is None]
        if missing:
            raise SplitwisePlanError(f"{d.name} needs {' and '.join(missing)} (ranges like 20:30)")
        ps, ts = parse_counts(prompt, "--prompt"), parse_counts(token, "--token")
        if len(ps) * len(ts) > MAX_GRID_POINTS:
            raise SplitwisePlanError(f"the grid has {len(ps) * len(ts):,} points; at most {MAX_GRID_POINTS:,}")
        grid = [(p, t) for p in ps for t in ts]
    _check_outputs(json_out, csv_out, plot, inputs=_input_files(
        trace=trace, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    method = check_method(method, auto=True)
    inp = resolve_inputs(model=model, tp=tp, workload=workload, rps=rps, trace=trace, duration=duration,
                         seed=seed, slo=slo, machines_file=machines_file, profiles=profiles,
                         method="events" if method == AUTO else method, transfer=transfer, bandwidth=bandwidth)
    if method == AUTO:
        inp = auto_method(inp, d)
    if jobs is not None and jobs < 0:
        raise SplitwisePlanError(f"--jobs must be 0 (one per core) or more, got {jobs}")
    sim = inp.simulator(stop_early=stop_early)
    fluid_caution(sim, d)
    results, ckpt, others = _resumable_grid(sim, inp, d, grid, path_for(csv_out, json_out, plot), jobs=jobs,
                                            quiet=quiet, stop_early=stop_early)
    best = optimum([design_point(r) for r in results])
    best_result = next((r for r in results if best and (r.prompt_machines, r.token_machines)
                        == (best["prompt"], best["token"])), None)
    summary = {"design": d.name, "points": len(results), "passing": sum(r.slo_met for r in results),
               "optimum": None if best_result is None else {
                   "prompt_machines": best_result.prompt_machines, "token_machines": best_result.token_machines,
                   "machines": best_result.machines, "cost": round(best_result.cost, 6),
                   "power": round(best_result.power, 6)}}
    if csv_out is not None:
        write_csv(csv_out, [inp.csv_row(r) for r in results])
    if plot is not None:
        write_plot(plot, sweep=results, title=f"{d.name} design space, {inp.describe()}")
    doc = build_report("sweep", inp.report(), results, sweep=summary) if json_out is not None else None
    if json_out not in (None, STDOUT):
        write_json(json_out, doc)
    if ckpt is not None:   # every output is written: nothing of this grid is left to resume
        ckpt.finish(others, "design points")
    if json_out == STDOUT:
        _print_json(doc)
        return
    c = console(stderr=stdout_taken(json_out, csv_out, plot))
    table = Table(title=f"Sweep of {d.name}: {len(results):,} design points, {summary['passing']:,} hold all SLOs")
    for col in ("prompt", "token", "machines", "cost", "power", "tightest SLO", "value / limit", "holds"):
        table.add_column(col, justify="right")
    ok = sorted((r for r in results if r.slo_met), key=lambda r: rank_key(design_point(r)))[:10]
    for r in ok:
        t = r.tightest
        table.add_row(str(r.prompt_machines), str(r.token_machines) if r.token_machines else "-", str(r.machines),
                      f"{r.cost:.4g}", f"{r.power:.4g}", f"{t['metric'].upper()} P{t['percentile']:g}",
                      _fmt(t["ratio"], 3), "[green]yes[/]")
    if ok:
        table.caption = f"the {len(ok)} cheapest passing design points"
        c.print(table)
        c.print(inp.describe())
    else:
        c.print(f"no design point of the {len(results):,} holds all SLOs ({inp.describe()})")
    for p in (json_out, csv_out, plot):
        if p is not None:
            _note(f"wrote {p}", quiet)


from . import cli_check as _cli_check  # noqa: E402,F401  (check and capacity; they use the options above)
from . import cli_worker as _cli_worker  # noqa: E402,F401  (the worker command; it uses ReportCommand above)
