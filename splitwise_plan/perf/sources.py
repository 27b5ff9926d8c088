"""Where a pool's latencies come from. A measured profile wins wherever it holds the model on the GPU at
that tensor parallelism. Elsewhere the analytic model (:mod:`.analytic`) estimates them, from the
model's architecture, the machine's data sheet and the serving stack's efficiency (:mod:`.stack`); or,
with ``--stack aiconfigurator:BACKEND``, aiconfigurator's measured kernels give them (:mod:`.aiconfigurator`)
for every pool, the shipped profiles of the paper's 2023 stack left out (a user's ``--profiles`` still win).
The resulting :class:`~.latency_model.LatencyModel` is the same kind either way, so the simulators never
know which one they got. The reports do: :class:`Sourced` says which it was.
"""

from __future__ import annotations

from typing import NamedTuple

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.perf.analytic import Accelerator, Architecture, curve_rows
from splitwise_plan.perf.latency_model import LatencyModel
from splitwise_plan.perf.stack import Stack, load_stack

MEASURED, ESTIMATED = "measured", "estimated"


class Sourced(NamedTuple):
    """A latency model and where it came from: ``kind`` measured or estimated, ``detail`` in words."""

    latency: LatencyModel
    kind: str
    detail: str


def architecture_of(model) -> Architecture:
    """The analytic model's view of a :class:`~splitwise_plan.inputs.models.ModelSpec`: a mixture of experts
    with its active parameters, its experts and the bytes of their weights."""
    heads = int(getattr(model, "num_heads", 0) or 0)
    if not heads:
        raise SplitwisePlanError(f"model {model.name} gives no attention heads: its latency cannot be estimated "
                                 "(give its config.json, or a measured profile with --profiles)")
    params = float(getattr(model, "params", 0) or model.weights_bytes / max(getattr(model, "bytes_per_param", 2), 1))
    dense = Architecture(model.name, params, int(model.num_layers), int(model.hidden_size), heads,
                         int(getattr(model, "num_kv_heads", 0) or heads), float(model.weights_bytes),
                         float(model.kv_bytes_per_token), getattr(model, "dtype", "bf16"))
    experts = getattr(model, "experts", None)
    if experts is None:
        return dense
    return dense._replace(active_params=float(model.active_params), experts=int(experts.count),
                          experts_per_token=int(experts.per_token), moe_layers=int(model.moe_layers),
                          expert_params=float(model.expert_params),
                          expert_weights_bytes=min(float(model.expert_weights_bytes), float(model.weights_bytes)),
                          attention_layers=int(model.kv_layers or model.num_layers),
                          attention_width=int(heads * model.head_dim))


def accelerator_of(machine) -> Accelerator:
    """The analytic model's view of a machine's GPU data sheet; a user error naming what is missing."""
    missing = [k for k in ("hbm_bandwidth_tbps", "bf16_tflops") if getattr(machine, k, None) is None]
    if missing:
        raise SplitwisePlanError(f"machine {machine.name} has no {' or '.join(missing)} in its data sheet to "
                                 "estimate latencies from (set them in a --machines-file, or give a measured "
                                 "profile with --profiles)")
    return Accelerator(machine.hardware, float(machine.hbm_bandwidth_tbps), float(machine.bf16_tflops),
                       float(machine.fp8_tflops or 0.0), float(machine.interconnect_gbps or 0.0),
                       float(machine.power_cap or 1.0))


def has_profile(profiles, model: str, hardware: str, tensor_parallel: int, stack=None) -> bool:
    """Whether ``profiles`` holds ``model`` on ``hardware`` at this tensor parallelism (measured, or an
    estimate added by :func:`with_estimates`); with a ``stack`` that replaces measurements, not the
    shipped profiles' measurements."""
    if _replaced(profiles, model, hardware, tensor_parallel, stack):
        return False
    try:
        profiles.latency_model(model, hardware, tensor_parallel)
    except SplitwisePlanError:
        return False
    return True


def _replaced(profiles, model: str, hardware: str, tensor_parallel: int, stack) -> bool:
    """Whether ``stack`` (aiconfigurator's) gives these latencies in place of the shipped profiles' (the
    paper's 2023 stack: not mixed with another stack's), and ``profiles`` hold no estimate of it for them."""
    from splitwise_plan.perf.profiles import shipped
    key = (str(model).lower(), str(hardware).lower(), int(tensor_parallel))
    return hasattr(stack, "rows") and shipped(profiles) and key not in profiles.estimates


def estimated(model, machine, tensor_parallel: int, stack: Stack | None = None) -> Sourced:
    """The analytic estimate of ``model`` on ``machine``'s GPUs at this tensor parallelism."""
    from splitwise_plan.perf.profiles import ProfileSet

    rows, detail = _estimate_rows(model, machine, tensor_parallel, stack)
    key = (model.name.lower(), machine.hardware, int(tensor_parallel))
    rate = context_rate(model, machine, tensor_parallel, stack, rows)
    lm = ProfileSet(_frame(rows), source=f"<estimate of {model.name} on {machine.hardware}>",
                    context_rates={key: rate} if rate else {}).latency_model(*key)
    return Sourced(lm, ESTIMATED, detail)


#: The decode batches whose step's growth with the context sets the rate (the sizes a token machine runs at).
RATE_BATCHES = (8, 16, 32, 64, 128)


def context_rate(model, machine, tensor_parallel: int, stack, rows) -> tuple[float, float] | None:
    """(seconds per KV token, the context per sequence ``rows`` hold) of a source whose decode step grows with its
    context: the median over ``RATE_BATCHES`` of how much the step of ``n`` sequences grows from that context to
    twice it, per token added. None where the source reads no context."""
    import numpy as np

    from splitwise_plan.perf.latency_model import DECODE_CONTEXT
    stack = stack if stack is not None else load_stack()
    if not hasattr(stack, "with_context"):
        return None
    c = float(stack.context_tokens or DECODE_CONTEXT)
    longer, _ = _estimate_rows(model, machine, tensor_parallel, stack.with_context(2 * c))
    at, at2 = ({r["prompt_size"]: r["token_time"] for r in rs} for rs in (rows, longer))
    slopes = [(at2[n] - at[n]) * 1e-3 / (n * c) for n in RATE_BATCHES if n in at and n in at2]
    return (max(float(np.median(slopes)), 0.0), c) if slopes else None


def _estimate_rows(model, machine, tensor_parallel: int, stack: Stack | None) -> tuple[list, str]:
    if hasattr(stack, "rows"):   # aiconfigurator's
        return stack.rows(model, machine, int(tensor_parallel))
    stack = stack if stack is not None else load_stack()
    rows = curve_rows(architecture_of(model), accelerator_of(machine), int(tensor_parallel), stack)
    version = f", {stack.version}" if getattr(stack, "version", "") else ""
    return rows, f"estimated from data sheets (stack {stack.name}{version})"


def _frame(rows: list):
    import pandas as pd

    return pd.DataFrame(rows)


def resolve_stack(spec, profiles, model) -> tuple[object, str]:
    """The stack ``--stack spec`` names, and why, in words where ``auto`` chose it ('' where the user did).

    ``auto`` (or None): the paper's 2023 stack for a model the profiles measured on some GPU (BLOOM-176B and
    Llama2-70B in the shipped ones: their measured pools and their estimates then come from one stack, and the
    paper's reproductions are unchanged), else today's vLLM preset (a model nobody profiled is planned at the
    speed of a current engine, not of 2023's)."""
    import os

    from splitwise_plan.perf.stack import DEFAULT_STACK, PRESET
    if spec is not None and not isinstance(spec, (str, os.PathLike)):   # a stack already loaded (or AIConfigurator's)
        return spec, ""
    if spec is not None and str(spec).strip().lower() != "auto":
        return load_stack(spec), ""
    measured = set(profiles.table["model"]) if getattr(profiles, "table", None) is not None else set()
    if model.name.lower() in measured:
        return load_stack(DEFAULT_STACK), f"auto: {model.name} has measured profiles, of the paper's 2023 stack"
    return load_stack(PRESET), f"auto: no profile measured {model.name}, so today's {PRESET} preset"


def stack_label(stack, why: str) -> str | None:
    """What a report says of its stack: the one asked for (its source); auto's choice of a preset, and why; or
    None for auto's choice of the paper's stack (so that the paper's reports read as before)."""
    from splitwise_plan.perf.stack import DEFAULT_STACK
    if stack is None or (why and stack.name == DEFAULT_STACK):
        return None
    return f"{stack.name} ({why})" if why else stack.source


def for_requests(stack, requests):
    """``stack`` with its decode steps read at the mean context of ``requests`` (a workload or a stream: the
    prompt and half the output), where it is not bound to one yet; else itself (None stays None)."""
    if getattr(stack, "context_tokens", 0) is not None or requests is None:
        return stack
    import numpy as np
    return stack.with_context(float(np.mean(requests.prompt_tokens)) + float(np.mean(requests.output_tokens)) / 2)


def with_estimates(profiles, model, needs, stack: Stack | None = None):
    """``profiles`` with the analytic estimate added for each (machine, tensor parallelism) of ``needs``
    whose GPU they do not hold ``model`` on: a measured profile always wins. The added ones are listed in
    the result's ``estimates`` ({(model, hardware, tp): how}); ``profiles`` itself when none is missing."""
    import pandas as pd

    from splitwise_plan.perf.profiles import ProfileSet

    added, rates, rows = {}, {}, []
    for machine, tp in needs:
        key = (model.name.lower(), machine.hardware, int(tp))
        if key in added or has_profile(profiles, model.name, machine.hardware, tp, stack):
            continue
        try:
            new, added[key] = _estimate_rows(model, machine, tp, stack)
            rate = context_rate(model, machine, tp, stack, new)
        except SplitwisePlanError:
            if not hasattr(stack, "rows"):
                raise
            added.pop(key, None)
            continue   # aiconfigurator has no data for it: its designs are left out, with the reason
        rows += new
        if rate:
            rates[key] = rate
    if not added:
        return profiles
    table = profiles.table
    if hasattr(stack, "rows"):   # the measurements it replaces leave the table
        names = table["model"] + "|" + table["hardware"] + "|" + table["tensor_parallel"].astype(str)
        table = table[~names.isin([f"{m}|{h}|{t}" for m, h, t in added])]
    table = pd.concat([table, _frame(rows)], ignore_index=True)
    return ProfileSet(table, source=profiles.source, estimates={**profiles.estimates, **added},
                      context_rates={**profiles.context_rates, **rates})


def from_profiles(profiles, model, hardware: str, tensor_parallel: int) -> Sourced:
    """``model``'s latencies on ``hardware`` as ``profiles`` hold them: measured (in which file), or an
    estimate :func:`with_estimates` added (from which stack)."""
    how = profiles.estimates.get((model.name.lower(), hardware.lower(), int(tensor_parallel)))
    return Sourced(profiles.latency_model(model.name, hardware, tensor_parallel), ESTIMATED if how else MEASURED,
                   how or f"measured ({_profile_name(profiles)})")


def sourced_latency(profiles, model, machine, tensor_parallel: int, stack: Stack | None = None) -> Sourced:
    """The latency model of ``model`` on ``machine``'s GPU from ``profiles`` when they hold it, else the estimate."""
    if has_profile(profiles, model.name, machine.hardware, tensor_parallel, stack):
        return from_profiles(profiles, model, machine.hardware, tensor_parallel)
    return estimated(model, machine, tensor_parallel, stack)


def _profile_name(profiles) -> str:
    from pathlib import Path

    source = str(getattr(profiles, "source", "") or "profile")
    return Path(source).name if "/" in source else source


def reference_machine(slos, model, machines):
    """The catalog machine slowdowns are measured on (its GPU is the SLOs' reference hardware) and the
    reason the model cannot run alone on it at the reference TP ('' when it can); (None, why) when the
    catalog has no machine of that hardware. A request alone needs no batch's KV cache: the weights need only
    fit the HBM, not the 90% of it a serving instance leaves them (DeepSeek-V3 at fp8 takes 98% of a DGX-A100)."""
    from splitwise_plan.inputs.models import weights_fit_problem

    hw, tp = slos.reference_hardware.lower(), slos.reference_tensor_parallel
    machine = next((m for m in machines.values() if m.hardware == hw and m.base is None), None)
    if machine is None:
        return None, f"no machine of the catalog has {hw} GPUs"
    return machine, weights_fit_problem(model, machine, tp if tp < machine.gpus else 0, share=1.0) or ""


def reference_latency(slos, profiles, model, machines, stack: Stack | None = None) -> Sourced:
    """The latency model slowdowns are measured against: ``model`` alone on the SLOs' reference hardware
    at their reference tensor parallelism; from ``profiles`` when they hold it, else estimated from the
    data sheet of a catalog machine of that hardware. A model too big for that machine gets a nominal
    reference (its slowdowns are then only indicative), and a user error if an SLO is a slowdown."""
    hw, tp = slos.reference_hardware, slos.reference_tensor_parallel
    if has_profile(profiles, model.name, hw, tp, stack):
        return from_profiles(profiles, model, hw, tp)
    machine, problem = reference_machine(slos, model, machines)
    if machine is None:
        raise SplitwisePlanError(f"slowdowns are measured against {model.name} alone on {hw} at TP{tp} (the reference "
                                 f"of {slos.reference_of}; an SLO file sets reference_hardware and "
                                 f"reference_tensor_parallel), which no profile measured and {problem}")
    if problem and slos.needs_slowdown:
        raise SplitwisePlanError(f"slowdown SLOs compare with {model.name} alone on a {machine.name} at TP{tp}, "
                                 f"but {problem}: give the SLOs in seconds (--slo FILE with unit = \"seconds\")")
    est = estimated(model, machine, tp, stack)
    return est._replace(detail=est.detail + (" (it does not fit there: slowdowns are nominal)" if problem else ""))


def latency_sources(profiles, model, machines: dict, pools, slos) -> dict:
    """{machine name: where its latencies come from} for ``pools`` ((machine name, tensor parallelism) of the
    designs' pools; a machine at several TPs is named with each, ``dgx-h100@tp4``), and under ``"reference"`` the
    source of the latencies slowdowns are measured against."""
    out = {}
    pools = list(dict.fromkeys(pools))
    for name, tp in pools:
        m = machines[name]
        several = sum(n == name for n, _ in pools) > 1
        out[m.name + (f"@tp{tp}" if several else "")] = (
            from_profiles(profiles, model, m.hardware, tp).detail if has_profile(profiles, model.name, m.hardware, tp)
            else "none (see its design's note)")
    try:
        out["reference"] = reference_latency(slos, profiles, model, machines).detail
    except SplitwisePlanError as exc:
        out["reference"] = f"none: {exc}"
    return out
