"""Models from their architecture: the built-in files, a user's config.json, the sizes they give."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.machines import BUILTIN_MACHINES
from splitwise_plan.inputs.models import (
    BUILTIN_MODELS,
    ModelSpec,
    check_fits,
    count_params,
    get_model,
    model_from_config,
    model_names,
    weights_fit_problem,
)
from splitwise_plan.inputs.paths import data_file, shipped_files

LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _config(tmp_path, doc, name="config.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def test_the_papers_models_are_sized_as_the_reference():
    bloom, llama2 = BUILTIN_MODELS["bloom-176b"], BUILTIN_MODELS["llama2-70b"]
    assert (bloom.weights_bytes, llama2.weights_bytes) == (329_000_000_000, 135_000_000_000)
    assert bloom.kv_bytes_per_token == 2 * 14336 * 70 * 2 == 4_014_080
    assert llama2.kv_bytes_per_token == 2 * 8192 * 80 * 2 == 2_621_440
    assert (bloom.kv_sizing, llama2.kv_sizing, bloom.dtype, llama2.dtype) == ("reference", "reference", "bf16", "bf16")
    assert (bloom.num_layers, bloom.hidden_size, llama2.num_layers, llama2.hidden_size) == (70, 14336, 80, 8192)
    assert get_model("BLOOM-176B") is bloom and get_model("llama2-70b") is llama2


def test_a_spec_built_by_hand_as_before_keeps_the_reference_sizing():
    m = ModelSpec("x", num_layers=10, hidden_size=1024, weights_bytes=5)
    assert (m.kv_sizing, m.kv_bytes_per_token, m.params, m.dtype) == ("reference", 2 * 1024 * 10 * 2, 0, "bf16")
    assert get_model("X", {"x": m}) is m


def test_gqa_kv_of_llama_3_1_70b():
    m = get_model("llama-3.1-70b")
    assert (m.kv_sizing, m.num_kv_heads, m.head_dim) == ("gqa", 8, 128)
    assert m.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680
    assert get_model("llama-3.1-70b", kv_sizing="reference").kv_bytes_per_token == 2 * 8192 * 80 * 2
    # the paper's llama2-70b read with its real GQA: the same 8 KV heads of 128
    assert get_model("llama2-70b", kv_sizing="gqa").kv_bytes_per_token == 327_680


@pytest.mark.parametrize("name,published", [
    ("llama-3.1-8b", 8.0e9), ("llama-3.1-70b", 70.6e9), ("llama-3.1-405b", 405.9e9),
    ("qwen2.5-72b", 72.7e9), ("mistral-large-2", 122.6e9),
    ("bloom-176b", 176.2e9), ("llama2-70b", 69.0e9)])
def test_parameter_counts_land_near_the_published_sizes(name, published):
    m = get_model(name)
    assert m.params == pytest.approx(published, rel=0.02)
    if name not in ("bloom-176b", "llama2-70b"):
        assert m.weights_bytes == 2 * m.params   # bf16


def test_parameter_count_by_hand():
    # Llama-3.1-8B: 2 * 128256 * 4096 embeddings and head, 32 layers of q,o (2 * 4096^2), k,v (2 * 4096 * 1024)
    # and a gated MLP (3 * 4096 * 14336)
    want = 2 * 128256 * 4096 + 32 * (2 * 4096 ** 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert get_model("llama-3.1-8b").params == want == 8_029_995_008
    # BLOOM: tied embeddings, 4 h^2 attention and a 2-matrix 4h MLP: the published count less norms and biases
    bloom = count_params(num_layers=70, hidden_size=14336, num_heads=112, num_kv_heads=112, head_dim=128,
                         intermediate_size=4 * 14336, vocab_size=250880, mlp_matrices=2, tie_word_embeddings=True)
    assert bloom == 250880 * 14336 + 70 * 12 * 14336 ** 2
    assert bloom == pytest.approx(get_model("bloom-176b").params, rel=1e-4)


def test_fp8_halves_the_weights_and_keeps_the_kv_cache_at_bf16():
    bf16, fp8 = get_model("llama-3.1-70b"), get_model("llama-3.1-70b", dtype="fp8")
    assert fp8.dtype == "fp8" and fp8.weights_bytes * 2 == bf16.weights_bytes == 2 * bf16.params
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token
    assert get_model("bloom-176b", dtype="float8_e4m3fn").weights_bytes == 164_500_000_000
    assert get_model("llama2-70b", dtype="bfloat16") is BUILTIN_MODELS["llama2-70b"]
    assert get_model("llama-3.1-8b", dtype="float16").weights_bytes == bf16.bytes_per_param * 8_029_995_008


def test_builtin_names_and_files():
    names = model_names()
    assert names[:2] == ["bloom-176b", "llama2-70b"]
    assert set(names[:7]) == {"bloom-176b", "llama2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
                              "qwen2.5-72b", "mistral-large-2"}   # the dense ones, then the mixtures of experts
    assert names[7:] == ["deepseek-v3", "gpt-oss-120b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b"]
    assert list(BUILTIN_MODELS) == names and len(BUILTIN_MODELS) == 12
    for n in names:
        path = data_file("models", f"{n}.json")
        assert BUILTIN_MODELS[n].name == n and "Hugging Face" in BUILTIN_MODELS[n].source
        assert json.loads(path.read_text())["_source"] and str(path.resolve()) in shipped_files()
    assert "models/README.md" in shipped_files().values()
    assert get_model("Llama-2-70B") is BUILTIN_MODELS["llama2-70b"]   # an alias


def test_unknown_name_lists_the_builtins_and_the_config_path():
    with pytest.raises(SplitwisePlanError) as err:
        get_model("gpt3")
    msg = str(err.value)
    assert msg.startswith("unknown model 'gpt3'; valid: bloom-176b, llama2-70b, llama-3.1-8b,")
    assert "config.json" in msg and "\n" not in msg


def test_a_users_config_json(tmp_path):
    folder = tmp_path / "Meta-Llama-3.1-8B"
    folder.mkdir()
    path = _config(folder, LLAMA_8B)
    for given in (path, str(path), folder, str(folder)):
        m = get_model(given)
        assert (m.name, m.params, m.kv_bytes_per_token) == ("meta-llama-3.1-8b", 8_029_995_008, 2 * 32 * 8 * 128 * 2)
        assert m.weights_bytes == 2 * m.params and str(path.resolve()) in m.source
    assert get_model(path, dtype="fp8").weights_bytes == 8_029_995_008


def test_a_config_with_its_own_head_dim_tied_embeddings_and_fp8(tmp_path):
    doc = dict(LLAMA_8B, hidden_size=2560, num_attention_heads=32, head_dim=128, num_key_value_heads=8,
               intermediate_size=9728, vocab_size=151936, num_hidden_layers=36, tie_word_embeddings=True,
               quantization_config={"quant_method": "fp8"})
    m = get_model(_config(tmp_path, doc, "small.json"))
    assert (m.name, m.head_dim, m.dtype) == ("small", 128, "fp8")
    assert m.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2
    assert m.params == 151936 * 2560 + 36 * (2560 * 128 * (2 * 32 + 2 * 8) + 3 * 2560 * 9728)
    assert m.weights_bytes == m.params


def test_a_config_without_kv_heads_is_multi_head(tmp_path):
    doc = {k: v for k, v in LLAMA_8B.items() if k != "num_key_value_heads"}
    assert get_model(_config(tmp_path, doc)).kv_bytes_per_token == 2 * 32 * 32 * 128 * 2


@pytest.mark.parametrize("doc,needle", [
    ("{not json", "is not valid JSON"),
    ("[1, 2]", "holds a JSON object"),
    ({k: v for k, v in LLAMA_8B.items() if k != "num_attention_heads"}, "missing num_attention_heads"),
    ({k: v for k, v in LLAMA_8B.items() if k != "intermediate_size"}, "missing intermediate_size"),
    (dict(LLAMA_8B, num_attention_heads=0), "num_attention_heads must be a positive whole number, got 0"),
    (dict(LLAMA_8B, hidden_size=4096.5), "hidden_size must be a positive whole number, got 4096.5"),
    (dict(LLAMA_8B, num_hidden_layers="32"), "num_hidden_layers must be a positive whole number, got '32'"),
    (dict(LLAMA_8B, num_attention_heads=48), "num_attention_heads 48 does not divide hidden_size 4096"),
    (dict(LLAMA_8B, num_key_value_heads=5), "num_key_value_heads 5 does not divide num_attention_heads 32"),
    (dict(LLAMA_8B, torch_dtype="int3"), "unknown dtype 'int3'; valid: bf16, bfloat16"),
    (dict(LLAMA_8B, torch_dtype="float32"), "unknown dtype 'float32'"),
    (dict(LLAMA_8B, tie_word_embeddings="no"), "tie_word_embeddings must be true or false"),
    (dict(LLAMA_8B, quantization_config={"quant_method": "gptq"}), "quantization 'gptq' is not modelled"),
    (dict(LLAMA_8B, model_type="mixtral"), "missing num_local_experts (needed for the number of its experts)"),
    (dict(LLAMA_8B, model_type="qwen3_moe", num_experts=128), "missing num_experts_per_tok"),
    (dict(LLAMA_8B, model_type="qwen3_moe", num_experts=8, num_experts_per_tok=9, moe_intermediate_size=768),
     "num_experts_per_tok 9 is more than its 8 experts"),
    (dict(LLAMA_8B, model_type="qwen3_moe", num_experts=8, num_experts_per_tok=2), "missing moe_intermediate_size"),
    (dict(LLAMA_8B, model_type="mixtral", num_local_experts=0, num_experts_per_tok=2),
     "num_local_experts must be a positive whole number, got 0"),
    (dict(LLAMA_8B, num_local_experts=8), "a mixture-of-experts model of a layout splitwise-plan does not read "
                                          "(num_local_experts); it reads the model_type mixtral, qwen3_moe, gpt_oss"),
    (dict(LLAMA_8B, model_type="dbrx"), "a mixture-of-experts model of a layout splitwise-plan does not read "
                                        "(model_type dbrx)"),
    (dict(LLAMA_8B, model_type="qwen2_moe", num_experts=60), "does not read (model_type qwen2_moe)"),
    (dict(LLAMA_8B, model_type="deepseek_v3"), "missing n_routed_experts"),
    (dict(LLAMA_8B, model_type="deepseek_v3", n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=64),
     "missing kv_lora_rank (needed for its latent attention (MLA))"),
    (dict(LLAMA_8B, n_routed_experts=256), "does not read (n_routed_experts)"),
    (dict(LLAMA_8B, moe_intermediate_size=1408), "does not read (moe_intermediate_size)"),
    (dict(LLAMA_8B, quantization_config={"quant_method": "mxfp4"}), "quantization 'mxfp4' is not modelled"),
    (dict(LLAMA_8B, layer_types=["sliding_attention"] * 32, sliding_window=128), "every layer of layer_types slides"),
    (dict(LLAMA_8B, layer_types=["linear_attention"] * 32, sliding_window=128), "layer_types must list 32 layers"),
])
def test_bad_configs_are_one_line_errors_naming_the_file(tmp_path, doc, needle):
    path = _config(tmp_path, doc)
    with pytest.raises(SplitwisePlanError) as err:
        get_model(path)
    msg = str(err.value)
    assert needle in msg and str(path) in msg and "\n" not in msg


def test_missing_files_and_bad_options(tmp_path):
    with pytest.raises(SplitwisePlanError, match="model config file not found"):
        get_model(tmp_path / "none.json")
    with pytest.raises(SplitwisePlanError, match="holds no config.json"):
        get_model(tmp_path)
    with pytest.raises(SplitwisePlanError, match="unknown dtype 'int4'; valid: bf16, bfloat16, .*fp8"):
        get_model("llama-3.1-8b", dtype="int4")
    with pytest.raises(SplitwisePlanError, match="unknown kv_sizing 'mqa'; valid: reference, gqa, mla"):
        get_model("llama-3.1-8b", kv_sizing="mqa")
    with pytest.raises(SplitwisePlanError, match="mla KV sizing needs a latent attention"):
        get_model("llama-3.1-8b", kv_sizing="mla")
    with pytest.raises(SplitwisePlanError, match="^dtype: nvfp4 weights are not supported: .*plan at fp8"):
        get_model("deepseek-v3", dtype="nvfp4")
    with pytest.raises(SplitwisePlanError, match="dtype mxfp4 quantizes a mixture's experts, and llama-3.1-8b has none"):
        get_model("llama-3.1-8b", dtype="mxfp4")
    with pytest.raises(SplitwisePlanError, match="gqa KV sizing needs its attention heads"):
        get_model("x", {"x": ModelSpec("x", 10, 1024, 5)}, kv_sizing="gqa")


def test_a_model_too_big_for_the_machine():
    a100 = BUILTIN_MACHINES["dgx-a100"]   # 8 x 80 GiB
    check_fits(get_model("bloom-176b"), a100, 8)
    assert weights_fit_problem(get_model("llama-3.1-70b"), a100, 2) is None
    big = get_model("llama-3.1-405b")   # 812 GB at bf16: more than the 640 GiB of the machine
    with pytest.raises(SplitwisePlanError, match=r"the weights of llama-3.1-405b \(812 GB\) do not fit in the "
                                                 r"640 GiB of HBM of dgx-a100$"):
        check_fits(big, a100)
    msg = weights_fit_problem(big, a100, 8, tensor_parallel=8)
    assert msg.startswith("the weights of llama-3.1-405b (812 GB) do not fit in the 640 GiB of HBM of dgx-a100: "
                          "llama-3.1-405b is too big for dgx-a100 at tensor parallelism 8")
    assert "even all 8 GPUs of dgx-a100 cannot hold it" in msg and "fp8 weights" in msg
    small = weights_fit_problem(get_model("llama-3.1-70b"), a100, 1, tensor_parallel=1)
    assert "at tensor parallelism 1" in small and "its weights need at least 2 of the 8 GPUs of dgx-a100" in small


# --- mixtures of experts ------------------------------------------------------------------------------

#: (total, active) parameters as their makers publish them. gpt-oss's 5.1B active leaves out the input
#: embedding (OpenAI's model card: 5.13B); the others count both embedding tables, as this module does.
PUBLISHED_MOE = {"qwen3-30b-a3b": (30.5e9, 3.3e9), "qwen3-235b-a22b": (235e9, 22e9), "gpt-oss-120b": (117e9, 5.1e9),
                 "deepseek-v3": (671e9, 37e9), "mixtral-8x7b": (46.7e9, 12.9e9)}


@pytest.mark.parametrize("name", sorted(PUBLISHED_MOE))
def test_moe_parameter_counts_are_the_published_ones(name):
    m = get_model(name)
    total, active = PUBLISHED_MOE[name]
    input_embedding = m.vocab_size * m.hidden_size if name == "gpt-oss-120b" else 0
    assert m.params == pytest.approx(total, rel=0.02)
    assert m.active_params - input_embedding == pytest.approx(active, rel=0.02)
    assert m.active_params < m.params and "Hugging Face" in m.source


def test_deepseek_v3_by_hand():
    m = get_model("deepseek-v3")
    h, heads = 7168, 128
    mla = (h * 1536 + 1536 * heads * (128 + 64)          # queries through the rank-1536 bottleneck
           + h * (512 + 64) + 512 * heads * (128 + 128)  # the KV latent and the RoPE key; keys and values from it
           + heads * 128 * h)                           # the output projection
    dense_mlp, expert, router = 3 * h * 18432, 3 * h * 2048, h * 256
    embeddings = 2 * 129280 * h
    assert m.params == embeddings + 61 * mla + 3 * dense_mlp + 58 * ((256 + 1) * expert + router)
    assert m.active_params == embeddings + 61 * mla + 3 * dense_mlp + 58 * ((8 + 1) * expert + router)
    assert (m.experts.count, m.experts.per_token, m.experts.shared, m.experts.dense_layers) == (256, 8, 1, 3)
    # MLA: one 512-value latent and one 64-value RoPE key a layer, at bf16, whatever the 128 heads
    assert (m.kv_sizing, m.kv_bytes_per_token) == ("mla", 61 * (512 + 64) * 2) == ("mla", 70_272)
    # its release is fp8: a byte a weight, every expert held
    assert m.dtype == "fp8" and m.weights_bytes == m.params == 671_025_397_760
    assert get_model("deepseek-v3", dtype="bf16").weights_bytes == 2 * m.params


def test_moe_kv_cache_per_token_by_hand():
    assert get_model("qwen3-30b-a3b").kv_bytes_per_token == 2 * 48 * 4 * 128 * 2 == 98_304
    assert get_model("qwen3-235b-a22b").kv_bytes_per_token == 2 * 94 * 4 * 128 * 2 == 192_512
    assert get_model("mixtral-8x7b").kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    # gpt-oss: its 18 sliding-window layers hold 128 tokens whatever the context; the KV cache that grows with
    # the context is the 18 full-attention layers'
    oss = get_model("gpt-oss-120b")
    assert (oss.kv_layers, oss.kv_bytes_per_token) == (18, 2 * 18 * 8 * 64 * 2) == (18, 36_864)


def test_gpt_oss_is_its_release_mxfp4_experts_unless_a_dtype_is_given():
    m = get_model("gpt-oss-120b")
    experts = 36 * 128 * 3 * 2880 * 2880
    assert m.dtype == "mxfp4" and m.expert_params == experts
    # MXFP4 experts (4.25 bits: 4-bit values, an 8-bit scale per 32) and the rest at bf16: about 65 GB
    assert m.weights_bytes == (m.params - experts) * 2 + math.ceil(experts * 4.25 / 8)
    assert m.weights_bytes == pytest.approx(65.2e9, rel=0.005)
    assert get_model("gpt-oss-120b", dtype="bf16").weights_bytes == 2 * m.params
    assert get_model("gpt-oss-120b", dtype="fp8").weights_bytes == m.params
    assert get_model("gpt-oss-120b", dtype="fp8").kv_bytes_per_token == m.kv_bytes_per_token


def test_deepseek_v3_at_fp8_fits_h200_and_b200_not_a_dgx_h100():
    m = get_model("deepseek-v3")
    h100, h200, b200 = (BUILTIN_MACHINES[n] for n in ("dgx-h100", "dgx-h200", "dgx-b200"))
    # 671.0 GB of 8 x 80 GiB = 687.2 GB is 97.6%: more than the 90% (618.5 GB) that weights may take
    assert 0.9 * 8 * 80 * 2**30 < m.weights_bytes < 8 * 80 * 2**30
    problem = weights_fit_problem(m, h100)
    assert problem == ("the weights of deepseek-v3 (671 GB) do not fit in the 640 GiB of HBM of dgx-h100 (they would "
                       "take 98% of it, and weights may take at most 90%, vLLM's default gpu_memory_utilization)")
    # 8 x 141 GB = 1,128 GB (59%) and 8 x 180 GB = 1,440 GB (47%)
    assert m.weights_bytes <= 0.9 * 8 * 141e9 and m.weights_bytes <= 0.9 * 8 * 180e9
    assert weights_fit_problem(m, h200) is None and weights_fit_problem(m, b200) is None
    assert "its weights need at least 6 of the 8 GPUs of dgx-h200" in weights_fit_problem(m, h200, 4, 4)
    # a request alone (the slowdown reference) needs no batch's KV cache: the weights need only fit the HBM
    assert weights_fit_problem(m, h100, share=1.0) is None


def test_ninety_percent_of_the_hbm_for_the_weights_whatever_the_model():
    a100 = BUILTIN_MACHINES["dgx-a100"]   # 687.2 GB
    spec = ModelSpec("x", num_layers=10, hidden_size=1024, weights_bytes=int(0.9 * a100.hbm_of()))
    assert weights_fit_problem(spec, a100) is None
    over = ModelSpec("x", num_layers=10, hidden_size=1024, weights_bytes=int(0.9 * a100.hbm_of()) + 1)
    with pytest.raises(SplitwisePlanError, match=r"do not fit .* \(they would take 90% of it, and weights may take "
                                                 r"at most 90%"):
        check_fits(over, a100)


def test_a_users_moe_config_json_in_a_folder_works_like_the_built_in(tmp_path):
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    doc = {k: v for k, v in json.loads(data_file("models", "qwen3-30b-a3b.json").read_text()).items()
           if not k.startswith("_")}
    _config(folder, dict(doc, num_experts_per_tok=8, output_router_logits=False, router_aux_loss_coef=0.001))
    mine, builtin = get_model(folder), get_model("qwen3-30b-a3b")
    assert mine.name == "qwen3-30b-a3b" and str(folder.resolve()) in mine.source
    assert dataclasses.replace(mine, source=builtin.source) == builtin
    assert get_model(folder, dtype="fp8").weights_bytes == builtin.params


def test_moe_layouts_read_their_dense_layers():
    doc = {k: v for k, v in json.loads(data_file("models", "qwen3-30b-a3b.json").read_text()).items()
           if not k.startswith("_")}
    sparse = model_from_config(dict(doc, mlp_only_layers=[0, 1], decoder_sparse_step=2), "x", "x.json")
    assert sparse.experts.dense_layers == 25   # 23 of the 48 are MoE: odd ones, 1 excepted
    with pytest.raises(SplitwisePlanError, match="x.json: no layer of its 48 is a mixture of experts"):
        model_from_config(dict(doc, mlp_only_layers=list(range(48))), "x", "x.json")
