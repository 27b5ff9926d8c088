"""The planner's command: ``splitwise-plan --goal min-cost --rps 70`` (the root options, no subcommand).

It builds a :class:`~splitwise_plan.planning.PlanRequest` from the options (whose defaults and checks
live there), runs the plan with a progress bar per design, keeps finished designs in a checkpoint
beside the first report file, then writes the reports and prints the ranking table.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from splitwise_plan import __version__
from splitwise_plan.cli.app import app, console
from splitwise_plan.cli.options import opt_bandwidth, opt_transfer
from splitwise_plan.cli.options import STDOUT
from splitwise_plan.cli.output import check_output_options, note, print_json, stdout_taken


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
    from splitwise_plan.planning import PlanRequest

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
    from splitwise_plan.report.checkpoint import stopped_note
    from splitwise_plan.report.plan import plan_report, render, write_reports
    from splitwise_plan.planning import plan
    from splitwise_plan.cli.progress import progress

    check_output_options(json_out, csv_out, plot, inputs=req.input_files())   # a bad path fails now, not after the run
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
            stopped = stopped_note(ckpt, n, "plan", "designs", len(others), also)
            if stopped:
                sys.stderr.write(stopped + "\n")
            raise
    written = write_reports(result, json_path=None if json_out == STDOUT else json_out,
                            csv_path=csv_out, plot_path=plot)
    if ckpt is not None:
        ckpt.finish(others, "designs")
    if json_out == STDOUT:
        print_json(plan_report(result))
    else:
        render(result, console(stderr=stdout_taken(json_out, csv_out, plot)))
    for path in written:
        note(f"wrote {path}", quiet)


def _plan_checkpoint(req, *outputs, quiet: bool) -> tuple:
    """The checkpoint of a plan beside its first output file (None: no file) and the designs it kept from
    an earlier run of the same plan, stopped: {design: DesignPlan} (also of designs this one does not name)."""
    from splitwise_plan.report.checkpoint import Checkpoint, path_for, plan_fingerprint

    where = path_for(*outputs)
    if where is None:
        return None, {}
    # its notes say what becomes of the user's files: printed even with --quiet
    ckpt = Checkpoint(where, plan_fingerprint(req, __version__), say=lambda why: note(why, False), kind="plan")
    loaded = ckpt.load()   # a file not this plan's is moved aside once a design is done (the inputs good)
    kept = [d for d in loaded if d in req.designs]
    if kept:
        note(f"resuming: {len(kept)} of {len(req.designs)} designs kept in {where} ({', '.join(kept)})", False)
    return ckpt, loaded


def _print_version(given: bool) -> None:
    """``--version``: the version, then exit (before any other option is read)."""
    if given:
        typer.echo(__version__)
        raise typer.Exit()
