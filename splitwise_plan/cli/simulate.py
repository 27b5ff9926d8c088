"""CLI commands that simulate given clusters: ``simulate`` (one design point) and ``sweep`` (a grid).

They hang off the ``app`` of :mod:`splitwise_plan.cli.app`, with the options and inputs they share with
``check`` and ``capacity`` (:mod:`.options`, :mod:`.inputs`). Every bad input is a
``SplitwisePlanError`` (one line, exit 2), including option parsing errors, which
:class:`~splitwise_plan.cli.app.ReportCommand` converts.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from splitwise_plan.cli.app import ReportCommand, app, console
from splitwise_plan.cli.inputs import (
    arrivals_bar,
    auto_method,
    check_method,
    fluid_caution,
    parse_counts,
    resolve_counts,
    resolve_inputs,
)
from splitwise_plan.cli.options import (
    ADV,
    AUTO,
    OUT,
    STDOUT,
    opt_bandwidth,
    opt_csv,
    opt_duration,
    opt_json,
    opt_machines_file,
    opt_method,
    opt_model,
    opt_profiles,
    opt_quiet,
    opt_seed,
    opt_slo,
    opt_tp,
    opt_trace,
    opt_transfer,
    opt_workload,
)
from splitwise_plan.cli.output import check_output_options, input_files, note, print_json, stdout_taken
from splitwise_plan.cli.progress import progress
from splitwise_plan.errors import SplitwisePlanError, plural
from splitwise_plan.inputs.designs import Design, get_design
from splitwise_plan.report.formats import machine_counts

MAX_GRID_POINTS = 200_000


# --- shared options ------------------------------------------------------------------


# --- inputs ---------------------------------------------------------------------------


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
    workload: str = opt_workload(),
    model: str = opt_model(),
    tp: int = opt_tp(),
    trace: Optional[Path] = opt_trace(),
    duration: float = opt_duration(),
    seed: int = opt_seed(),
    slo: Optional[Path] = opt_slo(),
    machines_file: Optional[Path] = opt_machines_file(),
    profiles: Optional[Path] = opt_profiles(),
    json_out: Optional[str] = opt_json(),
    csv_out: Optional[Path] = opt_csv(),
    requests_out: Optional[Path] = typer.Option(
        None, "--requests", metavar="FILE", rich_help_panel=OUT,
        help="Write one CSV row per request: arrival, prompt and output tokens, TTFT, TBT and E2E in seconds "
             "and as slowdowns, finished (an unfinished request's latencies are nan)."),
    quiet: bool = opt_quiet(),
    method: str = opt_method("events"),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
) -> None:
    """Simulate one cluster design: the nine SLO percentiles, cost and power (exit 0 either way)."""
    from splitwise_plan.report.formats import build_report, write_csv, write_json

    d = get_design(design)
    n_prompt, n_token = resolve_counts(d, prompt, token, machines)
    check_output_options(json_out, csv_out, requests=requests_out, inputs=input_files(
        trace=trace, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    inp = resolve_inputs(model=model, tp=tp, workload=workload, rps=rps, trace=trace, duration=duration,
                         seed=seed, slo=slo, machines_file=machines_file, profiles=profiles, method=method,
                         transfer=transfer, bandwidth=bandwidth)
    sim = inp.simulator()
    fluid_caution(sim, d)
    with arrivals_bar(inp, f"simulating {d.name}", quiet) as on_arrivals:
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
        print_json(result.to_dict())
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
            note(f"wrote {p}", quiet)


# --- sweep ------------------------------------------------------------------------------

def run_grid(sim, design: Design, points: list[tuple[int, int]], *, quiet: bool = False,
             label: str = "sweep", jobs: int = 1, on_results=None) -> list:
    """Evaluate design points with ``run_many`` (over ``jobs`` processes), with a progress bar
    that moves as each part of fluid runs, oracle run or worker's part is done (``on_results`` gets its results)."""
    with progress(len(points), f"{label} {design.name} ({sim.method})", quiet=quiet) as bar:
        return sim.run_many(design, points, jobs=max(1, jobs), progress=bar.advance, on_results=on_results)


def _resumable_grid(sim, inp, design: Design, grid: list, where: Optional[Path], *, jobs: Optional[int],
                    quiet: bool, stop_early: bool) -> tuple[list, Optional[object], list]:
    """``run_grid`` over the points a checkpoint at ``where`` does not hold yet, keeping each part's
    results there as it finishes: a stopped sweep goes on where it stopped. Returns the results in
    grid order, the checkpoint (to finish once the outputs are written) and the points it holds that
    this grid does not (kept for the sweep that names them)."""
    from splitwise_plan import __version__
    from splitwise_plan.report.checkpoint import Checkpoint, fingerprint, stopped_note
    from splitwise_plan.sim.simulator import cpu_cores

    ckpt, done, others = None, {}, []
    if where is not None:   # its notes say what becomes of the user's files: printed even with --quiet
        ckpt = Checkpoint(where, fingerprint(inp.report(), inp.stream, design.name, stop_early=stop_early,
                                             version=__version__), say=lambda why: note(why, False))
        loaded = ckpt.load()
        wanted = set(grid)
        done = {pt: r for pt, r in loaded.items() if pt in wanted}
        others = [pt for pt in loaded if pt not in wanted]
        if done:
            note(f"resuming: {len(done):,} of {len(grid):,} design points kept in {where}", False)
    todo = [pt for pt in grid if pt not in done]
    if jobs is None:
        jobs = sim.default_jobs(len(todo), design=design)
    try:
        fresh = run_grid(sim, design, todo, quiet=quiet, jobs=jobs or cpu_cores(),
                         on_results=ckpt.keep if ckpt is not None else None) if todo else []
    except KeyboardInterrupt:
        stopped = stopped_note(ckpt, len(grid), "sweep", "design points", len(others))
        if stopped:
            sys.stderr.write(stopped + "\n")
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
    workload: str = opt_workload(),
    model: str = opt_model(),
    tp: int = opt_tp(),
    trace: Optional[Path] = opt_trace(),
    duration: float = opt_duration(),
    seed: int = opt_seed(),
    slo: Optional[Path] = opt_slo(),
    machines_file: Optional[Path] = opt_machines_file(),
    profiles: Optional[Path] = opt_profiles(),
    json_out: Optional[str] = opt_json(),
    csv_out: Optional[Path] = opt_csv(),
    plot: Optional[Path] = typer.Option(None, "--plot", metavar="FILE", rich_help_panel=OUT,
                                        help="Design-space map (like the paper's Fig. 12): .png, .svg or .html."),
    quiet: bool = opt_quiet(),
    method: str = opt_method(AUTO),
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
    from splitwise_plan.report.checkpoint import path_for

    d = get_design(design)
    grid = _sweep_grid(d, prompt, token, machines)
    check_output_options(json_out, csv_out, plot, inputs=input_files(
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
    summary = _sweep_summary(d, results)
    doc = _write_sweep_reports(inp, d, results, summary, json_out=json_out, csv_out=csv_out, plot=plot)
    if ckpt is not None:   # every output is written: nothing of this grid is left to resume
        ckpt.finish(others, "design points")
    if json_out == STDOUT:
        print_json(doc)
        return
    _print_sweep(console(stderr=stdout_taken(json_out, csv_out, plot)), inp, d, results, summary)
    for p in (json_out, csv_out, plot):
        if p is not None:
            note(f"wrote {p}", quiet)


def _sweep_grid(d: Design, prompt: Optional[str], token: Optional[str], machines: Optional[str]) -> list:
    """The design points of ``sweep``: (machines, 0) of a baseline, else every (prompt, token) pair
    of the ranges; a user error when the ranges do not fit the design or the grid is too large."""
    if d.is_baseline:
        if prompt is not None or token is not None:
            raise SplitwisePlanError(f"{d.name} is a baseline (one pool): give --machines RANGE, not --prompt/--token")
        if machines is None:
            raise SplitwisePlanError(f"{d.name} needs --machines RANGE (e.g. 10:40)")
        return [(m, 0) for m in parse_counts(machines, "--machines")]
    if machines is not None:
        raise SplitwisePlanError(f"{d.name} has a prompt and a token pool: give --prompt and --token ranges, "
                                 "not --machines")
    missing = [f for f, v in (("--prompt", prompt), ("--token", token)) if v is None]
    if missing:
        raise SplitwisePlanError(f"{d.name} needs {' and '.join(missing)} (ranges like 20:30)")
    ps, ts = parse_counts(prompt, "--prompt"), parse_counts(token, "--token")
    if len(ps) * len(ts) > MAX_GRID_POINTS:
        raise SplitwisePlanError(f"the grid has {len(ps) * len(ts):,} points; at most {MAX_GRID_POINTS:,}")
    return [(p, t) for p in ps for t in ts]


def _sweep_summary(d: Design, results: list) -> dict:
    """The ``sweep`` block of the JSON report: points, passing points and the optimum (cheapest passing)."""
    from splitwise_plan.report.plots import design_point, optimum

    best = optimum([design_point(r) for r in results])
    best_result = next((r for r in results if best and (r.prompt_machines, r.token_machines)
                        == (best["prompt"], best["token"])), None)
    return {"design": d.name, "points": len(results), "passing": sum(r.slo_met for r in results),
            "optimum": None if best_result is None else {
                "prompt_machines": best_result.prompt_machines, "token_machines": best_result.token_machines,
                "machines": best_result.machines, "cost": round(best_result.cost, 6),
                "power": round(best_result.power, 6)}}


def _write_sweep_reports(inp, d: Design, results: list, summary: dict, *, json_out: Optional[str],
                         csv_out: Optional[Path], plot: Optional[Path]) -> Optional[dict]:
    """Write the CSV, the plot and the JSON report file asked for; return the JSON report (None
    without --json), which the caller prints when it goes to stdout."""
    from splitwise_plan.report.formats import build_report, write_csv, write_json
    from splitwise_plan.report.plots import write_plot

    if csv_out is not None:
        write_csv(csv_out, [inp.csv_row(r) for r in results])
    if plot is not None:
        write_plot(plot, sweep=results, title=f"{d.name} design space, {inp.describe()}")
    doc = build_report("sweep", inp.report(), results, sweep=summary) if json_out is not None else None
    if json_out not in (None, STDOUT):
        write_json(json_out, doc)
    return doc


def _print_sweep(c, inp, d: Design, results: list, summary: dict) -> None:
    """The table of the cheapest passing design points (at most 10), or that none passes."""
    from splitwise_plan.report.plots import design_point, rank_key

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


