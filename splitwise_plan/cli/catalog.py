"""Commands that show what ships and what a run would read: ``profiles``, ``workloads``, ``slos``,
``machines``, plus ``version`` and ``help``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from splitwise_plan import __version__
from splitwise_plan.cli.app import app, console
from splitwise_plan.errors import SplitwisePlanError


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
    """Print the splitwise-plan version.

    e.g. `splitwise-plan version`.
    """
    typer.echo(__version__)


@app.command("profiles")
def profiles_cmd(
    profiles: Optional[Path] = typer.Option(
        None, "--profiles", metavar="FILE",
        help="Profile CSV (columns model, hardware, prompt_size, batch_size, token_size, prompt_time, "
             "token_time, tensor_parallel; times in ms). Default: the shipped perf_model.csv."),
    seed: int = typer.Option(0, "--seed", help="Seed of the 80:20 train:test split for the MAPE."),
) -> None:
    """List the performance profiles and the latency model's held-out error (MAPE).

    e.g. `splitwise-plan profiles --profiles my_profiles.csv`.
    """
    from splitwise_plan.perf.profiles import load_profiles, profile_accuracy

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
    """List the workloads with request counts, trace rate and size statistics.

    e.g. `splitwise-plan workloads coding my_trace.csv --rps 70` (also a 70 req/s stream of each).
    """
    from splitwise_plan.inputs.workloads import load_trace, load_workload, workload_names

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
    """Show the latency SLOs a cluster design must meet (each strictly below its limit).

    e.g. `splitwise-plan slos --slo my_slos.toml`.
    """
    from splitwise_plan.inputs.slos import load_slos

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
    """Show the machine types with GPUs, HBM, price per hour, provisioned power and their sources.

    e.g. `splitwise-plan machines --machines-file examples/machines-paper.toml`.
    """
    from splitwise_plan.inputs.machines import GIB, catalog_units, load_machines

    catalog = load_machines(machines)
    try:   # one unit each: in the header; mixed (a file's own units for some machines): in each cell
        cost_unit, power_unit = catalog_units(catalog)
        units = {"cost": cost_unit, "power": power_unit}
    except SplitwisePlanError:
        units = None
    table = Table(title="Machines (cost per machine-hour, provisioned power per machine)",
                  caption=None if units else "The catalog mixes units: each number carries its own.")
    columns = ("name", "hardware", "GPUs", "HBM/GPU GiB",
               f"cost ({units['cost']})" if units else "cost", f"power ({units['power']})" if units else "power",
               "base", "source")
    for col in columns:
        table.add_column(col, justify="right" if col[:3] in ("GPU", "HBM", "cos", "pow") else "left",
                         overflow="fold")
    for m in catalog.values():
        cost, power = f"{m.cost:,.2f}", _plain(m.power)
        if units is None:
            cost, power = f"{cost} {m.cost_unit}", f"{power} {m.power_unit}"
        table.add_row(m.name, m.hardware, str(m.gpus), f"{m.hbm_bytes_per_gpu / GIB:g}", cost, power,
                      m.base or "", m.source)
    console().print(table)


def _plain(value: float) -> str:
    """A number with thousands separators and at most three decimals, never in scientific notation."""
    return f"{value:,.3f}".rstrip("0").rstrip(".")
