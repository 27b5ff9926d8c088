"""AIConfigurator as a latency source (``--stack aiconfigurator:BACKEND[@VERSION]``): the rows it gives are its
``EngineHandle``'s own numbers, every pool reads it, and what it cannot give is one line, exit 2.

The tests that need the extra ``splitwise-plan[aiconfigurator]`` skip without it (CI installs it)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from splitwise_plan.cli import main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.machines import BUILTIN_MACHINES
from splitwise_plan.inputs.models import get_model
from splitwise_plan.perf import aiconfigurator as aic
from splitwise_plan.perf.sources import for_requests, sourced_latency
from splitwise_plan.perf.stack import load_stack

HAS_AIC = importlib.util.find_spec("aiconfigurator_core") is not None
needs_aic = pytest.mark.skipif(not HAS_AIC, reason="needs the extra splitwise-plan[aiconfigurator] (Linux x86-64)")


def test_a_missing_extra_is_one_line_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)   # (import fails, as without the extra)
    with pytest.raises(SplitwisePlanError, match=r"needs the extra.*splitwise-plan\[aiconfigurator\]"):
        load_stack("aiconfigurator:vllm")


@pytest.mark.parametrize("spec, needle", [("aiconfigurator:tgi", "unknown aiconfigurator backend 'tgi'"),
                                          ("aiconfigurator:vllm@", "no version after @")])
def test_a_bad_source_is_one_line(spec, needle):
    with pytest.raises(SplitwisePlanError, match=needle):
        load_stack(spec)


def test_decodes_read_the_mean_context_of_the_requests():
    # half the output is the KV length mid-decode: (1000 + 3000) / 2 + (100 + 300) / 2 / 2 = 2100
    requests = SimpleNamespace(prompt_tokens=np.array([1000, 3000]), output_tokens=np.array([100, 300]))
    bound = for_requests(aic.AIConfiguratorStack("vllm"), requests)
    assert bound.context_tokens == 2100
    assert for_requests(bound, SimpleNamespace(prompt_tokens=[1], output_tokens=[1])) is bound   # bound once
    assert for_requests(load_stack(), requests).context_tokens == 2100   # (the analytic estimate reads it too)
    assert for_requests(None, requests) is None


@needs_aic
def test_rows_are_engine_handle_numbers_for_its_own_llama_config():
    # our config.json of Llama-3.1-70B against aiconfigurator's shipped one, through EngineHandle itself
    import shutil
    import tempfile

    import aiconfigurator_core
    from aiconfigurator_core.sdk import EngineHandle
    shipped = Path(aiconfigurator_core.__file__).parent / "model_configs" / "meta-llama--Meta-Llama-3.1-70B_config.json"
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(shipped, Path(tmp) / "config.json")
        h = EngineHandle.compile(tmp, "h100_sxm", "trtllm", tp_size=8, backend_version="1.3.0rc20")
        prefill = [h.predict_prefill_latency(1, x) for x in aic.BATCH_TOKENS]
        decode = [h.decode_step_latency(x, 2048, 1) for x in aic.BATCH_TOKENS]
    stack = aic.AIConfiguratorStack("trtllm", "1.3.0rc20", context_tokens=2048)
    rows, detail = stack.rows(get_model("llama-3.1-70b"), BUILTIN_MACHINES["dgx-h100"], 8)
    assert "trtllm 1.3.0rc20 on h100_sxm" in detail and "2,048 tokens of context" in detail
    for row, p, d, x in zip(rows, prefill, decode, aic.BATCH_TOKENS):
        assert row["prompt_size"] * row["batch_size"] == x
        assert row["prompt_time"] == pytest.approx(p, rel=0.01)
        if d >= max(decode[:aic.BATCH_TOKENS.index(x) + 1]):   # where its curve does not dip
            assert row["token_time"] == pytest.approx(d, rel=0.01)


@needs_aic
def test_a_decode_curve_that_dips_is_made_non_decreasing():
    # aiconfigurator's A100 decode step of Llama-3.1-70B dips (29.4 ms at batch 96, 28.8 at 128)
    raw = aic._engine(aic._config_text(get_model("llama-3.1-70b")), "a100_sxm", "vllm", "0.14.0", 8, "bf16")
    assert raw.decode_step_latency(128, 1024, 1) < raw.decode_step_latency(96, 1024, 1)
    stack = aic.AIConfiguratorStack("vllm", context_tokens=1024)
    rows, _ = stack.rows(get_model("llama-3.1-70b"), BUILTIN_MACHINES["dgx-a100"], 8)
    decode = [r["token_time"] for r in rows]
    prefill = [r["prompt_time"] for r in rows]
    assert decode == sorted(decode) and prefill == sorted(prefill)
    assert decode[-1] > 2 * decode[0]   # (it grows with the batch, as a current stack's does)


#: The catalog's machines whose GPUs aiconfigurator-core measured since the paper's, and its systems.
NEWER_SYSTEMS = {"dgx-b300": "b300_sxm", "gb200-8": "gb200", "l40s-8": "l40s"}


@needs_aic
@pytest.mark.parametrize("machine, system", sorted(NEWER_SYSTEMS.items()))
def test_the_newer_machines_data_sheets_are_aiconfigurators_system_files(machine, system):
    # the catalog quotes NVIDIA's data sheets as aiconfigurator-core's systems/*.yaml give them: HBM B/s, dense
    # bf16 and fp8 FLOP/s, and the GPU-to-GPU link one way (the catalog's is both directions)
    import aiconfigurator_core
    import yaml
    spec = yaml.safe_load((Path(aiconfigurator_core.__file__).parent / "systems" / f"{system}.yaml").read_text())
    m = BUILTIN_MACHINES[machine]
    assert aic.SYSTEMS[m.hardware] == system
    assert m.hbm_bandwidth_tbps * 1e12 == pytest.approx(spec["gpu"]["mem_bw"], rel=1e-12)
    assert m.bf16_tflops * 1e12 == pytest.approx(spec["gpu"]["bfloat16_tc_flops"], rel=1e-12)
    assert m.fp8_tflops * 1e12 == pytest.approx(spec["gpu"]["fp8_tc_flops"], rel=1e-12)
    assert m.interconnect_gbps * 1e9 == pytest.approx(2 * spec["node"]["intra_node_bw"], rel=1e-12)


@needs_aic
@pytest.mark.parametrize("backend", aic.BACKENDS)
@pytest.mark.parametrize("machine, system", sorted(NEWER_SYSTEMS.items()))
def test_the_newer_gpus_read_their_own_kernels(machine, system, backend):
    # Llama-3.1-8B at TP8 on each backend's current version: aiconfigurator's shipped config of it, through
    # EngineHandle itself, against the rows of our config.json
    import shutil
    import tempfile

    import aiconfigurator_core
    from aiconfigurator_core.sdk import EngineHandle
    version = aic._current_version(system, backend)
    shipped = Path(aiconfigurator_core.__file__).parent / "model_configs" / "meta-llama--Meta-Llama-3.1-8B_config.json"
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(shipped, Path(tmp) / "config.json")
        h = EngineHandle.compile(tmp, system, backend, tp_size=8, backend_version=version)
        prefill = [h.predict_prefill_latency(1, x) for x in aic.BATCH_TOKENS]
    rows, detail = aic.AIConfiguratorStack(backend).rows(get_model("llama-3.1-8b"), BUILTIN_MACHINES[machine], 8)
    assert f"{backend} {version} on {system} " in detail
    for row, p, x in zip(rows, prefill, aic.BATCH_TOKENS):
        if p >= max(prefill[:aic.BATCH_TOKENS.index(x) + 1]):   # where its curve does not dip
            assert row["prompt_time"] == pytest.approx(p, rel=0.01)
    decode = [r["token_time"] for r in rows]
    assert 0 < decode[0] and decode == sorted(decode)


@needs_aic
@pytest.mark.parametrize("model, machine, dtype, needle", [
    ("bloom-176b", "dgx-h100", None, "no BloomForCausalLM architecture"),
    ("llama-3.1-70b", "mi300x-8", None, "no measured kernels for mi300x-8"),
    ("llama-3.1-70b", "dgx-a100", "fp8", "missing system flops"),
])
def test_what_it_cannot_give_is_one_line(model, machine, dtype, needle):
    stack = aic.AIConfiguratorStack("vllm")
    with pytest.raises(SplitwisePlanError, match=needle) as caught:
        stack.rows(get_model(model, dtype=dtype), BUILTIN_MACHINES[machine], 8)
    assert "\n" not in str(caught.value)


@needs_aic
@pytest.mark.parametrize("spec, machine, needle", [
    ("aiconfigurator:vllm@9.9", "dgx-h100", "has no vllm 9.9 data for dgx-h100's GPU (h100_sxm); it has 0.24.0"),
    ("aiconfigurator:vllm@0.24.0", "dgx-a100", "has no vllm 0.24.0 data for dgx-a100's GPU (a100_sxm); it has 0.14.0"),
    ("aiconfigurator:vllm@0.14.0", "l40s-8", "has no vllm 0.14.0 data for l40s-8's GPU (l40s); it has 0.24.0, 0.27.0"),
])
def test_a_version_the_gpu_lacks_is_one_line_naming_those_it_has(spec, machine, needle):
    with pytest.raises(SplitwisePlanError, match=re.escape(needle)):
        load_stack(spec).rows(get_model("llama-3.1-70b"), BUILTIN_MACHINES[machine], 8)


@needs_aic
def test_it_replaces_the_shipped_measurements_of_every_pool():
    # Llama2-70B on DGX-A100 is measured in the shipped profiles (the paper's 2023 stack): with aiconfigurator
    # chosen, its latencies come from aiconfigurator, not mixed with the measurements
    from splitwise_plan.perf.profiles import ProfileSet
    profiles = ProfileSet.load()
    model, machine = get_model("llama2-70b"), BUILTIN_MACHINES["dgx-a100"]
    assert sourced_latency(profiles, model, machine, 8).kind == "measured"
    got = sourced_latency(profiles, model, machine, 8, load_stack("aiconfigurator:vllm"))
    assert got.kind == "estimated" and "aiconfigurator-core" in got.detail and "on a100_sxm" in got.detail


@needs_aic
@pytest.mark.parametrize("name, shipped, system, dtype", [
    ("qwen3-30b-a3b", "Qwen--Qwen3-30B-A3B", "h100_sxm", "bf16"),
    ("deepseek-v3", "deepseek-ai--DeepSeek-V3", "h200_sxm", "fp8"),
    ("gpt-oss-120b", "openai--gpt-oss-120b", "h100_sxm", "mxfp4"),
    ("mixtral-8x7b", "mistralai--Mixtral-8x7B-v0.1", "b200_sxm", "bf16"),
])
def test_moe_rows_are_engine_handle_numbers_for_its_own_config_at_ep_of_the_instance(name, shipped, system, dtype):
    # our config.json of each mixture against aiconfigurator's shipped one, its experts over the 8 GPUs of the
    # instance (moe_ep_size 8, moe_tp_size 1) and its attention at TP8, at its release's quantization
    import tempfile

    import aiconfigurator_core
    from aiconfigurator_core.sdk import EngineHandle
    gemm, experts = aic.MOE_QUANT[dtype]
    config = json.loads((Path(aiconfigurator_core.__file__).parent / "model_configs" / f"{shipped}_config.json").read_text())
    config.pop("quantization_config", None)   # (DeepSeek-V3's would put its KV cache at fp8 too: ours is at bf16)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config))
        h = EngineHandle.compile(tmp, system, "vllm", tp_size=8, moe_tp_size=1, moe_ep_size=8, backend_version="0.24.0",
                                 gemm_quant_mode=gemm, moe_quant_mode=experts)
        prefill = [h.predict_prefill_latency(1, x) for x in aic.BATCH_TOKENS]
        decode = [h.decode_step_latency(x, 2048, 1) for x in aic.BATCH_TOKENS]
    model = get_model(name)
    assert model.dtype == dtype
    machine = next(m for m in BUILTIN_MACHINES.values() if aic.SYSTEMS.get(m.hardware) == system and not m.power_cap)
    rows, detail = aic.AIConfiguratorStack("vllm", "0.24.0", context_tokens=2048).rows(model, machine, 8)
    assert f"vllm 0.24.0 on {system} (experts at EP8)" in detail
    for row, p, d, x in zip(rows, prefill, decode, aic.BATCH_TOKENS):
        if p >= max(prefill[:aic.BATCH_TOKENS.index(x) + 1]):   # where its curve does not dip
            assert row["prompt_time"] == pytest.approx(p, rel=0.01)
        if d >= max(decode[:aic.BATCH_TOKENS.index(x) + 1]):
            assert row["token_time"] == pytest.approx(d, rel=0.01)


def test_a_moe_config_text_holds_the_fields_aiconfigurator_reads():
    ds = json.loads(aic._config_text(get_model("deepseek-v3")))
    assert ds["architectures"] == ["DeepseekV3ForCausalLM"] and ds["model_type"] == "deepseek_v3"
    assert (ds["n_routed_experts"], ds["num_experts_per_tok"], ds["moe_intermediate_size"], ds["n_shared_experts"],
            ds["first_k_dense_replace"], ds["intermediate_size"]) == (256, 8, 2048, 1, 3, 18432)
    assert (ds["q_lora_rank"], ds["kv_lora_rank"], ds["qk_nope_head_dim"], ds["qk_rope_head_dim"], ds["v_head_dim"]) \
        == (1536, 512, 128, 64, 128)
    oss = json.loads(aic._config_text(get_model("gpt-oss-120b")))
    assert (oss["num_local_experts"], oss["num_experts_per_tok"], oss["sliding_window"]) == (128, 4, 128)
    assert oss["layer_types"][:2] == ["sliding_attention", "full_attention"] and len(oss["layer_types"]) == 36
    qwen = json.loads(aic._config_text(get_model("qwen3-30b-a3b")))
    assert (qwen["model_type"], qwen["num_experts"], qwen["moe_intermediate_size"]) == ("qwen3_moe", 128, 768)
    assert "num_experts_per_tok" not in json.loads(aic._config_text(get_model("llama-3.1-8b")))


@needs_aic
def test_a_moe_plan_on_it_names_the_source_and_the_expert_parallelism(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = main(["--goal", "min-cost", "--rps", "20", "--model", "qwen3-30b-a3b", "--designs", "H100:H100", "--tp", "8",
                 "--seeds", "1", "--duration", "30", "--stack", "aiconfigurator:vllm", "--json", str(out), "-q"])
    assert code == 0, capsys.readouterr().err
    sources = json.loads(out.read_text())["inputs"]["latency_sources"]
    assert "vllm 0.24.0 on h100_sxm (experts at EP8)" in sources["dgx-h100"]
    assert "vllm 0.14.0 on a100_sxm (experts at EP8)" in sources["reference"]


@needs_aic
def test_a_plan_on_it_names_the_source_backend_and_version(tmp_path, capsys):
    out = tmp_path / "plan.json"
    code = main(["--goal", "min-cost", "--rps", "20", "--model", "llama-3.1-70b", "--workload", "conversation",
                 "--designs", "H100:H100", "--seeds", "1", "--duration", "30", "--stack", "aiconfigurator:vllm",
                 "--json", str(out), "-q"])
    capsys.readouterr()
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["inputs"]["stack"].startswith("aiconfigurator:vllm (aiconfigurator-core ")
    sources = doc["inputs"]["latency_sources"]   # each GPU's current version, written out
    assert "vllm 0.24.0 on h100_sxm" in sources["dgx-h100"]
    assert "vllm 0.14.0 on a100_sxm" in sources["reference"]   # the slowdowns' reference reads it too
    assert [r["status"] for r in doc["results"]] == ["ok"] and doc["plan"]["winner"] is not None


def test_the_presets_ship_their_held_out_errors_and_profiles_prints_them(capsys):
    from splitwise_plan.perf.stack import shipped_stacks
    assert {"vllm", "sglang", "trtllm"} <= set(shipped_stacks())
    for name in ("vllm", "sglang", "trtllm"):
        stack = load_stack(name)
        assert stack.version.startswith(name + " ") and "aiconfigurator-core" in stack.source
        assert set(stack.held_out) == {"h200-141gb", "b200-180gb",   # and the MoE estimate's, per GPU
                                       "moe h100-80gb", "moe h200-141gb", "moe b200-180gb"}
    assert main(["profiles"]) == 0
    out = capsys.readouterr().out
    assert "Stack presets (--stack NAME)" in out
    vllm_b200 = next(line for line in out.splitlines() if "vllm" in line and "b200-180gb" in line)
    assert f"{load_stack('vllm').held_out['b200-180gb']['ratio_to_h100_median_pct']:.1f}" in vllm_b200
    vllm_moe = next(line for line in out.splitlines() if "vllm" in line and "moe h200-141gb" in line)
    assert f"{load_stack('vllm').held_out['moe h200-141gb']['decode_median_pct']:.1f}" in vllm_moe


def test_an_estimate_names_the_preset_and_its_version():
    from splitwise_plan.perf.sources import estimated
    got = estimated(get_model("llama-3.1-70b"), BUILTIN_MACHINES["dgx-h200"], 8, load_stack("vllm"))
    assert got.detail == "estimated from data sheets (stack vllm, vllm 0.24.0 (a100_sxm 0.14.0))"


@needs_aic
def test_a_preset_reads_a_current_stack_far_closer_than_the_papers():
    # Llama-3.1-70B on H100 at TP8 (a model and GPU the presets were fitted on, as a user's first plan has it):
    # the vllm preset's estimate against aiconfigurator's own vLLM numbers, and the 2023 stack's
    from splitwise_plan.perf.analytic import predict_times
    from splitwise_plan.perf.sources import accelerator_of, architecture_of
    model, machine = get_model("llama-3.1-70b"), BUILTIN_MACHINES["dgx-h100"]
    h = aic._engine(aic._config_text(model), "h100_sxm", "vllm", "0.24.0", 8, "bf16")
    batches = np.array([1, 8, 32, 64, 128])
    truth = np.array([h.decode_step_latency(int(b), 1024, 128) for b in batches])
    errors = {}
    for name in ("vllm", "default"):
        _, decode = predict_times(architecture_of(model), accelerator_of(machine), 8, load_stack(name), 1024, batches)
        errors[name] = float(np.median(np.abs(decode / truth - 1)))
    assert errors["vllm"] < 0.15 < 1.0 < errors["default"]   # (the 2023 stack's decode step reads 2-3x slower)


def test_profiles_show_prints_what_a_plan_reads(capsys):
    code = main(["profiles", "show", "--model", "llama-3.1-70b", "--machine", "B200", "--batch", "1,32,128",
                 "--context", "1024,8192", "--prompt-tokens", "512,2048", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"].startswith("estimated from data sheets (stack vllm") and doc["reads_context"] is True
    assert doc["stack"].startswith("vllm (auto: no profile measured llama-3.1-70b")
    prefill = [r["ms"] for r in doc["rows"] if r["phase"] == "prefill"]
    decode = {(r["batch"], r["context"]): r["ms"] for r in doc["rows"] if r["phase"] == "decode"}
    assert len(prefill) == 2 and prefill[0] < prefill[1]
    assert decode[1, 1024] < decode[32, 1024] < decode[128, 1024] < decode[128, 8192]   # batch and context
    # a measured profile (BLOOM-176B on the A100) reads no context
    assert main(["profiles", "show", "--model", "bloom-176b", "--machine", "A100", "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["source"].startswith("measured") and measured["reads_context"] is False


def test_profiles_show_bad_input_is_one_line(capsys):
    assert main(["profiles", "show", "--model", "llama-3.1-70b", "--batch", "1,x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--batch takes positive whole numbers" in err[0]


@needs_aic
def test_profiles_show_on_aiconfigurator_is_engine_handle_within_1_percent(capsys):
    code = main(["profiles", "show", "--model", "llama-3.1-70b", "--machine", "H100", "--stack",
                 "aiconfigurator:trtllm", "--prompt-tokens", "512,2048,8192", "--batch", "1,32,128",
                 "--context", "1024,8192", "--json"])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    assert "trtllm 1.3.0rc20 on h100_sxm" in doc["source"]
    h = aic._engine(aic._config_text(get_model("llama-3.1-70b")), "h100_sxm", "trtllm", "1.3.0rc20", 8, "bf16")
    for r in doc["rows"]:
        if r["phase"] == "prefill":
            assert r["ms"] == pytest.approx(h.predict_prefill_latency(1, r["tokens"]), rel=0.01)
        else:
            truth = h.decode_step_latency(r["batch"], r["context"], 1)
            below = [h.decode_step_latency(b, r["context"], 1) for b in aic.BATCH_TOKENS if b <= r["batch"]]
            if truth >= max(below):   # where its curve does not dip
                assert r["ms"] == pytest.approx(truth, rel=0.01)
