"""A near-tie called one: the cheapest rival at most :data:`NEAR` dearer than the winner (in the goal's
objective) that is markedly safer, with at least :data:`HEADROOM_TIMES` the winner's SLO headroom, or holding the
SLOs at the higher rate where the winner fails them (the planner's +5% probe). A headroom under 2%, which the
plan calls thin in its winner, makes no rival robust.
"""

from __future__ import annotations

import math

from splitwise_plan.planning.objectives import goal_value

#: A rival at most this much dearer than the winner is a near-tie.
NEAR = 0.05
#: ... and a robust alternative with at least this many times the winner's SLO headroom,
HEADROOM_TIMES = 3.0
#: and at least this much headroom itself (below it the plan warns the winner's is thin: not robust either)
LEAST_HEADROOM = 0.02


def robust_alternative(req, ranked, winner, stress, confirm) -> dict | None:
    """The robust alternative to ``winner`` among ``ranked`` (None if no rival qualifies, or for max-throughput).
    ``stress`` is the winner's verdict at the higher rate; ``confirm(design, point, rate)`` gives (held, worst result)
    of a rival at that rate, asked only where the winner fails it."""
    if winner is None or req.goal == "max-throughput":
        return None
    best = goal_value(winner, req.goal)
    winner_fails = stress is not None and not stress["slo_met"]
    for p in ranked:
        if p.design == winner.design or not goal_value(p, req.goal) <= best * (1.0 + NEAR):
            continue
        room = p.headroom if math.isfinite(p.headroom) else 0.0
        reasons = []
        if room >= max(HEADROOM_TIMES * winner.headroom, LEAST_HEADROOM):
            reasons.append("headroom")
        held = None
        if winner_fails:
            held, _ = confirm(p.design, (p.prompt, p.token), stress["rate_rps"])
            if held:
                reasons.append("higher_rate")
        if reasons:
            return {"design": p.design, "extra": goal_value(p, req.goal) / best - 1.0 if best else 0.0, "slo_headroom": room,
                    "winner_slo_headroom": winner.headroom, "reasons": reasons, "holds_at_higher_rate": held,
                    "rate_rps": stress["rate_rps"] if stress is not None else None}
    return None
