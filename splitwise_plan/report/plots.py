"""Plots of planner and sweep results (matplotlib, Agg: no display needed).

- :func:`design_space_figure`: the design-space map of a sweep, prompt x token machines
  coloured by the tightest SLO (value / limit), with the pass/fail boundary, the cheapest
  passing design (the optimum) and the iso-cost and iso-power lines through it, like the
  Splitwise paper's Figure 12. A baseline sweep (one pool) becomes a line chart.
- :func:`comparison_figure`: cost, power and throughput per design, like its Figure 18.
- :func:`write_plot`: the ``--plot FILE`` hook: PNG or SVG by extension, or HTML, a
  self-contained page with the figure as inline SVG plus a table of the numbers.

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

MAX_RATIO_DECADES = 1.0  # colour scale: tightest ratio from 10^-1 to 10^+1, clipped


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
            "met": bool(met), "ratio": ratio, "tightest_slo": _get(r, "tightest_slo")}


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


def draw_design_space(fig, rows: Iterable, title: str | None = None) -> dict | None:
    """Draw the design-space map of sweep results into ``fig`` (a Figure or SubFigure); return the optimum."""
    points = [design_point(r) for r in rows]
    if not points:
        raise SplitwisePlanError("nothing to plot: the sweep has no design points")
    designs = sorted({p["design"] for p in points})
    best = optimum(points)
    norm, cmap, span = _ratio_colours([p["ratio"] for p in points])
    ax = fig.add_subplot(1, 1, 1)
    name = ", ".join(designs)
    if all(p["token"] == 0 for p in points):  # baseline: one pool, a line chart
        _draw_baseline(ax, points, best, norm, cmap)
        ax.set_title(title or f"Design space of {name}")
        return best
    _draw_grid(fig, ax, points, best, norm, cmap, span)
    ax.set_title(title or f"Design space of {name}: tightest SLO per design point")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=8, frameon=False)
    return best


def _draw_baseline(ax, points: list, best: dict | None, norm, cmap) -> None:
    """A baseline sweep (one pool): the tightest SLO ratio against the machines, with the optimum."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    points.sort(key=lambda p: p["prompt"])
    x = np.array([p["prompt"] for p in points])
    y = np.array([p["ratio"] for p in points])
    ax.plot(x, y, color="0.4", lw=1, zorder=1)
    ax.scatter(x, y, c=np.log10(np.clip(y, 1e-12, None)), cmap=cmap, norm=norm, zorder=2,
               edgecolors="k", linewidths=0.5)
    ax.axhline(1.0, color="k", ls="--", lw=1, label="SLO limit (ratio 1)")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set_xlabel("machines")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("tightest SLO: value / limit")
    if best:
        ax.scatter([best["prompt"]], [best["ratio"]], marker="*", s=260, c="gold", edgecolors="k",
                   zorder=3, label=f"optimum: {best['prompt']} machines, cost {best['cost']:.4g}")
    ax.legend(loc="best", fontsize=8)


def _draw_grid(fig, ax, points: list, best: dict | None, norm, cmap, span: float) -> None:
    """A two-pool sweep: the prompt x token map coloured by the tightest SLO ratio, with its colour
    bar, the pass/fail boundary and the optimum with the iso-cost and iso-power lines through it."""
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
    cbar.set_ticklabels([f"{10 ** t:.3g}" for t in ticks])
    cbar.set_label("tightest SLO: value / limit (pass < 1)")
    segs_x, segs_y = _boundary(met, xe, ye)
    if segs_x:
        ax.plot(segs_x, segs_y, color="k", lw=2.2, label="pass/fail boundary")
    if best:
        _draw_optimum(ax, points, best, xe)
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


def _draw_optimum(ax, points: list, best: dict, xe: np.ndarray) -> None:
    """The optimum as a star, and the iso-cost and iso-power lines through it (one line when they
    are parallel, or none where the points do not pin down a per-machine price)."""
    drawn = []
    for key, style, label in (("cost", "--", "iso-cost"), ("power", ":", "iso-power")):
        prices = _unit_prices(points, key)
        if prices is None or any(math.isclose(prices[0] / prices[1], q[0] / q[1]) for q in drawn):
            continue  # iso-power parallel to iso-cost (one machine type): the same line
        drawn.append(prices)
        level = best[key]
        xl = np.linspace(xe[0], xe[-1], 200)
        yl = (level - prices[0] * xl) / prices[1]
        ax.plot(xl, yl, color="0.15", ls=style, lw=1.2, label=f"{label} through optimum")
    ax.scatter([best["prompt"]], [best["token"]], marker="*", s=320, c="gold", edgecolors="k",
               linewidths=0.8, zorder=5,
               label=f"optimum: {best['prompt']}P+{best['token']}T, cost {best['cost']:.4g}, "
                     f"power {best['power']:.4g}")


def design_space_figure(rows: Iterable, title: str | None = None) -> Figure:
    """A new figure holding the design-space map of sweep results."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(8, 6), layout="constrained")
    draw_design_space(fig, rows, title)
    return fig


def _throughput(d: Mapping) -> float:
    for key in ("throughput", "throughput_rps", "rate_rps", "rps", "capacity_rps"):
        if d.get(key) is not None:
            return float(d[key])
    return float("nan")


def draw_comparison(fig, designs: Sequence[Mapping], title: str | None = None,
                    normalize_to: str | None = None) -> None:
    """Draw cost, power and throughput per design into ``fig`` (three bar panels).

    Each design is a dict with ``design`` (or ``label``), ``cost``, ``power`` and
    ``throughput`` (or ``throughput_rps``/``rate_rps``), optionally ``prompt_machines``,
    ``token_machines`` or ``machines``. ``normalize_to`` names a design whose values become 1.
    """
    if not designs:
        raise SplitwisePlanError("nothing to plot: no designs to compare")
    labels = [_design_label(d) for d in designs]
    values = {"cost": [float(d.get("cost", float("nan"))) for d in designs],
              "power": [float(d.get("power", float("nan"))) for d in designs],
              "throughput": [_throughput(d) for d in designs]}
    units = {"cost": "cost", "power": "provisioned power", "throughput": "throughput, req/s"}
    if normalize_to is not None:
        names = [str(d.get("design", d.get("label", ""))) for d in designs]
        if normalize_to not in names and normalize_to not in labels:
            raise SplitwisePlanError(f"cannot normalize to {normalize_to!r}: not among the designs")
        k = names.index(normalize_to) if normalize_to in names else labels.index(normalize_to)
        for key, vals in values.items():
            ref = vals[k]
            values[key] = [v / ref if ref else float("nan") for v in vals]
            units[key] = f"{units[key].split(',')[0]} (vs {normalize_to})"
    axes = fig.subplots(1, 3)
    colours = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
    x = np.arange(len(designs))
    for ax, key in zip(axes, ("cost", "power", "throughput")):
        vals = np.array(values[key], dtype=float)
        bars = ax.bar(x, np.nan_to_num(vals), color=[colours[i % len(colours)] for i in range(len(x))])
        for b, v in zip(bars, vals):
            ax.annotate("n/a" if not math.isfinite(v) else f"{v:.3g}", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=7, xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(key)
        ax.set_ylabel(units[key])
        ax.margins(y=0.15)
    fig.suptitle(title or "Cluster designs compared: cost, power and throughput")


def _design_label(d: Mapping) -> str:
    label = str(d.get("label") or d.get("design", "?"))
    p, t, m = d.get("prompt_machines"), d.get("token_machines"), d.get("machines")
    if p and t:
        return f"{label}\n{p}P+{t}T"
    if p or m:
        return f"{label}\nx{p or m}"
    return label


def comparison_figure(designs: Sequence[Mapping], title: str | None = None,
                      normalize_to: str | None = None) -> Figure:
    """A new figure comparing designs' cost, power and throughput (like the paper's Figure 18)."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(max(9, 1.4 * len(designs) * 3 / 2), 4.2), layout="constrained")
    draw_comparison(fig, designs, title, normalize_to)
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


def _sweep_table(points: Sequence[dict]) -> tuple:
    cols = ("design", "prompt", "token", "cost", "power", "SLOs met", "tightest SLO", "value / limit")
    rows = [(p["design"], p["prompt"], p["token"], p["cost"], p["power"], "yes" if p["met"] else "no",
             p["tightest_slo"] or "", p["ratio"])
            for p in sorted(points, key=lambda p: (not p["met"], rank_key(p)))]
    return ("Design points (passing first, cheapest first)", cols, rows)


def _comparison_table(designs: Sequence[Mapping]) -> tuple:
    cols = ("design", "prompt machines", "token machines", "machines", "cost", "power", "throughput, req/s")
    rows = [(d.get("label") or d.get("design", ""), d.get("prompt_machines", ""), d.get("token_machines", ""),
             d.get("machines", ""), float(d.get("cost", float("nan"))), float(d.get("power", float("nan"))),
             _throughput(d)) for d in designs]
    return ("Designs compared", cols, rows)


def write_plot(path: str | Path, *, sweep: Iterable | None = None, designs: Sequence[Mapping] | None = None,
               title: str | None = None, normalize_to: str | None = None) -> Path:
    """The ``--plot FILE`` hook: the design-space map of ``sweep`` and/or the comparison of ``designs``.

    ``.png``/``.svg`` give one image (both panels stacked when both are given);
    ``.html`` gives a page with the figures inline as SVG and the numbers as tables.
    """
    from matplotlib.figure import Figure
    check_plot_path(path)
    fmt = plot_format(path)
    sweep = list(sweep) if sweep is not None else None
    if not sweep and not designs:
        raise SplitwisePlanError("nothing to plot: no sweep points and no designs")
    if fmt == "html":
        figs, tables = [], []
        if sweep:
            figs.append(design_space_figure(sweep))
            tables.append(_sweep_table([design_point(r) for r in sweep]))
        if designs:
            figs.append(comparison_figure(designs, normalize_to=normalize_to))
            tables.append(_comparison_table(designs))
        return atomic_write_text(path, html_page(title or "splitwise-plan results", figs, tables), what="plot")
    if sweep and designs:
        fig = Figure(figsize=(10, 11), layout="constrained")
        top, bottom = fig.subfigures(2, 1, height_ratios=[1.5, 1])
        draw_design_space(top, sweep)
        draw_comparison(bottom, designs, normalize_to=normalize_to)
    elif sweep:
        fig = design_space_figure(sweep)
    else:
        fig = comparison_figure(designs, normalize_to=normalize_to)
    if title:
        fig.suptitle(_wrap(title), fontsize=10)
    return atomic_write_bytes(path, _render(fig, fmt), what="plot")


def plot_design_space(rows: Iterable, path: str | Path, title: str | None = None) -> Path:
    """Write the design-space map of sweep results to ``path`` (.png, .svg or .html)."""
    return write_plot(path, sweep=rows, title=title)


def plot_design_comparison(designs: Sequence[Mapping], path: str | Path, title: str | None = None,
                           normalize_to: str | None = None) -> Path:
    """Write the cost/power/throughput comparison of designs to ``path`` (.png, .svg or .html)."""
    return write_plot(path, designs=designs, title=title, normalize_to=normalize_to)
