"""How well the analytic latency model transfers to a GPU it was not fitted on, and the shipped stack.

Prints the held-out table (fit on A100 rows, predict H100; fit on H100, predict A100; per model the median
and P90 absolute percentage error of prompt and decode times over every configuration of the grid), the
default stack, its in-sample errors, and sanity figures for Llama-2-70B at TP8 on the H100 (~15 s).

    python benchmarks/bench_latency_estimate.py
"""

from __future__ import annotations

import numpy as np

from splitwise_plan.perf.analytic import (
    ACCELERATORS,
    ARCHITECTURES,
    SHIPPED_GRID,
    estimate_rows,
    held_out_errors,
    predict_times,
)
from splitwise_plan.perf.profiles import load_profiles
from splitwise_plan.perf.stack import load_stack


def held_out_table(profiles) -> None:
    print("held-out error, % (all 19 configurations of the grid, medians of repeats)")
    print(f"{'train -> test':<26} {'model':<11} {'rows':>4}  {'prompt med':>10} {'P90':>6}  "
          f"{'decode med':>10} {'P90':>6}")
    for r in held_out_errors(profiles):
        print(f"{r.train + ' -> ' + r.test:<26} {r.model:<11} {r.n_rows:>4}  {r.prompt_median_ape_pct:>10.1f} "
              f"{r.prompt_p90_ape_pct:>6.1f}  {r.decode_median_ape_pct:>10.1f} {r.decode_p90_ape_pct:>6.1f}")


def in_sample(profiles, stack) -> None:
    print("\ndefault stack, in-sample error, % (median / P90 over configurations)")
    t = profiles.table
    med = t.groupby(["model", "hardware", "tensor_parallel", "prompt_size", "batch_size", "token_size"])[
        ["prompt_time", "token_time"]].median().reset_index()
    for (model, hw), sub in med.groupby(["model", "hardware"]):
        pe, de = [], []
        for tp, rows in sub.groupby("tensor_parallel"):
            p, d = predict_times(ARCHITECTURES[model], ACCELERATORS[hw], int(tp), stack, rows["prompt_size"],
                                 rows["batch_size"], rows["token_size"])
            pe += list(np.abs(p / rows["prompt_time"] - 1) * 100)
            de += list(np.abs(d / rows["token_time"] - 1) * 100)
        print(f"  {model:<11} {hw:<15} prompt {np.median(pe):5.1f} / {np.percentile(pe, 90):5.1f}   "
              f"decode {np.median(de):5.1f} / {np.percentile(de, 90):5.1f}")


def sanity(profiles, stack) -> None:
    arch, accel = ARCHITECTURES["llama2-70b"], ACCELERATORS["h100-80gb"]
    med = profiles.medians("llama2-70b", "h100-80gb", 8).set_index("batch_tokens")
    prefill, _ = predict_times(arch, accel, 8, stack, 1024, 1)
    _, step = predict_times(arch, accel, 8, stack, 1024, 1)
    floor_ms = arch.weights_bytes / (8 * accel.hbm_tbps * 1e12) * 1e3
    print("\nsanity: llama2-70b, TP8, h100-80gb")
    print(f"  prefill of 1024 tokens: profile (median at batch_tokens 1024) {med.loc[1024, 'prompt_time']:.1f} ms, "
          f"default stack {float(prefill):.1f} ms")
    print(f"  decode step, batch 1, context 1024: profile (median at batch_tokens 1024) "
          f"{med.loc[1024, 'token_time']:.1f} ms, default stack {float(step):.1f} ms")
    print(f"  HBM floor {arch.weights_bytes / 1e9:.0f} GB / (8 x {accel.hbm_tbps} TB/s) = {floor_ms:.2f} ms "
          f"(the issue's 140 GB: {140e9 / (8 * 3.35e12) * 1e3:.2f} ms)")
    lowest = min(r["token_time"] / (a.weights_bytes / (tp * h.hbm_tbps * 1e12) * 1e3)
                 for a in ARCHITECTURES.values() for h in ACCELERATORS.values() for tp in (1, 2, 4, 8)
                 for r in estimate_rows(a, h, tp, stack, SHIPPED_GRID))
    print(f"  every decode prediction over its floor weights/(tp*bw): lowest ratio {lowest:.2f} (must be > 1)")


def main() -> None:
    profiles = load_profiles()
    held_out_table(profiles)
    stack = load_stack()
    print(f"\ndefault stack ({stack.source}):")
    for name, value in stack.parameters().items():
        print(f"  {name:<22} {value:.6g}")
    in_sample(profiles, stack)
    sanity(profiles, stack)


if __name__ == "__main__":
    main()
