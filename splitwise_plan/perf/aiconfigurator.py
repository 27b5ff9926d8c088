"""AIConfigurator as a latency source: kernel timings that NVIDIA's ``aiconfigurator-core`` (Apache-2.0) measured
per GPU and per serving stack (vLLM, SGLang, TensorRT-LLM), read through its SDK's ``EngineHandle``.

``--stack aiconfigurator:BACKEND[@VERSION]`` selects it. It is the optional extra
``splitwise-plan[aiconfigurator]`` (Linux x86-64, Python 3.11-3.13), imported here only, and only when a
pool's latencies are asked of it. A pool's latencies come out as profile rows, as the analytic estimate's
do, so the simulators read them as they read measurements. Without a version, each GPU gets the version
that aiconfigurator-core calls current for that backend, and the reports write it out.

A mixture of experts (Mixtral, Qwen3-MoE, gpt-oss, DeepSeek-V3) is built with its experts spread over all
the instance's GPUs (``moe_ep_size`` = TP, ``moe_tp_size`` 1) and its attention at the instance's TP, from
aiconfigurator's measured MoE kernels: bf16, fp8 as 128x128 blocks (the released fp8 checkpoints'), and
gpt-oss's MXFP4 experts (the only ones it measured for gpt-oss).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import platform
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.perf.latency_model import DECODE_CONTEXT, phase_rows

PREFIX = "aiconfigurator:"
EXTRA = "splitwise-plan[aiconfigurator]"
BACKENDS = ("vllm", "sglang", "trtllm")
#: The catalog's GPUs (a machine's ``hardware``) and aiconfigurator's system that measured them. The
#: power-capped H100 reads the H100's kernels, its prefill slowed as the analytic stack slows it.
SYSTEMS = {"a100-80gb": "a100_sxm", "h100-80gb": "h100_sxm", "h100-80gb-pcap": "h100_sxm",
           "h200-141gb": "h200_sxm", "b200-180gb": "b200_sxm", "b300-288gb": "b300_sxm", "gb200-186gb": "gb200",
           "l40s-48gb": "l40s"}
#: Hugging Face architectures and the one aiconfigurator builds for each (Mistral's layers are Llama's).
ARCHITECTURES = {"LlamaForCausalLM": "LlamaForCausalLM", "MistralForCausalLM": "LlamaForCausalLM",
                 "Qwen2ForCausalLM": "Qwen2ForCausalLM", "Qwen3ForCausalLM": "Qwen3ForCausalLM",
                 "MixtralForCausalLM": "MixtralForCausalLM", "Qwen3MoeForCausalLM": "Qwen3MoeForCausalLM",
                 "GptOssForCausalLM": "GptOssForCausalLM", "DeepseekV3ForCausalLM": "DeepseekV3ForCausalLM"}
#: Each mixture-of-experts architecture's model_type and the config keys it spells its experts with (count,
#: width); aiconfigurator reads them as Hugging Face spells them.
MOE_KEYS = {"MixtralForCausalLM": ("mixtral", "num_local_experts", "intermediate_size"),
            "Qwen3MoeForCausalLM": ("qwen3_moe", "num_experts", "moe_intermediate_size"),
            "GptOssForCausalLM": ("gpt_oss", "num_local_experts", "intermediate_size"),
            "DeepseekV3ForCausalLM": ("deepseek_v3", "n_routed_experts", "moe_intermediate_size")}
#: aiconfigurator's quantization of a mixture's weights at each dtype: (GEMMs, experts).
MOE_QUANT = {"bf16": ("bfloat16", "bfloat16"), "fp8": ("fp8_block", "fp8_block"), "mxfp4": ("bfloat16", "w4a16_mxfp4")}
#: Batch tokens of the rows: a prefill of that many tokens, a decode step of that many sequences.
BATCH_TOKENS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096,
                8192, 16384)


@dataclass(frozen=True)
class AIConfiguratorStack:
    """The latency source ``aiconfigurator:BACKEND[@VERSION]``: ``version`` None is each GPU's current one;
    ``context_tokens`` the KV tokens per sequence its decode steps read; ``cap_slowdown`` the analytic
    stack's prefill slowdown under the power cap ``cap_reference`` (aiconfigurator measured no capped GPU)."""

    backend: str
    version: str | None = None
    context_tokens: int | None = None   # None: not bound to requests (DECODE_CONTEXT)
    cap_slowdown: float = 1.0
    cap_reference: float = 0.7

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.backend}" + (f"@{self.version}" if self.version else "")

    @property
    def source(self) -> str:
        return f"{self.name} (aiconfigurator-core {_core_version()})"

    def with_context(self, tokens: float) -> "AIConfiguratorStack":
        """The same source, its decode steps read at ``tokens`` of context per sequence."""
        return dataclasses.replace(self, context_tokens=max(1, int(round(tokens))))

    def rows(self, model, machine, tensor_parallel: int) -> tuple[list[dict], str]:
        """Profile rows (the ``perf_model.csv`` schema, ms) of ``model`` on ``machine`` at this TP, and
        where they came from in words; a one-line user error where aiconfigurator cannot give them."""
        system = SYSTEMS.get(machine.hardware)
        if system is None:
            raise SplitwisePlanError(f"{self.name}: aiconfigurator has no measured kernels for {machine.name}'s GPU "
                                     f"{machine.hardware}; it has: {', '.join(sorted(set(SYSTEMS)))}")
        version = self.version or _current_version(system, self.backend)
        held = _versions(system, self.backend)
        if version not in held:
            raise SplitwisePlanError(f"{self.name}: aiconfigurator-core {_core_version()} has no {self.backend} "
                                     f"{version} data for {machine.name}'s GPU ({system}); it has "
                                     f"{', '.join(held) or 'none'} (without @VERSION each GPU reads its current one)")
        handle = _engine(_config_text(model), system, self.backend, version, int(tensor_parallel), model.dtype)
        ep = f" (experts at EP{tensor_parallel})" if getattr(model, "experts", None) is not None else ""
        where = f"{self.name}: {model.name} on {system} at TP{tensor_parallel}{ep}"
        prefill = _queried(where, lambda: [handle.predict_prefill_latency(1, x) for x in BATCH_TOKENS])
        context = self.context_tokens or DECODE_CONTEXT
        decode = _queried(where, lambda: [handle.decode_step_latency(x, context, 1) for x in BATCH_TOKENS])
        # its curves dip in places (A100, Llama-3.1-70B: a decode step of 96 takes 29.4 ms, of 128 28.8): made non-decreasing
        prefill, decode = np.maximum.accumulate(prefill), np.maximum.accumulate(decode)
        cap = machine.power_cap
        if cap is not None and cap < 1:
            prefill = prefill * (1.0 + (self.cap_slowdown - 1.0) * (1.0 - cap) / (1.0 - self.cap_reference))
        rows = phase_rows(model.name, machine.hardware, tensor_parallel, BATCH_TOKENS, prefill, decode)
        capped = f", prefill slowed for the {cap:.0%} power cap" if cap is not None and cap < 1 else ""
        return rows, (f"aiconfigurator-core {_core_version()}, {self.backend} {version} on {system}{ep} (decode at "
                      f"{context:,} tokens of context{capped})")


def is_spec(text) -> bool:
    """Whether ``--stack`` names aiconfigurator."""
    return text is not None and str(text).strip().lower().startswith(PREFIX)


def parse_spec(text: str, cap_slowdown: float = 1.0, cap_reference: float = 0.7) -> AIConfiguratorStack:
    """``aiconfigurator:BACKEND[@VERSION]`` as a source; a user error naming what is wrong. Checks the extra
    is installed, so that a plan fails at once rather than at its first pool."""
    backend, _, version = text.strip()[len(PREFIX):].partition("@")
    backend = backend.strip().lower()
    if backend not in BACKENDS:
        raise SplitwisePlanError(f"--stack {text}: unknown aiconfigurator backend {backend!r}; valid: "
                                 f"{', '.join(BACKENDS)} (as aiconfigurator:vllm or aiconfigurator:vllm@0.24.0)")
    if "@" in text and not version.strip():
        raise SplitwisePlanError(f"--stack {text}: no version after @ (leave out @ for the current one)")
    _sdk()
    return AIConfiguratorStack(backend, version.strip() or None, cap_slowdown=float(cap_slowdown),
                               cap_reference=float(cap_reference))


def _sdk():
    """aiconfigurator-core's SDK, its logger quiet (it warns at each TensorRT-LLM compile); a one-line user
    error naming the extra and this platform where it is missing."""
    try:
        from aiconfigurator_core import sdk
    except ImportError:
        here = f"{platform.system()} {platform.machine()}, Python {sys.version_info[0]}.{sys.version_info[1]}"
        supported = (platform.system() == "Linux" and platform.machine() in ("x86_64", "AMD64")
                     and (3, 11) <= sys.version_info[:2] <= (3, 13))
        if not supported:
            raise SplitwisePlanError(f"--stack aiconfigurator needs the extra {EXTRA}, which has wheels for Linux "
                                     f"x86-64 and Python 3.11-3.13 only (this is {here})") from None
        raise SplitwisePlanError(f"--stack aiconfigurator needs the extra: pip install '{EXTRA}'") from None
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    return sdk


@functools.lru_cache(maxsize=1)
def _core_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("aiconfigurator-core")
    except PackageNotFoundError:
        return "?"


@functools.lru_cache(maxsize=None)
def _current_version(system: str, backend: str) -> str:
    """The version aiconfigurator-core calls current for ``backend`` on ``system``."""
    _sdk()
    from aiconfigurator_core.sdk.perf_database import get_latest_database_version
    version = get_latest_database_version(system, backend)
    if not version:
        raise SplitwisePlanError(f"aiconfigurator:{backend}: aiconfigurator-core {_core_version()} has no data "
                                 f"for {backend} on {system}")
    return version


@functools.lru_cache(maxsize=None)
def _versions(system: str, backend: str) -> tuple[str, ...]:
    """The versions of ``backend`` that aiconfigurator-core holds data of for ``system``."""
    _sdk()
    from aiconfigurator_core.sdk.perf_database import get_supported_databases
    return tuple(get_supported_databases().get(system, {}).get(backend, []))


def _config_text(model) -> str:
    """The config.json aiconfigurator builds ``model`` from (its own files may lack RoPE and the positions)."""
    arch = model.architecture or ("LlamaForCausalLM" if model.num_heads and model.mlp_matrices == 3 else "")
    if arch not in ARCHITECTURES or (arch in MOE_KEYS) != (getattr(model, "experts", None) is not None):
        raise SplitwisePlanError(f"aiconfigurator models no {arch or 'unknown'} architecture ({model.name}); it "
                                 f"builds {', '.join(sorted(ARCHITECTURES))} of the models this tool sizes")
    config = {"architectures": [ARCHITECTURES[arch]], "model_type": ARCHITECTURES[arch][:-len("ForCausalLM")].lower(),
              "num_hidden_layers": model.num_layers, "hidden_size": model.hidden_size,
              "num_attention_heads": model.num_heads, "num_key_value_heads": model.num_kv_heads,
              "head_dim": model.head_dim, "intermediate_size": model.intermediate_size,
              "vocab_size": model.vocab_size, "max_position_embeddings": model.max_positions or 131072,
              "rope_theta": model.rope_theta or 10000.0, "tie_word_embeddings": model.tie_word_embeddings,
              "hidden_act": "silu", "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
    if arch in MOE_KEYS:
        config.update(_moe_fields(model, arch))
    return json.dumps(config, sort_keys=True)


def _moe_fields(model, arch: str) -> dict:
    """A mixture's config keys as its Hugging Face config spells them: experts, MLA, sliding layers."""
    model_type, count_key, width_key = MOE_KEYS[arch]
    e = model.experts
    fields = {"model_type": model_type, count_key: e.count, width_key: e.width, "num_experts_per_tok": e.per_token}
    if model.mla is not None:
        m = model.mla
        fields.update(n_shared_experts=e.shared, first_k_dense_replace=e.dense_layers, q_lora_rank=m.q_rank or None,
                      kv_lora_rank=m.kv_rank, qk_nope_head_dim=m.nope_dim, qk_rope_head_dim=m.rope_dim,
                      v_head_dim=m.v_dim, head_dim=None)
    if model.kv_layers:   # gpt-oss: sliding and full-attention layers in turn (aiconfigurator's window is 128)
        fields.update(sliding_window=128, layer_types=["sliding_attention", "full_attention"] * (model.num_layers // 2))
    return fields


@functools.lru_cache(maxsize=64)
def _engine(config_text: str, system: str, backend: str, version: str, tensor_parallel: int, dtype: str):
    """aiconfigurator's engine of one model, GPU, backend, version and TP (about 1 s to build; kept)."""
    sdk = _sdk()
    quant = {"gemm_quant_mode": "fp8"} if dtype == "fp8" else {}
    if "num_experts_per_tok" in json.loads(config_text):   # a mixture: experts over all the instance's GPUs
        gemm, experts = MOE_QUANT[dtype]
        quant = dict(gemm_quant_mode=gemm, moe_quant_mode=experts, moe_tp_size=1, moe_ep_size=tensor_parallel)
    where = f"aiconfigurator:{backend}@{version} on {system} at TP{tensor_parallel}"
    with tempfile.TemporaryDirectory(prefix="splitwise-plan-aic-") as folder:   # a local folder: never downloads
        (Path(folder) / "config.json").write_text(config_text)
        return _queried(where, lambda: sdk.EngineHandle.compile(folder, system, backend, tp_size=tensor_parallel,
                                                                 backend_version=version, **quant))


def _queried(where: str, ask):
    """``ask()``, its errors (an unknown version, no data for the GPU, no fp8 on A100, a missing field) as one
    line naming ``where``."""
    try:
        return ask()
    except SplitwisePlanError:
        raise
    except Exception as exc:   # (its own error types; their first line says what is missing)
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if len(text) > 200 and ". " in text:   # its first sentence says what is missing
            text = text[:text.index(". ") + 1]
        raise SplitwisePlanError(f"{where}: aiconfigurator: {text[:300]}") from None
