"""The analytic (roofline) latency model: hand-computed cases, synthetic profiles, the shipped stack."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from splitwise_plan import SplitwisePlanError, load_profiles
from splitwise_plan.perf.analytic import (
    ACCELERATORS,
    ARCHITECTURES,
    SHIPPED_GRID,
    Accelerator,
    Architecture,
    estimate_rows,
    fit_stack,
    held_out_errors,
    predict_times,
    touched_share,
)
from splitwise_plan.perf.profiles import ProfileSet
from splitwise_plan.perf.stack import Stack, load_stack

# A stack that reaches the data sheet and costs nothing else: times are the bare roofline.
IDEAL = Stack("ideal", eff_compute=1.0, eff_bw=1.0, eff_net=1.0, prompt_overhead_ms=0.0, decode_overhead_ms=0.0,
              allreduce_step_bytes=0.0, decode_request_bytes=0.0)
TOY = Architecture("toy", params=1e9, num_layers=1, hidden_size=1000, num_heads=8, num_kv_heads=8,
                   weights_bytes=2e9, kv_bytes_per_token=1e5)
TOY_GPU = Accelerator("toy-gpu", hbm_tbps=1.0, bf16_tflops=100.0, fp8_tflops=200.0, interconnect_gbps=100.0)


@pytest.fixture(scope="module")
def shipped():
    return load_profiles()


def test_decode_floor_by_hand():
    # batch 1, context 128 + 0/2: bytes 2e9 + 128 * 1e5 over 1 TB/s = 2.0128 ms; FLOPs (2e9 + 4*1000*128)
    # over 100 TFLOP/s are 0.02 ms, so the read is the time.
    _, decode = predict_times(TOY, TOY_GPU, 1, IDEAL, 128, 1, 0)
    assert float(decode) == pytest.approx(2.0128, rel=1e-12)


def test_prompt_compute_by_hand():
    # 1000 tokens: 2e9*1000 + 2*1*1000*1000^2 = 2.002e12 FLOPs over 100 TFLOP/s = 20.02 ms (> the 2 ms weight read)
    prompt, _ = predict_times(TOY, TOY_GPU, 1, IDEAL, 1000, 1)
    assert float(prompt) == pytest.approx(20.02, rel=1e-12)


def test_issue_bandwidth_floor_and_decode_never_below_it():
    llama, h100 = ARCHITECTURES["llama2-70b"], ACCELERATORS["h100-80gb"]
    assert 140e9 / (8 * h100.hbm_tbps * 1e12) * 1e3 == pytest.approx(5.22, abs=0.01)   # the issue's figure
    stack = load_stack()
    for arch in ARCHITECTURES.values():
        for accel in ACCELERATORS.values():
            for tp in (1, 2, 4, 8):
                floor = arch.weights_bytes / (tp * accel.hbm_tbps * 1e12) * 1e3
                rows = estimate_rows(arch, accel, tp, stack)
                assert min(r["token_time"] for r in rows) > floor
    _, step = predict_times(llama, h100, 8, IDEAL, 1024, 1, 0)
    assert float(step) >= llama.weights_bytes / (8 * h100.hbm_tbps * 1e12) * 1e3


def test_doubling_bandwidth_speeds_up_memory_bound_decode():
    llama, h100 = ARCHITECTURES["llama2-70b"], ACCELERATORS["h100-80gb"]
    fast = h100._replace(name="h100-2x", hbm_tbps=2 * h100.hbm_tbps)
    _, slow_ideal = predict_times(llama, h100, 8, IDEAL, 512, 1)
    _, fast_ideal = predict_times(llama, fast, 8, IDEAL, 512, 1)
    assert float(fast_ideal) == pytest.approx(float(slow_ideal) / 2, rel=1e-3)   # all of it is the read
    stack = load_stack()
    _, slow = predict_times(llama, h100, 8, stack, 512, [1, 8, 64])
    _, quick = predict_times(llama, fast, 8, stack, 512, [1, 8, 64])
    assert np.all(quick < slow)


def test_fp8_weights_use_the_fp8_peak_where_there_is_one():
    fp8 = TOY._replace(weights_dtype="fp8")
    bf16_time, _ = predict_times(TOY, TOY_GPU, 1, IDEAL, 1000, 1)
    fp8_time, _ = predict_times(fp8, TOY_GPU, 1, IDEAL, 1000, 1)
    assert float(fp8_time) == pytest.approx(float(bf16_time) / 2, rel=1e-12)
    no_fp8 = TOY_GPU._replace(fp8_tflops=0.0)
    assert float(predict_times(fp8, no_fp8, 1, IDEAL, 1000, 1)[0]) == pytest.approx(float(bf16_time), rel=1e-12)


def test_power_cap_slows_prompt_not_memory_bound_decode():
    stack = load_stack()
    llama = ARCHITECTURES["llama2-70b"]
    p, d = predict_times(llama, ACCELERATORS["h100-80gb"], 8, stack, 8192, 1)
    pc, dc = predict_times(llama, ACCELERATORS["h100-80gb-pcap"], 8, stack, 8192, 1)
    assert float(pc) > 1.1 * float(p)
    assert float(dc) == pytest.approx(float(d), rel=1e-9)


def test_estimate_rows_build_a_profile_set():
    stack = load_stack()
    rows = estimate_rows(ARCHITECTURES["llama2-70b"], ACCELERATORS["h100-80gb"], 4, stack)
    assert len(rows) == len(SHIPPED_GRID)
    ps = ProfileSet(pd.DataFrame(rows))
    lm = ps.latency_model("llama2-70b", "h100-80gb", 4)
    at_1024 = [r["prompt_time"] for r in rows if r["prompt_size"] * r["batch_size"] == 1024]
    assert lm.prompt_time(1024) == pytest.approx(float(np.median(at_1024)) / 1000, rel=1e-12)
    assert lm.token_time(512) > 0


def test_shipped_default_stack_reproduces_when_refitted(shipped):
    stored = load_stack()
    assert "fitted" in stored.source and "perf_model.csv" in stored.source
    refit = fit_stack(shipped.table, name="default")
    for name, value in stored.parameters().items():
        assert getattr(refit, name) == pytest.approx(value, rel=0.02), name


def test_held_out_errors_are_finite_and_bounded(shipped):
    records = held_out_errors(shipped)
    assert {(r.train, r.test) for r in records} == {("a100-80gb", "h100-80gb"), ("h100-80gb", "a100-80gb")}
    assert {r.model for r in records} == {"bloom-176b", "llama2-70b"}
    for r in records:
        values = (r.prompt_median_ape_pct, r.prompt_p90_ape_pct, r.decode_median_ape_pct, r.decode_p90_ape_pct)
        assert all(math.isfinite(v) and v >= 0 for v in values)
        # A regression guard at today's figures, not the issue's goal (median 10%, P90 20%), which is not met.
        assert r.prompt_median_ape_pct <= 20 and r.decode_median_ape_pct <= 20, r
        assert r.prompt_p90_ape_pct <= 45 and r.decode_p90_ape_pct <= 25, r


def test_bad_stacks_and_inputs_raise(tmp_path):
    with pytest.raises(SplitwisePlanError):
        IDEAL.__class__(**{**IDEAL.parameters(), "name": "x", "eff_bw": 1.5})
    with pytest.raises(SplitwisePlanError, match="no shipped stack"):
        load_stack("no-such-stack")
    path = tmp_path / "mine.toml"
    path.write_text(IDEAL.to_toml().replace("eff_net = 1\n", ""))
    with pytest.raises(SplitwisePlanError, match="lacks eff_net"):
        load_stack(path)
    with pytest.raises(SplitwisePlanError, match="tensor_parallel"):
        predict_times(TOY, TOY_GPU, 0, IDEAL, 128, 1)
    with pytest.raises(SplitwisePlanError, match="no architecture"):
        fit_stack(pd.DataFrame(estimate_rows(TOY, TOY_GPU, 1, IDEAL)))


# --- mixtures of experts ---------------------------------------------------------------------------------

# A toy mixture: 1e9 parameters of which 0.8e9 in 64 routed experts (1 layer), a token using 2 of them;
# 0.25e9 active; bf16 weights.
TOY_MOE = TOY._replace(name="toy-moe", active_params=0.25e9, experts=64, experts_per_token=2, moe_layers=1,
                       expert_params=0.8e9, expert_weights_bytes=1.6e9)


def test_the_experts_a_batch_touches():
    assert touched_share(64, 2, 1) == pytest.approx(2 / 64)
    share = touched_share(64, 2, np.array([1, 4, 16, 64, 1024]))
    assert np.all(share <= np.minimum(1.0, np.array([1, 4, 16, 64, 1024]) * 2 / 64) + 1e-12)   # at most min(E, b*k)
    assert np.all(np.diff(share) > 0) and share[-1] == pytest.approx(1.0)
    assert touched_share(0, 0, 7) == 1.0   # a dense model reads all its weights


def test_moe_decode_reads_the_experts_its_batch_touches_by_hand():
    # batch 1, context 128: the 0.4e9 bytes of the other weights, 2 of the 64 experts' 1.6e9 bytes, and the KV
    # cache, over 1 TB/s
    _, decode = predict_times(TOY_MOE, TOY_GPU, 1, IDEAL, 128, 1, 0)
    assert float(decode) == pytest.approx((0.4e9 + 1.6e9 * 2 / 64 + 128 * 1e5) / 1e12 * 1e3, rel=1e-12)
    # a large batch touches them all, as a dense model of the same weights reads them
    _, big = predict_times(TOY_MOE, TOY_GPU, 1, IDEAL, 128, 4096, 0)
    _, dense = predict_times(TOY, TOY_GPU, 1, IDEAL, 128, 4096, 0)
    assert float(big) <= float(dense) and float(big) == pytest.approx(float(dense), rel=0.5)


def test_moe_prompt_computes_on_the_active_parameters_by_hand():
    # 1000 tokens: 2 * 0.25e9 * 1000 + 2 * 1000 * 1000^2 = 5.02e11 FLOPs over 100 TFLOP/s = 5.02 ms; the read
    # (every expert is touched by 1000 tokens: 2e9 bytes at 1 TB/s = 2 ms) is shorter
    prompt, _ = predict_times(TOY_MOE, TOY_GPU, 1, IDEAL, 1000, 1)
    assert float(prompt) == pytest.approx(5.02, rel=1e-6)


def test_a_stacks_moe_efficiencies_slow_only_the_experts():
    slow = Stack(**{**IDEAL.parameters(), "name": "slow", "moe_compute_slowdown": 3.0, "moe_read_slowdown": 2.0,
                    "moe_layer_overhead_ms": 0.5})
    prompt, decode = predict_times(TOY_MOE, TOY_GPU, 1, slow, 1000, 1, 0)
    routed_active = 0.8e9 * 2 / 64
    assert float(prompt) == pytest.approx((2 * (0.25e9 + 2 * routed_active) * 1000 + 2e9) / 1e14 * 1e3 + 0.5)
    _, decode = predict_times(TOY_MOE, TOY_GPU, 1, slow, 128, 1, 0)
    assert float(decode) == pytest.approx((0.4e9 + 2 * 1.6e9 * 2 / 64 + 128 * 1e5) / 1e12 * 1e3 + 0.5)
    # a dense model is not touched by them
    assert predict_times(TOY, TOY_GPU, 1, slow, 1000, 1)[0] == predict_times(TOY, TOY_GPU, 1, IDEAL, 1000, 1)[0]
    with pytest.raises(SplitwisePlanError, match="moe_read_slowdown must be a finite number, positive"):
        Stack(**{**IDEAL.parameters(), "name": "x", "moe_read_slowdown": 0.0})


def test_the_presets_hold_their_moe_efficiencies_and_held_out_errors(tmp_path):
    for name in ("vllm", "sglang", "trtllm"):
        stack = load_stack(name)
        assert stack.moe_compute_slowdown > 1 and stack.moe_read_slowdown >= 1 and stack.moe_layer_overhead_ms > 0
        moe = {k: v for k, v in stack.held_out.items() if k.startswith("moe ")}
        assert set(moe) == {"moe h100-80gb", "moe h200-141gb", "moe b200-180gb"}
        for figures in moe.values():
            assert "qwen3-30b-a3b" in figures["models"] and figures["configs"] > 100
            assert 0 < figures["decode_median_pct"] <= figures["decode_p90_pct"] < 200
        path = tmp_path / f"{name}.toml"
        path.write_text(stack.to_toml())
        assert load_stack(path).moe_parameters() == stack.moe_parameters()   # (written back as read)
    assert load_stack().moe_parameters() == {"moe_compute_slowdown": 1.0, "moe_read_slowdown": 1.0,
                                             "moe_layer_overhead_ms": 0.0}   # the paper's stack: no mixture


def test_a_moe_estimate_is_slower_than_its_active_dense_twin_and_faster_than_its_total():
    from splitwise_plan.inputs.machines import BUILTIN_MACHINES
    from splitwise_plan.inputs.models import get_model
    from splitwise_plan.perf.sources import accelerator_of, architecture_of
    arch, h100 = architecture_of(get_model("qwen3-235b-a22b")), accelerator_of(BUILTIN_MACHINES["dgx-h100"])
    assert (arch.experts, arch.experts_per_token, arch.moe_layers) == (128, 8, 94)
    assert arch.attention_width == 64 * 128 and arch.attention_layers == 94
    active = arch._replace(params=arch.active_params, weights_bytes=2 * arch.active_params, experts=0,
                           expert_params=0.0, expert_weights_bytes=0.0, moe_layers=0)
    whole = arch._replace(active_params=0.0, experts=0, expert_params=0.0, expert_weights_bytes=0.0, moe_layers=0)
    stack = load_stack("vllm")
    for sizes in ((2048, 1, 0), (1260, 64, 0)):
        moe, dense_active, dense_whole = (predict_times(a, h100, 8, stack, *sizes) for a in (arch, active, whole))
        phase = 0 if sizes[1] == 1 else 1
        assert dense_active[phase] < moe[phase]
    assert predict_times(arch, h100, 8, stack, 1260, 1, 0)[1] < predict_times(whole, h100, 8, stack, 1260, 1, 0)[1]
