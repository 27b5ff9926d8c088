"""Plots of planner and sweep results (matplotlib, Agg: no display needed).

- :func:`design_space_figure`: the design-space map of a sweep, prompt x token machines
  coloured by the tightest SLO (value / limit), with the pass/fail boundary, the cheapest
  passing design (the optimum) and the iso-cost and iso-power lines through it, like the
  Splitwise paper's Figure 12. A baseline sweep (one pool) becomes a line chart.
  The star says whose optimum it is: the confirmed plan's when the caller gives it, else the
  sweep's model's (the fast fluid model's is marked "not confirmed").
- :func:`comparison_figure`: cost, power and throughput per design, like its Figure 18, with the
  winner marked, a budget drawn as a line, and each design's SLO headroom against the 0 line (a
  throughput panel whose bars would all be one rate is left out).
- :func:`write_plot`: the ``--plot FILE`` hook: PNG or SVG by extension, or HTML, a
  self-contained page with the figure as inline SVG plus a table of the numbers;
  :func:`plan_marks`: what to mark on a plan's plot (winner, budget, headroom, units).

Numbers read plainly (``1,513``, never ``1.51e+03``: :func:`plain_number`; a headroom as the
plan's table writes it, ``9%`` or ``0.3%``), and axes carry the machine catalog's units
(``cost_unit``, ``power_unit``; USD/h and kW by default). Legends sit below the panels, off the data.

Every writer goes through :mod:`splitwise_plan.report.files`' atomic writer.
"""

from __future__ import annotations

import html
import io
import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import numpy as np  # (matplotlib is imported where it draws: a sweep without --plot needs none)

if TYPE_CHECKING:   # for the annotations only
    from matplotlib.figure import Figure

from splitwise_plan import __version__
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.report.files import atomic_write_bytes, atomic_write_text, check_plot_path, plot_format
from splitwise_plan.report.formats import percent

MAX_RATIO_DECADES = 1.0  # colour scale: tightest ratio from 10^-1 to 10^+1, clipped
DEFAULT_UNITS = ("USD/h", "kW")   # (cost, power) when the caller names no machines


# --- numbers and units -------------------------------------------------------------

def plain_number(value: float) -> str:
    """A number as a planner reads it: thousands separators, never scientific notation, about
    four significant digits (1512.8 -> "1,513", 88.243 -> "88.24", 0.0123 -> "0.0123")."""
    v = float(value)
    if not math.isfinite(v):
        return "n/a"
    if v == 0:
        return "0"
    decimals = max(0, 3 - int(math.floor(math.log10(abs(v)))))   # 4 significant digits, whole units kept
    text = f"{v:,.{min(decimals, 12)}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def plain_formatter():
    """A matplotlib tick formatter writing :func:`plain_number`."""
    from matplotlib.ticker import FuncFormatter
    return FuncFormatter(lambda v, _pos: plain_number(v))


def _units(machines=None, units: tuple[str, str] | None = None) -> tuple[str, str]:
    """(cost unit, power unit): ``units`` if given, else those of ``machines`` (Machines, or a
    mapping of names to them or to their dicts), "mixed units" where they differ; default USD/h, kW."""
    if units is not None:
        return str(units[0]), str(units[1])
    if not machines:
        return DEFAULT_UNITS
    pool = list(machines.values()) if isinstance(machines, Mapping) else list(machines)
    found = []
    for key, default in zip(("cost_unit", "power_unit"), DEFAULT_UNITS):
        seen = {str(_get(m, key, default) or default) for m in pool}
        found.append(seen.pop() if len(seen) == 1 else "mixed units")
    return found[0], found[1]


# --- inputs ------------------------------------------------------------------------

def _get(r, key, default=None):
    if isinstance(r, Mapping):
        return r.get(key, default)
    return getattr(r, key, default)


def design_point(r) -> dict:
    """A design point from a ``SimulationResult``, its ``flat()`` row or ``to_dict()``."""
    ratio = _get(r, "tightest_ratio")
    if ratio is None:
        tight = _get(r, "tightest") or {}
        ratio = tight.get("ratio") if isinstance(tight, Mapping) else None
    met = _get(r, "slo_met")
    if met is None:
        slo = _get(r, "slo") or {}
        met = slo.get("met") if isinstance(slo, Mapping) else None
    ratio = float("nan") if ratio is None else float(ratio)
    return {"design": str(_get(r, "design", "")),
            "prompt": int(_get(r, "prompt_machines", 0) or 0), "token": int(_get(r, "token_machines", 0) or 0),
            "cost": float(_get(r, "cost", float("nan"))), "power": float(_get(r, "power", float("nan"))),
            "met": bool(met), "ratio": ratio, "tightest_slo": _get(r, "tightest_slo"),
            "method": _get(r, "method")}


def optimum(points: Sequence[dict]) -> dict | None:
    """The cheapest passing design point (ties: lower power, then the most SLO slack, then fewer machines)."""
    ok = [p for p in points if p["met"]]
    if not ok:
        return None
    return min(ok, key=rank_key)


def rank_key(p: dict) -> tuple:
    """Sort key of design points: cost, power (rounded so float noise does not break ties),
    then the tightest SLO ratio (more slack first), then fewer machines."""
    ratio = p["ratio"] if math.isfinite(p["ratio"]) else math.inf
    return (round(p["cost"], 6), round(p["power"], 6), ratio, p["prompt"] + p["token"], p["prompt"])


def _edges(values: np.ndarray) -> np.ndarray:
    """Cell edges around sorted integer values: midpoints between neighbours, +-half a step at the ends."""
    if values.size == 1:
        return np.array([values[0] - 0.5, values[0] + 0.5])
    mids = (values[1:] + values[:-1]) / 2.0
    return np.concatenate([[values[0] - (mids[0] - values[0])], mids, [values[-1] + (values[-1] - mids[-1])]])


def _unit_prices(points: Sequence[dict], key: str) -> tuple[float, float] | None:
    """Per-machine price of each pool (cost or power) fitted from the points, if they pin it down."""
    a = np.array([[p["prompt"], p["token"]] for p in points], dtype=float)
    y = np.array([p[key] for p in points], dtype=float)
    if np.linalg.matrix_rank(a) < 2 or not np.all(np.isfinite(y)):
        return None
    sol, *_ = np.linalg.lstsq(a, y, rcond=None)
    if not np.allclose(a @ sol, y, rtol=1e-6, atol=1e-9) or np.any(sol <= 0):
        return None
    return float(sol[0]), float(sol[1])


# --- figures -------------------------------------------------------------------------

def _ratio_colours(ratios=None):
    """Colour scale of log10(value / limit), symmetric around 1 (the SLO limit)."""
    from matplotlib.colors import Normalize
    span = MAX_RATIO_DECADES
    if ratios is not None:
        r = np.asarray([v for v in ratios if math.isfinite(v) and v > 0], dtype=float)
        if r.size:
            span = float(np.clip(np.max(np.abs(np.log10(r))), 0.1, MAX_RATIO_DECADES))
    return Normalize(vmin=-span, vmax=span, clip=True), "RdYlGn_r", span


def draw_design_space(fig, rows: Iterable, title: str | None = None, *, confirmed_optimum=None,
                      machines=None, units: tuple[str, str] | None = None) -> dict | None:
    """Draw the design-space map of sweep results into ``fig`` (a Figure or SubFigure); return the
    sweep's optimum (its cheapest passing point).

    ``confirmed_optimum``: the design the confirmed plan chose, as (prompt, token) machines or a
    mapping with ``prompt_machines``/``token_machines`` (or ``prompt``/``token``): marked as the
    confirmed optimum. Without it the star is the sweep's own optimum, labelled by its model (a fast
    fluid model's is "fast-model optimum (not confirmed)"). ``machines``/``units``: the units of
    cost and power in the labels."""
    points = [design_point(r) for r in rows]
    if not points:
        raise SplitwisePlanError("nothing to plot: the sweep has no design points")
    designs = sorted({p["design"] for p in points})
    best = optimum(points)
    marks = _optimum_marks(points, best, _confirmed_counts(confirmed_optimum), _units(machines, units))
    norm, cmap, span = _ratio_colours([p["ratio"] for p in points])
    ax = fig.add_subplot(1, 1, 1)
    name = ", ".join(designs)
    if all(p["token"] == 0 for p in points):  # baseline: one pool, a line chart
        _draw_baseline(ax, points, marks, norm, cmap)
        ax.set_title(title or f"Design space of {name}")
        legend_below(fig, [ax], ncols=1)
        return best
    _draw_grid(fig, ax, points, marks, norm, cmap, span)
    ax.set_title(title or f"Design space of {name}: tightest SLO per design point")
    legend_below(fig, [ax], ncols=1)
    return best


def legend_below(fig, axes: Sequence, ncols: int | None = None) -> None:
    """One legend of the marks drawn in ``axes`` (each label once), below the panels of ``fig`` (a
    Figure or SubFigure), off the data: a constrained layout makes room for it. ``ncols``: its
    columns (default: all entries on one row)."""
    handles, labels = [], []
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols or len(labels), fontsize=8,
                   frameon=False)


def _confirmed_counts(confirmed) -> tuple[int, int] | None:
    """(prompt, token) machines of a confirmed optimum given as a pair or a mapping (None: none given)."""
    if confirmed is None:
        return None
    if isinstance(confirmed, Mapping) or not isinstance(confirmed, Sequence):
        p = _get(confirmed, "prompt_machines", _get(confirmed, "prompt"))
        t = _get(confirmed, "token_machines", _get(confirmed, "token"))
    else:
        p, t = (list(confirmed) + [0, 0])[:2]
    if p is None:
        raise SplitwisePlanError(f"confirmed_optimum must give prompt (and token) machines, got {confirmed!r:.80}")
    return int(p), int(t or 0)


def _sweep_model(points: Sequence[dict]) -> str:
    """Whose optimum a sweep's is, by the model that simulated its points."""
    methods = {p.get("method") for p in points}
    if methods == {"events"}:
        return "optimum (event simulator)"
    if "fluid" in methods:
        return "fast-model optimum (not confirmed)"
    return "sweep optimum (not confirmed)"


def _optimum_marks(points: list, best: dict | None, confirmed: tuple[int, int] | None,
                   units: tuple[str, str]) -> list[dict]:
    """The stars to draw, [{"point", "label", "confirmed"}]: the confirmed optimum if given, then the
    sweep's own optimum where it differs. The first is the one the iso lines go through."""
    def described(label, p):
        counts = f"{p['prompt']} machines" if p["token"] == 0 else f"{p['prompt']}P+{p['token']}T"
        return (f"{label}: {counts}, cost {plain_number(p['cost'])} {units[0]}, "
                f"power {plain_number(p['power'])} {units[1]}")
    marks = []
    if confirmed is not None:
        at = next((p for p in points if (p["prompt"], p["token"]) == confirmed), None)
        if at is None:   # outside the swept grid: its cost and power from the per-machine prices, if pinned down
            at = {"prompt": confirmed[0], "token": confirmed[1], "ratio": float("nan"), "met": True}
            for key in ("cost", "power"):
                prices = _unit_prices(points, key)
                at[key] = float("nan") if prices is None else prices[0] * confirmed[0] + prices[1] * confirmed[1]
        marks.append({"point": at, "label": described("confirmed optimum", at), "confirmed": True})
    if best is not None and (confirmed is None or (best["prompt"], best["token"]) != confirmed):
        label = _sweep_model(points)
        if confirmed is not None and label.startswith("optimum"):
            label = f"sweep {label}"
        marks.append({"point": best, "label": described(label, best), "confirmed": False})
    return marks


def _star(ax, x: float, y: float, mark: dict, size: int, solid: bool) -> None:
    """One optimum's star: gold and filled for the one the map stands by, hollow for another."""
    ax.scatter([x], [y], marker="*", s=size, c="gold" if solid else "none", edgecolors="k",
               linewidths=0.8 if solid else 1.4, zorder=5, label=mark["label"])


def _draw_baseline(ax, points: list, marks: list, norm, cmap) -> None:
    """A baseline sweep (one pool): the tightest SLO ratio against the machines, with the SLO limit
    and the optimum."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator
    points.sort(key=lambda p: p["prompt"])
    x = np.array([p["prompt"] for p in points])
    y = np.array([p["ratio"] for p in points])
    ax.plot(x, y, color="0.4", lw=1, zorder=1)
    ax.scatter(x, y, c=np.log10(np.clip(y, 1e-12, None)), cmap=cmap, norm=norm, zorder=2,
               edgecolors="k", linewidths=0.5)
    ax.axhline(1.0, color="k", ls="--", lw=1, label="SLO limit (value / limit = 1)")
    ax.set_yscale("log")
    finite = y[np.isfinite(y) & (y > 0)]
    if finite.size and np.log10(finite.max() / finite.min()) < 2:   # under two decades: 1, 2, 5 labelled
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(plain_formatter())
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("machines")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("tightest SLO: value / limit (pass < 1)")
    for k, mark in enumerate(marks):
        ratio = mark["point"]["ratio"]
        _star(ax, mark["point"]["prompt"], ratio if math.isfinite(ratio) else 1.0, mark, 260, solid=k == 0)


def _draw_grid(fig, ax, points: list, marks: list, norm, cmap, span: float) -> None:
    """A two-pool sweep: the prompt x token map coloured by the tightest SLO ratio, with its colour
    bar (the SLO limit marked on it), the pass/fail boundary and the optimum with the iso-cost and
    iso-power lines through it."""
    from matplotlib.ticker import MaxNLocator
    xs = np.array(sorted({p["prompt"] for p in points}), dtype=float)
    ys = np.array(sorted({p["token"] for p in points}), dtype=float)
    xi = {v: i for i, v in enumerate(xs)}
    yi = {v: i for i, v in enumerate(ys)}
    ratio = np.full((ys.size, xs.size), np.nan)
    met = np.zeros((ys.size, xs.size), dtype=np.int8) - 1  # -1 = not evaluated
    for p in points:
        i, j = yi[p["token"]], xi[p["prompt"]]
        ratio[i, j] = p["ratio"]
        met[i, j] = int(p["met"])
    with np.errstate(divide="ignore", invalid="ignore"):
        logr = np.log10(np.where(np.isfinite(ratio), ratio, 10.0 ** (2 * MAX_RATIO_DECADES)))
    logr = np.ma.masked_where(met < 0, logr)
    xe, ye = _edges(xs), _edges(ys)
    mesh = ax.pcolormesh(xe, ye, logr, cmap=cmap, norm=norm, shading="flat")
    cbar = fig.colorbar(mesh, ax=ax, pad=0.02)
    ticks = np.linspace(-span, span, 5)
    cbar.set_ticks(ticks)
    cbar.set_ticklabels([plain_number(10 ** t) for t in ticks])
    cbar.ax.axhline(0.0, color="k", lw=2)   # log10(1): the SLO limit
    cbar.set_label("tightest SLO: value / limit (SLO limit at 1, pass < 1)")
    segs_x, segs_y = _boundary(met, xe, ye)
    if segs_x:
        ax.plot(segs_x, segs_y, color="k", lw=2.2, label="pass/fail boundary (SLO limit)")
    if marks:
        _draw_optimum(ax, points, marks, xe)
    ax.set_xlim(xe[0], xe[-1])
    ax.set_ylim(ye[0], ye[-1])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("prompt machines")
    ax.set_ylabel("token machines")


def _boundary(met: np.ndarray, xe: np.ndarray, ye: np.ndarray) -> tuple[list, list]:
    """The pass/fail boundary: every cell edge between a passing and a failing cell, as x and y
    coordinates of line segments separated by nan."""
    n_rows, n_cols = met.shape   # token x prompt machines
    segs_x, segs_y = [], []
    for i in range(n_rows):
        for j in range(n_cols):
            if met[i, j] < 0:
                continue
            if j + 1 < n_cols and met[i, j + 1] >= 0 and met[i, j] != met[i, j + 1]:
                segs_x += [xe[j + 1], xe[j + 1], np.nan]
                segs_y += [ye[i], ye[i + 1], np.nan]
            if i + 1 < n_rows and met[i + 1, j] >= 0 and met[i, j] != met[i + 1, j]:
                segs_x += [xe[j], xe[j + 1], np.nan]
                segs_y += [ye[i + 1], ye[i + 1], np.nan]
    return segs_x, segs_y


def _draw_optimum(ax, points: list, marks: list, xe: np.ndarray) -> None:
    """The optimum stars, and the iso-cost and iso-power lines through the first (one line when they
    are parallel, or none where the points do not pin down a per-machine price)."""
    drawn = []
    lead = marks[0]["point"]
    for key, style, label in (("cost", "--", "iso-cost"), ("power", ":", "iso-power")):
        prices = _unit_prices(points, key)
        if prices is None or any(math.isclose(prices[0] / prices[1], q[0] / q[1]) for q in drawn):
            continue  # iso-power parallel to iso-cost (one machine type): the same line
        drawn.append(prices)
        level = lead[key]
        xl = np.linspace(xe[0], xe[-1], 200)
        yl = (level - prices[0] * xl) / prices[1]
        which = "confirmed optimum" if marks[0]["confirmed"] else "optimum"
        ax.plot(xl, yl, color="0.15", ls=style, lw=1.2, label=f"{label} through {which}")
    for k, mark in enumerate(marks):
        _star(ax, mark["point"]["prompt"], mark["point"]["token"], mark, 320, solid=k == 0)


def design_space_figure(rows: Iterable, title: str | None = None, *, confirmed_optimum=None,
                        machines=None, units: tuple[str, str] | None = None) -> Figure:
    """A new figure holding the design-space map of sweep results (see :func:`draw_design_space`)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 6), layout="constrained")
    draw_design_space(fig, rows, title, confirmed_optimum=confirmed_optimum, machines=machines, units=units)
    return fig


def _throughput(d: Mapping) -> float:
    for key in ("throughput", "throughput_rps", "rate_rps", "rps", "capacity_rps"):
        if d.get(key) is not None:
            return float(d[key])
    return float("nan")


COLOURS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]


def _headroom(d: Mapping, given: Mapping | None) -> float:
    """A design's SLO headroom (1 - tightest value / limit): from ``given`` by name, else its own key."""
    name = str(d.get("design", d.get("label", "")))
    v = given.get(name, given.get(str(d.get("label", "")))) if given else None
    if v is None:
        v = d.get("slo_headroom", d.get("headroom"))
    if v is None and d.get("tightest_ratio") is not None:
        v = 1.0 - float(d["tightest_ratio"])
    return float("nan") if v is None else float(v)


def _winner_index(designs: Sequence[Mapping], labels: list, winner: str | None) -> int | None:
    """The winner's position: the design ``winner`` names (design or label, any case), else the one
    flagged ``winner``."""
    for k, d in enumerate(designs):
        names = {str(d.get("design", "")).lower(), str(d.get("label", "")).lower(), labels[k].lower()}
        if (winner is not None and str(winner).lower() in names) or (winner is None and d.get("winner")):
            return k
    return None


def _panels(designs: Sequence[Mapping], units: tuple[str, str], headroom: Mapping | None) -> list[dict]:
    """The bar panels: cost and power, throughput unless every design has one rate (an iso-throughput
    plan: then it is said in the title instead), and the SLO headroom where known."""
    panels = [{"key": "cost", "title": "cost", "label": f"cost ({units[0]})",
               "values": [float(d.get("cost", float("nan"))) for d in designs]},
              {"key": "power", "title": "provisioned power", "label": f"power ({units[1]})",
               "values": [float(d.get("power", float("nan"))) for d in designs]}]
    rates = [_throughput(d) for d in designs]
    held = [r for r in rates if math.isfinite(r)]
    if not (len(held) >= 2 and all(math.isclose(r, held[0], rel_tol=1e-9) for r in held)):
        panels.append({"key": "throughput", "title": "throughput", "label": "throughput (req/s)", "values": rates})
    room = [_headroom(d, headroom) for d in designs]
    if any(math.isfinite(v) for v in room):
        panels.append({"key": "headroom", "title": "SLO headroom", "values": room,
                       "label": "tightest SLO headroom (% of limit)"})
    return panels


def draw_comparison(fig, designs: Sequence[Mapping], title: str | None = None,
                    normalize_to: str | None = None, *, winner: str | None = None,
                    budget: tuple[str, float] | None = None, headroom: Mapping | None = None,
                    machines=None, units: tuple[str, str] | None = None) -> None:
    """Draw cost, power, throughput and SLO headroom per design into ``fig`` (bar panels).

    Each design is a dict with ``design`` (or ``label``), ``cost``, ``power`` and
    ``throughput`` (or ``throughput_rps``/``rate_rps``), optionally ``prompt_machines``,
    ``token_machines`` or ``machines``, ``slo_headroom`` (or ``tightest_ratio``) and ``winner``.
    ``normalize_to`` names a design whose values become 1. ``winner`` names the design to mark;
    ``budget`` is (``"cost"`` or ``"power"``, amount), drawn as a line on that panel; ``headroom``
    maps design names to 1 - tightest value / limit; ``machines``/``units`` give the axes' units.
    A throughput panel whose bars would all be one rate is left out (the title says the rate).
    """
    if not designs:
        raise SplitwisePlanError("nothing to plot: no designs to compare")
    labels = [_design_label(d) for d in designs]
    cost_unit, power_unit = _units(machines, units)
    panels = _panels(designs, (cost_unit, power_unit), headroom)
    budget_line = None if budget is None else {"key": str(budget[0]), "amount": float(budget[1])}
    if normalize_to is not None:
        _normalize(designs, labels, panels, budget_line, normalize_to)
    best = _winner_index(designs, labels, winner)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        _bar_panel(ax, panel, labels, best)
        if budget_line is not None and budget_line["key"] == panel["key"]:
            unit = "" if normalize_to is not None else f" {cost_unit if panel['key'] == 'cost' else power_unit}"
            ax.axhline(budget_line["amount"], color="#C44E52", ls="--", lw=1.5,
                       label=f"budget {plain_number(budget_line['amount'])}{unit}")
    legend_below(fig, axes)
    fig.suptitle(title or "Cluster designs compared: " + ", ".join(p["title"] for p in panels)
                 + _same_rate_note(designs, panels))


def _normalize(designs: Sequence[Mapping], labels: list, panels: list, budget_line: dict | None,
               normalize_to: str) -> None:
    """Divide each panel but the headroom (and the budget) by the ``normalize_to`` design's value."""
    names = [str(d.get("design", d.get("label", ""))) for d in designs]
    if normalize_to not in names and normalize_to not in labels:
        raise SplitwisePlanError(f"cannot normalize to {normalize_to!r}: not among the designs")
    k = names.index(normalize_to) if normalize_to in names else labels.index(normalize_to)
    for panel in panels:
        if panel["key"] == "headroom":
            continue
        ref = panel["values"][k]
        panel["values"] = [v / ref if ref else float("nan") for v in panel["values"]]
        panel["label"] = f"{panel['label'].split(' (')[0]} (vs {normalize_to})"
        if budget_line is not None and budget_line["key"] == panel["key"]:
            budget_line["amount"] = budget_line["amount"] / ref if ref else float("nan")


def _bar_panel(ax, panel: dict, labels: list, best: int | None) -> None:
    """One panel's bars with their values in plain numbers, the winner's outlined and labelled; the
    headroom panel in percent with its 0 line (the SLO limit)."""
    from matplotlib.ticker import FuncFormatter
    vals = np.array(panel["values"], dtype=float)
    pct = panel["key"] == "headroom"
    show = percent if pct else plain_number
    x = np.arange(len(vals))
    bars = ax.bar(x, np.nan_to_num(vals), color=[COLOURS[i % len(COLOURS)] for i in range(len(x))],
                  edgecolor="none")
    for k, (b, v) in enumerate(zip(bars, vals)):
        top = max(b.get_height(), 0.0)
        ax.annotate("n/a" if not math.isfinite(v) else show(v), (b.get_x() + b.get_width() / 2, top),
                    ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
        if k == best:
            b.set_edgecolor("k")
            b.set_linewidth(2.0)
            ax.annotate("winner", (b.get_x() + b.get_width() / 2, top), ha="center", va="bottom",
                        fontsize=8, fontweight="bold", xytext=(0, 12), textcoords="offset points")
    ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
    if best is not None:
        ax.get_xticklabels()[best].set_fontweight("bold")
    if pct:
        ax.axhline(0.0, color="k", ls="--", lw=1, label="SLO limit (0% headroom)")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{plain_number(100 * v)}%"))
    else:
        ax.yaxis.set_major_formatter(plain_formatter())
    ax.set_title(panel["title"])
    ax.set_ylabel(panel["label"])
    ax.margins(y=0.2)


def _same_rate_note(designs: Sequence[Mapping], panels: list) -> str:
    """", each holding R req/s" when the throughput panel was left out because every design holds R."""
    if any(p["key"] == "throughput" for p in panels):
        return ""
    held = [r for r in (_throughput(d) for d in designs) if math.isfinite(r)]
    return f", each holding {plain_number(held[0])} req/s" if held else ""


def _design_label(d: Mapping) -> str:
    """A design's tick: its label, else its display name (a plan's report has it: ``Splitwise-HH (H100:H100)``),
    else its name; then its machine counts."""
    label = str(d.get("label") or d.get("display_name") or d.get("design", "?"))
    p, t, m = d.get("prompt_machines"), d.get("token_machines"), d.get("machines")
    if p and t:
        return f"{label}\n{p}P+{t}T"
    if p or m:
        return f"{label}\nx{p or m}"
    return label


def comparison_figure(designs: Sequence[Mapping], title: str | None = None,
                      normalize_to: str | None = None, **marks) -> Figure:
    """A new figure comparing designs' cost, power, throughput and SLO headroom (like the paper's
    Figure 18); ``marks``: :func:`draw_comparison`'s ``winner``, ``budget``, ``headroom``,
    ``machines`` and ``units``."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(max(9, 1.4 * len(designs) * 3 / 2), 4.2), layout="constrained")
    draw_comparison(fig, designs, title, normalize_to, **marks)
    return fig


# --- writing -------------------------------------------------------------------------

def _wrap(title: str, width: int = 90) -> str:
    return "\n".join(textwrap.wrap(title, width)) or title


def _render(fig: Figure, fmt: str) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=130, metadata={"Software": f"splitwise-plan {__version__}"}
                if fmt == "png" else {"Creator": f"splitwise-plan {__version__}"})
    return buf.getvalue()


def _inline_svg(fig: Figure) -> str:
    text = _render(fig, "svg").decode("utf-8")
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def _html_table(caption: str, columns: Sequence[str], rows: Sequence[Sequence]) -> str:
    def cell(v):
        if isinstance(v, float):
            return "" if not math.isfinite(v) else f"{v:.4g}"
        return "" if v is None else html.escape(str(v))   # no value (a baseline's token pool): as a CSV cell
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "\n".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return (f"<table><caption>{html.escape(caption)}</caption>\n<thead><tr>{head}</tr></thead>\n"
            f"<tbody>\n{body}\n</tbody></table>")


def html_page(title: str, figures: Sequence[Figure], tables: Sequence[tuple] = ()) -> str:
    """A self-contained HTML page: the figures as inline SVG, then the tables."""
    svgs = "\n".join(f"<figure>{_inline_svg(f)}</figure>" for f in figures)
    tabs = "\n".join(_html_table(*t) for t in tables)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
figure {{ margin: 0 0 2em 0; }} figure svg {{ max-width: 100%; height: auto; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin-bottom: 2em; }}
caption {{ text-align: left; font-weight: bold; padding: 0.4em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
th {{ background: #f2f2f2; }} tr.pass td {{ background: #eef8ee; }}
</style></head>
<body>
<h1>{html.escape(title)}</h1>
{svgs}
{tabs}
<p><small>splitwise-plan {html.escape(__version__)}</small></p>
</body></html>
"""


def _sweep_table(points: Sequence[dict], units: tuple[str, str] = DEFAULT_UNITS) -> tuple:
    cols = ("design", "prompt", "token", f"cost ({units[0]})", f"power ({units[1]})", "SLOs met", "tightest SLO",
            "value / limit")
    rows = [(p["design"], p["prompt"], p["token"], p["cost"], p["power"], "yes" if p["met"] else "no",
             p["tightest_slo"] or "", p["ratio"])
            for p in sorted(points, key=lambda p: (not p["met"], rank_key(p)))]
    return ("Design points (passing first, cheapest first)", cols, rows)


def _comparison_table(designs: Sequence[Mapping], units: tuple[str, str] = DEFAULT_UNITS,
                      winner: str | None = None, headroom: Mapping | None = None) -> tuple:
    labels = [_design_label(d) for d in designs]
    best = _winner_index(designs, labels, winner)
    cols = ("design", "prompt machines", "token machines", "machines", f"cost ({units[0]})",
            f"power ({units[1]})", "throughput (req/s)", "SLO headroom", "winner")
    rows = []
    for k, d in enumerate(designs):
        room = _headroom(d, headroom)
        rows.append((d.get("label") or d.get("design", ""), d.get("prompt_machines", ""), d.get("token_machines", ""),
                     d.get("machines", ""), float(d.get("cost", float("nan"))), float(d.get("power", float("nan"))),
                     _throughput(d), percent(room) if math.isfinite(room) else "",
                     "winner" if k == best else ""))
    return ("Designs compared", cols, rows)


def write_plot(path: str | Path, *, sweep: Iterable | None = None, designs: Sequence[Mapping] | None = None,
               title: str | None = None, normalize_to: str | None = None, winner: str | None = None,
               budget: tuple[str, float] | None = None, headroom: Mapping | None = None,
               confirmed_optimum=None, machines=None, units: tuple[str, str] | None = None) -> Path:
    """The ``--plot FILE`` hook: the design-space map of ``sweep`` and/or the comparison of ``designs``.

    ``.png``/``.svg`` give one image (both panels stacked when both are given);
    ``.html`` gives a page with the figures inline as SVG and the numbers as tables.
    ``winner``, ``budget``, ``headroom``: marks on the comparison (see :func:`draw_comparison`;
    :func:`plan_marks` makes them of a plan); ``confirmed_optimum``: the confirmed plan's design on
    the sweep map (see :func:`draw_design_space`); ``machines``/``units``: the units of cost and power.
    """
    from matplotlib.figure import Figure
    check_plot_path(path)
    fmt = plot_format(path)
    sweep = list(sweep) if sweep is not None else None
    if not sweep and not designs:
        raise SplitwisePlanError("nothing to plot: no sweep points and no designs")
    unit_pair = _units(machines, units)
    on_map = {"confirmed_optimum": confirmed_optimum, "units": unit_pair}
    on_bars = {"winner": winner, "budget": budget, "headroom": headroom, "units": unit_pair}
    if fmt == "html":
        figs, tables = [], []
        if sweep:
            figs.append(design_space_figure(sweep, **on_map))
            tables.append(_sweep_table([design_point(r) for r in sweep], unit_pair))
        if designs:
            figs.append(comparison_figure(designs, normalize_to=normalize_to, **on_bars))
            tables.append(_comparison_table(designs, unit_pair, winner, headroom))
        return atomic_write_text(path, html_page(title or "splitwise-plan results", figs, tables), what="plot")
    if sweep and designs:
        fig = Figure(figsize=(10, 11), layout="constrained")
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.5, 1])
        draw_design_space(top, sweep, **on_map)
        draw_comparison(bottom, designs, normalize_to=normalize_to, **on_bars)
    elif sweep:
        fig = design_space_figure(sweep, **on_map)
    else:
        fig = comparison_figure(designs, normalize_to=normalize_to, **on_bars)
    if title:
        fig.suptitle(_wrap(title), fontsize=10)
    return atomic_write_bytes(path, _render(fig, fmt), what="plot")


def plan_marks(result) -> dict:
    """What to mark on a plan's comparison plot, as :func:`write_plot` keywords: the ``winner``, the
    ``budget`` of a max-throughput plan (on the cost or power it limits), each design's SLO
    ``headroom`` and the ``units`` of the machines its designs use (from the plan's machine catalog)."""
    marks = {"winner": result.winner, "headroom": {dp.design: dp.headroom for dp in result.designs}}
    if result.budget is not None:
        marks["budget"] = (result.request.objective, float(result.budget))
    catalog = (result.inputs or {}).get("machine_catalog") or (
        result.request.machines_file if isinstance(result.request.machines_file, Mapping) else None)
    if catalog:
        used = _machines_used(result, catalog)
        marks["units"] = _units(used or catalog)
    return marks


def _machines_used(result, catalog: Mapping) -> list:
    """The catalog entries of the machines the plan's designs run on (none if they cannot be told)."""
    from splitwise_plan.inputs.designs import get_design
    names = set()
    for dp in result.designs:
        try:
            names.update(get_design(dp.design).machines)
        except (SplitwisePlanError, KeyError, ValueError):
            return []
    by_lower = {str(k).lower(): v for k, v in catalog.items()}
    return [by_lower[n.lower()] for n in names if n.lower() in by_lower]


def plot_design_space(rows: Iterable, path: str | Path, title: str | None = None) -> Path:
    """Write the design-space map of sweep results to ``path`` (.png, .svg or .html)."""
    return write_plot(path, sweep=rows, title=title)


def plot_design_comparison(designs: Sequence[Mapping], path: str | Path, title: str | None = None,
                           normalize_to: str | None = None) -> Path:
    """Write the cost/power/throughput comparison of designs to ``path`` (.png, .svg or .html)."""
    return write_plot(path, designs=designs, title=title, normalize_to=normalize_to)
