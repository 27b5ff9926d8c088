"""How sure a plan's answer is. Each machine whose latencies are estimated has an error band per phase (the
source's held-out P90 error, perf/bands.py), or the user gives one for every machine (``--latency-error``).
The winner is confirmed again with each phase that much slower; where it no longer holds, it is planned anew at
those latencies, then every rival whose answer was cheaper than that new one, to tell which design wins then.
The SLOs' reference keeps its latencies: a limit in seconds stays where it was.
"""

from __future__ import annotations

import math
from dataclasses import replace

from splitwise_plan.inputs.designs import display_name, get_design
from splitwise_plan.perf.bands import Band, estimate_band, given_band
from splitwise_plan.perf.sources import ESTIMATED, sourced_latency
from splitwise_plan.planning.objectives import goal_value, tightest_ratio
from splitwise_plan.planning.request import Inputs, PlanRequest, pool_tps


def design_bands(inputs: Inputs, req: PlanRequest, design: str) -> dict:
    """{GPU: its :class:`Band`, or None where an estimate's band is unknown} of ``design``'s machines that have
    one: all of them with ``--latency-error``, else those whose latencies are estimated from data sheets."""
    out: dict = {}
    for name, tp in pool_tps(get_design(design), inputs.tp):
        m = inputs.machines[name]
        if req.latency_error is not None:
            out[m.hardware] = given_band(req.latency_error)
        elif not hasattr(inputs.stack, "rows") and sourced_latency(
                inputs.profiles, inputs.model, m, tp, inputs.stack).kind == ESTIMATED:   # (AIConfigurator: measured)
            out[m.hardware] = estimate_band(inputs.stack, inputs.model, m.hardware)
    return out


def sureness(inputs: Inputs, req: PlanRequest, ranked, winner, replan, confirm, say=None) -> dict | None:
    """Whether ``winner`` still holds its SLOs, and still wins against every rival of ``ranked`` (the runner-up
    first), with each phase's latencies slower by their band. ``confirm(inputs, design, point, rate)`` gives (held, worst result);
    ``replan(inputs, names)`` plans designs anew ({name: DesignPlan}). None for max-throughput (its winner's
    rate is its limit already) or without a winner."""
    if winner is None or req.goal == "max-throughput":
        return None
    rivals = [p for p in ranked if p.status == "ok" and p.design != winner.design]
    bands = {}
    for p in [*rivals, winner]:   # (every design that may win at the band: each GPU's band)
        bands.update(design_bands(inputs, req, p.design))
    known = {hw: b for hw, b in bands.items() if b is not None}
    out = {"bands": {hw: {"prompt": b.prompt, "decode": b.decode, "basis": b.basis} for hw, b in sorted(known.items())},
           "no_band": sorted(hw for hw, b in bands.items() if b is None),
           "runner_up": rivals[0].design if rivals else None, "holds": None, "still_wins": None,
           "winner_if_not": None, "tightest_ratio": None, "at_band": {}}
    if known:
        _check(out, replace(inputs, slower={hw: b.slower() for hw, b in known.items()}, ceilings={}), req, winner,
               rivals, replan, confirm, say)
    unit = inputs.machines[get_design(winner.design).machines[0]].cost_unit
    out["text"] = sureness_text(out, known, winner, unit, kernels=hasattr(inputs.stack, "rows"))
    return out


def _check(out: dict, slowed: Inputs, req: PlanRequest, winner, rivals: list, replan, confirm, say) -> None:
    """Fill ``out`` with the winner's verdict at the slowed latencies; where it fails, the winner planned anew at
    them, then every rival whose answer was cheaper than that, searched only below it (slower latencies make no
    answer cheaper: a rival dearer than the winner's new answer cannot beat it)."""
    if say is not None:
        say(f"checking {display_name(winner.design)} with its latencies slower by their error band")
    held, worst = confirm(slowed, winner.design, (winner.prompt, winner.token), winner.rate)
    out["holds"], out["tightest_ratio"] = bool(held), _finite(tightest_ratio(worst))
    if held:   # slower latencies only make every rival dearer too
        out["still_wins"] = True
        return
    answers = replan(slowed, [winner.design])
    bar = goal_value(answers[winner.design], req.goal) if winner.design in answers else math.inf
    names = [p.design for p in rivals if goal_value(p, req.goal) < bar]
    if names:
        answers.update(replan(replace(slowed, ceilings={n: bar for n in names} if math.isfinite(bar) else {}), names))
    best = min((p for p in answers.values() if p.status == "ok"), key=lambda p: goal_value(p, req.goal), default=None)
    out["still_wins"] = best is not None and best.design == winner.design
    out["winner_if_not"] = None if out["still_wins"] or best is None else best.design
    out["at_band"] = {n: {"status": p.status, "prompt_machines": p.prompt if p.status == "ok" else None,
                          "token_machines": p.token if p.status == "ok" else None, "cost": _finite(p.cost),
                          "power": _finite(p.power)} for n, p in answers.items()}


def _finite(v):
    v = float(v)
    return v if math.isfinite(v) else None


def band_text(known: dict) -> str:
    """The bands in words: ``latencies 20% slower``, ``prompt latencies 26% and decode latencies 22% slower``, or
    per GPU where they differ (GPUs of one band together): ``(B200, H100: prompt 26%, decode 22%; H200: 18%)``."""
    def phases(b: Band) -> str:
        if round(b.prompt, 2) == round(b.decode, 2):
            return f"{b.prompt:.0%}"
        return f"prompt {b.prompt:.0%}, decode {b.decode:.0%}"
    groups: dict = {}
    for hw, b in sorted(known.items()):
        groups.setdefault(phases(b), []).append(_gpu(hw))
    if len(groups) == 1:
        b = next(iter(known.values()))
        if round(b.prompt, 2) == round(b.decode, 2):
            return f"latencies {b.prompt:.0%} slower"
        return f"prompt latencies {b.prompt:.0%} and decode latencies {b.decode:.0%} slower"
    return "latencies slower by their error bands (" + "; ".join(f"{', '.join(gpus)}: {text}"
                                                                 for text, gpus in groups.items()) + ")"


def _gpu(hardware: str) -> str:
    """``h100-80gb`` as ``H100``; ``h100-80gb-pcap`` as ``H100cap``."""
    head = hardware.split("-")[0].upper()
    return head + ("cap" if hardware.endswith("pcap") else "")


def sureness_text(out: dict, known: dict, winner, unit: str = "USD/h", kernels: bool = False) -> str:
    """The verdict in one line: ``holds and still wins with latencies 20% slower`` / ``with prompt latencies 26%
    and decode latencies 22% slower, Splitwise-HH (H100:H100) wins``."""
    unknown = ", ".join(_gpu(hw) for hw in out["no_band"])
    if not known:
        if unknown:
            return (f"no error band is known for the estimated latencies of {unknown} (a stack without held-out "
                    "errors): --latency-error 0.2 checks the answer with them 20% slower")
        what = "latencies from AIConfigurator's measured kernels" if kernels else "latencies measured"
        return f"{what}, no error band: --latency-error 0.2 checks the answer with them 20% slower"
    band = band_text(known)
    also = f" ({unknown}: no band known)" if unknown else ""
    if out["holds"]:
        return f"holds and still wins with {band}{also}"
    mine = out["at_band"].get(winner.design, {})
    if out["still_wins"]:
        return f"with {band}, it needs {_answer(winner.design, mine, unit)}, and still wins{also}"
    if out["winner_if_not"] is None:
        return f"with {band}, no design holds the SLOs within the search's limits{also}"
    other = out["winner_if_not"]
    return (f"with {band}, {display_name(other)} wins: {_answer(other, out['at_band'][other], unit)}, against "
            f"{_answer(winner.design, mine, unit) if mine.get('status') == 'ok' else 'none that holds'} for the winner{also}")


def _answer(design: str, a: dict, unit: str) -> str:
    """``3 prompt + 1 token machines (371.14 USD/h)``: an answer planned at the slowed latencies, its cost."""
    counts = (f"{a['prompt_machines']} machines" if get_design(design).is_baseline else
              f"{a['prompt_machines']} prompt + {a['token_machines']} token machines")
    return f"{counts} ({a['cost']:,.2f} {unit})" if a.get("cost") is not None else counts
