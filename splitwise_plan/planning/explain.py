"""Why a plan answers as it does, in the planner's words: the SLOs that no machine count can meet
(:func:`out_of_reach`: each request alone on the design's machines already misses them), and for a
design's answer the SLO that binds it and the pool that binds that SLO (:func:`binding`).
"""

from __future__ import annotations

import numpy as np

from splitwise_plan.inputs.designs import Design
from splitwise_plan.sim.metrics import percentiles

#: The pool whose machines set each metric: the prompt pool computes the first token, the token pool the
#: others; end-to-end latency is both pools' (a baseline's one pool does everything).
_PHASE_POOL = {"ttft": "prompt", "tbt": "token", "e2e": "prompt and token"}


def alone_latencies(sim, d: Design) -> dict:
    """Per request of ``sim``'s stream, its TTFT, TBT and E2E in seconds alone on ``d``'s machines: the
    prompt at batch one on a prompt machine, then one decode iteration of batch one per further token on
    a token machine, with no queue and no KV-cache transfer. No cluster of ``d`` is faster."""
    prompt = sim.latency(sim.machine(d.prompt_machine), sim.pool_tp(d, "prompt"))
    token = sim.latency(sim.machine(d.prompt_machine if d.is_baseline else d.token_machine), sim.pool_tp(d, "token"))
    p = np.asarray(sim.stream.prompt_tokens, dtype=np.float64)
    n = np.asarray(sim.stream.output_tokens, dtype=np.float64)
    ttft = np.asarray(prompt.prompt_time(p), dtype=np.float64)
    decode = (n - 1.0).clip(min=0.0) * token.token.at(1.0)
    return {"ttft": ttft, "tbt": decode / n, "e2e": ttft + decode}


def out_of_reach(sim, d: Design) -> list[dict]:
    """The SLOs no machine count of ``d`` meets on ``sim``'s stream, each with the percentile of the
    requests alone (``alone``, in the SLO's unit) and in seconds (``alone_s``), the pool that sets it,
    and its limit."""
    alone = alone_latencies(sim, d)
    pcts = sorted({s.percentile for s in sim.slos})
    seconds = percentiles(alone, pcts)
    ref = dict(zip(("ttft", "tbt", "e2e"), sim.reference))
    slow = percentiles({m: alone[m] / ref[m] for m in alone}, pcts)
    out = []
    for s in sim.slos:
        value = (slow if s.unit == "slowdown" else seconds)[s.metric][s.percentile]
        if not value < s.limit:
            out.append({"metric": s.metric, "percentile": s.percentile, "unit": s.unit, "limit": s.limit,
                        "alone": float(value), "alone_s": float(seconds[s.metric][s.percentile]),
                        "pool": "machine" if d.is_baseline else _PHASE_POOL[s.metric]})
    return out


def method_text(method: str) -> str:
    """A simulator as the notes name it: the fast (fluid) model or the event simulation."""
    return {"fluid": "the fast model", "events": "the event simulation"}.get(method, method)


def searched_text(method: str) -> str:
    """A simulator as the progress line names it: 'fast model' or 'event simulation'."""
    return method_text(method).removeprefix("the ")


def method_words(method: str) -> str:
    """A simulator as a command's summary names it: ``the event simulation (--method events)``."""
    return f"{method_text(method)} (--method {method})"


def reference_label(slos) -> str:
    """The machine a slowdown SLO measures against: ``a DGX-A100`` for the paper's, else hardware and TP."""
    hw, tp = slos.reference_hardware, slos.reference_tensor_parallel
    return "a DGX-A100" if (hw, tp) == ("a100-80gb", 8) else f"{hw} at TP{tp}"


def slo_label(metric: str, percentile) -> str:
    """``TTFT P99``."""
    return f"{metric.upper()} P{percentile:g}"


def limit_text(value: float, limit: float, unit: str) -> str:
    """A value against its limit in the SLO's unit: ``5.46x (limit 6x)`` or ``1.92 s (limit 2 s)``."""
    return f"{value:.2f}x (limit {limit:g}x)" if unit == "slowdown" else f"{seconds_text(value)} (limit {seconds_text(limit)})"


def seconds_text(s: float) -> str:
    """Seconds in the unit a person reads: ``85 ms``, ``1.92 s``."""
    if not np.isfinite(s):
        return "unfinished"
    return f"{s * 1000:.3g} ms" if abs(s) < 1.0 else f"{s:.3g} s"


def out_of_reach_text(missed: list[dict], reference: str) -> str:
    """Why no machine count meets the SLOs: the first of :func:`out_of_reach` (the JSON report has them all)."""
    m = missed[0]
    where = "one machine" if m["pool"] == "machine" else f"the {m['pool']} machines"
    alone = (f"{m['alone']:.2f}x the request alone on {reference} ({seconds_text(m['alone_s'])})"
             if m["unit"] == "slowdown" else seconds_text(m["alone_s"]))
    limit = f"{m['limit']:g}x" if m["unit"] == "slowdown" else seconds_text(m["limit"])
    return (f"{slo_label(m['metric'], m['percentile'])} < {limit} cannot be met by any number of machines: with "
            f"each request alone on {where} at the profile's speed it is already {alone}")


def binding(result, d: Design) -> dict:
    """The SLO that binds an answer (its tightest over the streams: the one at least headroom) and the
    pool whose machines set it."""
    t = result.tightest
    seconds = result.latency_s.get(t["metric"], {}).get(t["percentile"], float("nan"))
    return {"metric": t["metric"], "percentile": t["percentile"], "unit": t["unit"], "value": float(t["value"]),
            "limit": float(t["limit"]), "seconds": float(seconds),
            "pool": "machine" if d.is_baseline else _PHASE_POOL[t["metric"]]}


def binding_text(b: dict) -> str:
    """``TTFT P99 at 5.46x (limit 6x; 1.92 s at P99), set by the prompt pool``."""
    pool = "its one pool" if b["pool"] == "machine" else f"the {b['pool']} pool" + ("s" if " and " in b["pool"] else "")
    secs = f"; {seconds_text(b['seconds'])} at P{b['percentile']:g}" if b["unit"] == "slowdown" else ""
    value = limit_text(b["value"], b["limit"], b["unit"])
    return f"{slo_label(b['metric'], b['percentile'])} at {value.replace(')', secs + ')', 1)}, set by {pool}"
