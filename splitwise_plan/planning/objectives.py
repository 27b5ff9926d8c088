"""What a plan optimizes, and how it ranks and words its answers: the search's key (:func:`key_fn`, the
objective first), a design's pools priced (:func:`pool_units`), the grid searched (:func:`grid_limits`,
the reference's, scaled with the rate), the designs' ranking under a goal (:func:`rank_key`) and the
winner's gains over the baselines (:func:`gain_text`, :func:`gains`), and the notes' texts of an SLO
ratio and a design point.
"""

from __future__ import annotations

import math

from splitwise_plan.inputs.designs import MAX_POOL, Design, display_name, get_design
from splitwise_plan.planning.request import Inputs, PlanRequest
from splitwise_plan.planning.result import DesignPlan

#: The reference's provisioning sweeps at 70 req/s (prompt max, token max); scaled with the rate.
REFERENCE_GRID = {"splitwise-aa": (69, 69), "splitwise-hh": (39, 39), "splitwise-ha": (39, 69),
                  "splitwise-hhcap": (39, 39), "baseline-a100": (139, 0), "baseline-h100": (79, 0)}
REFERENCE_RATE = 70.0


def key_fn(objective: str, up: dict, tp: dict):
    """Lexicographic key: the objective, then the other one, then fewer machines, then fewer prompt machines."""
    other = "power" if objective == "cost" else "cost"

    def key(p: int, t: int) -> tuple:
        return (round(up[objective] * p + tp[objective] * t, 9), round(up[other] * p + tp[other] * t, 9), p + t, p)
    return key


def pool_units(inputs: Inputs, d: Design) -> tuple[dict, dict]:
    pm = inputs.machines[d.prompt_machine]
    tm = inputs.machines[d.token_machine] if d.token_machine else None
    up = {"cost": pm.cost, "power": pm.power}
    ut = {"cost": tm.cost if tm else 0.0, "power": tm.power if tm else 0.0}
    return up, ut


def grid_limits(req: PlanRequest, d: Design, rate: float) -> tuple[int, int]:
    for name, pmax, tmax in req.limits:
        if get_design(name).name == d.name:
            return int(pmax), (0 if d.is_baseline else int(tmax))
    # a design of the user's own machine types gets the largest shipped design's grid
    pmax, tmax = REFERENCE_GRID.get(d.name, (139, 0) if d.is_baseline else (69, 69))
    f = max(1.0, rate / REFERENCE_RATE)   # the reference's grid, scaled with the rate, within the pool bound
    return min(MAX_POOL, int(math.ceil(pmax * f))), min(MAX_POOL, int(math.ceil(tmax * f)))


# --- SLO ratios and design points in the notes ------------------------------------------

def tightest_ratio(r) -> float:
    return float(r.tightest.get("ratio", math.inf)) if r is not None and r.tightest else math.inf


def ratio_text(r: float) -> str:
    """An SLO ratio for the notes: three decimals (0.997 read 1.00 rounded to two, like a miss), more
    where three would put it on the wrong side of 1 (a miss at 1.000088 read 1.000, as if it passed)."""
    text = f"{r:.3f}"
    return f"{r:.6f}" if text == "1.000" and r != 1.0 else text


def point_text(d: Design, pt) -> str:
    """A design point as the notes write it: ``24+5``, or a baseline's machine count."""
    return f"{pt[0]}" if d.is_baseline else f"{pt[0]}+{pt[1]}"


# --- ranking and gains ------------------------------------------------------------------

def goal_value(p: DesignPlan, goal: str) -> float:
    """A design answer's figure the goal minimizes: its power for min-power, else its cost (inf without an answer)."""
    if p.status != "ok":
        return math.inf
    return p.power if goal == "min-power" else p.cost


def rank_key(goal: str):
    def key(dp: DesignPlan):
        if dp.status != "ok":
            return (1, 0.0, 0.0)
        if goal == "min-cost":
            return (0, dp.cost, dp.power)
        if goal == "min-power":
            return (0, dp.power, dp.cost)
        return (0, -dp.rate, dp.cost)
    return key


def _pct(new: float, old: float, what: str) -> str:
    if not (old > 0 and math.isfinite(new)):
        return f"{what} n/a"
    ch = (new - old) / old
    if abs(ch) < 0.005:
        return f"the same {what}"
    return f"{abs(ch) * 100:.0f}% {'lower' if ch < 0 else 'higher'} {what}"


def gain_text(winner: DesignPlan, other: DesignPlan, goal: str) -> str:
    """The winner against another design, in the paper's terms."""
    if goal == "max-throughput":
        thr = winner.rate / other.rate if other.rate > 0 else math.inf
        head = "the same throughput" if abs(thr - 1.0) < 0.005 else f"{thr:.2f}x throughput"
    else:
        head = "same throughput"
    first, second = ("power", "cost") if goal == "min-power" else ("cost", "power")
    return (f"{display_name(winner.design)} vs {display_name(other.design)}: {head} at {_pct(getattr(winner, first), getattr(other, first), first)}"
            f" and {_pct(getattr(winner, second), getattr(other, second), second)}")


def gains(designs: tuple[DesignPlan, ...], winner: DesignPlan | None, goal: str) -> tuple[str, ...]:
    if winner is None:
        return ()
    out = []
    for dp in designs:
        if dp.status == "ok" and dp is not winner and get_design(dp.design).is_baseline:
            out.append(gain_text(winner, dp, goal))
    return tuple(out)
