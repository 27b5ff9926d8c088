"""CLI commands that gate a deployed cluster: ``check`` (do the SLOs hold at a rate, or each of a list,
with headroom, margin, on the worst of ``--seeds`` streams: exit 0, 1 when not, 2 on bad input; a rate
above the analytic bound of what the cluster can carry fails at once) and ``capacity`` (the highest rate
it holds).

Both read a cluster file (:mod:`splitwise_plan.inputs.cluster_file`) and share the options
(:mod:`.options`) and inputs (:mod:`.inputs`) of ``simulate``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import typer

from splitwise_plan.cli.app import EXIT_NO_ANSWER, ReportCommand, app
from splitwise_plan.cli.inputs import (
    Inputs,
    above_bound,
    arrivals_bar,
    best_case_rate,
    bound_line,
    fluid_caution,
    resolve_inputs,
    stream_at,
    with_stream,
    worst_of,
)
from splitwise_plan.cli.options import (
    ADV,
    STDOUT,
    check_positive,
    check_seeds_margin,
    opt_bandwidth,
    opt_csv,
    opt_dtype,
    opt_duration,
    opt_json,
    opt_machines_file,
    opt_margin,
    opt_method,
    opt_model_override,
    opt_profiles,
    opt_quiet,
    opt_rps,
    opt_seed,
    opt_seeds,
    opt_slo,
    opt_stack,
    opt_trace,
    opt_transfer,
    opt_workload,
    parse_rates,
)
from splitwise_plan.cli.output import check_output_options, input_files, note, print_json, stdout_taken
from splitwise_plan.cli.progress import progress
from splitwise_plan.errors import SplitwisePlanError, plural
from splitwise_plan.planning.explain import method_words
from splitwise_plan.search import passes

MIN_STREAM_REQUESTS = 10  # capacity: never try a rate that gives fewer requests than this
MAX_STREAM_REQUESTS = 2_000_000  # capacity: stop raising the rate past this many requests
PROBE_REQUESTS = 2_000  # capacity: requests of the stream its rate bound is estimated on
MIN_DURATION_S, MAX_DURATION_S = 1.0, 86_400.0   # capacity: the streams it tries last from a second to a day


def _load_spec(cluster_file: Path, machines_file: Optional[Path], model: Optional[str] = None):
    """The cluster file's spec; ``model`` (--model) in place of the model it names (a what-if)."""
    import dataclasses

    from splitwise_plan.inputs.cluster_file import load_cluster
    from splitwise_plan.inputs.machines import load_machines
    from splitwise_plan.inputs.models import get_model
    spec = load_cluster(cluster_file, load_machines(machines_file))
    return spec if model is None else dataclasses.replace(spec, model=get_model(model).name)


def _plan_defaults(spec, workload, duration, seed, seeds, dtype, stack, trace=None) -> tuple:
    """(workload, duration, seed, seeds, dtype, stack): each option as given, else the cluster file's (a plan's
    --cluster-out writes them), else the command's default (the plan's confirmation's seeds; one stream of a trace)."""
    from splitwise_plan.planning.options import default

    given = {"workload": workload, "duration": duration, "seed": seed, "seeds": seeds, "dtype": dtype, "stack": stack}
    if trace is not None and seeds is None:
        given["seeds"] = 1
    fallback = {"workload": default("workload"), "duration": default("duration"), "seed": default("seed"),
                "seeds": default("seeds"), "dtype": None, "stack": None}
    return tuple(v if v is not None else spec.plan.get(k, fallback[k]) for k, v in given.items())


def _check_cluster(spec, inp: Inputs, cluster_file: Path) -> None:
    """A user error naming the cluster file when its machines cannot run its model at its TP
    (too few GPUs or too little HBM, or no profile at that TP)."""
    from splitwise_plan.inputs.designs import parse_tp
    from splitwise_plan.inputs.machines import get_machine
    from splitwise_plan.inputs.models import get_model
    from splitwise_plan.perf.sources import sourced_latency
    from splitwise_plan.sim.cluster import instance_layout
    d = spec.design
    model = inp.model_spec or get_model(spec.model)
    try:
        for m, tp in zip(d.machines, parse_tp(spec.tensor_parallel)):
            machine = get_machine(m, inp.machines)   # in any case, as the catalog names it
            instance_layout(machine, tp, d.is_baseline, model)
            sourced_latency(inp.profiles, model, machine, tp, inp.stack)   # (measured, or estimated)
    except SplitwisePlanError as exc:
        raise SplitwisePlanError(f"cluster file {cluster_file} ({spec.model} at TP{spec.tensor_parallel} on "
                                 f"{', '.join(dict.fromkeys(d.machines))}): {exc}") from None


def slo_text(row: dict, result, before_limit: str = " < ") -> str:
    """One SLO's value against its limit in its unit, a slowdown with the latency it stands for:
    "TTFT P99 slowdown 3.91x (1.31 s) < 6x", "TBT P90 0.052 s < 0.1 s" (``before_limit`` between them)."""
    from splitwise_plan.planning.explain import slo_label

    name = slo_label(row["metric"], row["percentile"])
    value, slowdown = row["value"], row["unit"] == "slowdown"
    limit = f"{row['limit']:g}x" if slowdown else f"{row['limit']:g} s"
    if not math.isfinite(value):
        return f"{name}{' slowdown' if slowdown else ''} not finished (inf){before_limit}{limit}"
    if not slowdown:
        return f"{name} {value:.4g} s{before_limit}{limit}"
    seconds = result.latency_s.get(row["metric"], {}).get(row["percentile"])
    at = f" ({seconds:.3g} s)" if seconds is not None and math.isfinite(seconds) else ""
    return f"{name} slowdown {value:.3g}x{at}{before_limit}{limit}"


def violation_lines(result) -> list[str]:
    """One line per violated SLO, with its value, limit and margin in the SLO's unit."""
    out = []
    for v in result.violations:
        unit = "x" if v["unit"] == "slowdown" else " s"
        margin = "-inf" if not math.isfinite(v["margin"]) else f"{v['margin']:.3g}{unit}"
        out.append(f"  - {slo_text(v, result, ', limit < ')}, margin {margin}")
    return out


@dataclass
class Load:
    """One rate ``check`` asks about: its rate, its streams' request counts (one per seed), the worst
    seed's result and whether every seed holds; ``bound``: the analytic bound it is above (not simulated)."""

    rate: float
    own: bool = False        # the rate itself, after the rate raised by the headroom
    requests: list = field(default_factory=list)
    results: list = field(default_factory=list)   # (seed, result) of every stream simulated
    worst: object = None
    holds: bool = False
    bound: Optional[float] = None


@app.command("check", cls=ReportCommand)
def check_cmd(
    cluster_file: Path = typer.Argument(..., metavar="CLUSTER_FILE", help="The deployed cluster, TOML (or YAML, with PyYAML installed)."),
    rps: Optional[str] = opt_rps("Expected request rate, req/s. Default: the cluster file's rps (the rate a plan "
                                 "chose it for, --cluster-out)."),
    headroom: float = typer.Option(0.0, "--headroom", help=(
        "Require the SLOs at rate x (1 + headroom), e.g. 0.2, and at the rate itself.")),
    workload: Optional[str] = opt_workload(from_file=True),
    model: Optional[str] = opt_model_override(),
    dtype: Optional[str] = opt_dtype(),
    trace: Optional[Path] = opt_trace(),
    duration: Optional[float] = opt_duration(from_file=True),
    seed: Optional[int] = opt_seed(from_file=True),
    seeds: Optional[int] = opt_seeds(from_file=True),
    margin: float = opt_margin(),
    slo: Optional[Path] = opt_slo(),
    machines_file: Optional[Path] = opt_machines_file(),
    profiles: Optional[Path] = opt_profiles(),
    json_out: Optional[str] = opt_json("the verdict"),
    csv_out: Optional[Path] = opt_csv("rate checked (the raised one, then the rate itself) and seed"),
    quiet: bool = opt_quiet(),
    method: str = opt_method("events"),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
    stack: Optional[Path] = opt_stack(),
) -> None:
    """CI gate: exit 0 when all SLOs hold and every request finishes at the rate (with headroom), 1 when not,
    2 on bad input.

    A rate above what the cluster can carry at most (the analytic bound) fails at once, unsimulated.

    The first run after install compiles the simulator (about 15 s, said on stderr): a CI job keeps it between runs in NUMBA_CACHE_DIR (docs/ci.md).

    e.g. `splitwise-plan check examples/cluster.toml --rps 60 --headroom 0.2` (or --rps 50,60,70: a verdict per rate).
    """
    spec = _load_spec(cluster_file, machines_file, model)
    rps = rps if rps is not None or trace is not None or "rps" not in spec.plan else f"{spec.plan['rps']:g}"
    workload, duration, seed, seeds, dtype, stack = _plan_defaults(spec, workload, duration, seed, seeds, dtype, stack,
                                                                   trace)
    rates = parse_rates(rps)
    _check_check_options(headroom, rates, trace)
    threshold = check_seeds_margin(seeds, margin)
    check_output_options(json_out, csv_out, inputs=input_files(
        cluster=cluster_file, trace=trace, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    inp = resolve_inputs(model=spec.model, dtype=dtype, stack=stack, tp=spec.tensor_parallel, workload=workload, rps=None, trace=trace,
                         duration=duration, seed=seed, slo=slo, machines_file=machines_file, profiles=profiles,
                         method=method, transfer=transfer, bandwidth=bandwidth, need_stream=False, quiet=quiet)
    _check_cluster(spec, inp, cluster_file)
    factor = 1.0 + headroom
    if trace is not None and factor != 1.0 and not inp.stream.duration_s > 0:
        raise SplitwisePlanError(f"trace {trace}: all its requests arrive at one instant, so it has no rate "
                                 "for --headroom to raise; give --headroom 0 or a trace that spans time")
    bases = rates if rates is not None else [inp.stream.rate]
    checks = [_loads_of(base, factor, trace is not None) for base in bases]
    _check_streams_exist(inp, checks, seeds)
    for loads in checks:
        for load in loads:
            _run_load(inp, spec, load, seeds, threshold, quiet)
    passed = all(load.holds for loads in checks for load in loads)
    doc_check = _check_block(inp, spec, bases, checks, headroom=headroom, seeds=seeds, margin=margin)
    _write_check_reports(inp, cluster_file, bases, checks, doc_check, design=spec.design, headroom=headroom, seeds=seeds,
                         json_out=json_out, csv_out=csv_out)
    if json_out != STDOUT:
        lines = _check_lines(inp, spec, trace, bases, checks, headroom=headroom, seeds=seeds, margin=margin)
        typer.echo("\n".join(lines), err=stdout_taken(json_out, csv_out))
    _wrote(quiet, json_out, csv_out)
    if not passed:
        raise typer.Exit(code=EXIT_NO_ANSWER)


def _check_check_options(headroom: float, rates: Optional[list], trace: Optional[Path]) -> None:
    """A user error for a --headroom out of range, or for neither or both of --rps and --trace."""
    if headroom is None or not math.isfinite(headroom) or not 0 <= headroom <= MAX_HEADROOM:
        raise SplitwisePlanError(f"--headroom must be a finite number from 0 to {MAX_HEADROOM:g} (0.2 = 20% more load), "
                                 f"got {headroom:g}")
    if rates is None and trace is None:
        raise SplitwisePlanError("give --rps R (the expected requests per second) or --trace FILE")
    if rates is not None and trace is not None:   # (--headroom scales a trace)
        raise SplitwisePlanError("give --rps (a generated stream) or --trace (a replayed file), not both")


def _loads_of(base: float, factor: float, is_trace: bool) -> list:
    """The loads ``check`` simulates for the rate ``base``: the rate raised by the headroom (to the digits
    it is printed with, so that check --rps at it is the same stream), then, with headroom, the rate
    itself (each rate is its own stream: headroom must never pass a cluster that fails at the rate asked
    for, where near its limit nearby rates can flip)."""
    raised = base * factor if is_trace else float(f"{base * factor:.10g}")
    return [Load(raised)] + ([Load(base, own=True)] if factor != 1.0 else [])


def _load_stream(inp: Inputs, load: Load, seed: int):
    """The stream of ``load`` with ``seed`` (a trace: time-scaled to the raised rate, or as it is)."""
    if inp.trace is not None:
        return inp.trace_stream if load.own or load.rate == inp.trace_stream.rate else inp.trace_stream.at_rate(load.rate)
    return stream_at(inp, load.rate, seed)


def _check_streams_exist(inp: Inputs, checks: list, seeds: int) -> None:
    """Before any simulation: a user error for a drawn stream with no request (a rate too low for the
    duration); only short streams can be empty, and only they are drawn here."""
    if inp.trace is not None:
        return
    for loads in checks:
        for load in loads:
            if load.rate * inp.duration_s < 1_000:
                for k in range(seeds):
                    _load_stream(inp, load, inp.seed + k)


def _run_load(inp: Inputs, spec, load: Load, seeds: int, threshold: float, quiet: bool) -> None:
    """Simulate ``load`` on each seed's stream (one at a time: only one is held), or find it above the
    analytic bound (no simulation); its worst result and verdict."""
    load.bound = above_bound(inp, spec.design, spec.prompt_machines, spec.token_machines,
                             None if inp.trace is not None and load.own else load.rate)
    if load.bound is not None:
        load.holds = False
        return
    for k in range(seeds if inp.trace is None else 1):
        s = None if inp.trace is not None else inp.seed + k
        stream = _load_stream(inp, load, s)
        sim = inp.simulator(stream)
        if not load.results:
            fluid_caution(sim, spec.design)
        what = f"checking {spec.label} at {load.rate:.10g} req/s" + (f", seed {s}" if seeds > 1 else "")
        with arrivals_bar(inp, what, quiet, stream) as on_arrivals:
            r = sim.run_requests(spec.design, spec.prompt_machines, spec.token_machines, on_arrivals=on_arrivals)[0]
        load.requests.append(len(stream))
        load.results.append((s, r))
        del stream, sim
    load.worst, load.holds = worst_of([r for _, r in load.results], threshold)


def _check_block(inp: Inputs, spec, bases: list, checks: list, *, headroom: float, seeds: int, margin: float) -> dict:
    """The ``check`` block of the JSON report: the verdict of each rate asked for (one rate: at the top)."""
    def block(base, loads):
        rates = []
        for load in loads:
            row = {"rate_rps": load.rate, "passed": load.holds}
            if load.bound is not None:
                row["analytic_bound_rps"] = load.bound
            rates.append(row)
        return {"rate_rps": base, "headroom": headroom, "checked_rps": loads[0].rate,
                "passed": all(load.holds for load in loads), "rates": rates}
    out = {"cluster": spec.to_dict(), "passed": all(load.holds for loads in checks for load in loads),
           "method": inp.method}
    if seeds > 1 or margin:
        out.update(seeds=seeds, margin=margin)
    if len(bases) == 1:
        return {**out, **block(bases[0], checks[0])}
    return {**out, "checks": [block(b, loads) for b, loads in zip(bases, checks)]}


def _write_check_reports(inp: Inputs, cluster_file: Path, bases: list, checks: list, check: dict, *, design,
                         headroom: float, seeds: int, json_out: Optional[str], csv_out: Optional[Path]) -> None:
    """The CSV (a row per load and seed) and the JSON report of ``check``, to its file or stdout."""
    from splitwise_plan.report.formats import build_report, write_csv, write_json

    loads = [load for ls in checks for load in ls]
    if csv_out is not None:
        rows = []
        for load in loads:
            if load.bound is not None:
                rows.append({"rate_rps": load.rate, "seed": inp.seed, "slo_met": False,
                             "analytic_bound_rps": load.bound, "headroom": headroom})
            rows += [{**inp.csv_row(r, load.rate), "seed": s, "headroom": headroom} for s, r in load.results]
        write_csv(csv_out, rows)
    if json_out is None:
        return
    one = len(loads) == 1 and seeds == 1 and loads[0].results
    if one:   # the inputs say the one stream simulated, as simulate's do
        inp = with_stream(inp, loads[0].rate, stream=_load_stream(inp, loads[0], inp.seed))
        asked = {}
    else:   # the rate asked for (with --headroom two streams, each result with its rate and requests)
        asked = {"rate_rps": float(bases[0]) if len(bases) == 1 else None, "requests": None}
        if inp.trace is not None:
            asked.update(rate_rps=float(inp.trace_stream.rate), duration_s=float(inp.trace_stream.duration_s))
    results = [{**load.worst.to_dict(), "rate_rps": load.rate, **({"seed": load.results[[r for _, r in load.results].index(load.worst)][0]} if seeds > 1 else {})}
               for load in loads if load.worst is not None]
    doc = build_report("check", {**inp.report(design, cluster_file=str(cluster_file)), **asked}, results,
                       check=check)
    if json_out == STDOUT:
        print_json(doc)
    else:
        write_json(json_out, doc)


def _check_lines(inp: Inputs, spec, trace: Optional[Path], bases: list, checks: list, *, headroom: float,
                 seeds: int, margin: float) -> list[str]:
    """The text verdict of ``check``: the cluster, each load and its verdict, then the gate's."""
    src = (f"trace {trace}" if trace else f"{inp.workload}, {inp.duration_s:g} s, "
           + (f"seeds {inp.seed}..{inp.seed + seeds - 1}" if seeds > 1 else f"seed {inp.seed}"))
    lines = [f"check: {spec.name + ' = ' if spec.name else ''}{spec.label}, {spec.model} TP{spec.tensor_parallel}"
             + (f"; SLOs held with margin {margin:g} (value/limit < {1 - margin:g})" if margin else "")]
    for base, loads in zip(bases, checks):
        for load in loads:
            # the rate simulated, to the digits that make it the same stream again (check --rps at it)
            rate_txt = (f"{load.rate:.10g} req/s ({base:.10g} req/s + {headroom:.0%} headroom)"
                        if not load.own and headroom else f"{load.rate:.10g} req/s" if math.isfinite(load.rate)
                        else "all at one instant")
            n = (plural(load.requests[0], 'request') if len(load.requests) == 1 else
                 f"{min(load.requests):,} to {max(load.requests):,} requests" if load.requests else "not simulated")
            lines.append(f"load:  {rate_txt}; {'the rate itself' if load.own else src}; "
                         f"{n}; {inp.scheduler.describe()}; {method_words(inp.method)}")
            if load.bound is not None:
                lines.append(f"FAIL: {bound_line(load.rate, load.bound, 'this cluster')}")
            else:
                lines.extend(_verdict_lines(load.worst, len(inp.slos), load.holds, seeds))
        if len(loads) > 1:   # the gate's verdict of the rate last, where a CI log's tail shows it
            failed = [f"{load.rate:.10g} req/s" for load in loads if not load.holds]
            lines.append(f"check {'PASSED' if not failed else 'FAILED'}: {base:.10g} req/s with {headroom:.0%} "
                         f"headroom" + ("" if not failed else f" (fails at {' and '.join(failed)})"))
    if len(bases) > 1:
        failed = [f"{b:.10g}" for b, loads in zip(bases, checks) if not all(load.holds for load in loads)]
        lines.append(f"check {'PASSED' if not failed else 'FAILED'}: {len(bases)} rates"
                     + ("" if not failed else f" (fails at {', '.join(failed)} req/s)"))
    return lines


MAX_HEADROOM = 100.0   # --headroom at most: 101x the rate (more is a typo, not a load)


def _verdict_lines(result, n: int, holds: Optional[bool] = None, seeds: int = 1) -> list:
    """PASS or FAIL of one checked load (its worst seed's result), with the tightest SLO or each violation;
    ``holds``: the verdict with the margin (default: every SLO met, every request finished)."""
    lost = result.requests - result.completed
    worst = f" (worst of {seeds} seeds)" if seeds > 1 else ""
    t = result.tightest
    if holds is None:
        holds = result.slo_met and not lost
    if holds:
        return [f"PASS: all {n} SLOs hold{worst} (tightest: {slo_text(t, result)}, "
                f"at {t['value'] / t['limit']:.0%} of its limit)"]
    unfinished = (f"{lost:,} of {plural(result.requests, 'request')} "
                  f"{'never got their KV-cache memory' if result.oom else 'never finished'}")
    if result.slo_met and not lost:   # held, but not with the margin asked for
        return [f"FAIL: all {n} SLOs hold{worst}, but not with the margin asked for (tightest: "
                f"{t['metric'].upper()} P{t['percentile']:g} at {t['ratio']:.4g} of its limit)"]
    if result.slo_met:
        return [f"FAIL: all {n} SLOs hold{worst}, but {unfinished}"]
    return [f"FAIL: {len(result.violations)} of {n} SLOs violated{worst}:", *violation_lines(result),
            *([f"  ({unfinished})"] if lost else [])]   # why some read "not finished"


def _round_rate(rate: float, digits: int, how=round) -> float:
    """``rate`` to ``digits`` significant digits (``how``: round, math.ceil or math.floor): the rates
    ``capacity`` tries are ones a user can type."""
    if not math.isfinite(rate) or rate <= 0:
        return rate
    places = digits - 1 - math.floor(math.log10(rate))
    scaled = rate * 10.0 ** places
    return round(how(round(scaled, 6)) / 10.0 ** places, max(places, 0))


def _rate_digits(precision: float) -> int:
    """Significant digits of the rates ``capacity`` tries: two more than its relative precision needs."""
    return 2 + max(0, math.ceil(-math.log10(precision)))


def find_capacity(run_at, *, start: float, precision: float = 0.01, min_rate: float, max_rate: float,
                  on_trial=None, threshold: float = 1.0):
    """Highest rate in [min_rate, max_rate] at which ``run_at(rate)`` holds (every SLO met, every request
    finished, as ``check`` asks; its tightest value/limit below ``threshold``: 1 - the margin), by doubling then bisection to relative ``precision``. Returns (rate or
    None, fail_rate or None, trials).

    Every rate tried has two significant digits more than the precision needs (4 at 1%), so the
    answer is a rate that was simulated and held, short enough to pass to ``check --rps``: each rate
    is its own stream, and near its limit a cluster's verdict can flip between nearby rates.
    """
    digits = _rate_digits(precision)
    # the bounds too, inward: the answer is a rate of those digits even where a bound stops the search
    min_rate, max_rate = _round_rate(min_rate, digits, math.ceil), _round_rate(max_rate, digits, math.floor)
    trials = []

    def ok(rate):
        r = run_at(rate)
        trials.append((rate, r))
        if on_trial:
            on_trial(rate, r, trials)
        return passes(r, threshold)

    def within(rate):
        return min(max(_round_rate(rate, digits), min_rate), max_rate)

    rate = within(start)
    lo = hi = None
    if ok(rate):
        lo = rate
        while hi is None:
            if lo >= max_rate:
                return lo, None, trials
            nxt = within(lo * 2.0)
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        hi = rate
        while lo is None:
            if hi <= min_rate:
                return None, hi, trials
            nxt = within(hi / 2.0)
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    while (hi - lo) > precision * lo:
        mid = _round_rate((lo + hi) / 2.0, digits)
        if not lo < mid < hi:   # no rate of those digits between them
            break
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi, trials


def _rate_bound(inp: Inputs, spec, duration: float, seed: int) -> float:
    """A rate the cluster cannot hold (req/s): twice the most that the capacity model (best-case
    work and memory, see :mod:`splitwise_plan.search.bound`) lets it carry, on a probe drawn from the
    workload (or on the trace itself). Trials stop there, so a rate far past the cluster never costs a
    long simulation."""
    probe = (inp.trace_stream if inp.trace is not None else
             inp.source.generate(PROBE_REQUESTS / duration, duration_s=duration, seed=seed))
    return 2.0 * best_case_rate(inp, spec.design, spec.prompt_machines, spec.token_machines, probe)


@app.command("capacity", cls=ReportCommand)
def capacity_cmd(
    cluster_file: Path = typer.Argument(..., metavar="CLUSTER_FILE", help="The deployed cluster, TOML (or YAML, with PyYAML installed)."),
    workload: Optional[str] = opt_workload(from_file=True),
    model: Optional[str] = opt_model_override(),
    dtype: Optional[str] = opt_dtype(),
    trace: Optional[Path] = typer.Option(None, "--trace", metavar="FILE", help=(
        "Replay this trace CSV (Azure or reference format), time-scaled to each rate tried, instead of "
        "generated streams.")),
    duration: Optional[float] = opt_duration(from_file=True),
    seed: Optional[int] = opt_seed(from_file=True),
    seeds: Optional[int] = opt_seeds(from_file=True),
    margin: float = opt_margin(),
    precision: float = typer.Option(0.01, "--precision", help="Relative precision of the bisection on the rate."),
    start_rps: Optional[float] = typer.Option(None, "--start-rps", rich_help_panel=ADV,
                                              help="First rate to try (default: 2 req/s per machine)."),
    slo: Optional[Path] = opt_slo(),
    machines_file: Optional[Path] = opt_machines_file(),
    profiles: Optional[Path] = opt_profiles(),
    json_out: Optional[str] = opt_json("the answer"),
    csv_out: Optional[Path] = opt_csv("rate tried"),
    quiet: bool = opt_quiet(),
    method: str = opt_method("events"),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
    stack: Optional[Path] = opt_stack(),
) -> None:
    """The highest request rate at which the cluster holds all SLOs and every request finishes
    (bisection on the rate, same seeds; with --seeds K on the worst of K streams).

    Exit 0 with a rate, 1 when the SLOs fail even at the lowest rate tried, 2 on bad input.

    e.g. `splitwise-plan capacity examples/cluster.toml --seeds 3 --margin 0.1`.
    """
    spec = _load_spec(cluster_file, machines_file, model)
    workload, duration, seed, seeds, dtype, stack = _plan_defaults(spec, workload, duration, seed, seeds, dtype, stack,
                                                                   trace)
    _check_capacity_options(precision, start_rps, duration)
    threshold = check_seeds_margin(seeds, margin)
    check_output_options(json_out, csv_out, inputs=input_files(
        cluster=cluster_file, trace=trace, workload=workload, slo=slo, machines_file=machines_file,
        profiles=profiles))
    inp = resolve_inputs(model=spec.model, dtype=dtype, stack=stack, tp=spec.tensor_parallel, workload=workload, rps=None, trace=trace,
                         duration=duration, seed=seed, slo=slo, machines_file=machines_file, profiles=profiles,
                         method=method, need_stream=False, transfer=transfer, bandwidth=bandwidth, quiet=quiet)
    _check_cluster(spec, inp, cluster_file)
    if trace is not None:
        if not inp.trace_stream.duration_s > 0:
            raise SplitwisePlanError(f"trace {trace}: all its requests arrive at one instant, so it has no rate to "
                                     "scale; give a trace that spans time")
        seeds, duration, seed = 1, inp.trace_stream.duration_s, None
        min_rate = len(inp.trace_stream) / MAX_DURATION_S   # the trace stretched to a day at most
    else:
        min_rate = MIN_STREAM_REQUESTS / duration
    cap, fail, trials, results_by_rate = _search_capacity(inp, spec, duration=duration, seed=seed, seeds=seeds,
                                                          threshold=threshold, start_rps=start_rps,
                                                          precision=precision, min_rate=min_rate, quiet=quiet)
    inp.rate = None   # no rate was given: the answer is the capacity block's capacity_rps (its trials' rates there)
    inp.stream = None
    _write_capacity_reports(inp, spec, cluster_file, cap, fail, trials, results_by_rate, precision=precision,
                            duration=duration, seed=seed, seeds=seeds, margin=margin, threshold=threshold,
                            json_out=json_out, csv_out=csv_out)
    if json_out != STDOUT:
        err = stdout_taken(json_out, csv_out)   # a report takes stdout: this line goes to stderr
        typer.echo(_capacity_line(inp, spec, cap, fail, trials, results_by_rate, precision=precision,
                                  duration=duration, seed=seed, seeds=seeds, margin=margin, min_rate=min_rate),
                   err=err)
    _wrote(quiet, json_out, csv_out)
    if cap is None:
        raise typer.Exit(code=EXIT_NO_ANSWER)


def _check_capacity_options(precision: float, start_rps: Optional[float], duration: float) -> None:
    """A user error for a --precision, --start-rps or --duration that ``capacity`` cannot use."""
    if not math.isfinite(precision) or not 0 < precision < 1:
        raise SplitwisePlanError(f"--precision must be between 0 and 1 (0.01 = 1%), got {precision:g}")
    if start_rps is not None:
        check_positive(start_rps, "--start-rps")
    if not MIN_DURATION_S <= check_positive(duration, "--duration") <= MAX_DURATION_S:   # each trial is one stream
        raise SplitwisePlanError(f"--duration must be between {MIN_DURATION_S:g} s and {MAX_DURATION_S:g} s "
                                 f"(a day) for capacity, got {duration:g}")


def _search_capacity(inp: Inputs, spec, *, duration: float, seed: Optional[int], seeds: int, threshold: float,
                     start_rps: Optional[float], precision: float, min_rate: float, quiet: bool) -> tuple:
    """:func:`find_capacity` of the cluster, ``seeds`` streams of ``duration`` per rate tried (or the trace
    time-scaled to it), with a progress bar: (capacity or None, fail rate or None, trials, rate -> (worst
    result, requests of its streams))."""
    results_by_rate = {}

    def run_at(rate):
        results, n = [], 0
        for k in range(seeds):
            stream = (inp.trace_stream.at_rate(rate) if inp.trace is not None else
                      inp.source.generate(rate, duration_s=duration, seed=seed + k))
            results.append(inp.simulator(stream).run(spec.design, spec.prompt_machines, spec.token_machines))
            n += len(stream)
            del stream
        worst, _ = worst_of(results, threshold)
        results_by_rate[rate] = (worst, n)
        return worst

    top = _rate_bound(inp, spec, duration, seed if seed is not None else 0)
    if min_rate > top:
        raise SplitwisePlanError(f"--duration {duration:g} s is too short: {MIN_STREAM_REQUESTS} requests in it "
                                 f"({min_rate:.4g} req/s) are more than {spec.label} can serve ({top:.4g} req/s "
                                 "at most); give a longer duration")
    most = (MAX_STREAM_REQUESTS / duration if inp.trace is None else math.inf)
    with progress(None, f"capacity of {spec.label} ({inp.method})", quiet=quiet) as bar:
        def on_trial(rate, r, trials):
            bar.update(description=f"capacity of {spec.label}: {rate:.4g} req/s "
                                   f"{'holds' if passes(r, threshold) else 'fails'} (trial {len(trials)})")
        cap, fail, trials = find_capacity(
            run_at, start=start_rps or 2.0 * spec.machines, precision=precision,
            min_rate=min_rate, max_rate=min(most, top), on_trial=on_trial, threshold=threshold)
    return cap, fail, trials, results_by_rate


def _write_capacity_reports(inp: Inputs, spec, cluster_file: Path, cap, fail, trials: list, results_by_rate: dict, *,
                            precision: float, duration: float, seed: Optional[int], seeds: int, margin: float,
                            threshold: float, json_out: Optional[str], csv_out: Optional[Path]) -> None:
    """The CSV (a row per rate tried) and the JSON report of ``capacity``, to its file or stdout."""
    from splitwise_plan.report.formats import build_report, write_csv, write_json

    at = results_by_rate[cap][0] if cap is not None else None
    summary = {"cluster": spec.to_dict(), "capacity_rps": cap, "fails_at_rps": fail, "precision": precision,
               "method": inp.method, "workload": inp.workload, "duration_s": duration, "seed": seed,
               "trials": [{"rate_rps": rate, "requests": results_by_rate[rate][1], "completed": r.completed,
                           "slo_met": r.slo_met, "passed": passes(r, threshold), "tightest": r.tightest}
                          for rate, r in trials]}
    if inp.trace is not None:
        summary["trace"] = str(inp.trace)
    if seeds > 1 or margin:   # (only then: a report of the defaults reads as before)
        summary.update(seeds=seeds, margin=margin)
    if csv_out is not None:
        write_csv(csv_out, [inp.csv_row(r, rate) for rate, r in trials])
    if json_out is not None:
        doc = build_report("capacity", inp.report(spec.design, cluster_file=str(cluster_file)),
                           [{**at.to_dict(), "rate_rps": cap}] if at else [], capacity=summary)
        if json_out == STDOUT:
            print_json(doc)
        else:
            write_json(json_out, doc)


def _capacity_line(inp: Inputs, spec, cap, fail, trials: list, results_by_rate: dict, *, precision: float,
                   duration: float, seed: Optional[int], seeds: int, margin: float, min_rate: float) -> str:
    """The answer of ``capacity`` as one line: the rate, how it was found, and why a lower one failed."""
    head = f"{spec.name + ' = ' if spec.name else ''}{spec.label}, {spec.model} TP{spec.tensor_parallel}"
    src = (f"trace {inp.trace} time-scaled" if inp.trace is not None else
           f"{inp.workload}, {duration:g} s, " + (f"worst of seeds {seed}..{seed + seeds - 1}" if seeds > 1
                                                  else f"seed {seed}"))
    how = (f"{src}, {inp.scheduler.describe()}, {method_words(inp.method)}, "
           + (f"margin {margin:g}, " if margin else "") + f"{len(trials) * seeds} simulations")
    failed = results_by_rate[fail][0] if fail is not None else None
    if failed is not None and failed.slo_met and failed.completed < failed.requests:   # not the SLOs: memory
        n = failed.requests - failed.completed
        how += (f"; at {float(fail)!r} req/s the SLOs hold but {plural(n, 'request')} never got "
                f"{'their' if n > 1 else 'its'} KV-cache memory")
    if cap is None:
        memory = failed is not None and failed.completed < failed.requests   # lower rates do not help there
        short = (f"; {float(fail)!r} req/s ({MIN_STREAM_REQUESTS} requests expected in {duration:g} s) is the "
                 "lowest rate tried: a longer --duration tries lower ones"
                 if fail <= _round_rate(min_rate, _rate_digits(precision), math.ceil) and not memory
                 and inp.trace is None else "")
        return f"capacity of {head}: none; the SLOs fail even at {float(fail)!r} req/s ({how}){short}"
    if fail is None:
        return f"capacity of {head}: at least {float(cap)!r} req/s (the largest rate tried; {how})"
    # the rates tried, exactly: ``check --rps`` at them simulates the same streams
    return f"capacity of {head}: {float(cap)!r} req/s (fails at {float(fail)!r}; {how})"


def _wrote(quiet: bool, *outputs) -> None:
    """``wrote FILE`` for each report file written (as simulate and sweep say it)."""
    for out in outputs:
        if out is not None and out != STDOUT:
            note(f"wrote {out}", quiet)
