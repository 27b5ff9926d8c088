"""LLM architectures: what the simulator needs to size the KV cache and the weights.

A model is read from its architecture, in the keys of a Hugging Face ``config.json``: the built-in ones
from the JSON files of the shipped ``models/`` folder (loaded on first use), a user's from the path of
a ``config.json`` (or of the folder holding one). From layers, hidden size, attention and KV heads, MLP
width and vocabulary the module counts the parameters, hence the weights' bytes at the serving dtype
(bf16: 2 bytes a parameter, fp8: 1), and the KV-cache bytes one token takes:

* ``gqa`` sizing: ``2 * layers * kv_heads * head_dim * 2`` (keys and values, at bf16), the default;
* ``reference`` sizing: ``2 * hidden * layers * 2``, the Splitwise reference simulator's (no GQA), the
  default of the paper's two models (bloom-176b, llama2-70b), whose weights are the reference's bytes.

Mixture-of-experts models are out of scope: their configs are refused.
"""

from __future__ import annotations

import dataclasses
import json
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
}
#: KV-cache sizings (see the module's docstring).
KV_SIZINGS = ("reference", "gqa")
#: Bytes of one KV-cache value: bf16, whatever the weights' dtype.
KV_VALUE_BYTES = 2

#: Model families whose MLP is two matrices (up, down); the others' is gated (gate, up, down: llama-style).
TWO_MATRIX_MLP = frozenset({"bloom", "gpt2", "gpt_bigcode", "gpt_neox", "gptj", "opt", "falcon", "starcoder2",
                            "phi"})
#: Model families that tie the LM head to the embeddings when a config does not say.
TIED_BY_DEFAULT = frozenset({"bloom", "gpt2", "gpt_bigcode", "opt"})
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
class ModelSpec:
    """One dense LLM: its architecture, the weights' bytes and the KV-cache bytes a token takes.

    ``dtype_bytes`` is the bytes of one KV-cache value (2: bf16, also when the weights are fp8);
    ``dtype`` is the weights' (``bf16`` or ``fp8``). Architecture fields left at 0 are unknown (a spec
    built by hand from layers and hidden size only, sized as the reference); ``num_kv_heads`` 0 means
    ``num_heads`` (no GQA) and ``head_dim`` 0 means ``hidden_size / num_heads``. ``kv_sizing`` None is
    ``gqa`` when the heads are known, else ``reference``; ``params`` 0 is counted from the architecture
    when it is complete.
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

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise SplitwisePlanError(f"model {self.name}: unknown dtype {self.dtype!r}; valid: {choices(DTYPE_BYTES)}")
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
        if not self.params and self.num_heads and self.intermediate_size and self.vocab_size:
            object.__setattr__(self, "params", count_params(
                num_layers=self.num_layers, hidden_size=self.hidden_size, num_heads=self.num_heads,
                num_kv_heads=self.num_kv_heads, head_dim=self.head_dim, intermediate_size=self.intermediate_size,
                vocab_size=self.vocab_size, mlp_matrices=self.mlp_matrices,
                tie_word_embeddings=self.tie_word_embeddings))

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across the whole model, as ``kv_sizing`` says."""
        if self.kv_sizing == "reference":
            return 2 * self.hidden_size * self.num_layers * self.dtype_bytes
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def bytes_per_param(self) -> int:
        """Bytes of one weight at the model's dtype (2 for bf16, 1 for fp8)."""
        return DTYPE_BYTES[self.dtype]


def count_params(*, num_layers: int, hidden_size: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 intermediate_size: int, vocab_size: int, mlp_matrices: int = 3,
                 tie_word_embeddings: bool = False) -> int:
    """Parameters of a dense decoder: embeddings, each layer's attention (queries and output projection
    over all heads, keys and values over the KV heads) and MLP (``mlp_matrices`` hidden x intermediate
    matrices: 3 gated, llama-style; 2 bloom-style), and the LM head unless tied to the embeddings.
    Norms and biases are left out (well under 0.1% of a model this tool plans)."""
    attention = hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads)
    mlp = mlp_matrices * hidden_size * intermediate_size
    embeddings = vocab_size * hidden_size * (1 if tie_word_embeddings else 2)
    return embeddings + num_layers * (attention + mlp)


def dtype_named(value, what: str = "dtype") -> str:
    """The dtype (``bf16`` or ``fp8``) a spelling names (bfloat16, float16, fp8, float8_e4m3fn...), or a user
    error naming ``what`` and the valid spellings."""
    key = value.strip().lower() if isinstance(value, str) else None
    if key not in DTYPE_SPELLINGS:
        raise SplitwisePlanError(f"{what}: unknown dtype {value!r}; valid: {choices(DTYPE_SPELLINGS)} "
                                 "(2-byte types count as bf16, 1-byte as fp8)")
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


def _refuse_moe(config: dict, where: str) -> None:
    """A user error if ``config`` is a mixture of experts."""
    model_type = str(config.get("model_type", "")).lower()
    keys = [k for k in config if (k in EXPERT_KEYS or k.startswith("moe_")) and config[k] not in (None, 0, 1, False)]
    archs = [a for a in config.get("architectures") or [] if isinstance(a, str) and re.search("moe|mixtral", a, re.I)]
    if model_type in MOE_TYPES or keys or archs:
        why = f"model_type {model_type}" if model_type in MOE_TYPES else ", ".join(keys or archs)
        raise SplitwisePlanError(f"{where}: a mixture-of-experts model ({why}); MoE models are out of scope "
                                 "(splitwise-plan sizes dense models only)")


def _config_dtype(config: dict, where: str) -> str:
    """The weights' dtype a config gives: fp8 when quantized to fp8, else its ``torch_dtype`` (bf16 when
    absent); other quantizations are a user error."""
    quant = config.get("quantization_config")
    if quant:
        method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
        if "fp8" not in method:
            raise SplitwisePlanError(f"{where}: quantization {method or quant!r} is not modelled (only fp8 is); "
                                     "give the dtype to plan it at (bf16 or fp8)")
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


def model_from_config(config, name: str, where: str, source: str = "") -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config`` (a parsed config.json), named ``name``; errors
    name ``where`` (the file). Keys starting ``_`` are this tool's: ``_weights_bytes`` (at bf16),
    ``_params`` and ``_kv_sizing`` override what the architecture gives, ``_source`` says where it is from."""
    if not isinstance(config, dict):
        raise SplitwisePlanError(f"{where}: a config.json holds a JSON object, got {type(config).__name__}")
    _refuse_moe(config, where)
    arch = {f: _field(config, where, f, required=f not in ("num_kv_heads", "intermediate_size", "head_dim"))
            for f in _FIELD_KEYS}
    model_type = str(config.get("model_type", "")).lower()
    mlp_matrices = 2 if model_type in TWO_MATRIX_MLP else 3
    if not arch["intermediate_size"]:
        if mlp_matrices == 3:
            raise SplitwisePlanError(f"{where}: missing intermediate_size (needed for the model's MLP width)")
        arch["intermediate_size"] = 4 * arch["hidden_size"]
    heads, kv_heads = arch["num_heads"], arch["num_kv_heads"] or arch["num_heads"]
    if not arch["head_dim"] and arch["hidden_size"] % heads:
        raise SplitwisePlanError(f"{where}: num_attention_heads {heads} does not divide hidden_size "
                                 f"{arch['hidden_size']} (and no head_dim is given)")
    if heads % kv_heads:
        raise SplitwisePlanError(f"{where}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
    tied = config.get("tie_word_embeddings", model_type in TIED_BY_DEFAULT)
    if not isinstance(tied, bool):
        raise SplitwisePlanError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}")
    dtype = _config_dtype(config, where)
    extra = {k: config[k] for k in ("_weights_bytes", "_params") if k in config}
    for k, v in extra.items():
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise SplitwisePlanError(f"{where}: {k} must be a positive whole number, got {v!r}")
    spec = ModelSpec(name, arch["num_layers"], arch["hidden_size"], weights_bytes=0, num_heads=heads,
                     num_kv_heads=kv_heads, head_dim=arch["head_dim"], intermediate_size=arch["intermediate_size"],
                     vocab_size=arch["vocab_size"], mlp_matrices=mlp_matrices, tie_word_embeddings=tied,
                     params=extra.get("_params", 0), dtype=dtype, kv_sizing=config.get("_kv_sizing"),
                     source=str(config.get("_source", source)), **_positions(config, where))
    if "_weights_bytes" in extra:   # given at bf16
        weights = extra["_weights_bytes"] * DTYPE_BYTES[dtype] // DTYPE_BYTES["bf16"]
    else:
        weights = spec.params * DTYPE_BYTES[dtype]
    return dataclasses.replace(spec, weights_bytes=weights)


def load_model_config(path) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config.json`` at ``path`` (the file, or a folder holding
    it), named after its folder (a ``config.json``) or its file; a user error naming the file if it is
    missing, not JSON, lacks a field or has a bad value, or is a mixture of experts."""
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
            self._specs = {f.stem: load_model_config(f) for f in files}
        return self._specs

    def __getitem__(self, name: str) -> ModelSpec:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    def __repr__(self) -> str:
        return f"BUILTIN_MODELS({', '.join(self)})"


#: The built-in models by name (the paper's two, then Llama 3.1, Qwen2.5 and Mistral Large 2).
BUILTIN_MODELS: Mapping[str, ModelSpec] = _BuiltinModels()


def model_names() -> list[str]:
    """The built-in models' names, numbers read as numbers (bloom-176b, llama2-70b, llama-3.1-8b, ...)."""
    return list(BUILTIN_MODELS)


def _looks_like_path(name) -> bool:
    """Whether a model argument names a file or folder rather than a built-in model."""
    if isinstance(name, os.PathLike):
        return True
    return isinstance(name, str) and (any(c in name for c in "/\\") or name.lower().endswith(".json")
                                      or os.path.exists(name))


def with_options(model: ModelSpec, dtype=None, kv_sizing: str | None = None) -> ModelSpec:
    """``model`` with its weights at ``dtype`` (bytes scaled by the dtype's size) and its KV cache sized
    by ``kv_sizing``; ``model`` itself when neither changes anything."""
    changes = {}
    if dtype is not None:
        new = dtype_named(dtype)
        if new != model.dtype:
            changes.update(dtype=new, weights_bytes=model.weights_bytes * DTYPE_BYTES[new] // model.bytes_per_param)
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

def weights_fit_problem(model: ModelSpec, machine, gpus: int = 0, tensor_parallel: int | None = None) -> str | None:
    """Why an instance of ``model`` on ``gpus`` GPUs of ``machine`` (0: all of them) cannot hold its weights
    in their HBM with room left for the KV cache, or None if it can. With ``tensor_parallel`` the message
    goes on to say the model is too big for the machine at that TP, and what would hold it."""
    hbm = machine.hbm_of(gpus)
    if hbm > model.weights_bytes:
        return None
    where = (f"{hbm / 2**30:.4g} GiB of HBM of {machine.name}" if not gpus or gpus == machine.gpus else
             f"{hbm / 2**30:.4g} GiB of HBM of an instance on {gpus} of the {machine.gpus} GPUs of {machine.name}")
    message = f"the weights of {model.name} ({model.weights_bytes / 1e9:.0f} GB) do not fit in the {where}"
    if tensor_parallel is not None:
        least = model.weights_bytes // machine.hbm_of(1) + 1   # GPUs whose HBM holds the weights
        hint = (f"its weights need at least {least} of the {machine.gpus} GPUs of {machine.name}"
                if least <= machine.gpus else f"even all {machine.gpus} GPUs of {machine.name} cannot hold it")
        tries = (["a larger tensor parallelism"] if least <= machine.gpus else []) + ["a machine with more HBM"] \
            + (["fp8 weights"] if model.dtype != "fp8" else [])
        try_ = " or ".join([", ".join(tries[:-1]), tries[-1]] if len(tries) > 1 else tries)
        message += f": {model.name} is too big for {machine.name} at tensor parallelism {tensor_parallel} ({hint}; try {try_})"
    return message


def check_fits(model: ModelSpec, machine, gpus: int = 0, tensor_parallel: int | None = None) -> None:
    """A user error unless an instance of ``model`` on ``gpus`` GPUs of ``machine`` (0: all of them)
    holds its weights in their HBM, with room left for the KV cache (see :func:`weights_fit_problem`)."""
    problem = weights_fit_problem(model, machine, gpus, tensor_parallel)
    if problem:
        raise SplitwisePlanError(problem)
