"""``splitwise-plan calibrate RESULT``: the simulator's TTFT, TPOT and E2E beside those of a real serving
benchmark (vLLM's ``bench serve`` or SGLang's ``bench_serving``) of one server at a fixed request rate, with the
error of each statistic: how far to trust a plan's latencies on your stack."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from splitwise_plan.cli.app import ReportCommand, app, console
from splitwise_plan.cli.options import STDOUT, opt_dtype, opt_json, opt_machines_file, opt_method, opt_profiles
from splitwise_plan.cli.output import check_output_options, note, print_json
from splitwise_plan.errors import SplitwisePlanError


@app.command("calibrate", cls=ReportCommand)
def calibrate_cmd(
    result: Path = typer.Argument(..., metavar="RESULT", help="vLLM bench serve's --save-result JSON, or SGLang "
                                  "bench_serving's --output-file JSON lines (its last run unless --line)."),
    machine: str = typer.Option(..., "--machine", help="The benchmark server's machine type (e.g. H100)."),
    tp: int = typer.Option(..., "--tp", help="The server's tensor parallelism: it ran on this many GPUs of "
                                            "one machine."),
    model: Optional[str] = typer.Option(None, "--model", metavar="NAME|CONFIG", help="The model served; default: "
                                        "the file's model_id where it names a built-in model."),
    dtype: Optional[str] = opt_dtype(),
    stack: Optional[str] = typer.Option(None, "--stack", metavar="NAME|FILE|aiconfigurator:BACKEND",
                                        help="The latencies' stack, as the plan's --stack (default auto)."),
    line: Optional[int] = typer.Option(None, "--line", metavar="N", help="SGLang's file: its N-th run (from 1)."),
    seeds: int = typer.Option(3, "--seeds", metavar="K", help="Simulate K streams of the benchmark's client "
                              "(seeds seed..seed+K-1) and pool their requests. Default 3, as the plan confirms."),
    seed: int = typer.Option(0, "--seed", help="The first stream's seed."),
    method: str = opt_method("events"),
    profiles: Optional[Path] = opt_profiles(),
    machines_file: Optional[Path] = opt_machines_file(),
    json_out: Optional[str] = opt_json(),
) -> None:
    """Hold the simulator against a serving benchmark: TTFT, TPOT and E2E, each statistic the benchmark
    reports (mean, median, P90, P99 ...), simulated and measured, with the error.

    The benchmark's server is simulated as one model instance on --tp GPUs of --machine, its client as a
    stream at the file's request rate with its prompt and output lengths.

    e.g. `splitwise-plan calibrate vllm-result.json --model llama-3.1-70b --machine H100 --tp 8`.
    """
    from splitwise_plan.inputs.machines import load_machines, machine_by_name
    from splitwise_plan.inputs.models import get_model
    from splitwise_plan.inputs.serving_bench import read_serving_benchmark
    from splitwise_plan.perf.profiles import load_profiles
    from splitwise_plan.perf.sources import resolve_stack
    from splitwise_plan.planning.calibrate import calibrate

    check_output_options(json_out, None)
    if seeds < 1:
        raise SplitwisePlanError(f"--seeds must be at least 1, got {seeds}")
    bench = read_serving_benchmark(result, line)
    spec = get_model(_model_name(model, bench), dtype=dtype)
    catalog = load_machines(machines_file)
    m = machine_by_name(catalog, machine)
    ps = load_profiles(profiles)
    chosen, why = resolve_stack(stack, ps, spec)
    cal = calibrate(bench, spec, m, tp, stack=chosen, profiles=ps, machines=catalog,
                    seeds=seeds, seed=seed, method=method)
    doc = {**cal.to_dict(), "stack": chosen.name + (f" ({why})" if why else "")}
    if json_out == STDOUT:
        print_json(doc)
        return
    if json_out is not None:
        from splitwise_plan.report.formats import write_json
        write_json(json_out, doc)
    _print(cal, doc["stack"])
    if json_out is not None:
        note(f"wrote {json_out}", False)


def _model_name(model: Optional[str], bench) -> str:
    """``--model``, or the benchmark's ``model_id`` where it names a built-in model; else a one-line error."""
    from splitwise_plan.inputs.models import get_model

    if model is not None:
        return model
    name = (bench.model_id or "").rsplit("/", 1)[-1].lower().removesuffix("-instruct")   # Llama-3.1-70B-Instruct
    try:
        return get_model(name).name
    except SplitwisePlanError:
        raise SplitwisePlanError(f"give --model: {bench.path} names no built-in model (see `splitwise-plan models`)") \
            from None


def _print(cal, stack: str) -> None:
    """The table of statistics, then what was simulated and the median error."""
    table = Table(title=f"{cal.benchmark.tool} against the {cal.method} simulation",
                  caption=f"error: simulated / benchmark - 1; {cal.server}")
    for col in ("metric", "statistic", "benchmark, ms", "simulated, ms", "error"):
        table.add_column(col, justify="left" if col in ("metric", "statistic") else "right")
    for r in cal.rows:
        error = "-" if r["error"] is None else f"{r['error']:+.1%}"
        table.add_row(r["metric"].upper(), r["statistic"], f"{r['benchmark_ms']:,.1f}", f"{r['simulated_ms']:,.1f}",
                      error)
    c = console()
    c.print(table)
    c.print(cal.benchmark.describe(), highlight=False)
    if "itl" in cal.benchmark.left_out:
        c.print("ITL not compared: the simulator times each request's tokens as one mean gap (its TPOT), not "
                "token by token", highlight=False)
    c.print(f"lengths: {cal.lengths}; seeds {', '.join(map(str, cal.seeds))}", highlight=False)
    c.print(f"latencies: {cal.source}; stack {stack}", highlight=False)
    err = cal.median_abs_error()
    if err is not None:
        c.print(f"median |error| over the {len(cal.rows)} statistics: {err:.1%}", highlight=False)
