"""CLI commands that gate a deployed cluster: ``check`` (do the SLOs hold at a rate, with headroom:
exit 0, 1 when not, 2 on bad input) and ``capacity`` (the highest rate it holds).

Both read a cluster file (:mod:`splitwise_plan.inputs.cluster_file`) and share the options
(:mod:`.options`) and inputs (:mod:`.inputs`) of ``simulate``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from splitwise_plan.cli.app import ReportCommand, app
from splitwise_plan.cli.inputs import Inputs, arrivals_bar, fluid_caution, resolve_inputs
from splitwise_plan.cli.options import (
    ADV,
    STDOUT,
    check_positive,
    opt_bandwidth,
    opt_csv,
    opt_duration,
    opt_json,
    opt_machines_file,
    opt_method,
    opt_profiles,
    opt_quiet,
    opt_seed,
    opt_slo,
    opt_trace,
    opt_transfer,
    opt_workload,
)
from splitwise_plan.cli.output import check_output_options, input_files, note, print_json, stdout_taken
from splitwise_plan.cli.progress import progress
from splitwise_plan.errors import SplitwisePlanError, plural
from splitwise_plan.inputs.workloads import nonempty
from splitwise_plan.search import passes

MIN_STREAM_REQUESTS = 10  # capacity: never try a rate that gives fewer requests than this
MAX_STREAM_REQUESTS = 2_000_000  # capacity: stop raising the rate past this many requests
PROBE_REQUESTS = 2_000  # capacity: requests of the stream its rate bound is estimated on
MIN_DURATION_S, MAX_DURATION_S = 1.0, 86_400.0   # capacity: the streams it tries last from a second to a day


def _load_spec(cluster_file: Path, machines_file: Optional[Path]):
    from splitwise_plan.inputs.cluster_file import load_cluster
    from splitwise_plan.inputs.machines import load_machines
    return load_cluster(cluster_file, load_machines(machines_file))


def _check_cluster(spec, inp: Inputs, cluster_file: Path) -> None:
    """A user error naming the cluster file when its machines cannot run its model at its TP
    (too few GPUs or too little HBM, or no profile at that TP)."""
    from splitwise_plan.inputs.machines import get_machine
    from splitwise_plan.inputs.models import get_model
    from splitwise_plan.sim.cluster import instance_layout
    d = spec.design
    try:
        for m in d.machines:
            machine = get_machine(m, inp.machines)   # in any case, as the catalog names it
            instance_layout(machine, spec.tensor_parallel, d.is_baseline, get_model(spec.model))
            inp.profiles.latency_model(spec.model, machine.hardware, spec.tensor_parallel)
    except SplitwisePlanError as exc:
        raise SplitwisePlanError(f"cluster file {cluster_file} ({spec.model} at TP{spec.tensor_parallel} on "
                                 f"{', '.join(dict.fromkeys(d.machines))}): {exc}") from None


def violation_lines(result) -> list[str]:
    out = []
    for v in result.violations:
        unit = "x" if v["unit"] == "slowdown" else " s"
        value = v["value"]
        val = "not finished (inf)" if not math.isfinite(value) else f"{value:.4g}{unit}"
        margin = "-inf" if not math.isfinite(v["margin"]) else f"{v['margin']:.4g}"
        out.append(f"  - {v['metric'].upper()} P{v['percentile']:g} {v['unit']}: {val}, limit < {v['limit']:g}{unit}, "
                   f"margin {margin}")
    return out


@app.command("check", cls=ReportCommand)
def check_cmd(
    cluster_file: Path = typer.Argument(..., metavar="CLUSTER_FILE", help="The deployed cluster, TOML (or YAML, with PyYAML installed)."),
    rps: Optional[float] = typer.Option(None, "--rps", help="Expected request rate, req/s."),
    headroom: float = typer.Option(0.0, "--headroom", help=(
        "Require the SLOs at rate x (1 + headroom), e.g. 0.2, and at the rate itself.")),
    workload: str = opt_workload(),
    trace: Optional[Path] = opt_trace(),
    duration: float = opt_duration(),
    seed: int = opt_seed(),
    slo: Optional[Path] = opt_slo(),
    machines_file: Optional[Path] = opt_machines_file(),
    profiles: Optional[Path] = opt_profiles(),
    json_out: Optional[str] = opt_json("the verdict"),
    csv_out: Optional[Path] = opt_csv("rate checked (the raised one, then the rate itself)"),
    quiet: bool = opt_quiet(),
    method: str = opt_method("events"),
    transfer: str = opt_transfer(ADV),
    bandwidth: float = opt_bandwidth(ADV),
) -> None:
    """CI gate: exit 0 when all SLOs hold and every request finishes at the rate (with headroom), 1 when not,
    2 on bad input."""
    _check_check_options(headroom, rps, trace)
    spec = _load_spec(cluster_file, machines_file)
    check_output_options(json_out, csv_out, inputs=input_files(
        cluster=cluster_file, trace=trace, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    factor = 1.0 + headroom
    inp = resolve_inputs(model=spec.model, tp=spec.tensor_parallel, workload=workload,
                         # the raised rate to the digits it is printed with: check --rps at it is the same stream
                         rps=None if rps is None else float(f"{check_positive(rps, '--rps') * factor:.10g}"),
                         trace=trace,
                         duration=duration, seed=seed, slo=slo, machines_file=machines_file, profiles=profiles,
                         method=method, transfer=transfer, bandwidth=bandwidth)
    _check_cluster(spec, inp, cluster_file)
    base_rate, loads = _check_loads(inp, rps, trace, factor, duration, seed)
    results = _run_loads(inp, spec, loads, quiet)
    holds = [r.slo_met and r.completed == r.requests for r in results]   # unfinished requests fail the gate
    passed = all(holds)
    check = {"cluster": spec.to_dict(), "rate_rps": base_rate, "headroom": headroom, "checked_rps": inp.rate,
             "passed": passed, "method": inp.method,
             "rates": [{"rate_rps": rate, "passed": ok} for (rate, _), ok in zip(loads, holds)]}
    _write_check_reports(inp, cluster_file, loads, results, check, base_rate=base_rate, headroom=headroom,
                         factor=factor, json_out=json_out, csv_out=csv_out)
    if json_out != STDOUT:
        lines = _check_lines(inp, spec, trace, loads, results, holds, base_rate=base_rate, headroom=headroom)
        typer.echo("\n".join(lines), err=stdout_taken(json_out, csv_out))
    _wrote(quiet, json_out, csv_out)
    if not passed:
        raise typer.Exit(code=1)


def _check_check_options(headroom: float, rps: Optional[float], trace: Optional[Path]) -> None:
    """A user error for a --headroom out of range, or for neither or both of --rps and --trace."""
    if headroom is None or not math.isfinite(headroom) or not 0 <= headroom <= MAX_HEADROOM:
        raise SplitwisePlanError(f"--headroom must be a finite number from 0 to {MAX_HEADROOM:g} (0.2 = 20% more load), "
                                 f"got {headroom:g}")
    if rps is None and trace is None:
        raise SplitwisePlanError("give --rps R (the expected requests per second) or --trace FILE")
    if rps is not None and trace is not None:   # (--headroom scales a trace)
        raise SplitwisePlanError("give --rps (a generated stream) or --trace (a replayed file), not both")


def _check_loads(inp: Inputs, rps: Optional[float], trace: Optional[Path], factor: float, duration: float,
                 seed: int) -> tuple[float, list]:
    """The rate asked for, and the loads ``check`` simulates as (rate, stream): the rate raised by the
    headroom (a trace's stream is time-scaled to it in ``inp``), then, with headroom, the rate itself."""
    base_stream = inp.stream if trace is not None else None   # the rate asked for, if --headroom raises it
    if trace is not None and factor != 1.0:
        if not inp.stream.duration_s > 0:
            raise SplitwisePlanError(f"trace {trace}: all its requests arrive at one instant, so it has no rate "
                                     "for --headroom to raise; give --headroom 0 or a trace that spans time")
        # (the report's duration stays the trace's own, beside the rate asked for)
        inp.stream = inp.stream.at_rate(inp.stream.rate * factor)
        inp.rate = inp.stream.rate
    base_rate = rps if rps is not None else inp.rate / factor
    loads = [(inp.rate, inp.stream)]
    if factor != 1.0:   # and the rate itself: each rate is its own stream, and headroom must never pass a cluster
        if base_stream is None:   # that fails at the rate asked for (near its limit nearby rates can flip)
            base_stream = nonempty(inp.source.generate(rps, duration_s=duration, seed=seed), rps, duration, seed)
        loads.append((base_rate, base_stream))
    return base_rate, loads


def _run_loads(inp: Inputs, spec, loads: list, quiet: bool) -> list:
    """Simulate the cluster at each load, with a progress bar each: the results, in order."""
    results = []
    sims = [inp.simulator(stream) for _, stream in loads]
    fluid_caution(sims[0], spec.design)
    for (rate, stream), sim in zip(loads, sims):
        with arrivals_bar(inp, f"checking {spec.label} at {rate:.10g} req/s", quiet, stream) as on_arrivals:
            results.append(sim.run_requests(spec.design, spec.prompt_machines, spec.token_machines,
                                            on_arrivals=on_arrivals)[0])
    return results


def _write_check_reports(inp: Inputs, cluster_file: Path, loads: list, results: list, check: dict, *,
                         base_rate: float, headroom: float, factor: float, json_out: Optional[str],
                         csv_out: Optional[Path]) -> None:
    """The CSV (a row per load) and the JSON report of ``check``, to its file or stdout."""
    from splitwise_plan.report.formats import build_report, write_csv, write_json

    if csv_out is not None:
        write_csv(csv_out, [{**inp.csv_row(r, rate), "headroom": headroom} for (rate, _), r in zip(loads, results)])
    if json_out is not None:
        # the rate asked for; with --headroom two streams, each result with its rate and requests
        asked = {"rate_rps": float(base_rate), "requests": None} if factor != 1.0 else {}
        doc = build_report("check", {**inp.report(cluster_file=str(cluster_file)), **asked},
                           [{**r.to_dict(), "rate_rps": rate} for (rate, _), r in zip(loads, results)], check=check)
        if json_out == STDOUT:
            print_json(doc)
        else:
            write_json(json_out, doc)


def _check_lines(inp: Inputs, spec, trace: Optional[Path], loads: list, results: list, holds: list, *,
                 base_rate: float, headroom: float) -> list[str]:
    """The text verdict of ``check``: the cluster, each load and its verdict, then the gate's."""
    passed = all(holds)
    src = f"trace {trace}" if trace else f"{inp.workload}, {inp.duration_s:g} s, seed {inp.seed}"
    lines = [f"check: {spec.name + ' = ' if spec.name else ''}{spec.label}, {spec.model} TP{spec.tensor_parallel}"]
    for k, ((rate, stream), result) in enumerate(zip(loads, results)):
        # the rate simulated, to the digits that make it the same stream again (check --rps at it)
        rate_txt = (f"{rate:.10g} req/s ({base_rate:.10g} req/s + {headroom:.0%} headroom)" if k == 0 and headroom
                    else f"{rate:.10g} req/s" if math.isfinite(rate) else "all at one instant")
        lines.append(f"load:  {rate_txt}; {src if k == 0 else 'the rate itself'}; "
                     f"{plural(len(stream), 'request')}; {inp.scheduler.describe()}; method {inp.method}")
        lines.extend(_verdict_lines(result, len(inp.slos)))
    if len(loads) > 1:   # the gate's verdict last, where a CI log's tail shows it
        failed = [f"{rate:.10g} req/s" for (rate, _), ok in zip(loads, holds) if not ok]
        lines.append(f"check {'PASSED' if passed else 'FAILED'}: {base_rate:.10g} req/s with {headroom:.0%} headroom"
                     + ("" if passed else f" (fails at {' and '.join(failed)})"))
    return lines


MAX_HEADROOM = 100.0   # --headroom at most: 101x the rate (more is a typo, not a load)


def _verdict_lines(result, n: int) -> list:
    """PASS or FAIL of one checked load, with the tightest SLO or each violation."""
    lost = result.requests - result.completed
    if result.slo_met and not lost:
        t = result.tightest
        return [f"PASS: all {n} SLOs hold (tightest: {t['metric'].upper()} P{t['percentile']:g} "
                f"{t['value']:.4g} < {t['limit']:g}, margin {t['margin']:.4g})"]
    unfinished = (f"{lost:,} of {plural(result.requests, 'request')} "
                  f"{'never got their KV-cache memory' if result.oom else 'never finished'}")
    if result.slo_met:
        return [f"FAIL: all {n} SLOs hold, but {unfinished}"]
    return [f"FAIL: {len(result.violations)} of {n} SLOs violated:", *violation_lines(result),
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
                  on_trial=None):
    """Highest rate in [min_rate, max_rate] at which ``run_at(rate)`` holds (every SLO met, every request
    finished, as ``check`` asks), by doubling then bisection to relative ``precision``. Returns (rate or
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
        return passes(r)

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


def _rate_bound(inp: Inputs, wl, spec, duration: float, seed: int) -> float:
    """A rate the cluster cannot hold (req/s): twice the most that the capacity model (best-case
    work and memory, see :mod:`splitwise_plan.search.bound`) lets it carry. Trials stop there, so a
    rate far past the cluster never costs a long simulation."""
    from splitwise_plan.search import capacity_model

    probe = wl.generate(PROBE_REQUESTS / duration, duration_s=duration, seed=seed)
    cm = capacity_model(inp.simulator(probe), spec.design)
    scale = float(cm.max_scale(spec.prompt_machines, spec.token_machines, hi=1e6, iters=64))
    return 2.0 * scale * probe.rate


@app.command("capacity", cls=ReportCommand)
def capacity_cmd(
    cluster_file: Path = typer.Argument(..., metavar="CLUSTER_FILE", help="The deployed cluster, TOML (or YAML, with PyYAML installed)."),
    workload: str = opt_workload(),
    duration: float = opt_duration(),
    seed: int = opt_seed(),
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
) -> None:
    """The highest request rate at which the cluster holds all SLOs and every request finishes
    (bisection on the rate, same seed).

    Exit 0 with a rate, 1 when the SLOs fail even at the lowest rate tried, 2 on bad input.
    """
    _check_capacity_options(precision, start_rps, duration)
    spec = _load_spec(cluster_file, machines_file)
    check_output_options(json_out, csv_out, inputs=input_files(
        cluster=cluster_file, workload=workload, slo=slo, machines_file=machines_file, profiles=profiles))
    inp = resolve_inputs(model=spec.model, tp=spec.tensor_parallel, workload=workload, rps=None, trace=None,
                         duration=duration, seed=seed, slo=slo, machines_file=machines_file, profiles=profiles,
                         method=method, need_stream=False, transfer=transfer, bandwidth=bandwidth)
    _check_cluster(spec, inp, cluster_file)
    min_rate = MIN_STREAM_REQUESTS / duration
    cap, fail, trials, results_by_rate = _search_capacity(inp, spec, duration=duration, seed=seed,
                                                          start_rps=start_rps, precision=precision,
                                                          min_rate=min_rate, quiet=quiet)
    inp.rate = None   # no rate was given: the answer is the capacity block's capacity_rps (its trials' rates there)
    _write_capacity_reports(inp, spec, cluster_file, cap, fail, trials, results_by_rate, precision=precision,
                            duration=duration, seed=seed, json_out=json_out, csv_out=csv_out)
    if json_out != STDOUT:
        err = stdout_taken(json_out, csv_out)   # a report takes stdout: this line goes to stderr
        typer.echo(_capacity_line(inp, spec, cap, fail, trials, results_by_rate, precision=precision,
                                  duration=duration, seed=seed, min_rate=min_rate), err=err)
    _wrote(quiet, json_out, csv_out)
    if cap is None:
        raise typer.Exit(code=1)


def _check_capacity_options(precision: float, start_rps: Optional[float], duration: float) -> None:
    """A user error for a --precision, --start-rps or --duration that ``capacity`` cannot use."""
    if not math.isfinite(precision) or not 0 < precision < 1:
        raise SplitwisePlanError(f"--precision must be between 0 and 1 (0.01 = 1%), got {precision:g}")
    if start_rps is not None:
        check_positive(start_rps, "--start-rps")
    if not MIN_DURATION_S <= check_positive(duration, "--duration") <= MAX_DURATION_S:   # each trial is one stream
        raise SplitwisePlanError(f"--duration must be between {MIN_DURATION_S:g} s and {MAX_DURATION_S:g} s "
                                 f"(a day) for capacity, got {duration:g}")


def _search_capacity(inp: Inputs, spec, *, duration: float, seed: int, start_rps: Optional[float],
                     precision: float, min_rate: float, quiet: bool) -> tuple:
    """:func:`find_capacity` of the cluster, one stream of ``duration`` per rate tried, with a progress
    bar: (capacity or None, fail rate or None, trials, rate -> (result, requests of its stream))."""
    wl = inp.source
    results_by_rate = {}

    def run_at(rate):
        stream = wl.generate(rate, duration_s=duration, seed=seed)
        r = inp.simulator(stream).run(spec.design, spec.prompt_machines, spec.token_machines)
        results_by_rate[rate] = (r, len(stream))
        return r

    top = _rate_bound(inp, wl, spec, duration, seed)
    if min_rate > top:
        raise SplitwisePlanError(f"--duration {duration:g} s is too short: {MIN_STREAM_REQUESTS} requests in it "
                                 f"({min_rate:.4g} req/s) are more than {spec.label} can serve ({top:.4g} req/s "
                                 "at most); give a longer duration")
    with progress(None, f"capacity of {spec.label} ({inp.method})", quiet=quiet) as bar:
        def on_trial(rate, r, trials):
            bar.update(description=f"capacity of {spec.label}: {rate:.4g} req/s "
                                   f"{'holds' if passes(r) else 'fails'} (trial {len(trials)})")
        cap, fail, trials = find_capacity(
            run_at, start=start_rps or 2.0 * spec.machines, precision=precision,
            min_rate=min_rate, max_rate=min(MAX_STREAM_REQUESTS / duration, top), on_trial=on_trial)
    return cap, fail, trials, results_by_rate


def _write_capacity_reports(inp: Inputs, spec, cluster_file: Path, cap, fail, trials: list, results_by_rate: dict, *,
                            precision: float, duration: float, seed: int, json_out: Optional[str],
                            csv_out: Optional[Path]) -> None:
    """The CSV (a row per rate tried) and the JSON report of ``capacity``, to its file or stdout."""
    from splitwise_plan.report.formats import build_report, write_csv, write_json

    wl = inp.source
    at = results_by_rate[cap][0] if cap is not None else None
    summary = {"cluster": spec.to_dict(), "capacity_rps": cap, "fails_at_rps": fail, "precision": precision,
               "method": inp.method, "workload": wl.name, "duration_s": duration, "seed": seed,
               "trials": [{"rate_rps": rate, "requests": results_by_rate[rate][1], "completed": r.completed,
                           "slo_met": r.slo_met, "passed": passes(r), "tightest": r.tightest} for rate, r in trials]}
    if csv_out is not None:
        write_csv(csv_out, [inp.csv_row(r, rate) for rate, r in trials])
    if json_out is not None:
        doc = build_report("capacity", inp.report(cluster_file=str(cluster_file)),
                           [{**at.to_dict(), "rate_rps": cap}] if at else [], capacity=summary)
        if json_out == STDOUT:
            print_json(doc)
        else:
            write_json(json_out, doc)


def _capacity_line(inp: Inputs, spec, cap, fail, trials: list, results_by_rate: dict, *, precision: float,
                   duration: float, seed: int, min_rate: float) -> str:
    """The answer of ``capacity`` as one line: the rate, how it was found, and why a lower one failed."""
    wl = inp.source
    head = f"{spec.name + ' = ' if spec.name else ''}{spec.label}, {spec.model} TP{spec.tensor_parallel}"
    how = (f"{wl.name}, {duration:g} s, seed {seed}, {inp.scheduler.describe()}, method {inp.method}, "
           f"{len(trials)} simulations")
    failed = results_by_rate[fail][0] if fail is not None else None
    if failed is not None and failed.slo_met and failed.completed < failed.requests:   # not the SLOs: memory
        n = failed.requests - failed.completed
        how += (f"; at {float(fail)!r} req/s the SLOs hold but {plural(n, 'request')} never got "
                f"{'their' if n > 1 else 'its'} KV-cache memory")
    if cap is None:
        memory = failed is not None and failed.completed < failed.requests   # lower rates do not help there
        short = (f"; {float(fail)!r} req/s ({MIN_STREAM_REQUESTS} requests expected in {duration:g} s) is the "
                 "lowest rate tried: a longer --duration tries lower ones"
                 if fail <= _round_rate(min_rate, _rate_digits(precision), math.ceil) and not memory else "")
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
