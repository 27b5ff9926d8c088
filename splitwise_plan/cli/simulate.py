"""CLI commands that simulate given clusters: ``simulate`` (one design point) and ``sweep`` (a grid).

They hang off the ``app`` of :mod:`splitwise_plan.cli.app`, with the options and inputs they share with
``check`` and ``capacity`` (:mod:`.options`, :mod:`.inputs`). Every bad input is a
``SplitwisePlanError`` (one line, exit 2), including option parsing errors, which
:class:`~splitwise_plan.cli.app.ReportCommand` converts.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from splitwise_plan.cli.app import EXIT_NO_ANSWER, ReportCommand, app, console
from splitwise_plan.cli.inputs import (
    above_bound,
    arrivals_bar,
    auto_method,
    bound_line,
    check_method,
    fluid_caution,
    parse_counts,
    resolve_counts,
    resolve_inputs,
    with_stream,
    worst_of,
)
from splitwise_plan.cli.options import (
    ADV,
    AUTO,
    OUT,
    STDOUT,
    check_seeds_margin,
    opt_bandwidth,
    opt_csv,
    opt_dtype,
    opt_duration,
    opt_json,
    opt_machines_file,
    opt_margin,
    opt_method,
    opt_model,
    opt_profiles,
    opt_quiet,
    opt_rps,
    opt_seed,
    opt_seeds,
    opt_slo,
    opt_stack,
    opt_tp,
    opt_trace,
    opt_transfer,
    opt_workload,
    parse_rates,
    seeds_of,
)
from splitwise_plan.cli.output import check_output_options, input_files, note, print_json, stdout_taken
from splitwise_plan.cli.progress import progress
from splitwise_plan.errors import SplitwisePlanError, plural
from splitwise_plan.inputs.designs import Design, display_name, get_design
from splitwise_plan.planning.explain import searched_text
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
    return f"{display_name(result.design)}, {machine_counts(result.prompt_machines, result.token_machines)}"


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
    rps: Optional[str] = opt_rps(),
    workload: str = opt_workload(),
    model: str = opt_model(),
    dtype: Optional[str] = opt_dtype(),
    tp: str = opt_tp(),
    trace: Optional[Path] = opt_trace(),
    duration: float = opt_duration(),
    seed: int = opt_seed(),
    seeds: Optional[int] = opt_seeds(),
    margin: float = opt_margin(),
    slo: Optional[Path] = opt_slo(),
    machines_file: Optional[Path] = opt_machines_file(),
    profiles: Optional[Path] = opt_profiles(),
    json_out: Optional[str] = opt_json(),
    csv_out: Optional[Path] = opt_csv("rate and seed simulated"),
    requests_out: Optional[Path] = typer.Option(
        None, "--requests", metavar="FILE", rich_help_panel=OUT,
        help="Write one CSV row per request: arrival, prompt and output tokens, TTFT, TBT and E2E in seconds "
             "and as slowdowns, finished (an unfinished request's latencies are nan). One rate and seed only."),
    quiet: bool = opt_quiet(),
    method: str = opt_method("events"),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
    stack: Optional[Path] = opt_stack(),
) -> None:
    """Simulate one cluster design: the nine SLO percentiles, cost and power.

    Exit 0 with the percentiles, whether the SLOs hold or not; 1 when a rate is above what the design
    can carry at most (the analytic bound), which the events method does not simulate.

    e.g. `splitwise-plan simulate --design HH --prompt 27 --token 3 --rps 50,70`.
    """
    d = get_design(design)
    n_prompt, n_token = resolve_counts(d, prompt, token, machines)
    rates = parse_rates(rps)
    seeds = seeds_of(seeds, trace is not None or requests_out is not None)
    threshold = check_seeds_margin(seeds, margin)
    if requests_out is not None and (len(rates or [None]) > 1 or seeds > 1):
        raise SplitwisePlanError("--requests writes the requests of one run: give one --rps rate and --seeds 1")
    check_output_options(json_out, csv_out, requests=requests_out, inputs=input_files(
        trace=trace, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    if trace is None and rates is None:
        raise SplitwisePlanError("give --rps R (requests per second) or --trace FILE")
    base = resolve_inputs(model=model, dtype=dtype, stack=stack, tp=tp, workload=workload, rps=None, trace=trace, duration=duration,
                          seed=seed, slo=slo, machines_file=machines_file, profiles=profiles, method=method,
                          transfer=transfer, bandwidth=bandwidth, need_stream=False, quiet=quiet)
    runs, refused = [], False
    for rate in rates or [None]:
        bound = above_bound(base, d, n_prompt, n_token, rate) if base.method == "events" else None
        if bound is not None:   # the events method would only find it overloaded, slowly
            asked = rate if rate is not None else base.trace_stream.rate
            note(f"simulate: {bound_line(asked, bound, f'{d.name} {machine_counts(n_prompt, n_token)}')}; it cannot "
                 "hold the SLOs (--method fluid simulates it quickly)", False)
            refused = True
            continue
        runs.append(_simulate_rate(base, d, n_prompt, n_token, rate, seeds, threshold, quiet))
    _write_simulate_reports(runs, d, json_out=json_out, csv_out=csv_out, requests_out=requests_out)
    if json_out == STDOUT:
        for inp, _, (result, _), _ in runs:
            cost_unit, power_unit = _design_units(inp, d)
            print_json({**result.to_dict(), "cost_unit": cost_unit, "power_unit": power_unit})
    else:
        c = console(stderr=stdout_taken(json_out, csv_out, requests_out))
        for run in runs:
            _print_simulation(c, *run, d, seeds=seeds, margin=margin)
        for p in (json_out, csv_out, requests_out):
            if p not in (None, STDOUT):
                note(f"wrote {p}", quiet)
    if refused:
        raise typer.Exit(code=EXIT_NO_ANSWER)


def _simulate_rate(base, d: Design, n_prompt: int, n_token: int, rate: Optional[float], seeds: int,
                   threshold: float, quiet: bool) -> tuple:
    """Simulate ``d`` at ``rate`` on each seed's stream (one held at a time): (the inputs of the worst
    seed's stream, its simulator, (result, per-request columns), every (seed, result) with whether all hold)."""
    done, worst = [], None
    for k in range(seeds if base.trace is None else 1):
        inp = with_stream(base, rate, None if base.trace is not None else base.seed + k)
        sim = inp.simulator()
        if not done:
            fluid_caution(sim, d)
        what = f"simulating {display_name(d)}" + (f" at {rate:g} req/s" if rate is not None and seeds == 1 else "") + (
            f" at {rate:g} req/s, seed {inp.seed}" if seeds > 1 else "")
        with arrivals_bar(inp, what, quiet) as on_arrivals:
            out = sim.run_requests(d, n_prompt, n_token, on_arrivals=on_arrivals)
        done.append((inp.seed, out[0]))
        if worst is None or worst_of([worst[2][0], out[0]], threshold)[0] is out[0]:
            worst = (inp, sim, out)
        else:
            del out
    holds = worst_of([r for _, r in done], threshold)[1]
    return (*worst, (done, holds))


def _write_simulate_reports(runs: list, d: Design, *, json_out: Optional[str], csv_out: Optional[Path],
                            requests_out: Optional[Path]) -> None:
    """The CSV (a row per rate and seed), the per-request CSV (one run) and the JSON report file."""
    from splitwise_plan.report.formats import build_report, write_csv, write_json

    if csv_out is not None:
        write_csv(csv_out, [{**inp.csv_row(r, inp.rate), "seed": s} for inp, _, _, (done, _) in runs
                            for s, r in done])
    if requests_out is not None and runs:
        per_request = runs[0][2][1]
        cols = list(per_request)
        write_csv(requests_out, (dict(zip(cols, row)) for row in zip(*(per_request[c].tolist() for c in cols))),
                  cols, what="per-request CSV")
    if json_out not in (None, STDOUT) and runs:
        inp = runs[0][0]
        if len(runs) == 1:
            doc = build_report("simulate", inp.report(d), [runs[0][2][0]])
        else:   # several rates: each result with its rate, the inputs with none
            inp = dataclasses.replace(inp, rate=None, stream=None)
            doc = build_report("simulate", inp.report(d), [{**r.to_dict(), "rate_rps": i.rate}
                                                          for i, _, (r, _), _ in runs])
        write_json(json_out, doc)


def sources_line(sim, d: Design) -> str:
    """Where the latencies of ``d``'s pools and of the slowdown reference come from."""
    from splitwise_plan.report.plan import latencies_line

    tps = [sim.pool_tp(d, role) for role in ("prompt", "token")[:len(d.machines)]]
    several = len(set(d.machines)) < len(d.machines) and len(set(tps)) > 1   # one machine type at two TPs
    sources = {m + (f"@tp{tp}" if several else ""): sim.latency_source(sim.machine(m), tp).detail
               for m, tp in zip(d.machines, tps)}
    return latencies_line({**sources, "reference": sim.reference_source})


def _design_units(inp, d: Design) -> tuple[str, str]:
    """(cost unit, power unit) of the machines of ``d``'s pools, as the machine catalog names them."""
    from splitwise_plan.inputs.machines import catalog_units

    return catalog_units([inp.machines[m] for m in (d.prompt_machine, d.token_machine) if m in inp.machines])


def _print_simulation(c, inp, sim, out: tuple, seeds_done: tuple, d: Design, *, seeds: int, margin: float) -> None:
    """One run's table (the worst seed's), what was simulated, and the verdict."""
    result = out[0]
    done, holds = seeds_done
    worst = f"; the worst of {seeds} seeds ({inp.seed})" if seeds > 1 else ""
    c.print(result_table(result, inp.slos, title=_counts_label(result)))
    c.print(inp.describe() + worst)
    c.print(sources_line(sim, d), highlight=False)
    c.print(f"{plural(result.requests, 'request')}, {result.completed:,} completed"
            + (f"; [yellow]overloaded: a prompt waited over {sim.overload_s:.0f} s, the run stopped there[/]"
               if result.overloaded else "")
            + ("; [yellow]memory overflow: a request never got its KV-cache memory (larger than any machine's, or held by waiting transfers)[/]" if result.oom else ""))
    pools = (f" (prompt pool {result.prompt_utilization:.0%}, token pool {result.token_utilization:.0%})"
             if result.token_machines else "")
    verdict = _slo_verdict(result, len(inp.slos))
    if margin and result.slo_met and not holds:
        verdict += f" [yellow]but not with margin {margin:g}[/]"
    cost_unit, power_unit = _design_units(inp, d)
    c.print(f"cost {result.cost:,.2f} {cost_unit}, power {result.power:,.1f} {power_unit}, utilization {result.utilization:.0%}{pools}; "
            f"{verdict}")


# --- sweep ------------------------------------------------------------------------------

def run_grid(sim, design: Design, points: list[tuple[int, int]], *, quiet: bool = False,
             label: str = "sweep", jobs: int = 1, on_results=None) -> list:
    """Evaluate design points with ``run_many`` (over ``jobs`` processes), with a progress bar
    that moves as each part of fluid runs, oracle run or worker's part is done (``on_results`` gets its results)."""
    with progress(len(points), f"{label} {display_name(design)} ({searched_text(sim.method)})", quiet=quiet) as bar:
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
    dtype: Optional[str] = opt_dtype(),
    tp: str = opt_tp(),
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
    stack: Optional[Path] = opt_stack(),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help=(
        "Processes that simulate, this one and its workers (default: one per core when the grid is "
        "worth it and memory allows; 0: one per core; 1: this process only).")),
    stop_early: bool = typer.Option(False, "--stop-early", help=(
        "Stop a design once an SLO can no longer hold: same verdicts and passing rows, faster; "
        "failing rows then count their unfinished requests as +inf.")),
) -> None:
    """Simulate a grid of machine counts of one design: one CSV row per design point (the paper's Fig. 12).

    Exit 0 with the grid, whether or not a point holds the SLOs (a sweep is a map, not a gate: check
    and the planner answer whether one does).

    e.g. `splitwise-plan sweep --design HH --prompt 20:30 --token 1:6 --rps 70 --csv hh.csv`.
    """
    from splitwise_plan.report.checkpoint import path_for

    d = get_design(design)
    grid = _sweep_grid(d, prompt, token, machines)
    check_output_options(json_out, csv_out, plot, inputs=input_files(
        trace=trace, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    method = check_method(method, auto=True)
    inp = resolve_inputs(model=model, dtype=dtype, stack=stack, tp=tp, workload=workload, rps=rps, trace=trace, duration=duration,
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
        write_plot(plot, sweep=results, title=f"{display_name(d)} design space, {inp.describe()}")
    doc = build_report("sweep", inp.report(d), results, sweep=summary) if json_out is not None else None
    if json_out not in (None, STDOUT):
        write_json(json_out, doc)
    return doc


def _print_sweep(c, inp, d: Design, results: list, summary: dict) -> None:
    """The table of the cheapest passing design points (at most 10), or that none passes."""
    from splitwise_plan.report.plots import design_point, rank_key

    table = Table(title=f"Sweep of {display_name(d)}: {len(results):,} design points, {summary['passing']:,} hold all SLOs")
    cost_unit, power_unit = _design_units(inp, d)
    for col in ("prompt", "token", "machines", f"cost\n{cost_unit}", f"power\n{power_unit}", "tightest SLO",
                "value / limit", "holds"):
        table.add_column(col, justify="right")
    ok = sorted((r for r in results if r.slo_met), key=lambda r: rank_key(design_point(r)))[:10]
    for r in ok:
        t = r.tightest
        table.add_row(str(r.prompt_machines), str(r.token_machines) if r.token_machines else "-", str(r.machines),
                      f"{r.cost:,.2f}", f"{r.power:,.1f}", f"{t['metric'].upper()} P{t['percentile']:g}",
                      _fmt(t["ratio"], 3), "[green]yes[/]")
    if ok:
        table.caption = f"the {len(ok)} cheapest passing design points"
        c.print(table)
        c.print(inp.describe())
    else:
        c.print(f"no design point of the {len(results):,} holds all SLOs ({inp.describe()})")


