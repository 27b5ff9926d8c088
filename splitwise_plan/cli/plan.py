"""The planner's command: ``splitwise-plan --goal min-cost --rps 70`` (the root options, no subcommand).

It builds a :class:`~splitwise_plan.planning.PlanRequest` from the options (whose defaults and checks
live there; one per rate of ``--rps 50,70``), runs the plan with a progress bar per design, keeps finished designs in a checkpoint
beside the first report file (with none, in the user cache folder), then writes the reports and prints the ranking
table. It exits 1 when no design meets the goal (at one of the rates), as ``check`` does when its gate fails.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from splitwise_plan import __version__
from splitwise_plan.cli.app import EXIT_NO_ANSWER, app, console
from splitwise_plan.cli.options import ADV, RATES_METAVAR, STDOUT, opt_bandwidth, opt_transfer, parse_rates
from splitwise_plan.cli.output import check_output_options, note, print_json, stdout_taken
from splitwise_plan.errors import plural
from splitwise_plan.planning.options import PLAN_OPTIONS, option_name


def _plan_option(name: str, *aliases: str, **kw):
    """The root option of a plan field: its default and help from the plan's table (planning/options.py)."""
    kw.setdefault("help", PLAN_OPTIONS[name].help)
    return typer.Option(PLAN_OPTIONS[name].default, option_name(name), *aliases, **kw)


#: The root's help panels, as the commands have them: what a plan asks (the default panel), how it
#: searches (Advanced) and what it writes (Output).
ADVANCED = ("jobs", "strategy", "search_method", "confirm_method", "storage", "study", "stack")


def _root_option(name: str, *aliases: str, **kw):
    """A root option in its help panel (:data:`ADVANCED`, else the default one)."""
    return _plan_option(name, *aliases, rich_help_panel=ADV if name in ADVANCED else None, **kw)


@app.callback()
def root(
    ctx: typer.Context,
    goal: Optional[str] = _root_option("goal"),
    rps: Optional[str] = _root_option("rps", metavar=RATES_METAVAR, help=(
        PLAN_OPTIONS["rps"].help + " A comma list (50,70) plans each rate in turn.")),
    budget_power: Optional[str] = _root_option("budget_power"),
    budget_cost: Optional[str] = _root_option("budget_cost"),
    model: str = _root_option("model", metavar="NAME|CONFIG"),
    dtype: Optional[str] = _root_option("dtype", metavar="bf16|fp8"),
    stack: Optional[Path] = _root_option("stack", metavar="FILE"),
    workload: str = _root_option("workload", "-w"),
    trace: Optional[Path] = _root_option("trace", metavar="FILE"),
    slo: Optional[Path] = _root_option("slos", "--slos", metavar="FILE"),
    machines_file: Optional[Path] = _root_option("machines_file", metavar="FILE"),
    profiles: Optional[Path] = _root_option("profiles", metavar="FILE"),
    designs: str = _root_option("designs"),
    duration: float = _root_option("duration", metavar="S"),
    seed: int = _root_option("seed"),
    seeds: int = _root_option("seeds", metavar="K"),
    margin: float = _root_option("margin", metavar="M"),
    headroom: float = _root_option("headroom", metavar="H"),
    latency_error: Optional[float] = _root_option("latency_error", metavar="F"),
    tp: Optional[str] = _root_option("tp", metavar="N|P:T|auto"),
    jobs: int = _root_option("jobs", "-j"),
    strategy: str = _root_option("strategy"),
    search_method: str = _root_option("search_method"),
    confirm_method: str = _root_option("confirm_method"),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
    storage: Optional[str] = _root_option("storage", metavar="URL"),
    study: Optional[str] = _root_option("study", metavar="NAME"),
    json_out: Optional[str] = typer.Option(
        None, "--json", metavar="[FILE]", rich_help_panel="Output",
        help="Write the JSON report (inputs, each design's result, winner, gains) to FILE; '-' or no FILE: print it "
             "instead of the table. With several --rps rates, one file per rate (FILE-50rps.json)."),
    csv_out: Optional[Path] = typer.Option(
        None, "--csv", metavar="FILE", rich_help_panel="Output",
        help="Write one CSV row per design point the search simulated, and one per design with its confirmed answer."),
    plot: Optional[Path] = typer.Option(
        None, "--plot", metavar="FILE", rich_help_panel="Output",
        help="Cost, power and throughput of the designs (like the paper's Fig. 18): .png, .svg or .html."),
    cluster_out: Optional[Path] = typer.Option(
        None, "--cluster-out", metavar="FILE", rich_help_panel="Output",
        help="Write the winner as a cluster file (its machines and counts, the model, dtype, stack, each pool's TP, "
             "and the plan's rate and streams), which `splitwise-plan check FILE` re-checks on the plan's own streams."),
    quiet: bool = typer.Option(False, "--quiet", "-q", rich_help_panel="Output", help=(
        "No progress bar and no 'wrote FILE' notes (a stopped run still says what it kept).")),
    _version: bool = typer.Option(False, "--version", is_eager=True, callback=lambda v: _print_version(v),
                                  help="Print the version and exit (as the version command)."),
) -> None:
    """Plan LLM inference clusters with split prompt and token machine pools (Splitwise, ISCA 2024).

    With no command: plan, e.g. `splitwise-plan --goal min-cost --rps 70`; exit 1 when no design meets
    the goal.
    """
    if ctx.invoked_subcommand is not None:
        return
    if goal is None and rps is None and budget_power is None and budget_cost is None and trace is None:
        typer.echo(ctx.get_help())
        return
    from splitwise_plan.planning import PlanRequest

    rates = parse_rates(rps) or [None]
    reqs = [PlanRequest(
        goal=goal, rps=rate, budget_power=budget_power, budget_cost=budget_cost, model=model, dtype=dtype,
        stack=str(stack) if stack else None, workload=workload, trace=str(trace) if trace else None, slos=str(slo) if slo else None,
        machines_file=str(machines_file) if machines_file else None, profiles=str(profiles) if profiles else None,
        designs=designs, duration=duration, seed=seed, seeds=seeds, jobs=jobs, tp=tp, strategy=strategy,
        search_method=search_method, confirm_method=confirm_method, margin=margin, storage=storage, study=study,
        transfer=transfer, bandwidth=bandwidth, headroom=headroom, latency_error=latency_error)
        for rate in rates]   # every rate's request checked before any runs
    results = [_plan_and_report(req, *(_per_rate(out, req.rps, len(reqs)) for out in (json_out, csv_out, plot)),
                                quiet, _per_rate(cluster_out, req.rps, len(reqs))) for req in reqs]
    if len(results) > 1 and json_out != STDOUT:
        from splitwise_plan.report.plan import rates_table
        console(stderr=stdout_taken(json_out, csv_out, plot)).print(rates_table(results))
    if not all(r.winner is not None for r in results):   # the worst of the rates: no design meets the goal at one
        raise typer.Exit(code=EXIT_NO_ANSWER)


def _per_rate(path, rate: Optional[float], n: int):
    """An output path of the plan at ``rate``, one of ``n``: the path itself for one plan (or standard
    output), else the path with the rate before its suffix (plan.json: plan-50rps.json)."""
    if path is None or path == STDOUT or n == 1:
        return path
    p = Path(path)
    named = p.with_name(f"{p.stem}-{rate:g}rps{p.suffix}")
    return str(named) if isinstance(path, str) else named


def _plan_and_report(req, json_out: Optional[str], csv_out: Optional[Path], plot: Optional[Path],
                     quiet: bool, cluster_out: Optional[Path] = None):
    """Run the planner with a progress bar (per finished design), then write the reports and the table; the
    plan's result."""
    from splitwise_plan.cli.progress import progress
    from splitwise_plan.planning import plan, planned_designs
    from splitwise_plan.report.checkpoint import plan_cache_dir, stopped_note
    from splitwise_plan.report.plan import plan_report, render, write_reports

    check_output_options(json_out, csv_out, plot, inputs=req.input_files(), cluster=cluster_out)   # fail now, not after
    names = planned_designs(req)   # (under --tp auto, each design at each TP)
    n = len(names)
    ckpt, loaded = _plan_checkpoint(req, names, csv_out, None if json_out == STDOUT else json_out, plot, quiet=quiet)
    from splitwise_plan.planning.memo import Memo

    kept = {d: p for d, p in loaded.items() if d in names}
    others = [d for d in loaded if isinstance(d, str) and d not in names]   # kept for a plan naming them
    memo = Memo((k for d, k in loaded.items() if isinstance(d, tuple)),   # simulations of designs unfinished
                keep=ckpt.keep if ckpt is not None else None)
    what = (f"{n} TP pairs of {plural(len(req.designs), 'design')}" if n != len(req.designs) else
            plural(n, "design"))
    with progress(n, f"plan {req.goal}, {what}", quiet=quiet) as bar:
        def done(dp) -> None:
            bar.advance(1)
            bar.update(description=f"plan {req.goal}: {dp.design} {dp.status} in {dp.seconds:.1f} s")
            if ckpt is not None and dp.design not in kept:   # the first makes the file this plan's
                ckpt.keep([dp])
        try:
            result = plan(req, on_design=done, done=kept, memo=memo,
                          on_step=lambda text: bar.update(description=f"plan {req.goal}: {text}"))
        except KeyboardInterrupt:
            also = "" if req.goal == "max-throughput" else "; --storage keeps every simulation"   # (it refuses one)
            stopped = stopped_note(ckpt, n, "plan", "designs", len(others), also,   # (None: cache unwritable)
                                   cache=plan_cache_dir() or "the user cache folder")
            if stopped:
                sys.stderr.write(stopped + "\n")
            raise
    written = write_reports(result, json_path=None if json_out == STDOUT else json_out,
                            csv_path=csv_out, plot_path=plot)
    if cluster_out is not None and result.winner is not None:
        from splitwise_plan.report.plan import write_cluster_file
        written.append(write_cluster_file(result, cluster_out))
    if ckpt is not None:
        ckpt.finish(others, "designs")
    if json_out == STDOUT:
        print_json(plan_report(result))
    else:
        render(result, console(stderr=stdout_taken(json_out, csv_out, plot)))
    for path in written:
        note(f"wrote {path}", quiet)
    return result


def _plan_checkpoint(req, names: tuple, *outputs, quiet: bool) -> tuple:
    """The checkpoint of a plan beside its first output file (with none, in the user cache folder, keyed
    by the plan's inputs; None where that folder cannot be written) and the designs it kept from an
    earlier run of the same plan, stopped: {design: DesignPlan} (also of designs this one does not name)."""
    from splitwise_plan.report.checkpoint import Checkpoint, path_for, plan_cache_path, plan_fingerprint

    where = path_for(*outputs)
    digest = plan_fingerprint(req, __version__)
    where = where or plan_cache_path(digest)
    if where is None:
        return None, {}
    # its notes say what becomes of the user's files: printed even with --quiet
    ckpt = Checkpoint(where, digest, say=lambda why: note(why, False), kind="plan")
    loaded = ckpt.load()   # a file not this plan's is moved aside once a design is done (the inputs good)
    kept = [d for d in loaded if d in names]
    sims = sum(1 for d in loaded if isinstance(d, tuple))
    if kept or sims:
        listed = f" ({', '.join(kept)})" if kept else ""
        also = f", and {sims:,} simulations of the others" if sims else ""
        note(f"resuming: {len(kept)} of {len(names)} designs kept in {where}{listed}{also}", False)
    return ckpt, loaded


def _print_version(given: bool) -> None:
    """``--version``: the version, then exit (before any other option is read)."""
    if given:
        typer.echo(__version__)
        raise typer.Exit()
