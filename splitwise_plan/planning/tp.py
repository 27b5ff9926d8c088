"""``--tp auto``: each design's pools at every tensor parallelism the model fits, chosen with the machine counts.

A design's variants are its pools at each pair (prompt TP, token TP) of divisors of their machines' GPUs at which
an instance holds the model's weights (a baseline's one pool: each divisor). Each variant is a design of its own
(``splitwise-hh@tp4:2``), searched and confirmed as any design is. The capacity model's ILP bound orders them and
prunes: the variant of the lowest bound and the design at TP8 run first; a variant whose bound (the cost or power no
cluster of it can go below) cannot beat the best of its design's answers then is never simulated, and the others
are searched only below that answer (their search space's ceiling): a variant that cannot beat it is told so in a
few simulations. Each design keeps its best variant; the others are listed with it.
"""

from __future__ import annotations

import math
from dataclasses import replace

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.designs import base_design, get_design, with_tp
from splitwise_plan.sim.cluster import instance_layout

#: The tensor parallelism every pool had before ``auto``: each design's variant at it is always planned.
DEFAULT_TP = 8


def divisors(gpus: int) -> list[int]:
    """The tensor parallelisms a machine of ``gpus`` GPUs splits into whole instances by."""
    return [n for n in range(1, gpus + 1) if gpus % n == 0]


def variants(design: str, machines: dict, model) -> list[str]:
    """The names of ``design`` at each (prompt TP, token TP) whose instances hold ``model``'s weights."""
    base = base_design(get_design(design))
    choices = [[tp for tp in divisors(machines[m].gpus) if _fits(machines[m], tp, model)] for m in base.machines]
    pairs = [(p, p) for p in choices[0]] if base.is_baseline else [(p, t) for p in choices[0] for t in choices[1]]
    return [with_tp(base, pair).name for pair in pairs]


def _fits(machine, tp: int, model) -> bool:
    try:
        instance_layout(machine, tp, False, model)
    except SplitwisePlanError:
        return False
    return True


def first_round(names: list[str], bounds: dict) -> list[str]:
    """Of one design's variants, those planned first: the one of the lowest bound, and the one at ``DEFAULT_TP``."""
    default = [n for n in names if get_design(n).tp == (DEFAULT_TP, DEFAULT_TP)]
    lowest = min(names, key=lambda n: (bounds.get(n, math.inf), n))
    return list(dict.fromkeys([lowest, *default]))


def can_beat(name: str, bounds: dict, best: float) -> bool:
    """Whether variant ``name``'s bound leaves room below ``best`` (its design's best answer so far)."""
    return bounds.get(name, 0.0) < best * (1 - 1e-9)


def collapsed(plans: list, goal_key, machines: dict) -> list:
    """One plan per design: its best variant, with its pools' instances per machine (of ``machines``' GPUs) and the
    others' outcomes in ``tp_tried``."""
    by_base: dict = {}
    for p in plans:
        by_base.setdefault(base_design(get_design(p.design)).name, []).append(p)
    out = []
    for group in by_base.values():
        group.sort(key=goal_key)
        best, rest = group[0], group[1:]
        d = get_design(best.design)
        out.append(replace(best, instances=tuple(machines[m].gpus // tp for m, tp in zip(d.machines, d.tp)),
                           tp_tried=tuple((p.design, p.status, p.cost, p.power, p.evaluations, p.confirmations,
                                           p.grid_size) for p in rest)))
    return out
