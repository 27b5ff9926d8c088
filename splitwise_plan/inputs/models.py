"""LLM architectures: what the simulator needs to size the KV cache and the weights.

A model is read from its architecture, in the keys of a Hugging Face ``config.json``: the built-in ones
from the JSON files of the shipped ``models/`` folder (loaded on first use), a user's from the path of
a ``config.json`` (or of the folder holding one). From layers, hidden size, attention and KV heads, MLP
width and vocabulary the module counts the parameters, hence the weights' bytes at the serving dtype
(bf16: 2 bytes a parameter, fp8: 1), and the KV-cache bytes one token takes:

* ``gqa`` sizing: ``2 * layers * kv_heads * head_dim * 2`` (keys and values, at bf16), the default; where
  some layers attend through a sliding window (gpt-oss), only the full-attention layers count;
* ``mla`` sizing: ``layers * (kv_lora_rank + qk_rope_head_dim) * 2``, DeepSeek-V3's multi-head latent
  attention (one latent and one RoPE key a layer, whatever the heads);
* ``reference`` sizing: ``2 * hidden * layers * 2``, the Splitwise reference simulator's (no GQA), the
  default of the paper's two models (bloom-176b, llama2-70b), whose weights are the reference's bytes.

Mixtures of experts (MoE) are read in four layouts: Mixtral, Qwen3-MoE, gpt-oss and DeepSeek-V3
(``MOE_LAYOUTS``). Every expert's weights are held; a token computes on the active parameters only (its
``num_experts_per_tok`` routed experts, the shared ones and the rest). gpt-oss's release holds its experts
at MXFP4 (dtype ``mxfp4``: 4.25 bits an expert weight, the rest at bf16). Other MoE layouts are refused.
An instance holds a model when its weights take at most 90% of its HBM (``WEIGHTS_HBM_SHARE``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from splitwise_plan.errors import SplitwisePlanError, by_name, choices

#: Bytes of one weight at each serving dtype. ``bf16`` stands for every 2-byte float (bfloat16, float16:
#: the same size and, on the GPUs modelled, the same speed).
DTYPE_BYTES = {"bf16": 2, "fp8": 1}
#: How a dtype may be spelled (by the API or a config's ``torch_dtype``), and the dtype it is.
DTYPE_SPELLINGS = {
    "bf16": "bf16", "bfloat16": "bf16", "fp16": "bf16", "float16": "bf16", "half": "bf16",
    "fp8": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e4m3": "fp8", "float8_e5m2": "fp8",
    "e4m3": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8",
    "mxfp4": "mxfp4",
}
#: Dtypes that quantize a mixture's routed experts only, the other weights staying bf16, and the bytes of one
#: expert weight: MXFP4 is 4-bit values with an 8-bit scale per 32 (gpt-oss's release).
EXPERT_DTYPE_BYTES = {"mxfp4": 4.25 / 8}
#: Dtypes that are not modelled, and why (a one-line error says so).
UNSUPPORTED_DTYPES = {
    "nvfp4": ("nvfp4 weights are not supported: the machines' data sheets give no fp4 peak for the estimate "
              "(plan at fp8; AIConfigurator's nvfp4 kernels of B200, B300 and GB200 are not read)"),
}
UNSUPPORTED_DTYPES["fp4"] = UNSUPPORTED_DTYPES["nvfp4"]
#: KV-cache sizings (see the module's docstring).
KV_SIZINGS = ("reference", "gqa", "mla")
#: The share of an instance's HBM its weights may take: vLLM's default ``gpu_memory_utilization``; the rest
#: holds activations and the KV cache. Only the fit check reads it (the KV cache's capacity is the HBM left
#: after the weights).
WEIGHTS_HBM_SHARE = 0.9
#: Bytes of one KV-cache value: bf16, whatever the weights' dtype.
KV_VALUE_BYTES = 2

#: Model families whose MLP is two matrices (up, down); the others' is gated (gate, up, down: llama-style).
TWO_MATRIX_MLP = frozenset({"bloom", "gpt2", "gpt_bigcode", "gpt_neox", "gptj", "opt", "falcon", "starcoder2",
                            "phi"})
#: Model families that tie the LM head to the embeddings when a config does not say.
TIED_BY_DEFAULT = frozenset({"bloom", "gpt2", "gpt_bigcode", "opt"})
#: Mixture-of-experts layouts this module reads (a config's ``model_type``), and the key of each one's expert
#: count, of its experts' width and of the experts a token uses.
MOE_LAYOUTS = {
    "mixtral": ("num_local_experts", "intermediate_size"),
    "qwen3_moe": ("num_experts", "moe_intermediate_size"),
    "gpt_oss": ("num_local_experts", "intermediate_size"),
    "deepseek_v3": ("n_routed_experts", "moe_intermediate_size"),
}
#: Model families that are mixtures of experts.
MOE_TYPES = frozenset({"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "dbrx", "olmoe", "phimoe",
                       "granitemoe", "granitemoeshared", "jetmoe", "jamba", "switch_transformers", "nllb_moe",
                       "gpt_oss", "llama4", "llama4_text", "minimax", "arctic", "grok-1", "hunyuan_v1_moe",
                       "ernie4_5_moe", "glm4_moe", "dots1", "bailing_moe"})
#: Config keys that count experts.
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "n_shared_experts",
               "expert_interval", "ffn_config")
#: Alias of a built-in name -> the name.
ALIASES = {"llama-2-70b": "llama2-70b", "mistral-large-instruct-2407": "mistral-large-2",
           "bloom": "bloom-176b"}


@dataclass(frozen=True)
class Experts:
    """The MLPs of a mixture of experts: each MoE layer holds ``count`` routed experts, each a gated MLP (3
    matrices of hidden x ``width``), of which a token uses ``per_token``, and ``shared`` experts of the same
    width that every token uses, plus a router (hidden x ``count``). ``dense_layers`` layers have a dense MLP
    (the model's ``intermediate_size``) instead (DeepSeek-V3's first 3)."""

    count: int
    per_token: int
    width: int
    shared: int = 0
    dense_layers: int = 0


@dataclass(frozen=True)
class LatentAttention:
    """Multi-head latent attention (DeepSeek-V3): queries through a rank-``q_rank`` bottleneck (0: none), keys
    and values through a rank-``kv_rank`` latent; each head has ``nope_dim + rope_dim`` query and key dims and
    ``v_dim`` value dims. The KV cache holds the latent and the RoPE key: ``kv_rank + rope_dim`` values a layer."""

    q_rank: int
    kv_rank: int
    nope_dim: int
    rope_dim: int
    v_dim: int


@dataclass(frozen=True)
class ModelSpec:
    """One LLM, dense or a mixture of experts: its architecture, the weights' bytes and the KV-cache bytes a
    token takes.

    ``dtype_bytes`` is the bytes of one KV-cache value (2: bf16, also when the weights are fp8);
    ``dtype`` is the weights' (``bf16``, ``fp8``, or ``mxfp4``: a mixture's experts at MXFP4, the rest at
    bf16). Architecture fields left at 0 are unknown (a spec built by hand from layers and hidden size only,
    sized as the reference); ``num_kv_heads`` 0 means ``num_heads`` (no GQA) and ``head_dim`` 0 means
    ``hidden_size / num_heads``. ``kv_sizing`` None is ``gqa`` when the heads are known, else ``reference``;
    ``params`` 0 is counted from the architecture when it is complete. A mixture of experts has ``experts``;
    its ``active_params`` (those one token computes on) are counted too (0: a dense model's, all of them).
    ``kv_layers`` is the layers whose KV cache grows with the context (0: all; gpt-oss's full-attention half).
    """

    name: str
    num_layers: int
    hidden_size: int
    weights_bytes: int
    dtype_bytes: int = KV_VALUE_BYTES
    num_heads: int = 0
    num_kv_heads: int = 0
    head_dim: int = 0
    intermediate_size: int = 0
    vocab_size: int = 0
    mlp_matrices: int = 3
    tie_word_embeddings: bool = False
    params: int = 0
    dtype: str = "bf16"
    kv_sizing: str | None = None
    source: str = ""
    architecture: str = ""       # the config's first ``architectures`` entry ('' unknown)
    max_positions: int = 0       # max_position_embeddings (0 unknown)
    rope_theta: float = 0.0      # the RoPE base (0 unknown or none)
    experts: Experts | None = None          # a mixture of experts' layout (None: dense)
    mla: LatentAttention | None = None      # multi-head latent attention (None: heads of keys and values)
    kv_layers: int = 0                      # layers whose KV cache grows with the context (0: all of them)
    active_params: int = 0                  # parameters one token computes on (0: all of them, dense)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES and self.dtype not in EXPERT_DTYPE_BYTES:
            raise SplitwisePlanError(f"model {self.name}: unknown dtype {self.dtype!r}; valid: "
                                     f"{choices([*DTYPE_BYTES, *EXPERT_DTYPE_BYTES])}")
        if self.dtype in EXPERT_DTYPE_BYTES and self.experts is None:
            raise SplitwisePlanError(f"model {self.name}: dtype {self.dtype} quantizes a mixture's experts, and "
                                     f"{self.name} has none (valid: {choices(DTYPE_BYTES)})")
        if self.num_heads and not self.num_kv_heads:
            object.__setattr__(self, "num_kv_heads", self.num_heads)
        if self.num_heads and not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_heads)
        if self.kv_sizing is None:
            object.__setattr__(self, "kv_sizing", "gqa" if self.num_heads else "reference")
        if self.kv_sizing not in KV_SIZINGS:
            raise SplitwisePlanError(f"model {self.name}: unknown kv_sizing {self.kv_sizing!r}; "
                                     f"valid: {', '.join(KV_SIZINGS)}")
        if self.kv_sizing == "gqa" and not self.num_heads:
            raise SplitwisePlanError(f"model {self.name}: gqa KV sizing needs its attention heads; "
                                     "it gives none (use kv_sizing='reference')")
        if self.kv_sizing == "mla" and self.mla is None:
            raise SplitwisePlanError(f"model {self.name}: mla KV sizing needs a latent attention (kv_lora_rank); "
                                     "it has none (use kv_sizing='gqa')")
        if self.num_heads and self.intermediate_size and self.vocab_size:
            shape = dict(num_layers=self.num_layers, hidden_size=self.hidden_size, num_heads=self.num_heads,
                         num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                         intermediate_size=self.intermediate_size, vocab_size=self.vocab_size,
                         mlp_matrices=self.mlp_matrices, tie_word_embeddings=self.tie_word_embeddings,
                         experts=self.experts, mla=self.mla)
            if not self.params:
                object.__setattr__(self, "params", count_params(**shape))
            if self.experts is not None and not self.active_params:
                object.__setattr__(self, "active_params", count_params(**shape, active=True))

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across the whole model, as ``kv_sizing`` says."""
        if self.kv_sizing == "reference":
            return 2 * self.hidden_size * self.num_layers * self.dtype_bytes
        if self.kv_sizing == "mla":
            return self.num_layers * (self.mla.kv_rank + self.mla.rope_dim) * self.dtype_bytes
        return 2 * (self.kv_layers or self.num_layers) * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_param(self) -> int:
        """Bytes of one weight at the model's dtype (2 for bf16, 1 for fp8; 2 for the non-expert weights of
        a dtype of the experts only, mxfp4)."""
        return DTYPE_BYTES.get(self.dtype, DTYPE_BYTES["bf16"])

    @property
    def moe_layers(self) -> int:
        """The layers whose MLP is a mixture of experts (0: a dense model)."""
        return self.num_layers - self.experts.dense_layers if self.experts is not None else 0

    @property
    def expert_params(self) -> int:
        """Parameters of all the routed experts of all the MoE layers (0: a dense model)."""
        e = self.experts
        return self.moe_layers * e.count * 3 * self.hidden_size * e.width if e is not None else 0

    @property
    def expert_weights_bytes(self) -> float:
        """Bytes of all the routed experts' weights at the model's dtype (0: a dense model)."""
        return self.expert_params * EXPERT_DTYPE_BYTES.get(self.dtype, self.bytes_per_param)


def count_params(*, num_layers: int, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 intermediate_size: int, vocab_size: int, mlp_matrices: int = 3, tie_word_embeddings: bool = False,
                 experts: Experts | None = None, mla: LatentAttention | None = None, active: bool = False) -> int:
    """Parameters of a decoder: embeddings, each layer's attention (queries and output projection over all
    heads, keys and values over the KV heads; or ``mla``'s projections) and MLP (``mlp_matrices`` hidden x
    intermediate matrices: 3 gated, llama-style; 2 bloom-style), and the LM head unless tied to the embeddings.
    With ``experts``, each MoE layer's MLP is its router and experts: all of them, or with ``active`` those one
    token computes on (``per_token`` routed and the shared ones). Norms and biases are left out (well under
    0.1% of a model this tool plans). Both embedding tables count as active, as Qwen, Mistral and DeepSeek
    publish it (gpt-oss's published 5.1B active leaves out the input embedding)."""
    if mla is None:
        attention = hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)
    else:
        q_head = mla.nope_dim + mla.rope_dim
        queries = (hidden_size * mla.q_rank + mla.q_rank * num_heads * q_head if mla.q_rank
                   else hidden_size * num_heads * q_head)
        attention = (queries + hidden_size * (mla.kv_rank + mla.rope_dim)
                     + mla.kv_rank * num_heads * (mla.nope_dim + mla.v_dim) + num_heads * mla.v_dim * hidden_size)
    mlp = mlp_matrices * hidden_size * intermediate_size
    embeddings = vocab_size * hidden_size * (1 if tie_word_embeddings else 2)
    if experts is None:
        return embeddings + num_layers * (attention + mlp)
    routed = experts.per_token if active else experts.count
    moe_mlp = 3 * hidden_size * experts.width * (routed + experts.shared) + hidden_size * experts.count
    dense = experts.dense_layers
    return embeddings + num_layers * attention + dense * mlp + (num_layers - dense) * moe_mlp


def weights_bytes_at(dtype: str, params: int, expert_params: int = 0) -> int:
    """Bytes of ``params`` weights at ``dtype``; a dtype of the experts only (mxfp4) holds the
    ``expert_params`` at its size and the others at bf16."""
    if dtype in EXPERT_DTYPE_BYTES:
        return (params - expert_params) * DTYPE_BYTES["bf16"] + math.ceil(expert_params * EXPERT_DTYPE_BYTES[dtype])
    return params * DTYPE_BYTES[dtype]


def dtype_named(value, what: str = "dtype") -> str:
    """The dtype (``bf16``, ``fp8`` or ``mxfp4``) a spelling names (bfloat16, float16, fp8, float8_e4m3fn...),
    or a user error naming ``what`` and the valid spellings (or why nvfp4 is not supported)."""
    key = value.strip().lower() if isinstance(value, str) else None
    if key in UNSUPPORTED_DTYPES:
        raise SplitwisePlanError(f"{what}: {UNSUPPORTED_DTYPES[key]}")
    if key not in DTYPE_SPELLINGS:
        raise SplitwisePlanError(f"{what}: unknown dtype {value!r}; valid: {choices(DTYPE_SPELLINGS)} "
                                 "(2-byte types count as bf16, 1-byte as fp8; mxfp4 is a mixture's experts at MXFP4)")
    return DTYPE_SPELLINGS[key]


# --- reading a config.json ----------------------------------------------------------------------

#: Each architecture field and the config keys that may give it, first found wins (GPT-style names too).
_FIELD_KEYS = {
    "num_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "num_heads": ("num_attention_heads", "n_head", "num_heads"),
    "num_kv_heads": ("num_key_value_heads", "num_kv_heads"),
    "intermediate_size": ("intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "vocab_size": ("vocab_size",),
    "head_dim": ("head_dim",),
}


def _field(config: dict, where: str, field: str, required: bool = True) -> int:
    """A positive whole-number architecture field of ``config`` (0 when absent and not ``required``)."""
    keys = _FIELD_KEYS[field]
    key = next((k for k in keys if config.get(k) is not None), None)
    if key is None:
        if required:
            raise SplitwisePlanError(f"{where}: missing {keys[0]} (needed for the model's {field.replace('_', ' ')})")
        return 0
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SplitwisePlanError(f"{where}: {key} must be a positive whole number, got {value!r}")
    return value


def _count(config: dict, where: str, key: str, what: str, least: int = 1) -> int:
    """A whole number of at least ``least`` that ``config`` must give under ``key`` (``what``: what it is)."""
    value = config.get(key)
    if value is None:
        raise SplitwisePlanError(f"{where}: missing {key} (needed for {what})")
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = "a positive whole number" if least > 0 else "a whole number, not negative"
        raise SplitwisePlanError(f"{where}: {key} must be {kind}, got {value!r}")
    return value


def _moe_signs(config: dict, model_type: str) -> str:
    """Why ``config`` reads as a mixture of experts, in words ('' for a dense model)."""
    keys = [k for k in config if (k in EXPERT_KEYS or k.startswith("moe_")) and config[k] not in (None, 0, 1, False)]
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str) and re.search("moe|mixtral", a, re.I)]
    if model_type in MOE_TYPES:
        return f"model_type {model_type}"
    return ", ".join(keys or archs)


def _dense_layers(config: dict, where: str, model_type: str, num_layers: int) -> int:
    """How many of a mixture's layers have a dense MLP: DeepSeek-V3's first ``first_k_dense_replace`` (and those
    off its ``moe_layer_freq``), Qwen3-MoE's ``mlp_only_layers`` (and those off its ``decoder_sparse_step``)."""
    if model_type == "deepseek_v3":
        first = _count({"first_k_dense_replace": 0, **config}, where, "first_k_dense_replace", "", least=0)
        every = _count({"moe_layer_freq": 1, **config}, where, "moe_layer_freq", "")
        moe = [i for i in range(num_layers) if i >= first and i % every == 0]
    elif model_type == "qwen3_moe":
        only = config.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise SplitwisePlanError(f"{where}: mlp_only_layers must be a list of layer numbers, got {only!r}")
        every = _count({"decoder_sparse_step": 1, **config}, where, "decoder_sparse_step", "")
        moe = [i for i in range(num_layers) if i not in only and (i + 1) % every == 0]
    else:
        return 0
    if not moe:
        raise SplitwisePlanError(f"{where}: no layer of its {num_layers} is a mixture of experts")
    return num_layers - len(moe)


def _experts(config: dict, where: str, model_type: str, num_layers: int) -> Experts | None:
    """The experts of a mixture-of-experts config (None: a dense one); a user error naming the file for a
    layout this module does not read, or an expert count missing."""
    why = _moe_signs(config, model_type)
    if not why:
        return None
    if model_type not in MOE_LAYOUTS:
        raise SplitwisePlanError(f"{where}: a mixture-of-experts model of a layout splitwise-plan does not read "
                                 f"({why}); it reads the model_type {', '.join(MOE_LAYOUTS)}")
    count_key, width_key = MOE_LAYOUTS[model_type]
    count = _count(config, where, count_key, "the number of its experts")
    tok_key = "num_experts_per_tok" if "num_experts_per_tok" in config or "experts_per_token" not in config \
        else "experts_per_token"
    per_token = _count(config, where, tok_key, "the experts a token uses")
    if per_token > count:
        raise SplitwisePlanError(f"{where}: {tok_key} {per_token} is more than its {count} experts ({count_key})")
    width = _count(config, where, width_key, "the width of an expert's MLP")
    shared = _count({"n_shared_experts": 0, **config}, where, "n_shared_experts", "", least=0) \
        if model_type == "deepseek_v3" else 0
    return Experts(count, per_token, width, shared, _dense_layers(config, where, model_type, num_layers))


def _latent_attention(config: dict, where: str, model_type: str) -> LatentAttention | None:
    """DeepSeek-V3's multi-head latent attention (None for another model_type); ``q_lora_rank`` null or 0 is
    no query bottleneck."""
    if model_type != "deepseek_v3":
        return None
    what = "its latent attention (MLA)"
    q_rank = _count({"q_lora_rank": config.get("q_lora_rank") or 0}, where, "q_lora_rank", what, least=0)
    return LatentAttention(q_rank, *(_count(config, where, k, what) for k in (
        "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")))


def _kv_layers(config: dict, where: str, num_layers: int) -> int:
    """The layers whose KV cache grows with the context where some attend through a sliding window (gpt-oss's
    ``layer_types``: its ``full_attention`` layers); 0 (all of them) where none does."""
    types = config.get("layer_types")
    if types is None or not config.get("sliding_window"):
        return 0
    known = ("full_attention", "sliding_attention")
    if not isinstance(types, list) or len(types) != num_layers or any(t not in known for t in types):
        raise SplitwisePlanError(f"{where}: layer_types must list {num_layers} layers, each one of "
                                 f"{', '.join(known)}")
    full = types.count("full_attention")
    if not full:
        raise SplitwisePlanError(f"{where}: every layer of layer_types slides: its KV cache is not modelled")
    return full


def _config_dtype(config: dict, where: str, moe: bool = False) -> str:
    """The weights' dtype a config gives: fp8 when quantized to fp8, mxfp4 for a mixture's MXFP4 experts
    (gpt-oss), else its ``torch_dtype`` (bf16 when absent); other quantizations are a user error."""
    quant = config.get("quantization_config")
    if quant:
        method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
        if method == "mxfp4" and moe:
            return "mxfp4"
        if "fp8" not in method:
            raise SplitwisePlanError(f"{where}: quantization {method or quant!r} is not modelled (only fp8 is, and "
                                     "mxfp4 experts); give the dtype to plan it at (bf16 or fp8)")
        return "fp8"
    spelled = config.get("torch_dtype", config.get("dtype"))
    return "bf16" if spelled is None else dtype_named(spelled, f"{where}: torch_dtype")


def _positions(config: dict, where: str) -> dict:
    """The architecture's name, its longest sequence and its RoPE base, where the config gives them."""
    archs = config.get("architectures") or []
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    positions, theta = config.get("max_position_embeddings") or 0, config.get("rope_theta") or 0.0
    if isinstance(positions, bool) or not isinstance(positions, int) or positions < 0:
        raise SplitwisePlanError(f"{where}: max_position_embeddings must be a positive whole number, got {positions!r}")
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta >= 0:
        raise SplitwisePlanError(f"{where}: rope_theta must be a positive number, got {theta!r}")
    return dict(architecture=arch, max_positions=positions, rope_theta=float(theta))


def _shape(config: dict, where: str, model_type: str) -> dict:
    """The architecture fields of ``config``: layers, hidden size, heads, MLP width, vocabulary, head size,
    and a mixture's experts and latent attention."""
    arch = {f: _field(config, where, f, required=f not in ("num_kv_heads", "intermediate_size", "head_dim"))
            for f in _FIELD_KEYS}
    arch["experts"] = _experts(config, where, model_type, arch["num_layers"])
    arch["mla"] = mla = _latent_attention(config, where, model_type)
    if mla is not None and not arch["head_dim"]:
        arch["head_dim"] = mla.nope_dim + mla.rope_dim
    needs_mlp = arch["experts"] is None or arch["experts"].dense_layers
    if not arch["intermediate_size"]:
        if model_type not in TWO_MATRIX_MLP and needs_mlp:
            raise SplitwisePlanError(f"{where}: missing intermediate_size (needed for the model's MLP width)")
        arch["intermediate_size"] = arch["experts"].width if not needs_mlp else 4 * arch["hidden_size"]
    heads, kv_heads = arch["num_heads"], arch["num_kv_heads"] or arch["num_heads"]
    if not arch["head_dim"] and arch["hidden_size"] % heads:
        raise SplitwisePlanError(f"{where}: num_attention_heads {heads} does not divide hidden_size "
                                 f"{arch['hidden_size']} (and no head_dim is given)")
    if heads % kv_heads:
        raise SplitwisePlanError(f"{where}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
    arch["num_kv_heads"] = kv_heads
    arch["kv_layers"] = _kv_layers(config, where, arch["num_layers"])
    return arch


def model_from_config(config, name: str, where: str, source: str = "") -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config`` (a parsed config.json), named ``name``; errors
    name ``where`` (the file). Keys starting ``_`` are this tool's: ``_weights_bytes`` (at bf16),
    ``_params`` and ``_kv_sizing`` override what the architecture gives, ``_source`` says where it is from."""
    if not isinstance(config, dict):
        raise SplitwisePlanError(f"{where}: a config.json holds a JSON object, got {type(config).__name__}")
    model_type = str(config.get("model_type", "")).lower()
    arch = _shape(config, where, model_type)
    tied = config.get("tie_word_embeddings", model_type in TIED_BY_DEFAULT)
    if not isinstance(tied, bool):
        raise SplitwisePlanError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")
    dtype = _config_dtype(config, where, moe=arch["experts"] is not None)
    extra = {k: config[k] for k in ("_weights_bytes", "_params") if k in config}
    for k, v in extra.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise SplitwisePlanError(f"{where}: {k} must be a positive whole number, got {v!r}")
    kv_sizing = config.get("_kv_sizing") or ("mla" if arch["mla"] is not None else None)
    spec = ModelSpec(name, arch.pop("num_layers"), arch.pop("hidden_size"), weights_bytes=0, **arch,
                     mlp_matrices=2 if model_type in TWO_MATRIX_MLP else 3, tie_word_embeddings=tied,
                     params=extra.get("_params", 0), dtype=dtype, kv_sizing=kv_sizing,
                     source=str(config.get("_source", source)), **_positions(config, where))
    if "_weights_bytes" in extra:   # given at bf16
        weights = extra["_weights_bytes"] * DTYPE_BYTES.get(dtype, DTYPE_BYTES["bf16"]) // DTYPE_BYTES["bf16"]
    else:
        weights = weights_bytes_at(dtype, spec.params, spec.expert_params)
    return dataclasses.replace(spec, weights_bytes=weights)


def load_model_config(path) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config.json`` at ``path`` (the file, or a folder holding
    it), named after its folder (a ``config.json``) or its file; a user error naming the file if it is
    missing, not JSON, lacks a field or has a bad value, or is a mixture of experts of a layout not read."""
    from splitwise_plan.inputs.paths import read_text, user_file
    p = Path(os.fspath(path)).expanduser() if isinstance(path, (str, os.PathLike)) else path
    if isinstance(p, Path) and p.is_dir():
        if not (p / "config.json").is_file():
            raise SplitwisePlanError(f"model folder {p} holds no config.json")
        p = p / "config.json"
    p = user_file(p, "model config")
    where = f"model config {p}"
    text = read_text(p, where)
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SplitwisePlanError(f"{where} is not valid JSON: {exc}") from None
    name = (p.resolve().parent.name if p.name == "config.json" else p.stem).lower() or p.stem
    return model_from_config(config, name, where, source=f"Hugging Face config {p.resolve()}")


# --- the built-in models ------------------------------------------------------------------------------

def _name_order(name: str) -> list:
    """Sort key reading the numbers in a name as numbers: llama-3.1-8b before llama-3.1-70b."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", name) if t]


class _BuiltinModels(Mapping):
    """The shipped models, name -> :class:`ModelSpec`, read from the ``models/`` data folder on first use."""

    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] | None = None

    def _loaded(self) -> dict[str, ModelSpec]:
        if self._specs is None:
            from splitwise_plan.inputs.paths import data_dir
            files = sorted(data_dir("models").glob("*.json"), key=lambda f: _name_order(f.stem))
            specs = {f.stem: load_model_config(f) for f in files}
            self._specs = dict(sorted(specs.items(), key=lambda kv: kv[1].experts is not None))   # dense ones first
        return self._specs

    def __getitem__(self, name: str) -> ModelSpec:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    def __repr__(self) -> str:
        return f"BUILTIN_MODELS({', '.join(self)})"


#: The built-in models by name (the paper's two, then Llama 3.1, Qwen2.5, Mistral Large 2 and the mixtures of
#: experts: Qwen3-MoE, gpt-oss, DeepSeek-V3, Mixtral).
BUILTIN_MODELS: Mapping[str, ModelSpec] = _BuiltinModels()


def model_names() -> list[str]:
    """The built-in models' names, numbers read as numbers (bloom-176b, llama2-70b, llama-3.1-8b, ...), the
    dense ones first."""
    return list(BUILTIN_MODELS)


def _looks_like_path(name) -> bool:
    """Whether a model argument names a file or folder rather than a built-in model."""
    if isinstance(name, os.PathLike):
        return True
    return isinstance(name, str) and (any(c in name for c in "/\\") or name.lower().endswith(".json")
                                      or os.path.exists(name))


def with_options(model: ModelSpec, dtype=None, kv_sizing: str | None = None) -> ModelSpec:
    """``model`` with its weights at ``dtype`` (bytes scaled by the dtype's size; a mixture's recounted from
    its experts) and its KV cache sized by ``kv_sizing``; ``model`` itself when neither changes anything."""
    changes = {}
    if dtype is not None:
        new = dtype_named(dtype)
        if new in EXPERT_DTYPE_BYTES and model.experts is None:
            raise SplitwisePlanError(f"dtype {new} quantizes a mixture's experts, and {model.name} has none "
                                     f"(valid: {choices(DTYPE_BYTES)})")
        if new != model.dtype:
            weights = (weights_bytes_at(new, model.params, model.expert_params) if model.experts and model.params
                       else model.weights_bytes * DTYPE_BYTES[new] // model.bytes_per_param)
            changes.update(dtype=new, weights_bytes=weights)
    if kv_sizing is not None:
        if kv_sizing not in KV_SIZINGS:
            raise SplitwisePlanError(f"unknown kv_sizing {kv_sizing!r}; valid: {', '.join(KV_SIZINGS)}")
        if kv_sizing != model.kv_sizing:
            changes["kv_sizing"] = kv_sizing
    return dataclasses.replace(model, **changes) if changes else model


def get_model(name, models: Mapping[str, ModelSpec] | None = None, dtype=None,
              kv_sizing: str | None = None) -> ModelSpec:
    """A model by name (any case; built-in unless ``models`` is given) or by the path of a Hugging Face
    ``config.json`` (or its folder), with its weights at ``dtype`` (``bf16``/``fp8``, also ``bfloat16``,
    ``float16``...; None: the model's own) and its KV cache sized by ``kv_sizing`` (``reference``/``gqa``;
    None: the model's own). An unknown name raises with the valid ones."""
    if isinstance(name, ModelSpec):   # resolved already (a plan's inputs hand theirs on)
        return with_options(name, dtype, kv_sizing)
    pool = BUILTIN_MODELS if models is None else models
    try:
        found = by_name(pool, ALIASES.get(name.lower(), name) if models is None and isinstance(name, str) else name)
    except (KeyError, TypeError, AttributeError):
        if _looks_like_path(name):
            found = load_model_config(name)
        else:
            if models is None:
                valid = ", ".join(model_names())
                known = (" (the architectures the tool knows: a profile of another model cannot size its KV cache "
                         "and weights), or the path of a Hugging Face config.json")
            else:
                valid, known = choices(pool), ""
            raise SplitwisePlanError(f"unknown model {name!r}; valid: {valid}{known}") from None
    return with_options(found, dtype, kv_sizing)


# --- does it fit? ------------------------------------------------------------------------------------------

def weights_fit_problem(model: ModelSpec, machine, gpus: int = 0, tensor_parallel: int | None = None,
                        share: float = WEIGHTS_HBM_SHARE) -> str | None:
    """Why an instance of ``model`` on ``gpus`` GPUs of ``machine`` (0: all of them) cannot hold its weights
    in at most ``share`` of their HBM (90%, vLLM's default ``gpu_memory_utilization``: the rest holds
    activations and the KV cache), or None if it can. With ``tensor_parallel`` the message goes on to say
    the model is too big for the machine at that TP, and what would hold it."""
    hbm = machine.hbm_of(gpus)
    if model.weights_bytes <= share * hbm:
        return None
    where = (f"{hbm / 2**30:.4g} GiB of HBM of {machine.name}" if not gpus or gpus == machine.gpus else
             f"{hbm / 2**30:.4g} GiB of HBM of an instance on {gpus} of the {machine.gpus} GPUs of {machine.name}")
    message = f"the weights of {model.name} ({model.weights_bytes / 1e9:.0f} GB) do not fit in the {where}"
    if model.weights_bytes < hbm:
        message += (f" (they would take {100 * model.weights_bytes / hbm:.0f}% of it, and weights may take at most "
                    f"{share:.0%}, vLLM's default gpu_memory_utilization)")
    if tensor_parallel is not None:
        least = math.ceil(model.weights_bytes / (share * machine.hbm_of(1)))   # GPUs whose HBM holds the weights
        hint = (f"its weights need at least {least} of the {machine.gpus} GPUs of {machine.name}"
                if least <= machine.gpus else f"even all {machine.gpus} GPUs of {machine.name} cannot hold it")
        tries = (["a larger tensor parallelism"] if least <= machine.gpus else []) + ["a machine with more HBM"] \
            + (["fp8 weights"] if model.dtype != "fp8" else [])
        try_ = " or ".join([", ".join(tries[:-1]), tries[-1]] if len(tries) > 1 else tries)
        message += f": {model.name} is too big for {machine.name} at tensor parallelism {tensor_parallel} ({hint}; try {try_})"
    return message


def check_fits(model: ModelSpec, machine, gpus: int = 0, tensor_parallel: int | None = None) -> None:
    """A user error unless an instance of ``model`` on ``gpus`` GPUs of ``machine`` (0: all of them)
    holds its weights in 90% of their HBM, the rest left to activations and the KV cache (see
    :func:`weights_fit_problem`)."""
    problem = weights_fit_problem(model, machine, gpus, tensor_parallel)
    if problem:
        raise SplitwisePlanError(problem)
