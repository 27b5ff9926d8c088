"""A plan's reports: its one-line title, the ranking table on the terminal (:func:`render`), and the
files other tools read: the JSON report (:func:`plan_report`), one CSV row per simulated point
(:func:`csv_rows`) and the plot of the designs compared (:func:`write_reports` writes them)."""

from __future__ import annotations

import math
from pathlib import Path

from splitwise_plan import __version__
from splitwise_plan.errors import SplitwisePlanError, plural
from splitwise_plan.inputs.designs import display_name, get_design
from splitwise_plan.planning import Inputs, PlanRequest, PlanResult, input_label, inputs_block, json_number, stream_of
from splitwise_plan.planning.explain import binding, binding_text, searched_text, seconds_text, slo_label
from splitwise_plan.report.formats import machine_counts, percent

# --- rendering ---------------------------------------------------------------------------

SLO_COLUMNS = tuple((m, p) for m in ("ttft", "tbt", "e2e") for p in (50, 90, 99))


def _title(result: PlanResult) -> str:
    """:func:`plan_title` of a plan's result, a budget in the units of its machines."""
    units = plan_units(result)
    unit = (units[1] if result.request.objective == "power" else units[0]) if result.budget is not None else ""
    return plan_title(result.request, result.trace_s, result.budget, unit)


def plan_title(req: PlanRequest, trace_s: float | None = None, budget: float | None = None,
               unit: str = "") -> str:
    """What was planned, in one line: the goal, the rate or budget (``budget``: its amount, if known, in
    ``unit``), the model and the stream (``trace_s``: the replayed trace's duration, if known)."""
    if req.goal == "max-throughput":
        kind = req.objective
        spec = req.budget_power if kind == "power" else req.budget_cost
        amount = f" = {budget:,.4g}" if budget is not None and f"{budget:g}" != f"{spec}" else ""
        amount += f" {unit}" if unit and budget is not None else ""
        title = f"max-throughput within {kind} budget {spec}{amount}"
    else:
        rate = f"{req.rps:g} req/s" if req.rps is not None else "the trace's rate"
        title = f"{req.goal} at {rate}"
    workload, duration, seed = stream_of(req, trace_s)
    several = req.seeds > 1 and req.trace is None   # each design's numbers are its worst stream's (JSON: seed)
    seeds = f"seeds {seed}-{seed + req.seeds - 1}, each design's worst" if several else f"seed {seed}"
    stream = (f"{input_label(workload)}, {duration:g} s, {seeds}" if req.trace is None
              else f"trace {input_label(req.trace)}, {duration:g} s")
    return (f"{title} - {req.model}, {stream}"
            + ("" if req.scheduler.is_reference else f", {req.scheduler.describe()}"))


_TABLE_WIDTH = 180   # columns the ranking table needs to show every number whole


def _slo_columns(result: PlanResult) -> tuple[list, str]:
    """The table's SLO columns, (metric, percentile, unit) of the plan's own SLO set in the paper's order
    (its nine slowdowns when the set is unknown), and what its slowdowns are measured against."""
    slos = (result.inputs or {}).get("slos")
    if not slos:
        return [(m, p, "slowdown") for m, p in SLO_COLUMNS], "a DGX-A100"
    order = {"ttft": 0, "tbt": 1, "e2e": 2}
    cols = sorted({(o["metric"], o["percentile"], o["unit"]) for o in slos["objectives"]},
                  key=lambda c: (order[c[0]], c[1], c[2]))
    hw, tp = slos["reference_hardware"], slos["reference_tensor_parallel"]
    return cols, "a DGX-A100" if (hw, tp) == ("a100-80gb", 8) else f"{hw} at TP{tp}"


def _ranking_table(result: PlanResult, slo_cols: list, reference: str, compact: int = 0):
    """The designs ranked, one row each: the nine SLO columns (``slo_cols``); ``compact`` 1 only the
    tightest SLO's, 2 also no simulation counts (for a terminal too narrow for them, where every
    number would shrink to "..."). Numbers are never cut: the design names and headers wrap first."""
    from rich.table import Table
    from rich.text import Text

    req = result.request
    cost_unit, power_unit = plan_units(result)
    limits = _limits(result)
    cols = ["#", "design", "prompt", "token"] + (["req/s"] if req.goal == "max-throughput" else [])
    cols += [f"cost\n{cost_unit}", f"power\n{power_unit}", "vs\nwinner"]
    cols += (["tightest\nSLO"] if compact else
             [f"{m.upper()}\nP{p:g}\n" + _limit_header(limits.get((m, p, u)), u) for m, p, u in slo_cols])
    cols += ["head-\nroom"] + [RUNS] * (compact < 2)
    winner = result.get(result.winner) if result.winner is not None else None
    rows = []
    for i, dp in enumerate(result.designs, 1):
        row = [str(i), display_name(dp.design)]
        sims = [f"{dp.evaluations}+{dp.confirmations}"] if cols[-1] == RUNS else []
        if dp.status == "infeasible" or dp.result is None:
            rows.append(row + ["-"] * (len(cols) - 2 - len(sims)) + sims)
            continue
        r = dp.result
        tight = tuple(r.tightest.get(k) for k in ("metric", "percentile", "unit")) if r.tightest else None
        row[1] += "" if dp.status == "ok" else " (not confirmed)"
        row += [str(dp.prompt), str(dp.token) if not get_design(dp.design).is_baseline else "-"]
        if req.goal == "max-throughput":
            row.append(f"{dp.rate:g}")
        row += [f"{dp.cost:,.2f}", f"{dp.power:,.1f}", _versus(dp, winner, req.goal)]
        for m, p, u in ([tight] if tight else [(None,) * 3]) if compact else slo_cols:
            v = (r.slowdown if u == "slowdown" else r.latency_s).get(m, {}).get(p, float("nan")) if m else None
            cell = "-" if v is None else f"{v:.2f}" if u == "slowdown" else f"{v:.3g}"
            if compact:
                cell = f"{m.upper()} P{p:g} {cell}" + (" s" if u == "seconds" else "x") if m else cell
            elif tight == (m, p, u):
                cell = f"[bold]{cell}*[/bold]"
            row.append(cell)
        rows.append(row + [percent(dp.headroom) if math.isfinite(dp.headroom) else "-"] + sims)   # -: unfinished requests
    table = Table(title=f"splitwise-plan: {_title(result)}", pad_edge=not compact)
    for k, c in enumerate(cols):
        text = c in ("design", "tightest\nSLO", "vs\nwinner")
        width = max((Text.from_markup(row[k]).cell_len for row in rows), default=1)
        table.add_column(c, justify="left" if text else "right", no_wrap=not compact and c == "design",
                         overflow="fold", min_width=None if text else width)
    for dp, row in zip(result.designs, rows):
        table.add_row(*row, style="dim" if dp.status == "infeasible" or dp.result is None else None)
    units = {u for *_, u in slo_cols}
    slos = ("the plan's SLOs in seconds" if units == {"seconds"} else
            f"the plan's SLOs as slowdowns vs the request alone on {reference}"
            + ("; columns marked s in seconds" if "seconds" in units and not compact else ""))
    if compact:
        slos = (f"the tightest of {len(slo_cols)} SLOs ({slos}; the terminal is too narrow for all of them: "
                f"--json or --csv have them)")
    else:
        slos += " (* tightest SLO)"
    table.caption = f"{slos}; headroom = 1 - tightest value/limit; " + runs_text(result)
    return table


#: The table's column of simulations run: the search's and the confirmation's
RUNS = "runs\nsearch+\nconfirm"


def runs_text(result: PlanResult) -> str:
    """What the simulation counts mean, in words (the table's caption)."""
    req = result.request
    space = (f"{plural(result.grid_size, 'split')} of the budget, each at several rates" if req.goal == "max-throughput"
             else f"{plural(result.grid_size, 'pair')} of prompt and token machine counts")
    return (f"runs = simulations by the search's {searched_text(result.search_method)} + the "
            f"{searched_text(req.confirm_method)}'s confirmations: {result.evaluations:,} + {result.confirmations:,}, "
            f"over {space}; not confirmed = the {searched_text(result.search_method)}'s answer, which the "
            f"{searched_text(req.confirm_method)} failed; {result.seconds:.1f} s")


def plan_units(result: PlanResult) -> tuple[str, str]:
    """(cost unit, power unit) of the machines the plan's designs use: ``USD/h`` and ``kW`` unless the
    catalog names others."""
    catalog = (result.inputs or {}).get("machine_catalog") or {}
    used = {m for d in result.request.designs for m in get_design(d).machines}
    units = {(m.get("cost_unit", "USD/h"), m.get("power_unit", "kW")) for name, m in catalog.items() if name in used}
    return units.pop() if len(units) == 1 else ("mixed units",) * 2 if units else ("USD/h", "kW")


def _limits(result: PlanResult) -> dict:
    """{(metric, percentile, unit): limit} of the plan's SLOs (the paper's when unknown)."""
    slos = (result.inputs or {}).get("slos")
    if not slos:
        from splitwise_plan.inputs.slos import load_slos
        return {(s.metric, s.percentile, s.unit): s.limit for s in load_slos()}
    return {(o["metric"], o["percentile"], o["unit"]): o["limit"] for o in slos["objectives"]}


def _limit_header(limit, unit: str) -> str:
    """An SLO column's limit under its name: ``<6x`` (a slowdown) or ``<2 s``."""
    if limit is None:
        return ""
    return f"<{limit:g}x" if unit == "slowdown" else f"<{seconds_text(limit)}"


def _versus(dp, winner, goal: str) -> str:
    """A design's goal figure against the winner's: ``winner``, ``+2.4%`` (cost or power), ``-30%`` (rate)."""
    if winner is None or dp.status != "ok":
        return "-"
    if dp is winner:
        return "winner"
    key = {"min-cost": "cost", "min-power": "power", "max-throughput": "rate"}[goal]
    mine, best = getattr(dp, key), getattr(winner, key)
    return f"{mine / best - 1:+.1%}" if best else "-"


def _check_plan_result(result, what: str) -> None:
    if not isinstance(result, PlanResult):   # a SimulationResult, say: its to_dict() is its JSON object
        raise SplitwisePlanError(f"{what} takes a plan's result (a PlanResult from plan()), got {result!r:.80}")


def render(result: PlanResult, console=None) -> None:
    """Print the ranking table, the winner and its gains with rich, to ``console`` (a rich Console, or a
    text file such as ``io.StringIO()``; default: standard output)."""
    from rich.console import Console
    from rich.measure import Measurement

    _check_plan_result(result, "render_plan")

    if console is not None and not isinstance(console, Console):
        if not callable(getattr(console, "write", None)):
            raise SplitwisePlanError(f"render_plan: console must be a rich Console or a text file, got "
                                     f"{type(console).__name__}")
        console = Console(file=console, width=_TABLE_WIDTH)
    con = console or Console()
    if console is None and (con.is_jupyter or not con.is_terminal) and con.width < _TABLE_WIDTH:
        con = Console(width=_TABLE_WIDTH)   # a notebook scrolls, a file or pipe has no width: no "..." cells
    slo_cols, reference = _slo_columns(result)
    table = _ranking_table(result, slo_cols, reference)
    wide = con.options.update(max_width=10 * _TABLE_WIDTH)   # the table's own width, not the console's
    for compact in (1, 2):
        if Measurement.get(con, wide, table).maximum <= con.width:   # its numbers fit whole
            break
        table = _ranking_table(result, slo_cols, reference, compact)
    con.print(table)
    con.print(inputs_line(result))
    for dp in result.designs:
        if dp.note:
            con.print(f"  {display_name(dp.design)}: {dp.note}")
    if result.winner is None:
        simulated = any(dp.evaluations or dp.confirmations for dp in result.designs)
        con.print("No design meets all SLOs." if simulated else
                  "No design could be planned (none was simulated): see the notes above.")
        return
    for line in winner_lines(result):
        con.print(line)


def inputs_line(result: PlanResult) -> str:
    """Every input the plan read, a file by its path and a built-in one said so."""
    inp = result.inputs or {}
    slos = inp.get("slo_file") or f"built-in ({(inp.get('slos') or {}).get('name', 'paper')})"
    stream = (f"trace {inp['trace']}" if inp.get("trace") else
              f"workload {inp.get('workload') or result.request.workload}"
              + ("" if str(inp.get("workload") or "").endswith(".csv") else " (built-in)"))
    cost_unit, power_unit = plan_units(result)
    line = (f"inputs: {stream}; SLOs {slos}; machines {inp.get('machines_file') or 'built-in'} ({cost_unit}, "
            f"{power_unit}); profiles {inp.get('profiles_file') or 'built-in'}")
    stack = f"\nstack: {inp['stack']}" if inp.get("stack") else ""
    return line + "\n" + latencies_line(inp.get("latency_sources") or {}) + stack


def latencies_line(sources: dict) -> str:
    """Where each pool's latencies came from (measured or estimated), grouped by source."""
    by_source: dict = {}
    for name, how in sources.items():
        by_source.setdefault(how, []).append("slowdown reference" if name == "reference" else name)
    return "latencies: " + "; ".join(f"{', '.join(names)} {how}" for how, names in by_source.items())


#: Below this headroom a plan's answer is said to be fragile.
THIN_HEADROOM = 0.02


def winner_lines(result: PlanResult) -> list[str]:
    """The winner in the planner's words: what it is and costs, the SLO and pool that bind it, how its
    verdict holds at a higher rate, a warning when its headroom is thin, and its gains."""
    req, w = result.request, result.get(result.winner)
    what = {"min-cost": "lowest cost", "min-power": "lowest power", "max-throughput": "highest throughput"}[req.goal]
    d = get_design(w.design)
    counts = machine_counts(w.prompt, 0 if d.is_baseline else w.token)
    if d.tp is not None and w.instances:   # --tp auto's choice: each pool's TP and its instances a machine
        counts += " (" + ", ".join(f"{role} TP{tp}: {n} instance{'s' * (n > 1)} a machine" for role, tp, n in
                                   zip(("prompt", "token"), d.tp, w.instances[:len(d.machines)])) + ")"
    rate = f" at {w.rate:g} req/s" if req.goal == "max-throughput" else ""
    cost_unit, power_unit = plan_units(result)
    streams = req.seeds if req.trace is None else 1
    lines = [f"Winner ({what}): [bold]{display_name(w.design)}[/bold], {counts}{rate}, {w.cost:,.2f} {cost_unit}, "
             f"{w.power:,.1f} {power_unit}"]
    lines += _buyer_lines(result, w, cost_unit)
    if w.result is not None and w.result.tightest:
        over = f" over {streams} streams" if streams > 1 else " on one stream"
        lines.append(f"  binding SLO: {binding_text(binding(w.result, d))}; headroom {percent(w.headroom)}{over}")
    st = result.stress
    if st is not None:
        r = st["result"]
        tight = r.tightest or {}
        verdict = (f"holds, headroom {percent(st['headroom'])}" if st["slo_met"] else
                   f"fails: {slo_label(tight.get('metric', '?'), tight.get('percentile', 0))} at "
                   f"{tight.get('ratio', float('nan')):.0%} of its limit")
        lines.append(f"  at {st['rate_rps']:g} req/s (+{st['factor'] - 1:.0%}): {verdict}")
        if not st["slo_met"]:
            lines.append(f"  [bold]warning[/bold]: {st['factor'] - 1:.0%} more load breaks the SLOs: plan for the "
                         f"rate you expect at its peak (--rps {st['rate_rps']:g}), or with --margin")
    if math.isfinite(w.headroom) and w.headroom < THIN_HEADROOM:
        lines.append(f"  [bold]warning[/bold]: headroom {percent(w.headroom)} is under {THIN_HEADROOM:.0%}: the answer "
                     f"rests on few requests at the tail; plan with --margin or more --seeds, or a longer --duration")
    lines += _judged_lines(result, w, cost_unit)
    lines += [f"  {g}" for g in result.gains]
    return lines


def rates_table(results: list):
    """One row per rate of a plan over several (``--rps 30,60,100``): the winner, its machines and GPUs, its cost
    and cost per million output tokens."""
    from rich.table import Table

    cost_unit = plan_units(results[0])[0]
    unit = cost_unit.removesuffix("/h")
    table = Table(title=f"splitwise-plan: {results[0].request.goal} at each rate - {results[0].request.model}")
    for col in ("req/s", "winner", "prompt", "token", "GPUs", f"cost\n{cost_unit}", f"{unit} per\nmonth",
                f"{unit} per million\noutput tokens", "head-\nroom"):
        table.add_column(col, justify="left" if col == "winner" else "right")
    for r in results:
        rate = f"{r.request.rps:g}" if r.request.rps is not None else "-"
        if r.winner is None:
            table.add_row(rate, "no design meets the SLOs", *["-"] * 7)
            continue
        w = r.get(r.winner)
        f = r.figures(w)
        base = get_design(w.design).is_baseline
        table.add_row(rate, display_name(w.design), str(w.prompt), "-" if base else str(w.token),
                      f"{f['gpus']:,}" if f["gpus"] else "-", f"{w.cost:,.2f}",
                      f"{f['cost_per_month']:,.0f}" if f["cost_per_month"] is not None else "-",
                      _money(f["cost_per_million_output_tokens"]) if f["cost_per_million_output_tokens"] is not None
                      else "-", percent(w.headroom) if math.isfinite(w.headroom) else "-")
    return table


def _money(x: float) -> str:
    """A price per token as a buyer reads it: cents below 100 (``4.50``), whole above (``1,236``)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.2f}"


def _buyer_lines(result: PlanResult, w, cost_unit: str) -> list[str]:
    """The winner in a buyer's units: GPUs in all, cost per month and per million output tokens."""
    f = result.figures(w)
    unit = cost_unit.removesuffix("/h")
    parts = [f"{f['gpus']:,} GPUs"] if f["gpus"] else []
    if f["cost_per_month"] is not None and cost_unit.endswith("/h"):
        parts.append(f"{f['cost_per_month']:,.0f} {unit} a month (730 h)")
    if f["cost_per_million_output_tokens"] is not None and cost_unit.endswith("/h"):
        parts.append(f"{_money(f['cost_per_million_output_tokens'])} {unit} per million output tokens at "
                     f"{result.priced_rate(w):g} req/s")
    req = result.request
    lines = [f"  load headroom: every SLO held at {req.planned_rps:g} req/s (+{req.headroom:.0%} over {req.rps:g})"
             ] if req.headroom else []
    return lines + (["  in all: " + ", ".join(parts)] if parts else [])


def _judged_lines(result: PlanResult, w, cost_unit: str) -> list[str]:
    """How sure the answer is, and its robust alternative where one exists."""
    lines = []
    sure = result.sureness
    if sure is not None:
        lines.append(f"  sureness: {sure['text']}")
    alt = result.alternative
    if alt is not None:
        p = result.get(alt["design"])
        why = []
        if "headroom" in alt["reasons"]:
            why.append(f"headroom {percent(alt['slo_headroom'])} against {percent(alt['winner_slo_headroom'])}")
        if "higher_rate" in alt["reasons"]:
            why.append(f"holds at {alt['rate_rps']:g} req/s where the winner fails")
        d = get_design(p.design)
        figure = (f"{p.power:,.1f} {plan_units(result)[1]}" if result.request.goal == "min-power" else
                  f"{p.cost:,.2f} {cost_unit}")   # (the goal's: its extra is in it)
        lines.append(f"  robust alternative: [bold]{display_name(p.design)}[/bold], "
                     f"{machine_counts(p.prompt, 0 if d.is_baseline else p.token)}, {figure} "
                     f"({alt['extra']:+.1%}): {'; '.join(why)}")
    return lines


# --- reports: JSON, CSV and plot ----------------------------------------------------------

def plan_inputs(result: PlanResult) -> dict:
    """The ``inputs`` block of a plan report: what the plan depends on (see :func:`~splitwise_plan.inputs.summary.report_inputs`),
    as it was when the plan ran (files read again only for a result built by hand)."""
    if result.inputs is not None:
        return result.inputs
    return inputs_block(result.request, Inputs.load(result.request), result.search_method)


def plan_report(result: PlanResult) -> dict:
    """The JSON report of a plan: schema version, inputs, one result per design, the winner and gains.
    Its own copy: editing it leaves the plan and its later reports as they are."""
    import copy

    from splitwise_plan.report.formats import build_report

    _check_plan_result(result, "plan_report")
    summary = result.to_dict()
    designs = summary.pop("designs")
    return copy.deepcopy(build_report("plan", plan_inputs(result), designs, plan=summary))


def csv_rows(result: PlanResult) -> list[dict]:
    """One row per evaluated design point: every point the search simulated (``phase`` search) and every
    point the confirm method checked (``phase`` confirm, the worst of the seeds; rejected ones too);
    ``chosen`` marks the design's answer. A design with no simulation at all gets one row with its
    status and note."""
    rows = []
    for dp in result.designs:
        chosen = (dp.prompt, dp.token) if dp.status == "ok" else None
        head = {"design": dp.design, "status": dp.status}
        for rate, r in dp.evaluated:   # led by the stream of the row's numbers (the worst of --seeds), as
            pt = (r.prompt_machines, r.token_machines)   # the rows of every command are
            rows.append({"rate_rps": rate, "seed": r.seed, **head, "phase": "search",
                         "chosen": pt == chosen and (dp.rate == rate or not math.isfinite(dp.rate)), **r.flat()})
        # each confirmation, held or rejected (the oracle's evidence), the answer's marked as chosen; a
        # design planned before confirmations were kept has its answer's alone
        confirmed = dp.confirmed or (((dp.rate, dp.result),) if dp.result is not None else ())
        answer = max((k for k, (_, r) in enumerate(confirmed) if r == dp.result), default=None)
        for k, (rate, r) in enumerate(confirmed):
            rows.append({"rate_rps": rate, "seed": r.seed, **head, "phase": "confirm",
                         "chosen": k == answer and dp.status == "ok", **r.flat(),
                         "note": dp.note if k == answer else ""})
        if not dp.evaluated and dp.result is None:   # the plan's stream and model all the same, so runs stack
            req = result.request
            rate = dp.rate if math.isfinite(dp.rate) else (result.inputs or {}).get("rate_rps", req.rps)
            rows.append({"rate_rps": None if rate is None else json_number(rate),
                         "seed": None if req.trace is not None else req.seed, **head,
                         "phase": "none", "chosen": False, "model": req.model, "note": dp.note})
    return rows


def comparison(result: PlanResult) -> list[dict]:
    """Each design's answer for :func:`plots.write_plot` ``designs=``: cost, power and throughput."""
    out = []
    for dp in result.designs:
        ok = dp.status == "ok"
        nan = float("nan")
        status = {"unconfirmed": "not confirmed"}.get(dp.status, dp.status)
        out.append({"design": dp.design, "label": display_name(dp.design) + ("" if ok else f" ({status})"),
                    "prompt_machines": dp.prompt if ok else None,
                    "token_machines": (dp.token if ok and dp.token else None),
                    "machines": dp.machines if ok else None,
                    "cost": dp.cost if ok else nan, "power": dp.power if ok else nan,
                    "throughput": dp.rate if ok else nan})
    return out


def csv_columns(result: PlanResult, rows: list[dict] | None = None) -> list[str]:
    """The plan CSV's columns, in one order whatever the results (a design never simulated, or none
    confirmed, took the header apart): the nine percentiles (and any others an SLO asks) of each metric
    in seconds, then as slowdowns, between the design's numbers and its tightest SLO and flags."""
    from splitwise_plan.sim.metrics import METRICS, PERCENTILES
    from splitwise_plan.sim.simulator import SimulationResult

    rows = csv_rows(result) if rows is None else rows
    pcts = set(PERCENTILES) | {float(k.split("_p", 1)[1].rsplit("_", 1)[0]) for r in rows for k in r
                               if k.startswith(METRICS) and k.endswith("_s") and "_p" in k}
    flat = SimulationResult.flat_columns(sorted({float(p) for p in pcts}))
    cols = ["rate_rps", "seed", "design", "status", "phase", "chosen", *flat[1:], "note"]   # (flat[0]: design)
    extra = [k for r in rows for k in r if k not in cols]   # (none today: a future key is kept, at the end)
    return cols + list(dict.fromkeys(extra))


def write_cluster_file(result: PlanResult, path) -> Path:
    """Write the winner of ``result`` as a cluster file (atomically), with what check and capacity need to re-check
    it on the plan's own streams: the model, dtype, stack, each pool's TP, the rate, workload, duration and seeds."""
    from splitwise_plan.inputs.cluster_file import ClusterSpec, cluster_toml
    from splitwise_plan.inputs.designs import base_design
    from splitwise_plan.report.files import atomic_open

    req, w = result.request, result.get(result.winner)
    d = get_design(w.design)
    tp = d.tp if d.tp is not None else req.tp
    if isinstance(tp, tuple):
        tp = tp[0] if tp[0] == tp[1] or d.is_baseline else f"{tp[0]}:{tp[1]}"
    stack = (result.inputs or {}).get("stack")
    plan = {"dtype": req.dtype, "stack": (req.stack if req.stack is not None else stack.split(" (")[0] if stack
                                          else None),
            "rps": w.rate if req.trace is None else None,   # (a trace's plan is checked with --trace again)
            "workload": input_label(req.workload) if req.trace is None else None,
            "duration": float(req.duration) if req.trace is None else None,
            "seed": req.seed if req.trace is None else None, "seeds": req.seeds if req.trace is None else None}
    spec = ClusterSpec(base_design(d), w.prompt, w.token, model=req.model, tensor_parallel=tp,
                       plan={k: v for k, v in plan.items() if v is not None})
    note = (f"The winner of splitwise-plan {__version__}: {display_name(w.design)}, {w.cost:,.2f} at {w.rate:g} req/s.\n"
            + ("splitwise-plan check FILE re-checks it on the plan's streams." if req.trace is None else
               f"Planned on trace {input_label(req.trace)}: splitwise-plan check FILE --trace {input_label(req.trace)}."))
    with atomic_open(path, "w", what="cluster file") as fh:
        fh.write(cluster_toml(spec, note))
    return Path(path).expanduser()


def write_reports(result: PlanResult, *, json_path=None, csv_path=None, plot_path=None) -> list:
    """Write the JSON, CSV and plot reports of a plan (each atomically); return the paths written.

    The paths are checked first, as the command line does: a bad one writes nothing."""
    from splitwise_plan.report.files import check_outputs
    from splitwise_plan.report.formats import write_csv, write_json

    _check_plan_result(result, "write_reports")
    check_outputs({"json_path": json_path, "csv_path": csv_path, "plot_path": plot_path},
                  result.request.input_files())
    written = []
    if csv_path is not None:
        rows = csv_rows(result)
        written.append(write_csv(csv_path, rows, csv_columns(result, rows)))
    if plot_path is not None:
        from splitwise_plan.report.plots import plan_marks, write_plot
        written.append(write_plot(plot_path, designs=comparison(result),
                                  title=f"splitwise-plan: {_title(result)}",
                                  **plan_marks(result)))
    if json_path is not None:
        written.append(write_json(json_path, plan_report(result)))
    return written
