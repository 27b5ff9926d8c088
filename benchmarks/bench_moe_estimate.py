"""The analytic estimate of mixture-of-experts models against AIConfigurator's measured MoE kernels.

    pip install '.[aiconfigurator]'
    python benchmarks/bench_moe_estimate.py                     # vllm: print the errors per model and GPU
    python benchmarks/bench_moe_estimate.py --backends vllm,sglang,trtllm --write

For each MoE model (Qwen3-30B-A3B, Qwen3-235B-A22B, gpt-oss-120b, DeepSeek-V3, Mixtral-8x7B, each at its own
dtype), GPU (H100, H200, B200) and tensor parallelism 4 and 8 where its weights fit (the experts at EP = TP),
aiconfigurator-core gives a prefill and a decode-step time on the grid of ``fit_stack_presets.py``. The
analytic estimate (:mod:`splitwise_plan.perf.analytic`) predicts the same at the backend's shipped preset
(``profiles/stacks/BACKEND.toml``): its dense efficiencies as fitted on dense models, plus the three MoE
efficiencies (``MOE_PARAMETER_DOCS``: the routed experts' compute and read slowdowns, a fixed cost a MoE
layer), fitted here on a grid by least squares on log times.

- Held out: each model is predicted at the MoE efficiencies fitted on the four others (leave one model
  out). It prints the median and P90 absolute error of prompt and decode times per model and GPU, then per
  GPU over the models, and first the error of the dense preset alone (MoE efficiencies at their defaults).
- ``--write``: the MoE efficiencies fitted on all five go into the preset's TOML, with the held-out figures
  per GPU as ``[held_out."moe GPU"]`` tables, which ``splitwise-plan profiles`` prints (without the extra)
  beside the presets' dense held-out errors.

It asserts nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from splitwise_plan.inputs.machines import BUILTIN_MACHINES  # noqa: E402
from splitwise_plan.inputs.models import get_model  # noqa: E402
from splitwise_plan.perf import aiconfigurator as aic  # noqa: E402
from splitwise_plan.perf.analytic import _columns, _times_ms  # noqa: E402
from splitwise_plan.perf.sources import accelerator_of, architecture_of  # noqa: E402
from splitwise_plan.perf.stack import MOE_DEFAULTS, load_stack  # noqa: E402

STACKS = Path(__file__).resolve().parents[1] / "profiles" / "stacks"
MODELS = ("qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "deepseek-v3", "mixtral-8x7b")
GPUS = ("dgx-h100", "dgx-h200", "dgx-b200")
TPS = (4, 8)
PREFIX = "moe "   # the held-out tables' keys: "moe h100-80gb"


def aic_rows(backend: str, models=MODELS, gpus=GPUS) -> pd.DataFrame:
    """aiconfigurator's times (ms) over the presets' grid for each (model, GPU, TP) whose weights fit, experts at
    EP = TP (those it has no data for are said and left out)."""
    from fit_stack_presets import aic_rows as preset_rows
    return preset_rows(backend, models, gpus, TPS, skip_missing=True)


def columns(rows: pd.DataFrame) -> dict:
    """The analytic formulas' inputs of each row."""
    machines = {m.hardware: accelerator_of(m) for m in BUILTIN_MACHINES.values()}
    archs = {name: architecture_of(get_model(name)) for name in set(rows["model"])}
    return _columns([archs[m] for m in rows["model"]], [machines[h] for h in rows["hardware"]], rows["tensor_parallel"],
                    rows["prompt_size"], rows["batch_size"], rows["token_size"])


def predicted(stack, cols: dict, slowdowns: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The analytic estimate's (prompt, decode) ms of each row, at ``stack`` (its MoE slowdowns replaced by
    ``slowdowns`` where given)."""
    return _times_ms(cols, {**stack.parameters(), **stack.moe_parameters(), **(slowdowns or {})})


#: The MoE efficiencies searched (a grid, each in log space; the overhead from 0).
SEARCHED = {"moe_compute_slowdown": np.exp(np.linspace(0.0, np.log(16.0), 33)),
            "moe_read_slowdown": np.exp(np.linspace(0.0, np.log(4.0), 17)),
            "moe_layer_overhead_ms": np.r_[0.0, np.exp(np.linspace(np.log(0.005), np.log(0.3), 25))]}


def fit_moe(stack, rows: pd.DataFrame) -> dict:
    """The MoE efficiencies (``MOE_PARAMETER_DOCS``) minimizing the squared log error of the prompt and decode
    times of ``rows``, the dense ones kept at ``stack``'s."""
    cols = columns(rows)
    logs = np.log(rows["prompt_time"].to_numpy()), np.log(rows["token_time"].to_numpy())
    best, best_loss = None, np.inf
    for values in itertools.product(*SEARCHED.values()):
        prompt, decode = predicted(stack, cols, dict(zip(SEARCHED, values)))
        loss = float(np.sum((np.log(prompt) - logs[0]) ** 2) + np.sum((np.log(decode) - logs[1]) ** 2))
        if loss < best_loss:
            best, best_loss = values, loss
    return {k: float(f"{v:.4g}") for k, v in zip(SEARCHED, best)}


def held_out_predictions(stack, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, dict]:
    """Each model's rows predicted at the slowdowns fitted on the other models' rows (leave one model out);
    and those slowdowns by model."""
    prompt, decode, fitted = np.empty(len(rows)), np.empty(len(rows)), {}
    for name in rows["model"].unique():
        mine = (rows["model"] == name).to_numpy()
        fitted[name] = fit_moe(stack, rows[~mine])
        p, d = predicted(stack, columns(rows[mine]), fitted[name])
        prompt[mine], decode[mine] = p, d
    return prompt, decode, fitted


def errors(rows: pd.DataFrame, prompt: np.ndarray, decode: np.ndarray) -> pd.DataFrame:
    """Absolute % errors of each row."""
    return rows.assign(prompt_err=np.abs(prompt / rows["prompt_time"].to_numpy() - 1) * 100,
                       decode_err=np.abs(decode / rows["token_time"].to_numpy() - 1) * 100,
                       prompt_bias=prompt / rows["prompt_time"].to_numpy(), decode_bias=decode / rows["token_time"].to_numpy())


def summary(err: pd.DataFrame) -> dict:
    """Median and P90 of prompt and decode errors; the median ratio estimate / aiconfigurator."""
    return {"configs": int(len(err)),
            "prompt_median_pct": round(float(np.median(err["prompt_err"])), 1),
            "prompt_p90_pct": round(float(np.percentile(err["prompt_err"], 90)), 1),
            "decode_median_pct": round(float(np.median(err["decode_err"])), 1),
            "decode_p90_pct": round(float(np.percentile(err["decode_err"], 90)), 1),
            "prompt_ratio": round(float(np.median(err["prompt_bias"])), 2),
            "decode_ratio": round(float(np.median(err["decode_bias"])), 2)}


def ratio_to_h100(err: pd.DataFrame, hw: str) -> float:
    """Median error (%) of each row's time on ``hw`` over its time on the H100, estimated against measured."""
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    h100 = err[err["hardware"] == "h100-80gb"].set_index(keys)
    j = err[err["hardware"] == hw].set_index(keys).join(h100.add_suffix("_h"), how="inner")
    if j.empty:
        return float("nan")
    out = []
    for bias in ("prompt_bias", "decode_bias"):
        out += list(np.abs(j[bias] / j[bias + "_h"] - 1) * 100)
    return round(float(np.median(out)), 1)


def write_preset(stack, moe: dict, figures: dict) -> Path:
    """The preset's TOML with its MoE efficiencies ``moe`` and its ``[held_out."moe GPU"]`` tables ``figures``
    (its dense parameters and held-out tables as they are)."""
    from fit_stack_presets import toml_of

    held = {k: v for k, v in stack.held_out.items() if not k.startswith(PREFIX)}
    held.update({PREFIX + gpu: e for gpu, e in figures.items()})
    path = STACKS / f"{stack.name}.toml"
    path.write_text(toml_of(dataclasses.replace(stack, **moe), held))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="vllm")
    ap.add_argument("--rows", type=Path, help="a CSV of aiconfigurator's rows to read (if it exists) or write")
    ap.add_argument("--write", action="store_true", help="write the MoE efficiencies and the per-GPU held-out figures into the presets' TOML")
    args = ap.parse_args()
    for backend in args.backends.split(","):
        t0 = time.perf_counter()
        cache = args.rows and args.rows.with_name(f"{args.rows.stem}-{backend}{args.rows.suffix}")
        if cache and cache.exists():
            rows = pd.read_csv(cache)
        else:
            aic._sdk()
            rows = aic_rows(backend)
            if cache:
                rows.to_csv(cache, index=False)
        stack = load_stack(backend)
        plain = errors(rows, *predicted(stack, columns(rows), MOE_DEFAULTS))
        e = summary(plain)
        print(f"[moe] {backend}: {len(rows)} rows of aiconfigurator-core {aic._core_version()} "
              f"({', '.join(sorted(set(rows['version'])))}) in {time.perf_counter() - t0:.0f} s")
        print(f"[moe] {backend}: the dense preset alone (MoE efficiencies at their defaults): prompt median "
              f"{e['prompt_median_pct']}% P90 {e['prompt_p90_pct']}% (ratio {e['prompt_ratio']}), decode median "
              f"{e['decode_median_pct']}% P90 "
              f"{e['decode_p90_pct']}% (ratio {e['decode_ratio']})")
        prompt, decode, fitted = held_out_predictions(stack, rows)
        err = errors(rows, prompt, decode)
        print(f"[moe] {backend}: held out, each model predicted at the MoE efficiencies fitted on the others "
              f"(absolute % error; ratio = estimate / aiconfigurator, median)")
        print(f"{'model':18} {'GPU':12} {'TPs':5} {'rows':>4} | prompt median  P90  ratio | decode median  P90  ratio "
              "| MoE efficiencies fitted without it")
        for (name, hw), sub in err.groupby(["model", "hardware"], sort=False):
            e = summary(sub)
            tps = ",".join(str(t) for t in sorted(set(sub["tensor_parallel"])))
            print(f"{name:18} {hw:12} {tps:5} {e['configs']:4} | {e['prompt_median_pct']:13.1f} {e['prompt_p90_pct']:5.1f} "
                  f"{e['prompt_ratio']:5.2f} | {e['decode_median_pct']:13.1f} {e['decode_p90_pct']:5.1f} {e['decode_ratio']:5.2f} "
                  f"| {', '.join(f'{v:g}' for v in fitted[name].values())}")
        figures = {}
        for hw, sub in err.groupby("hardware", sort=False):
            e = summary(sub)
            figures[hw] = {"models": sorted(set(sub["model"])), "configs": e["configs"],
                           **{k: v for k, v in e.items() if k.endswith("_pct")},
                           "ratio_to_h100_median_pct": 0.0 if hw == "h100-80gb" else ratio_to_h100(err, hw)}
            print(f"[moe] {backend} on {hw}: prompt median {e['prompt_median_pct']}% P90 {e['prompt_p90_pct']}%, decode "
                  f"median {e['decode_median_pct']}% P90 {e['decode_p90_pct']}%, ratio to H100 median "
                  f"{figures[hw]['ratio_to_h100_median_pct']}%", flush=True)
        moe = fit_moe(stack, rows)
        print(f"[moe] {backend}: fitted on every model: " + ", ".join(f"{k} {v:g}" for k, v in moe.items()))
        if args.write:
            print(f"[moe] wrote {write_preset(stack, moe, figures)}")


if __name__ == "__main__":
    main()
