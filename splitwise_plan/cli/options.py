"""The options the commands share (their defaults and the plan's help texts come from
:mod:`splitwise_plan.planning.options`).

Each ``opt_*`` returns a fresh ``typer.Option``; :func:`optional_values` lets ``--json`` go without
a file (standard output).
"""

from __future__ import annotations

import math
import os
from typing import Optional

import typer

from splitwise_plan.errors import SplitwisePlanError, positive_number
from splitwise_plan.planning.options import PLAN_OPTIONS, default
from splitwise_plan.planning.request import MAX_SEEDS

AUTO = "auto"   # --method of a grid: fluid where it reads the design reliably, else events


STDOUT = "-"


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


ADV = "Advanced"


OUT = "Output"


#: What the help of an option of check and capacity adds: a cluster file a plan wrote gives its own value.
FROM_FILE = " Default: the cluster file's, as the plan that wrote it (--cluster-out) ran, else "


def opt_workload(from_file: bool = False):
    return typer.Option(None if from_file else default("workload"), "--workload", "-w", metavar="NAME|FILE",
                        help="Request sizes: coding, conversation, or a trace CSV to draw sizes from."
                             + (f"{FROM_FILE}{default('workload')}." if from_file else ""))


def opt_trace():
    return typer.Option(None, "--trace", metavar="FILE",
                        help="Replay this trace CSV exactly (Azure or reference format) instead of a generated stream.")


def opt_duration(from_file: bool = False):
    return typer.Option(None if from_file else default("duration"), "--duration", metavar="S",
                        help="Length of the generated stream, seconds."
                             + (f"{FROM_FILE}{default('duration'):g}." if from_file else ""))


def opt_model():
    return typer.Option(default("model"), "--model", help=PLAN_OPTIONS["model"].help)


def opt_tp():
    return typer.Option("8", "--tp", metavar="N|P:T", help="Tensor parallelism: of every pool (8), or the prompt "
                        "pool's and the token pool's (4:2). A machine runs GPUs/TP instances of the model.")


def opt_seed(from_file: bool = False):
    return typer.Option(None if from_file else default("seed"), "--seed", help="Seed of the generated stream."
                        + (f"{FROM_FILE}{default('seed')}." if from_file else ""))


def opt_slo():
    return typer.Option(None, "--slo", "--slos", metavar="FILE", help="SLO TOML file. Default: the paper's Table VI.")


def opt_machines_file():
    return typer.Option(None, "--machines-file", metavar="FILE",
                        help="Machine TOML file overriding or extending the builtin machine catalog.")


def opt_profiles():
    return typer.Option(None, "--profiles", metavar="FILE", help="Profile CSV. Default: the shipped perf_model.csv.")


def opt_method(default: str):
    """``--method``: commands that simulate one design point at a time default to the discrete-event
    simulation (the reference's rules, tens of milliseconds for 2 minutes at 70 req/s), a grid to ``auto``:
    the fluid model where it reads the design reliably."""
    auto = default == AUTO
    return typer.Option(default, "--method", metavar="events|fluid" + "|auto" * auto, rich_help_panel=ADV,
                        help="Simulator: events (discrete-event, the reference simulator's rules one event at a "
                             "time) or fluid (each machine's decode iterations as a fluid: faster, within a few % of "
                             "events)" + (", or auto: fluid, but events where a token instance holds few requests' "
                                           "KV caches (there the fluid model can misread the SLOs by half again)" if auto else "")
                             + f". Default here: {default}.")


def opt_json(instead_of: str = "the table"):
    return typer.Option(None, "--json", metavar="[FILE]", rich_help_panel=OUT,
                        help=f"Write the JSON report to FILE; bare --json prints JSON to stdout instead of {instead_of}.")


def opt_csv(row: str = "design point"):
    return typer.Option(None, "--csv", metavar="FILE", rich_help_panel=OUT, help=f"Write one CSV row per {row}.")


def opt_quiet():
    return typer.Option(False, "--quiet", "-q", rich_help_panel=OUT, help="No progress bar and no 'wrote FILE' notes.")


def opt_model_override():
    """``--model`` of the commands that read a cluster file: the file's model unless given."""
    return typer.Option(None, "--model", help="Model to serve instead of the cluster file's (a what-if): "
                                               "bloom-176b or llama2-70b.")


def check_positive(value: float, flag: str) -> float:
    """A required option's positive finite value, or a user error naming ``flag``."""
    if value is None:
        raise SplitwisePlanError(f"{flag} is required")
    return positive_number(value, flag)


def opt_dtype():
    """``--dtype``: the weights' precision, shared by the planner and the simulation commands."""
    return typer.Option(default("dtype"), "--dtype", metavar="bf16|fp8", help=PLAN_OPTIONS["dtype"].help)


def opt_stack(panel: Optional[str] = ADV):
    """``--stack``: the serving stack of estimated latencies."""
    return typer.Option(default("stack"), "--stack", metavar="FILE|aiconfigurator:BACKEND", rich_help_panel=panel,
                        help=PLAN_OPTIONS["stack"].help)


def opt_transfer(panel: Optional[str] = None):
    """``--transfer``, shared by the planner and the simulation commands."""
    return typer.Option(default("transfer"), "--transfer", metavar="serialized|layerwise", rich_help_panel=panel,
                        help=PLAN_OPTIONS["transfer"].help)


def opt_bandwidth(panel: Optional[str] = None):
    """``--bandwidth``, shared by the planner and the simulation commands."""
    return typer.Option(default("bandwidth"), "--bandwidth", metavar="GIB_S", rich_help_panel=panel,
                        help=PLAN_OPTIONS["bandwidth"].help)



RATES_METAVAR = "R[,R...]"


def opt_rps(what: str = "Request rate of the generated stream, req/s; with --trace, the trace time-scaled to "
                        "this rate."):
    """``--rps``: one rate or a comma list of them (``50,70``), each its own what-if."""
    return typer.Option(None, "--rps", metavar=RATES_METAVAR,
                        help=f"{what} A comma list (50,70) runs each rate in turn.")


def parse_rates(text: Optional[str], flag: str = "--rps") -> Optional[list[float]]:
    """The rates of ``--rps``: one number or a comma list (``50,70``), each positive and finite, in the
    order given with repeats dropped; None when the option is not given."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise SplitwisePlanError(f"{flag} is empty; give a rate (req/s) or a comma list like 50,70")
    rates: list[float] = []
    for part in parts:
        try:
            value = float(part)
        except ValueError:
            raise SplitwisePlanError(f"{flag} {text!r}: {part!r} is not a number; give a rate (req/s) or a comma "
                                     "list like 50,70") from None
        rate = positive_number(value, flag)
        if rate not in rates:
            rates.append(rate)
    return rates


def opt_seeds(from_file: bool = False):
    """``--seeds`` of the commands that study one cluster: None, the plan's confirmation's (planning/options.py)
    where a generated stream is simulated (see :func:`seeds_of`), or a cluster file's."""
    return typer.Option(None, "--seeds", metavar="K",
                        help="Simulate K streams (seeds seed..seed+K-1); the verdict is their worst."
                             + (f"{FROM_FILE}{default('seeds')}, as the plan confirms." if from_file
                                else f" Default {default('seeds')}, as the plan confirms (1 with --trace or "
                                     "--requests)."))


def seeds_of(seeds, one_stream: bool) -> int:
    """``--seeds`` as given, else the plan's default, or 1 where the run is one stream (a trace, a --requests file)."""
    return seeds if seeds is not None else 1 if one_stream else default("seeds")


def opt_margin():
    return typer.Option(default("margin"), "--margin", metavar="M",
                        help="An SLO holds only when its value/limit is below 1 - M (0.1: 10% to spare).")


def check_seeds_margin(seeds: int, margin: float) -> float:
    """A user error for a ``--seeds`` below 1 (or absurdly many) or a ``--margin`` outside [0, 1); the
    threshold a result's tightest value/limit must stay below (1 - margin)."""
    if seeds is None or not 1 <= seeds <= MAX_SEEDS:
        raise SplitwisePlanError(f"--seeds must be a whole number from 1 to {MAX_SEEDS:,}, got {seeds}")
    if margin is None or not math.isfinite(margin) or not 0 <= margin < 1:
        raise SplitwisePlanError(f"--margin must be a number in [0, 1) (0.1 = 10% below each limit), got {margin:g}")
    return 1.0 - margin

