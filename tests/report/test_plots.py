"""Plots a planner reads: the winner marked, budgets and SLO limits drawn, units on the axes, plain
numbers, and a sweep map that says whose optimum its star is. Asserted on the Figure objects."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")   # (the plots never need pyplot or a display; this keeps any other test's off-screen too)

from splitwise_plan.inputs.machines import BUILTIN_MACHINES, Machine  # noqa: E402
from splitwise_plan.report import plots  # noqa: E402
from splitwise_plan.report.plots import (  # noqa: E402
    comparison_figure,
    design_space_figure,
    plain_formatter,
    plain_number,
    plan_marks,
    write_plot,
)

H100_USD, H100_KW, CAP_KW = 55.04, 10.2, 7.14


def _designs(rates=(30.0, 30.0, 30.0)):
    """Three designs of an iso-throughput plan (each at the asked 30 req/s) unless ``rates`` differ."""
    return [{"design": "baseline-a100", "label": "baseline-a100", "machines": 48, "cost": 1966.56,
             "power": 1512.8, "throughput": rates[0]},
            {"design": "splitwise-hh", "label": "splitwise-hh", "prompt_machines": 23, "token_machines": 6,
             "cost": 2559.05, "power": 277.44, "throughput": rates[1]},
            {"design": "splitwise-ha", "label": "splitwise-ha", "prompt_machines": 24, "token_machines": 8,
             "cost": 2445.59, "power": 296.8, "throughput": rates[2]}]


def _legend(ax) -> list[str]:
    """The legend's texts: of the axes' own legend, else of the legend below the panels of its figure."""
    legends = [ax.get_legend()] if ax.get_legend() else ax.figure.legends
    return [t.get_text() for leg in legends for t in leg.get_texts()]


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def _hlines_at(ax, y: float) -> list:
    """The horizontal lines of ``ax`` at height ``y``."""
    return [ln for ln in ax.lines if np.allclose(ln.get_ydata(), y)]


# --- plain numbers -----------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (1512.8, "1,513"), (88.2431, "88.24"), (7.14, "7.14"), (290.1, "290.1"), (1234567.0, "1,234,567"),
    (0.0123, "0.0123"), (0.5, "0.5"), (30.0, "30"), (0.0, "0"), (-0.01, "-0.01"), (float("nan"), "n/a"),
])
def test_numbers_read_plainly(value, text):
    assert plain_number(value) == text
    assert plain_formatter()(value, 0) == text


# --- the plan's comparison --------------------------------------------------------------

def test_an_iso_throughput_plan_shows_headroom_not_six_identical_bars():
    fig = comparison_figure(_designs(), headroom={"baseline-a100": 0.05, "splitwise-hh": 0.2, "splitwise-ha": -0.03})
    assert [ax.get_title() for ax in fig.axes] == ["cost", "provisioned power", "SLO headroom"]
    assert "each holding 30 req/s" in fig.get_suptitle()
    room = fig.axes[2]
    assert _texts(room) == ["5%", "20%", "-3%"]
    assert len(_hlines_at(room, 0.0)) == 1 and _legend(room) == ["SLO limit (0% headroom)"]
    assert room.yaxis.get_major_formatter()(0.15, 0) == "15%"


@pytest.mark.parametrize("room, text", [(0.09, "9%"), (0.2049, "20%"), (0.003271, "0.3%"), (0.015, "1.5%"),
                                        (-0.0021, "-0.2%"), (-0.15, "-15%"), (0.0, "0%"), (float("nan"), "n/a")])
def test_headroom_reads_as_in_the_plans_table(room, text, tmp_path):
    """As the table: a whole percent, one under 2% with one decimal ("0.3%", not "0.3271%")."""
    rooms = {"baseline-a100": 0.05, "splitwise-hh": room, "splitwise-ha": 0.1}
    assert _texts(comparison_figure(_designs(), headroom=rooms).axes[2])[1] == text
    page = write_plot(tmp_path / "p.html", designs=_designs(), headroom=rooms).read_text()
    assert f"<td>{text if math.isfinite(room) else ''}</td>" in page


def _off_the_data(fig) -> None:
    """Every legend of ``fig`` (and of its subfigures) lies outside every axes' box, inside the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)   # (the constrained layout places the panels and the legend)
    legends = [leg for f in (fig, *fig.subfigs) for leg in f.legends] + [ax.get_legend() for ax in fig.axes]
    legends = [leg for leg in legends if leg is not None]
    assert legends
    page = fig.bbox
    for leg in legends:
        box = leg.get_window_extent(renderer)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 and box.y1 <= page.y1
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), (leg, ax.get_title())


def test_the_comparisons_legend_is_below_the_panels_off_the_bars():
    fig = comparison_figure(_designs(rates=(50.0, 70.0, 65.0)), budget=("power", 300.0), winner="splitwise-hh",
                            headroom={"baseline-a100": 0.05, "splitwise-hh": 0.2, "splitwise-ha": -0.01})
    assert [ax.get_legend() for ax in fig.axes] == [None] * 4
    assert _legend(fig.axes[0]) == ["budget 300 kW", "SLO limit (0% headroom)"]
    _off_the_data(fig)
    below = fig.legends[0].get_window_extent()
    assert all(below.y1 <= ax.get_window_extent().y0 for ax in fig.axes)


def test_the_design_space_legends_are_off_the_map():
    _off_the_data(design_space_figure(_sweep(), confirmed_optimum=(23, 6)))
    rows = [{"design": "baseline-h100", "prompt_machines": m, "token_machines": 0, "cost": H100_USD * m,
             "power": H100_KW * m, "slo_met": m > 2, "tightest_ratio": 3.0 / m} for m in range(1, 6)]
    _off_the_data(design_space_figure(rows))


def test_the_legends_of_a_sweep_and_plan_drawn_together_are_off_the_data():
    """As ``write_plot`` draws both: the map above, the designs compared below, each legend below its own."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(10, 11), layout="constrained")
    top, bottom = fig.subfigures(2, 1, height_ratios=[1.5, 1])
    plots.draw_design_space(top, _sweep())
    plots.draw_comparison(bottom, _designs(), headroom={"splitwise-hh": 0.2})
    assert len(fig.axes) == 5 and [len(f.legends) for f in (top, bottom)] == [1, 1]
    _off_the_data(fig)


def test_without_headroom_an_iso_throughput_plan_has_two_panels():
    fig = comparison_figure(_designs())
    assert [ax.get_title() for ax in fig.axes] == ["cost", "provisioned power"]


def test_a_max_throughput_plan_keeps_its_throughput_panel():
    fig = comparison_figure(_designs(rates=(50.0, 70.0, 65.0)))
    assert [ax.get_title() for ax in fig.axes] == ["cost", "provisioned power", "throughput"]
    assert fig.axes[2].get_ylabel() == "throughput (req/s)" and _texts(fig.axes[2]) == ["50", "70", "65"]


def test_the_winner_is_marked_in_every_panel():
    fig = comparison_figure(_designs(), winner="Splitwise-HH", headroom={"splitwise-hh": 0.2})
    for ax in fig.axes:
        assert _texts(ax).count("winner") == 1
        bars = ax.patches
        assert [b.get_edgecolor()[3] for b in bars] == [0.0, 1.0, 0.0]   # only the winner's is outlined,
        assert bars[1].get_edgecolor()[:3] == (0.0, 0.0, 0.0) and bars[1].get_linewidth() == 2.0   # in black
        assert [t.get_fontweight() for t in ax.get_xticklabels()] == ["normal", "bold", "normal"]
    # the designs can flag it themselves too
    flagged = [dict(d, winner=d["design"] == "splitwise-ha") for d in _designs()]
    assert "winner" in _texts(comparison_figure(flagged).axes[0])
    assert "winner" not in _texts(comparison_figure(_designs()).axes[0])


def test_axes_carry_units_and_plain_numbers():
    fig = comparison_figure(_designs())
    cost, power = fig.axes
    assert cost.get_ylabel() == "cost (USD/h)" and power.get_ylabel() == "power (kW)"
    assert power.yaxis.get_major_formatter()(1512.8, 0) == "1,513"
    assert _texts(power) == ["1,513", "277.4", "296.8"]   # not 1.51e+03
    assert _texts(cost) == ["1,967", "2,559", "2,446"]
    euro = [Machine("box", "a100-80gb", 8, 2**30, 30.0, 6500.0, "EUR/h", "W")]
    cost, power = comparison_figure(_designs(), machines=euro).axes
    assert cost.get_ylabel() == "cost (EUR/h)" and power.get_ylabel() == "power (W)"
    cost, power = comparison_figure(_designs(), machines={**BUILTIN_MACHINES, "box": euro[0]}).axes
    assert cost.get_ylabel() == "cost (mixed units)"


def test_a_power_budget_is_a_line_on_the_power_panel():
    fig = comparison_figure(_designs(rates=(50.0, 70.0, 65.0)), budget=("power", 300.0))
    cost, power, rate = fig.axes
    assert [ln.get_label() for ln in _hlines_at(power, 300.0)] == ["budget 300 kW"]
    assert _legend(power) == ["budget 300 kW"]
    assert not _hlines_at(cost, 300.0) and not _hlines_at(rate, 300.0) and cost.get_legend() is None


def test_a_cost_budget_normalized_with_the_values():
    fig = comparison_figure(_designs(rates=(50.0, 70.0, 65.0)), budget=("cost", 2500.0),
                            normalize_to="baseline-a100")
    cost = fig.axes[0]
    assert len(_hlines_at(cost, 2500.0 / 1966.56)) == 1 and _legend(cost) == ["budget 1.271"]
    assert cost.get_ylabel() == "cost (vs baseline-a100)"


# --- the sweep map -----------------------------------------------------------------------

def _sweep(method="fluid"):
    """An HH sweep whose points pass from 26 prompt + 3 token machines (or 25 + 5) up: its cheapest
    passing point is 26P+3T, 29 machines at 55.04 USD/h, 26 x 10.2 + 3 x 7.14 = 286.62 kW."""
    rows = []
    for p in range(20, 30):
        for t in range(1, 9):
            met = (p >= 26 and t >= 3) or (p >= 25 and t >= 5)
            rows.append({"design": "splitwise-hh", "prompt_machines": p, "token_machines": t,
                         "cost": H100_USD * (p + t), "power": H100_KW * p + CAP_KW * t, "slo_met": met,
                         "tightest_ratio": 0.9 if met else 1.2, "tightest_slo": "ttft_p99", "method": method})
    return rows


def _stars(ax) -> list[str]:
    return [t for t in _legend(ax) if "optimum" in t and ", cost " in t]


def test_a_fluid_sweeps_star_says_it_is_the_fast_models():
    ax = design_space_figure(_sweep("fluid")).axes[0]
    assert _stars(ax) == ["fast-model optimum (not confirmed): 26P+3T, cost 1,596 USD/h, power 286.6 kW"]


@pytest.mark.parametrize("method, label", [("events", "optimum (event simulator)"),
                                           (None, "sweep optimum (not confirmed)")])
def test_other_sweeps_stars_say_whose_they_are(method, label):
    ax = design_space_figure(_sweep(method)).axes[0]
    assert _stars(ax) == [f"{label}: 26P+3T, cost 1,596 USD/h, power 286.6 kW"]


def test_the_confirmed_optimum_is_marked_and_the_fast_models_kept_apart():
    """The confirmed plan says 23+6 (23 x 10.2 + 6 x 7.14 = 277.44 kW) where the fluid sweep says 26+3."""
    for confirmed in ((23, 6), {"prompt_machines": 23, "token_machines": 6}):
        ax = design_space_figure(_sweep(), confirmed_optimum=confirmed).axes[0]
        assert _stars(ax) == ["confirmed optimum: 23P+6T, cost 1,596 USD/h, power 277.4 kW",
                              "fast-model optimum (not confirmed): 26P+3T, cost 1,596 USD/h, power 286.6 kW"]
        assert "iso-cost through confirmed optimum" in _legend(ax)
        stars = [c for c in ax.collections if c.get_label().startswith(("confirmed", "fast-model"))]
        assert [tuple(c.get_offsets()[0]) for c in stars] == [(23, 6), (26, 3)]


def test_a_confirmed_optimum_the_sweep_agrees_with_is_one_star():
    ax = design_space_figure(_sweep(), confirmed_optimum=(26, 3)).axes[0]
    assert _stars(ax) == ["confirmed optimum: 26P+3T, cost 1,596 USD/h, power 286.6 kW"]


def test_a_confirmed_optimum_outside_the_grid_is_priced_per_machine():
    ax = design_space_figure(_sweep(), confirmed_optimum=(30, 2)).axes[0]   # 32 x 55.04; 306 + 14.28 kW
    assert _stars(ax)[0] == "confirmed optimum: 30P+2T, cost 1,761 USD/h, power 320.3 kW"


def test_the_map_marks_the_slo_limit_on_its_colour_bar():
    fig = design_space_figure(_sweep())
    bar = fig.axes[1]
    assert len(_hlines_at(bar, 0.0)) == 1   # log10(value / limit) = 0: the limit
    assert "SLO limit at 1" in bar.get_ylabel()
    assert "pass/fail boundary (SLO limit)" in _legend(fig.axes[0])


def test_a_baseline_sweep_draws_the_slo_limit_and_plain_ticks():
    rows = [{"design": "baseline-h100", "prompt_machines": m, "token_machines": 0, "cost": H100_USD * m,
             "power": H100_KW * m, "slo_met": m > 2, "tightest_ratio": 3.0 / m, "method": "events"}
            for m in range(1, 6)]
    ax = design_space_figure(rows).axes[0]
    assert len(_hlines_at(ax, 1.0)) == 1 and "SLO limit (value / limit = 1)" in _legend(ax)
    assert _stars(ax) == ["optimum (event simulator): 3 machines, cost 165.1 USD/h, power 30.6 kW"]
    assert ax.yaxis.get_major_formatter()(2.0, 0) == "2"


# --- the plan's marks and the files ------------------------------------------------------

def test_plan_marks_give_the_winner_budget_headroom_and_units():
    from splitwise_plan.planning.request import PlanRequest
    from splitwise_plan.planning.result import DesignPlan, PlanResult
    req = PlanRequest(budget_power=300.0, designs="HH,HA")
    designs = (DesignPlan("splitwise-hh", "HH", "ok", 20, 5, cost=10.0, power=250.0, rate=70.0),
               DesignPlan("splitwise-ha", "HA", "ok", 20, 5, cost=9.0, power=240.0, rate=60.0))
    catalog = {name: {"cost": 1.0, "power": 1.0, "cost_unit": "EUR/h", "power_unit": "W"}
               for name in ("dgx-a100", "dgx-h100")}
    result = PlanResult(req, designs, "splitwise-hh", (), "fluid", 1.0,
                        inputs={"budget": {"objective": "power", "amount": 300.0}, "machine_catalog": catalog})
    marks = plan_marks(result)
    assert marks["winner"] == "splitwise-hh" and marks["budget"] == ("power", 300.0)
    assert marks["units"] == ("EUR/h", "W") and set(marks["headroom"]) == {"splitwise-hh", "splitwise-ha"}
    assert all(math.isnan(v) for v in marks["headroom"].values())   # no confirmed result: not known
    from splitwise_plan.report.plan import comparison
    fig = comparison_figure(comparison(result), **marks)
    assert _legend(fig.axes[1]) == ["budget 300 W"] and "winner" in _texts(fig.axes[0])


def test_the_html_page_names_units_and_the_winner(tmp_path):
    page = write_plot(tmp_path / "p.html", designs=_designs(), winner="splitwise-hh",
                      headroom={"splitwise-hh": 0.2}).read_text()
    assert "<th>cost (USD/h)</th>" in page and "<th>power (kW)</th>" in page
    assert "<td>winner</td>" in page and "<td>20%</td>" in page


def test_old_calls_still_draw(tmp_path):
    """The callers' keyword-free calls of before keep working."""
    assert write_plot(tmp_path / "a.png", designs=_designs(), normalize_to="baseline-a100").stat().st_size > 0
    assert write_plot(tmp_path / "b.svg", sweep=_sweep(), designs=_designs(), title="t").stat().st_size > 0


def test_plots_draw_off_screen():
    """No pyplot (no display, no global figure state): figures are drawn on the Agg canvas."""
    source = Path(plots.__file__).read_text()
    assert "pyplot" not in source and "backend_agg import FigureCanvasAgg" in source
    assert matplotlib.get_backend().lower() == "agg"
