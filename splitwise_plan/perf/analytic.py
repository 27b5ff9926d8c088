"""An analytic (roofline) latency model for models and GPUs nobody profiled.

A profile row's prompt and decode times are predicted from the model's architecture and the GPU's data
sheet; the serving stack's efficiency is a separate, small ``Stack`` (:mod:`.stack`) fitted on measured
profiles and shared by all GPUs. ``estimate_rows`` writes synthetic rows in the ``perf_model.csv`` schema,
so a ``ProfileSet`` builds a latency model from them exactly as from measurements.

Times, for one batch at tensor parallelism ``t`` (all rates are per GPU, from the data sheet):

- all-reduce of ``n`` bytes (ring): ``2(t-1) * step_bytes/link + 2(t-1)/t * n/(link*eff_net)``, two per layer;
- prompt of ``b`` prompts of ``s`` tokens, ``P = b*s``: FLOPs ``2*params*P + 2*layers*hidden*s^2*b``
  (projections and MLP, plus causal attention: QK^T and AV each ``s^2*hidden`` multiply-adds halved by the
  mask); ``time = max(prompt_overhead, max(FLOPs*cap/(t*peak*eff_compute), weights/(t*bw*eff_bw))
  + comm(P*hidden*2 bytes))``;
- decode step of ``b`` requests at context ``c = s + token_size/2`` (the mean over the generation):
  bytes ``weights + b*c*kv_bytes_per_token``, FLOPs ``2*params*b + 4*layers*hidden*c*b``;
  ``time = decode_overhead + max(bytes/(t*bw*eff_bw), FLOPs*cap/(t*peak*eff_compute))
  + comm(b*hidden*2 bytes) + b*layers*hidden*decode_request_bytes/bw``.

A mixture of experts (``Architecture.experts`` > 0) computes on its active parameters (``params`` above is
``active_params``), and a batch of ``x`` tokens reads the experts it touches, not all of them: of ``E``
routed experts a layer, each token using ``k``, ``x`` tokens touch about ``E * (1 - (1 - k/E)^x)`` (at most
``min(E, x*k)``; uniform routing), so the weights read are the other weights plus that share of the routed
experts' bytes. A stack's MoE efficiencies (:data:`~.stack.MOE_PARAMETER_DOCS`) slow the routed experts'
prefill FLOPs (``moe_compute_slowdown``) and their reads (``moe_read_slowdown``), and add a fixed cost to each
MoE layer of a prefill or a decode step (``moe_layer_overhead_ms``). The attention terms read ``attention_layers`` (those attending to the whole context) of width
``attention_width`` (heads x query head size) in place of ``layers`` and ``hidden``. Expert parallelism
equal to the instance's GPUs shares the experts' reads and FLOPs over all ``t`` GPUs as tensor parallelism
shares a dense model's; its all-to-alls are counted as the all-reduces they replace. A dense model's numbers
are the same as without these fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.perf.latency_model import DECODE_CONTEXT, phase_rows
from splitwise_plan.perf.stack import CAP_REFERENCE, PARAMETER_DOCS, Stack

if TYPE_CHECKING:
    import pandas as pd

#: (prompt_size, batch_size, token_size) of the shipped profile's rows: the reference simulator's grid.
SHIPPED_GRID = tuple(
    [(s, 1, 128) for s in (128, 256, 512, 1024, 2048, 4096, 8192)]
    + [(512, 1, n) for n in (256, 512, 1024, 2048, 4096, 8192)]
    + [(512, b, 128) for b in (2, 4, 8, 16, 32, 64)])
_FIT_NAMES = tuple(k for k in PARAMETER_DOCS if k != "cap_slowdown")
_EFFICIENCIES = 3   # the first three fitted parameters are fractions in (0, 1]


class Architecture(NamedTuple):
    """What the latency of a transformer depends on; bytes for the served precision. The fields after
    ``weights_dtype`` are a mixture of experts' (their defaults: a dense model)."""

    name: str
    params: float
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    weights_bytes: float
    kv_bytes_per_token: float
    weights_dtype: str = "bf16"   # "fp8": the GPU's fp8 peak applies where it has one
    active_params: float = 0.0    # parameters one token computes on (0: all of them)
    experts: int = 0              # routed experts a MoE layer (0: dense)
    experts_per_token: int = 0    # routed experts each token uses
    moe_layers: int = 0           # layers whose MLP is a mixture of experts
    expert_params: float = 0.0    # parameters of all the routed experts of all the layers
    expert_weights_bytes: float = 0.0   # their bytes
    attention_layers: int = 0     # layers attending to the whole context (0: num_layers)
    attention_width: int = 0      # heads x query head size (0: hidden_size)


class Accelerator(NamedTuple):
    """A GPU's data sheet: HBM TB/s, dense TFLOP/s, GPU-to-GPU link GB/s; ``power_cap`` a fraction of TDP."""

    name: str
    hbm_tbps: float
    bf16_tflops: float
    fp8_tflops: float = 0.0   # 0: no fp8 tensor cores (bf16 peak used)
    interconnect_gbps: float = 0.0
    power_cap: float = 1.0


ARCHITECTURES = {
    "bloom-176b": Architecture("bloom-176b", 176.2e9, 70, 14336, 112, 112, 329e9, 2 * 14336 * 70 * 2),
    # KV bytes per token as the reference simulator counts them (no grouped-query saving).
    "llama2-70b": Architecture("llama2-70b", 69e9, 80, 8192, 64, 8, 135e9, 2 * 8192 * 80 * 2),
}
ACCELERATORS = {
    "a100-80gb": Accelerator("a100-80gb", 2.039, 312.0, 0.0, 600.0),
    "h100-80gb": Accelerator("h100-80gb", 3.35, 989.0, 1979.0, 900.0),
    "h100-80gb-pcap": Accelerator("h100-80gb-pcap", 3.35, 989.0, 1979.0, 900.0, power_cap=0.7),
}


@dataclass(frozen=True)
class HeldOutError:
    """Error of a stack fitted on ``train`` hardware predicting ``test`` hardware for one model, percent."""

    model: str
    train: str
    test: str
    n_rows: int
    prompt_median_ape_pct: float
    prompt_p90_ape_pct: float
    decode_median_ape_pct: float
    decode_p90_ape_pct: float


def _columns(archs, accels, tp, prompt_size, batch_size, token_size) -> dict:
    """Per-row float arrays of everything the formulas read."""
    f = lambda seq, attr: np.array([getattr(x, attr) for x in seq], dtype=np.float64)   # noqa: E731
    fp8 = np.array([a.weights_dtype == "fp8" for a in archs]) & (f(accels, "fp8_tflops") > 0)
    cap = f(accels, "power_cap")
    if np.any(cap <= 0) or np.any(cap > 1) or np.any(f(accels, "interconnect_gbps") < 0):
        raise SplitwisePlanError("an accelerator's power_cap must be in (0, 1] and its interconnect not negative")
    active, attn_layers, width = f(archs, "active_params"), f(archs, "attention_layers"), f(archs, "attention_width")
    return dict(params=np.where(active > 0, active, f(archs, "params")), layers=f(archs, "num_layers"),
                hidden=f(archs, "hidden_size"), weights=f(archs, "weights_bytes"), kv=f(archs, "kv_bytes_per_token"),
                experts=f(archs, "experts"), per_token=f(archs, "experts_per_token"),
                expert_params=f(archs, "expert_params"), expert_bytes=f(archs, "expert_weights_bytes"),
                moe_layers=f(archs, "moe_layers"),
                attn_layers=np.where(attn_layers > 0, attn_layers, f(archs, "num_layers")),
                width=np.where(width > 0, width, f(archs, "hidden_size")),
                bw=f(accels, "hbm_tbps") * 1e12, link=f(accels, "interconnect_gbps") * 1e9,
                peak=np.where(fp8, f(accels, "fp8_tflops"), f(accels, "bf16_tflops")) * 1e12,
                capped=(1.0 - cap) / (1.0 - CAP_REFERENCE),
                t=np.asarray(tp, np.float64), s=np.asarray(prompt_size, np.float64),
                b=np.asarray(batch_size, np.float64), n=np.asarray(token_size, np.float64))


def touched_share(experts, per_token, tokens) -> np.ndarray:
    """The share of a MoE layer's routed experts that a batch of ``tokens`` tokens touches, each using
    ``per_token`` of ``experts`` (uniform routing: ``1 - (1 - k/E)^tokens``, at most ``tokens * k / E``); 1
    where ``experts`` is 0 (a dense model reads all its weights)."""
    e = np.asarray(experts, np.float64)
    miss = 1.0 - np.asarray(per_token, np.float64) / np.where(e > 0, e, 1.0)
    return np.where(e > 0, 1.0 - np.power(np.clip(miss, 0.0, 1.0), np.asarray(tokens, np.float64)), 1.0)


def _read_bytes(c: dict, p: dict, tokens) -> np.ndarray:
    """Weight bytes a batch of ``tokens`` tokens reads: all of a dense model's; a mixture's other weights and
    the experts its tokens touch, these at the stack's ``moe_read_slowdown``."""
    routed = c["expert_bytes"]
    slow = p.get("moe_read_slowdown", 1.0)
    return c["weights"] - routed + slow * routed * touched_share(c["experts"], c["per_token"], tokens)


def _compute_params(c: dict, p: dict) -> np.ndarray:
    """Parameters a token computes on: all of a dense model's; a mixture's active ones, its routed experts' at
    the stack's ``moe_compute_slowdown``."""
    routed = c["expert_params"] * c["per_token"] / np.where(c["experts"] > 0, c["experts"], 1.0)
    return c["params"] + (p.get("moe_compute_slowdown", 1.0) - 1.0) * routed


def _times_ms(c: dict, p: dict) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, decode) milliseconds of each row of ``c`` under stack parameters ``p``."""
    t, s, b = c["t"], c["s"], c["b"]
    if np.any(t < 1) or np.any((t > 1) & (c["link"] <= 0)):
        raise SplitwisePlanError("tensor parallelism above 1 needs an accelerator with an interconnect bandwidth")
    link = np.where(c["link"] > 0, c["link"], 1.0)
    slow = 1.0 + (p["cap_slowdown"] - 1.0) * c["capped"]
    compute_rate = t * c["peak"] * p["eff_compute"] / slow
    mem_rate = t * c["bw"] * p["eff_bw"]
    ring_latency = 2.0 * (t - 1.0) * p["allreduce_step_bytes"] / link

    def comm(message_bytes):   # two all-reduces per layer
        return 2.0 * c["layers"] * (ring_latency + 2.0 * (t - 1.0) / t * message_bytes / (link * p["eff_net"]))

    tokens, params = s * b, _compute_params(c, p)
    flops = 2.0 * params * tokens + 2.0 * c["attn_layers"] * c["width"] * s * s * b
    moe_fixed = c["moe_layers"] * p.get("moe_layer_overhead_ms", 0.0) * 1e-3
    prompt = np.maximum(p["prompt_overhead_ms"] * 1e-3, np.maximum(flops / compute_rate, _read_bytes(c, p, tokens) / mem_rate)
                        + comm(tokens * c["hidden"] * 2.0) + moe_fixed)
    ctx = s + c["n"] / 2.0
    read = _read_bytes(c, p, b) + b * ctx * c["kv"]
    dflops = 2.0 * c["params"] * b + 4.0 * c["attn_layers"] * c["width"] * ctx * b
    decode = (p["decode_overhead_ms"] * 1e-3 + moe_fixed + np.maximum(read / mem_rate, dflops / compute_rate)
              + comm(b * c["hidden"] * 2.0) + b * c["layers"] * c["hidden"] * p["decode_request_bytes"] / c["bw"])
    return prompt * 1e3, decode * 1e3


def _check(arch, accel, tp) -> None:
    if not isinstance(arch, Architecture) or not isinstance(accel, Accelerator):
        raise SplitwisePlanError(f"give an Architecture and an Accelerator, got {arch!r:.60} and {accel!r:.60}")
    if isinstance(tp, bool) or not isinstance(tp, (int, np.integer)) or tp < 1:
        raise SplitwisePlanError(f"tensor_parallel must be a positive whole number, got {tp!r}")


def predict_times(arch: Architecture, accel: Accelerator, tp: int, stack: Stack,
                  prompt_size, batch_size, token_size=128) -> tuple[np.ndarray, np.ndarray]:
    """(prompt_time, token_time) in ms of batches of ``batch_size`` prompts of ``prompt_size`` tokens."""
    _check(arch, accel, tp)
    s, b, n = np.broadcast_arrays(*(np.asarray(x, dtype=np.float64) for x in (prompt_size, batch_size, token_size)))
    if np.any(s < 1) or np.any(b < 1) or np.any(n < 0):
        raise SplitwisePlanError("prompt_size and batch_size must be at least 1 and token_size not negative")
    k = s.size
    c = _columns([arch] * k, [accel] * k, np.full(k, tp), s.ravel(), b.ravel(), n.ravel())
    prompt, decode = _times_ms(c, {**stack.parameters(), **stack.moe_parameters()})
    return prompt.reshape(s.shape), decode.reshape(s.shape)


#: Batch tokens of :func:`curve_rows`: a prefill of that many tokens, a decode step of that many sequences.
CURVE_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096, 8192, 16384)


def curve_rows(arch: Architecture, accel: Accelerator, tp: int, stack: Stack) -> list[dict]:
    """Rows in the ``perf_model.csv`` schema (ms) as the simulators' latency model reads them: at batch tokens
    ``x``, the prefill of one prompt of ``x`` tokens and the decode step of ``x`` sequences, each holding the
    stack's bound context (:meth:`Stack.with_context`; else ``DECODE_CONTEXT``). (Rows of the reference's grid,
    :func:`estimate_rows`, put a batch of ``b`` decodes at ``b`` times its prompt size: read by the number of
    decodes, their step was flat from 1 to 128.)"""
    _check(arch, accel, tp)
    x = np.array(CURVE_SIZES, dtype=np.float64)
    context = float(stack.context_tokens or DECODE_CONTEXT)
    prompt, _ = predict_times(arch, accel, tp, stack, x, 1.0, 0.0)
    _, decode = predict_times(arch, accel, tp, stack, context, x, 0.0)
    return phase_rows(arch.name, accel.name, tp, CURVE_SIZES, prompt, decode)


def estimate_rows(arch: Architecture, accel: Accelerator, tp: int, stack: Stack,
                  grid=SHIPPED_GRID) -> list[dict]:
    """Synthetic profile rows (the ``perf_model.csv`` schema, times in ms) over ``grid`` of
    (prompt_size, batch_size, token_size): ``ProfileSet(pandas.DataFrame(rows))`` takes them."""
    grid = [tuple(int(v) for v in g) for g in grid]
    if not grid or any(len(g) != 3 for g in grid):
        raise SplitwisePlanError("the grid is a non-empty list of (prompt_size, batch_size, token_size)")
    s, b, n = (np.array(col) for col in zip(*grid))
    prompt, decode = predict_times(arch, accel, tp, stack, s, b, n)
    return [dict(model=arch.name, hardware=accel.name, prompt_size=int(s[i]), batch_size=int(b[i]),
                 token_size=int(n[i]), prompt_time=float(prompt[i]), token_time=float(decode[i]),
                 tensor_parallel=int(tp)) for i in range(len(grid))]


def _config_medians(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per measured configuration: the median of its repeats."""
    keys = ["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    return rows.groupby(keys, sort=True)[["prompt_time", "token_time"]].median().reset_index()


def _row_columns(rows: pd.DataFrame, architectures: dict, accelerators: dict) -> dict:
    """Formula inputs of profile rows whose model and hardware are known."""
    for col, known, what in (("model", architectures, "architecture"), ("hardware", accelerators, "accelerator")):
        unknown = sorted(set(rows[col]) - set(known))
        if unknown:
            raise SplitwisePlanError(f"no {what} known for {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return _columns([architectures[m] for m in rows["model"]], [accelerators[h] for h in rows["hardware"]],
                    rows["tensor_parallel"], rows["prompt_size"], rows["batch_size"], rows["token_size"])


def _unpack(x: np.ndarray) -> dict:
    """Fitted parameters from the optimizer's unbounded vector (logit of efficiencies, log of the rest)."""
    values = np.concatenate([1.0 / (1.0 + np.exp(-x[:_EFFICIENCIES])), np.exp(x[_EFFICIENCIES:])])
    return dict(zip(_FIT_NAMES, values.tolist()))


def _nelder_mead(f, x0: np.ndarray, step: float, iterations: int) -> tuple[np.ndarray, float]:
    """Minimize ``f`` from ``x0`` with the Nelder-Mead simplex (standard coefficients)."""
    simplex = np.vstack([x0, x0 + step * np.eye(x0.size)])
    values = np.array([f(v) for v in simplex])
    for _ in range(iterations):
        order = np.argsort(values)
        simplex, values = simplex[order], values[order]
        centre = simplex[:-1].mean(axis=0)
        reflected = 2.0 * centre - simplex[-1]
        fr = f(reflected)
        if fr < values[0]:
            expanded = 3.0 * centre - 2.0 * simplex[-1]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = 0.5 * (centre + simplex[-1])
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:   # shrink towards the best vertex
                simplex[1:] = 0.5 * (simplex[0] + simplex[1:])
                values[1:] = [f(v) for v in simplex[1:]]
    best = int(np.argmin(values))
    return simplex[best], float(values[best])


#: Starting points of the fit: efficiencies (logits), then overheads ms, step bytes, request bytes (logs).
_STARTS = (np.r_[0.0, 0.0, -2.0, np.log([40.0, 25.0, 5e6, 500.0])],
           np.r_[2.0, 1.0, -3.0, np.log([30.0, 20.0, 1e7, 200.0])])


def fit_stack(rows: pd.DataFrame, architectures: dict | None = None, accelerators: dict | None = None,
              name: str = "fitted", source: str = "") -> Stack:
    """Fit a stack by least squares on log times to measured profile rows (the perf_model.csv schema).

    Repeats of a configuration are reduced to their median first. Rows on power-capped hardware fit
    ``cap_slowdown`` alone afterwards (1-D search), given the other parameters; without them it is 1.
    """
    architectures = ARCHITECTURES if architectures is None else architectures
    accelerators = ACCELERATORS if accelerators is None else accelerators
    med = _config_medians(rows)
    if med.empty:
        raise SplitwisePlanError("fit_stack needs measured rows")
    capped = np.array([h in accelerators and accelerators[h].power_cap < 1 for h in med["hardware"]])
    free, cap_rows = med[~capped], med[capped]
    if len(free) < len(_FIT_NAMES) + 1:
        raise SplitwisePlanError(f"fit_stack needs at least {len(_FIT_NAMES) + 1} uncapped configurations, "
                                 f"got {len(free)}")
    c = _row_columns(free, architectures, accelerators)
    logs = np.log(free["prompt_time"].to_numpy(np.float64)), np.log(free["token_time"].to_numpy(np.float64))

    def loss(x, cap=1.0, cols=c, target=logs):
        prompt, decode = _times_ms(cols, {**_unpack(x), "cap_slowdown": cap})
        return float(np.sum((np.log(prompt) - target[0]) ** 2) + np.sum((np.log(decode) - target[1]) ** 2))

    best_x, best_f = None, np.inf
    for x0 in _STARTS:
        x, _ = _nelder_mead(loss, x0, 0.5, 2000)
        x, fx = _nelder_mead(loss, x, 0.1, 1500)
        if fx < best_f:
            best_x, best_f = x, fx
    cap = 1.0
    if len(cap_rows):
        cc = _row_columns(cap_rows, architectures, accelerators)
        target = (np.log(cap_rows["prompt_time"].to_numpy(np.float64)),
                  np.log(cap_rows["token_time"].to_numpy(np.float64)))
        grid = np.linspace(1.0, 3.0, 2001)
        cap = float(grid[np.argmin([loss(best_x, g, cc, target) for g in grid])])
    return Stack(name=name, cap_slowdown=cap, source=source, **_unpack(best_x))


def _ape(pred: np.ndarray, actual: np.ndarray) -> np.ndarray:
    return np.abs(pred / actual - 1.0) * 100.0


def held_out_errors(profileset, architectures: dict | None = None,
                    accelerators: dict | None = None) -> list[HeldOutError]:
    """Leave one hardware out: fit a stack on the other uncapped hardware, predict this one's rows.

    Per (model, held-out hardware), the median and P90 absolute percentage error of prompt and decode times
    over every measured configuration of the grid (all batch sizes, repeats reduced to their median).
    Only models and hardware with known architectures and data sheets take part.
    """
    architectures = ARCHITECTURES if architectures is None else architectures
    accelerators = ACCELERATORS if accelerators is None else accelerators
    table = getattr(profileset, "table", None)
    if table is None:
        raise SplitwisePlanError(f"held_out_errors takes a ProfileSet (load_profiles()), got {profileset!r:.80}")
    known = table[table["model"].isin(architectures) & table["hardware"].isin(accelerators)]
    hardware = sorted(h for h in set(known["hardware"]) if accelerators[h].power_cap >= 1)
    out = []
    for test in hardware:
        train = [h for h in hardware if h != test]
        if not train:
            continue
        stack = fit_stack(known[known["hardware"].isin(train)], architectures, accelerators)
        med = _config_medians(known[known["hardware"] == test])
        for model in sorted(set(med["model"])):
            sub = med[med["model"] == model]
            prompt, decode = _times_ms(_row_columns(sub, architectures, accelerators), stack.parameters())
            pe, de = _ape(prompt, sub["prompt_time"].to_numpy()), _ape(decode, sub["token_time"].to_numpy())
            out.append(HeldOutError(model, ",".join(train), test, len(sub),
                                    float(np.median(pe)), float(np.percentile(pe, 90)),
                                    float(np.median(de)), float(np.percentile(de, 90))))
    return out
