"""The ``splitwise-plan`` command line: a thin layer over the Python API.

Every command reports a ``SplitwisePlanError`` as one line ``error: <message>`` on
stderr and exits with status 2. Later commands (simulate, sweep, check, capacity,
worker) and the root planner options hang off the same ``app``.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from . import __version__
from .errors import SplitwisePlanError, Stopped

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 3   # a bug: never 1, which check and capacity keep for "the SLOs fail"


def _click_class(name: str) -> type:
    """Click's exception class ``name`` as typer uses it: typer >= 0.26 vendors click (its own classes,
    and no longer installs the click package), older typer raises click's own."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


USAGE_ERROR = _click_class("UsageError")           # NoSuchOption, BadParameter, ...
CLICK_EXCEPTION = _click_class("ClickException")


def report_error(exc: SplitwisePlanError) -> None:
    """Print a user error as the one line ``error: <message>`` on stderr."""
    message = " ".join(str(exc).split())
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()


def report_internal_error(exc: BaseException) -> int:
    """Print an unexpected exception (a bug) as one line and return its exit status; the traceback
    when SPLITWISE_PLAN_TRACEBACK is set (to report it)."""
    if os.environ.get("SPLITWISE_PLAN_TRACEBACK"):
        import traceback
        traceback.print_exception(exc)
    message = " ".join(f"{type(exc).__name__}: {exc}".split())
    sys.stderr.write(f"error: internal error of splitwise-plan {__version__} (a bug; please report it, with the "
                     f"traceback that SPLITWISE_PLAN_TRACEBACK=1 prints): {message}\n")
    sys.stderr.flush()
    return EXIT_INTERNAL_ERROR


EXIT_PIPE_CLOSED = 128 + getattr(signal, "SIGPIPE", 13)   # what a shell reports of a program SIGPIPE ended


def _reader_gone() -> int:
    """Standard output's reader went away (``| head``): stop quietly, as a program that SIGPIPE ends
    does, with its exit status; nothing more is written there (nor flushed at exit, which would fail)."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):   # no file descriptor (a test's captured output)
        pass
    return EXIT_PIPE_CLOSED


class _Group(TyperGroup):
    """Typer group that turns SplitwisePlanError from any command into exit status 2."""

    def parse_args(self, ctx, args):  # noqa: D102 - the root (planner) options: one line, exit 2
        from .cli_simulate import optional_values
        try:
            upto = next((i for i, a in enumerate(args) if a in self.commands), len(args))
            if 0 < upto < len(args) and not set(args[:upto]) <= {"--help", "-h", "--version"}:   # the planner's options would be ignored
                raise SplitwisePlanError(
                    f"{' '.join(args[:upto])} comes before the command {args[upto]!r}, where it is a planner "
                    f"option that {args[upto]!r} ignores: put the command first (splitwise-plan {args[upto]} "
                    f"--help lists its options)")
            rest = super().parse_args(ctx, optional_values(args[:upto]) + list(args[upto:]))
            reject_stream_options(ctx)
            return rest
        except USAGE_ERROR as exc:
            if not args and self.no_args_is_help:   # click's "no arguments: show the help"
                raise
            report_error(SplitwisePlanError(exc.format_message()))
            raise typer.Exit(code=EXIT_USER_ERROR) from None
        except SplitwisePlanError as exc:
            report_error(exc)
            raise typer.Exit(code=EXIT_USER_ERROR) from None

    def invoke(self, ctx):  # noqa: D102 - see class docstring; a command's usage errors are one line too
        try:
            out = super().invoke(ctx)
            sys.stdout.flush()   # a reader gone (| head) shows here, not as click's bare exit 1 at exit
            return out
        except BrokenPipeError:
            raise typer.Exit(code=_reader_gone()) from None
        except USAGE_ERROR as exc:
            report_error(SplitwisePlanError(_usage_line(exc)))
            raise typer.Exit(code=EXIT_USER_ERROR) from None
        except SplitwisePlanError as exc:
            report_error(exc)
            raise typer.Exit(code=EXIT_USER_ERROR) from None
        except (typer.Exit, typer.Abort, CLICK_EXCEPTION):
            raise
        except Exception as exc:   # a bug: one line, exit 3
            raise typer.Exit(code=report_internal_error(exc)) from None


def reject_stream_options(ctx) -> None:
    """With ``--trace`` the file is the stream: options that shape a generated one, given on the
    command line, would be silently ignored, so they are an error."""
    if ctx.params.get("trace") is None:
        return
    given = [f"--{n}" for n in ("workload", "duration", "seed", "seeds") if n in ctx.params
             and getattr(ctx.get_parameter_source(n), "name", "DEFAULT") in ("COMMANDLINE", "ENVIRONMENT")]
    if given:
        raise SplitwisePlanError(f"--trace replays the file as it is; {', '.join(given)} "
                                 f"{'shapes' if len(given) == 1 else 'shape'} a generated stream only: drop "
                                 f"{'it' if len(given) == 1 else 'them'} or --trace")


def _usage_line(exc) -> str:
    """A click usage error as one line, naming the command and pointing to its help."""
    ctx = getattr(exc, "ctx", None)
    where = f"{ctx.command_path}: " if ctx is not None and ctx.command_path else ""
    return f"{where}{exc.format_message()} (see --help)"


app = typer.Typer(
    cls=_Group,
    name="splitwise-plan",
    help="Plan LLM inference clusters with split prompt and token machine pools (Splitwise, ISCA 2024).\n\n"
         "With no command, the options below plan one: splitwise-plan --goal min-cost --rps 70. "
         "The commands simulate, sweep, check and capacity study one cluster design.",
    no_args_is_help=False,
    invoke_without_command=True,
    subcommand_metavar="[COMMAND [ARGS]...]",   # none: the planner
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class _Console(Console):
    """A rich console whose closed pipe ends the command as any other write to it does (see
    ``_reader_gone``), not with rich's exit status 1, which ``check`` keeps for "the SLOs fail"."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console(stderr: bool = False) -> Console:
    """Rich console for stdout (``stderr``: for stderr, when a report takes stdout); no colour and no
    80-column squeeze when it is not a terminal."""
    c = _Console(highlight=False, stderr=stderr)
    if not c.is_terminal:
        c = _Console(highlight=False, stderr=stderr, width=max(c.width, 160))
    return c


def opt_transfer(panel: Optional[str] = None):
    """``--transfer``, shared by the planner and the simulation commands."""
    return typer.Option("serialized", "--transfer", metavar="serialized|layerwise", rich_help_panel=panel,
                        help="KV-cache transfer from prompt to token machine: after the prompt (serialized, the "
                             "reference's default) or layer by layer during it (layerwise, ~90% hidden).")


def opt_bandwidth(panel: Optional[str] = None):
    """``--bandwidth``, shared by the planner and the simulation commands."""
    return typer.Option(200.0, "--bandwidth", metavar="GIB_S", rich_help_panel=panel,
                        help="KV-cache transfer bandwidth between two machines, GiB/s (the reference's 200; "
                             "12.5 for its Ethernet variant).")


@app.callback()
def root(
    ctx: typer.Context,
    goal: Optional[str] = typer.Option(
        None, "--goal", help="min-cost or min-power (at --rps), max-throughput (within --budget-power/--budget-cost). "
                             "Default: min-cost, or max-throughput when a budget is given."),
    rps: Optional[float] = typer.Option(None, "--rps", help="Requests per second to hold (iso-throughput goals)."),
    budget_power: Optional[str] = typer.Option(
        None, "--budget-power", help="Power budget: machines, e.g. 40xH100, or a number in the machine catalog's "
                                     "units (a DGX-H100 is 44; see `splitwise-plan machines`) (max-throughput)."),
    budget_cost: Optional[str] = typer.Option(
        None, "--budget-cost", help="Cost budget: machines, e.g. 40xH100, or a number in the machine catalog's "
                                    "units (a DGX-H100 is 4.76; see `splitwise-plan machines`) (max-throughput)."),
    model: str = typer.Option("bloom-176b", "--model", help=(
        "Model: bloom-176b or llama2-70b (the architectures the tool knows; profiles may be your own).")),
    workload: str = typer.Option("coding", "--workload", "-w", help=(
        "coding, conversation, or a trace CSV (Azure or reference format) to draw sizes from.")),
    trace: Optional[Path] = typer.Option(None, "--trace", metavar="FILE", help=(
        "Replay this trace (max-throughput scales its arrival times to each rate it tries).")),
    slo: Optional[Path] = typer.Option(None, "--slo", "--slos", metavar="FILE", help="SLO TOML file (default: the paper's)."),
    machines_file: Optional[Path] = typer.Option(None, "--machines-file", metavar="FILE", help=(
        "Machine TOML file, overriding or extending the builtin machine catalog.")),
    profiles: Optional[Path] = typer.Option(None, "--profiles", metavar="FILE", help=(
        "Profile CSV. Default: the shipped perf_model.csv.")),
    designs: str = typer.Option("AA,HH,HA,HHcap,A100,H100", "--designs", help=(
        "Comma list of designs; machine types of --machines-file as PROMPT:TOKEN or baseline:MACHINE.")),
    duration: float = typer.Option(120.0, "--duration", metavar="S", help="Length of the generated stream, seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed of the request stream."),
    seeds: int = typer.Option(1, "--seeds", help="Plan over this many streams (seed..seed+K-1): search and confirm on their worst."),
    jobs: int = typer.Option(0, "--jobs", "-j", help="Parallel workers (0: all cores)."),
    tp: int = typer.Option(8, "--tp", help="Tensor parallelism of the model on a machine."),
    strategy: str = typer.Option("frontier", "--strategy", help="Search: frontier, optuna or exhaustive."),
    search_method: str = typer.Option("auto", "--search-method", help=(
        "Search simulator: fluid (the vectorized model, many designs a pass), events, or auto (fluid where "
        "it is installed, else events).")),
    confirm_method: str = typer.Option("events", "--confirm-method", help="Confirming simulator: events or fluid."),
    margin: float = typer.Option(0.0, "--margin", help=(
        "Hold every SLO with this margin: the tightest SLO's value/limit below 1 - margin, in the search and "
        "the confirmation.")),
    transfer: str = opt_transfer(),
    bandwidth: float = opt_bandwidth(),
    storage: Optional[str] = typer.Option(
        None, "--storage", metavar="URL",
        help="Keep the search's Optuna trials: sqlite:///plan.db or postgresql://USER@HOST/DB (default: in memory). "
             "Resumable; `splitwise-plan worker` processes can join."),
    study: Optional[str] = typer.Option(
        None, "--study", metavar="NAME",
        help="Study name prefix in --storage, one study NAME/<SHORT> per design, e.g. NAME/HH (default: derived "
             "from the inputs)."),
    json_out: Optional[str] = typer.Option(
        None, "--json", metavar="[FILE]", rich_help_panel="Output",
        help="Write the JSON report (inputs, each design's result, winner, gains) to FILE; '-' or no FILE: print it instead of the table."),
    csv_out: Optional[Path] = typer.Option(
        None, "--csv", metavar="FILE", rich_help_panel="Output",
        help="Write one CSV row per design point the search simulated, and one per design with its confirmed answer."),
    plot: Optional[Path] = typer.Option(
        None, "--plot", metavar="FILE", rich_help_panel="Output",
        help="Cost, power and throughput of the designs (like the paper's Fig. 18): .png, .svg or .html."),
    quiet: bool = typer.Option(False, "--quiet", "-q", rich_help_panel="Output", help=(
        "No progress bar and no 'wrote FILE' notes (a stopped run still says what it kept).")),
    _version: bool = typer.Option(False, "--version", is_eager=True, callback=lambda v: _print_version(v),
                                  help="Print the version and exit (as the version command)."),
) -> None:
    """Plan LLM inference clusters with split prompt and token machine pools (Splitwise, ISCA 2024).

    With no command: plan, e.g. `splitwise-plan --goal min-cost --rps 70`.
    """
    if ctx.invoked_subcommand is not None:
        return
    if goal is None and rps is None and budget_power is None and budget_cost is None and trace is None:
        typer.echo(ctx.get_help())
        return
    from .planner import PlanRequest

    if goal is None:
        goal = "max-throughput" if (budget_power or budget_cost) else "min-cost"
    req = PlanRequest(
        goal=goal, rps=rps, budget_power=budget_power, budget_cost=budget_cost, model=model, workload=workload,
        trace=str(trace) if trace else None, slos=str(slo) if slo else None,
        machines_file=str(machines_file) if machines_file else None, profiles=str(profiles) if profiles else None,
        designs=designs, duration=duration, seed=seed, seeds=seeds, jobs=jobs, tp=tp, strategy=strategy,
        search_method=search_method, confirm_method=confirm_method, margin=margin, storage=storage, study=study,
        transfer=transfer, bandwidth=bandwidth)
    _plan_and_report(req, json_out, csv_out, plot, quiet)


def _plan_and_report(req, json_out: Optional[str], csv_out: Optional[Path], plot: Optional[Path],
                     quiet: bool) -> None:
    """Run the planner with a progress bar (per finished design), then write the reports and the table."""
    from .checkpoint import stopped_note
    from .cli_simulate import STDOUT, _check_outputs, _note, _print_json, stdout_taken
    from .plan_reports import plan_report, render, write_reports
    from .planner import plan
    from .progress import progress

    _check_outputs(json_out, csv_out, plot, inputs=req.input_files())   # a bad path fails now, not after the run
    n = len(req.designs)
    ckpt, loaded = _plan_checkpoint(req, csv_out, None if json_out == STDOUT else json_out, plot, quiet=quiet)
    kept = {d: p for d, p in loaded.items() if d in req.designs}
    others = [d for d in loaded if d not in req.designs]   # kept for a plan that names them: never dropped
    with progress(n, f"plan {req.goal}, {n} design{'s' if n > 1 else ''}", quiet=quiet) as bar:
        def done(dp) -> None:
            bar.advance(1)
            bar.update(description=f"plan {req.goal}: {dp.design} {dp.status} in {dp.seconds:.1f} s")
            if ckpt is not None and dp.design not in kept:   # the first makes the file this plan's
                ckpt.keep([dp])
        try:
            result = plan(req, on_design=done, done=kept)
        except KeyboardInterrupt:
            also = "" if req.goal == "max-throughput" else "; --storage keeps every simulation"   # (it refuses one)
            note = stopped_note(ckpt, n, "plan", "designs", len(others), also)
            if note:
                sys.stderr.write(note + "\n")
            raise
    written = write_reports(result, json_path=None if json_out == STDOUT else json_out,
                            csv_path=csv_out, plot_path=plot)
    if ckpt is not None:
        ckpt.finish(others, "designs")
    if json_out == STDOUT:
        _print_json(plan_report(result))
    else:
        render(result, console(stderr=stdout_taken(json_out, csv_out, plot)))
    for path in written:
        _note(f"wrote {path}", quiet)


def _plan_checkpoint(req, *outputs, quiet: bool) -> tuple:
    """The checkpoint of a plan beside its first output file (None: no file) and the designs it kept from
    an earlier run of the same plan, stopped: {design: DesignPlan} (also of designs this one does not name)."""
    from .checkpoint import Checkpoint, path_for, plan_fingerprint
    from .cli_simulate import _note

    where = path_for(*outputs)
    if where is None:
        return None, {}
    # its notes say what becomes of the user's files: printed even with --quiet
    ckpt = Checkpoint(where, plan_fingerprint(req, __version__), say=lambda why: _note(why, False), kind="plan")
    loaded = ckpt.load()   # a file not this plan's is moved aside once a design is done (the inputs good)
    kept = [d for d in loaded if d in req.designs]
    if kept:
        _note(f"resuming: {len(kept)} of {len(req.designs)} designs kept in {where} ({', '.join(kept)})", False)
    return ckpt, loaded


def _print_version(given: bool) -> None:
    """``--version``: the version, then exit (before any other option is read)."""
    if given:
        typer.echo(__version__)
        raise typer.Exit()


@app.command("help")
def help_cmd(ctx: typer.Context, command: Optional[str] = typer.Argument(
        None, metavar="[COMMAND]", help="A command (simulate, sweep, check, ...); none: the planner's options.")) -> None:
    """Show a command's help, or the planner's (as COMMAND --help and --help do)."""
    root = ctx.parent
    if command is None:
        text = root.get_help()
    else:
        cmd = root.command.get_command(root, command)
        if cmd is None:
            raise SplitwisePlanError(f"help: no command {command!r}; the commands: "
                                     f"{', '.join(root.command.list_commands(root))}")
        text = cmd.get_help(type(ctx)(cmd, info_name=command, parent=root))
    if text:   # (typer's rich help prints itself and returns nothing)
        typer.echo(text)


@app.command("version")
def version_cmd() -> None:
    """Print the splitwise-plan version."""
    typer.echo(__version__)


@app.command("profiles")
def profiles_cmd(
    profiles: Optional[Path] = typer.Option(
        None, "--profiles", metavar="FILE",
        help="Profile CSV (columns model, hardware, prompt_size, batch_size, token_size, prompt_time, "
             "token_time, tensor_parallel; times in ms). Default: the shipped perf_model.csv."),
    seed: int = typer.Option(0, "--seed", help="Seed of the 80:20 train:test split for the MAPE."),
) -> None:
    """List the performance profiles and the latency model's held-out error (MAPE)."""
    from .profiles import load_profiles, profile_accuracy

    ps = load_profiles(profiles)
    acc = {(a.model, a.hardware, a.tensor_parallel): a for a in profile_accuracy(ps, seed=seed)}
    table = Table(title=f"Profiles in {ps.source}", caption=(
        f"MAPE: latency model fit on per-batch_tokens medians of 80% of the rows, "
        f"tested on the other 20% (seed {seed})."))
    for col in ("model", "hardware", "TP", "rows", "batch_tokens", "prompt MAPE %", "token MAPE %"):
        table.add_column(col, justify="left" if col in ("model", "hardware") else "right")
    for e in ps.entries():
        a = acc[(e.model, e.hardware, e.tensor_parallel)]
        med = ps.medians(e.model, e.hardware, e.tensor_parallel)
        bts = med["batch_tokens"]
        table.add_row(e.model, e.hardware, str(e.tensor_parallel), str(e.n_points),
                      f"{int(bts.min())}-{int(bts.max())} ({len(bts)})",
                      f"{a.prompt_mape_pct:.2f}", f"{a.token_mape_pct:.2f}")
    if acc:
        table.add_section()
        table.add_row("mean of all", "", "", "", "",
                      f"{sum(a.prompt_mape_pct for a in acc.values()) / len(acc):.2f}",
                      f"{sum(a.token_mape_pct for a in acc.values()) / len(acc):.2f}")
    console().print(table)


@app.command("workloads")
def workloads_cmd(
    names: Optional[list[str]] = typer.Argument(
        None, metavar="[NAME_OR_FILE]...",
        help="Workload names (coding, conversation) or trace CSV files. Default: the shipped ones."),
    rate: Optional[float] = typer.Option(
        None, "--rps", "--rate", help="Also generate a Poisson stream at this rate (requests/s) and show it."),
    duration: float = typer.Option(120.0, "--duration", help="Length of the generated stream, seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed of the generated stream."),
) -> None:
    """List the workloads with request counts, trace rate and size statistics."""
    from .workloads import load_trace, load_workload, workload_names

    columns = []  # (title, summary, stream)
    for name in names or workload_names():
        w = load_workload(name)
        columns.append((w.name, w.summary(), load_trace(name)))
        if rate is not None:
            gen = w.generate(rate, duration_s=duration, seed=seed)
            gw = type(w)(gen.name, gen.prompt_tokens, gen.output_tokens)
            columns.append((f"{w.name} @ {rate:g} req/s, {duration:g} s", gw.summary(), gen))
    table = Table(title="Workloads (tokens per request; output includes the first token)")
    table.add_column("statistic")
    for title, _, _ in columns:
        table.add_column(title, justify="right")
    table.add_row("requests", *(str(s["requests"]) for _, s, _ in columns))
    table.add_row("span, s", *(f"{st.duration_s:.1f}" for _, _, st in columns))
    table.add_row("rate, req/s", *(f"{st.rate:.3f}" for _, _, st in columns))
    for label in ("prompt", "output"):
        for q in ("p50", "p90", "p99"):
            table.add_row(f"{label} {q.upper()}", *(f"{s[f'{label}_{q}']:.1f}" for _, s, _ in columns))
        table.add_row(f"{label} mean", *(f"{s[f'{label}_mean']:.1f}" for _, s, _ in columns))
    console().print(table)


@app.command("slos")
def slos_cmd(
    slos: Optional[Path] = typer.Option(
        None, "--slo", "--slos", metavar="FILE", help="SLO TOML file. Default: the paper's Table VI (slos/paper.toml)."),
) -> None:
    """Show the latency SLOs a cluster design must meet (each strictly below its limit)."""
    from .slos import load_slos

    s = load_slos(slos)
    table = Table(title=f"SLO set {s.name!r} (reference for slowdowns: {s.reference_hardware}, "
                        f"TP{s.reference_tensor_parallel})")
    for col in ("metric", "percentile", "limit", "unit"):
        table.add_column(col, justify="right" if col in ("percentile", "limit") else "left")
    for slo in s.slos:
        table.add_row(slo.metric.upper(), f"P{slo.percentile:g}", f"< {slo.limit:g}", slo.unit)
    console().print(table)


@app.command("machines")
def machines_cmd(
    machines: Optional[Path] = typer.Option(
        None, "--machines-file", "--machines", metavar="FILE", help="Machine TOML file overriding or extending the builtins."),
) -> None:
    """Show the machine types with GPUs, HBM, cost and provisioned power."""
    from .machines import GIB, load_machines

    table = Table(title="Machines (cost and power per machine, in the reference's relative units)")
    for col in ("name", "hardware", "GPUs", "HBM/GPU GiB", "cost", "power"):
        table.add_column(col, justify="left" if col in ("name", "hardware") else "right")
    for m in load_machines(machines).values():
        table.add_row(m.name, m.hardware, str(m.gpus), f"{m.hbm_bytes_per_gpu / GIB:g}",
                      f"{m.cost:g}", f"{m.power:g}")
    console().print(table)


def _writable(stream) -> bool:
    """Whether a standard stream can be written: not closed by the caller (``2>&-`` leaves Python None
    there, or, when a launcher such as a pyenv shim opened a file of its own at that descriptor first,
    a descriptor open for reading only). A stream with no descriptor (a test's capture) counts."""
    if stream is None:
        return False
    try:
        import fcntl
        return fcntl.fcntl(stream.fileno(), fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
    except (ImportError, AttributeError, ValueError, io.UnsupportedOperation):   # no fcntl, or no descriptor
        return True
    except OSError:   # a descriptor not open at all
        return False


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the app; a user error becomes one stderr line and exit 2.

    A first Ctrl-C stops the run as usual (partial work kept, worker processes shut down); a
    second one, while that cleanup runs, ends the worker processes and exits at once (130).
    """
    import warnings
    # a stopped run cancels the workers' tasks on purpose: joblib's note of it is noise here
    warnings.filterwarnings("ignore", message=r".*tasks which were still being processed by the workers")
    main_thread = threading.current_thread() is threading.main_thread()
    own = main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    ends = [sig for sig in _END_SIGNALS if main_thread and signal.getsignal(sig) == signal.SIG_DFL]
    if own:
        signal.signal(signal.SIGINT, _first_interrupt)
    for sig in ends:
        signal.signal(sig, _terminated)
    closed = [name for name in ("stdout", "stderr") if not _writable(getattr(sys, name))]
    for name in closed:   # closed by the caller (>&-): what would go there goes nowhere, the run goes on
        setattr(sys, name, open(os.devnull, "w"))
    try:
        app(args=argv, prog_name="splitwise-plan")
    except BrokenPipeError:   # outside a command (its help, say)
        return _reader_gone()
    except SplitwisePlanError as exc:  # raised outside a command (e.g. during option parsing)
        report_error(exc)
        return EXIT_USER_ERROR
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except Exception as exc:   # a bug outside a command's run
        return report_internal_error(exc)
    finally:
        for name in closed:
            getattr(sys, name).close()
            setattr(sys, name, None)
        if own:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in ends:   # after a stop by one of them, the same stop sent again to the group finds it ended
            stopped = signal.getsignal(sig) not in (_terminated, signal.SIG_DFL)
            signal.signal(sig, signal.SIG_IGN if stopped else signal.SIG_DFL)
    return 0


def _first_interrupt(signum, frame) -> None:
    """Ctrl-C: stop the run, keeping what it has finished. ``timeout -s INT`` and CI runners signal the
    process and then its group, so the same SIGINT can arrive twice at once: only one that comes
    later than a hand could press it (``_ECHO_S``) is a second Ctrl-C."""
    first = time.monotonic()
    signal.signal(signal.SIGINT, _second_after(first, _ECHO_S))
    _wait_out_echo(first)
    raise KeyboardInterrupt


def _second_after(first: float, window_s: float):
    """A handler that ends the run at once (:func:`_second_interrupt`) for a signal that comes more than
    ``window_s`` after the ``first`` one; one sooner is that one's echo, the same stop."""
    def again(signum, frame) -> None:
        if time.monotonic() - first >= window_s:
            _second_interrupt(signum, frame)
    return again


_ECHO_S = 0.1   # a SIGINT this soon after the first is its echo through the process group, not a second Ctrl-C


def _wait_out_echo(first: float) -> None:
    """Let a stop signal's echo through the process group arrive before the cleanup starts: the echo
    kills what the cleanup starts meanwhile (joblib's worker shutdown runs ``pgrep``, and, its
    SIGINT-killed, leaves a traceback and may hang)."""
    time.sleep(max(0.0, first + _ECHO_S - time.monotonic()))


# SIGTERM (kill, a cancelled CI job) and SIGHUP (its terminal closed, where there is one) stop a run as Ctrl-C does
_END_SIGNALS = tuple(s for s in (signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None)
_REPEAT_S = 2.0   # one of them this soon after the first is the same stop, not a second one


def _terminated(signum, frame) -> None:
    """SIGTERM (a cancelled CI job, kill) or SIGHUP (the terminal closed): end the worker processes now
    (none is left running on its own), then stop as Ctrl-C does, keeping what the run has finished.

    ``timeout`` and some CI runners signal the process and then its whole group, so the same stop
    arrives twice at once: only one that comes later ends the run at once, as a second Ctrl-C does."""
    first = time.monotonic()
    signal.signal(signal.SIGINT, _second_interrupt)
    for sig in _END_SIGNALS:
        signal.signal(sig, _second_after(first, _REPEAT_S))
    _wait_out_echo(first)
    _end_descendants()
    raise Stopped(signal.Signals(signum).name)


def _end_descendants() -> None:
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass


def _second_interrupt(signum, frame) -> None:
    """Ctrl-C again while the first one's cleanup runs: end the worker processes and exit now."""
    _end_descendants()
    sys.stderr.write("stopped (Ctrl-C twice)\n")
    sys.stderr.flush()
    os._exit(130)


def _descendants(pid: int) -> list[int]:
    """The processes started by ``pid`` and by them (Linux's /proc; none where it is absent)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for f in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                kids = [int(x) for x in f.read_text().split()]
            except (OSError, ValueError):
                continue
            out += kids
            todo += kids
    return out


# simulate and sweep live in their own module; importing it registers them on ``app`` (and, at its end,
# check and capacity, then the worker command, which build on it: any of these modules may be imported first)
from . import cli_simulate as _cli_simulate  # noqa: E402,F401
