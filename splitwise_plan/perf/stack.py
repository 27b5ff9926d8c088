"""A serving stack's efficiency: the few numbers that turn a GPU's data sheet into measured batch times.

The analytic latency model (:mod:`.analytic`) keeps the hardware's physics (FLOP/s, HBM and link bandwidth)
apart from these; a ``Stack`` is fitted once on measured profiles and shared by every GPU, so that it
transfers to GPUs nobody profiled. The shipped ones are in ``profiles/stacks/``: ``paper-2023`` (the paper's
2023 stack, fitted on the shipped profiles; also called ``default``) and presets of today's engines, ``vllm``,
``sglang`` and ``trtllm``. ``auto`` (:func:`~.sources.resolve_stack`) picks between the first two.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.paths import data_dir, read_toml

#: The power cap a stack's ``cap_slowdown`` was measured at (fraction of the GPU's power).
CAP_REFERENCE = 0.7
STACKS_FOLDER = "stacks"
DEFAULT_STACK = "paper-2023"
PRESET = "vllm"                         # auto's stack for a model no shipped profile measured
ALIASES = {"default": DEFAULT_STACK}    # (the paper's stack's old name)

#: What each number means, written into a stack's TOML beside it.
PARAMETER_DOCS = {
    "eff_compute": "fraction of the data-sheet dense FLOP/s the matrix multiplications reach (0..1]",
    "eff_bw": "fraction of the data-sheet HBM bandwidth that weight and KV-cache reads reach (0..1]",
    "eff_net": "fraction of the data-sheet GPU-to-GPU link bandwidth a tensor-parallel all-reduce reaches (0..1]",
    "prompt_overhead_ms": "floor of a prompt batch: no prefill is faster than this (launches, scheduling), ms",
    "decode_overhead_ms": "fixed cost of one decode iteration added to its roofline time, ms",
    "allreduce_step_bytes": "latency of one ring all-reduce step, as the bytes the link would move in that time",
    "decode_request_bytes": ("bytes per decoding request, per layer and per hidden unit, that each GPU moves "
                             "whatever the TP (activations, sampling, per-sequence bookkeeping folded together)"),
    "cap_slowdown": ("how much slower the compute-bound part runs under a 70% power cap (the paper: prefill "
                     "slows, the memory-bound decode barely does); other caps scale it linearly"),
}
#: A mixture of experts' own efficiencies, beside the dense ones; optional in a stack's TOML, their defaults
#: (``MOE_DEFAULTS``) as fast as a dense model's. The presets' are fitted on AIConfigurator's measured MoE
#: kernels: benchmarks/bench_moe_estimate.py.
MOE_PARAMETER_DOCS = {
    "moe_compute_slowdown": ("how many times slower a mixture's routed experts compute than dense matrix "
                             "multiplications of their FLOPs (grouped GEMMs, routing imbalance over the GPUs)"),
    "moe_read_slowdown": ("how many times slower a mixture's routed experts are read than dense weights of their "
                          "bytes (small grouped GEMMs, routing imbalance over the GPUs)"),
    "moe_layer_overhead_ms": ("fixed cost of each mixture-of-experts layer in a prefill or a decode step (routing, "
                              "dispatch, combine), ms"),
}
MOE_DEFAULTS = {"moe_compute_slowdown": 1.0, "moe_read_slowdown": 1.0, "moe_layer_overhead_ms": 0.0}


@dataclass(frozen=True)
class Stack:
    """Named efficiency parameters of one serving stack (see ``PARAMETER_DOCS``)."""

    name: str
    eff_compute: float
    eff_bw: float
    eff_net: float
    prompt_overhead_ms: float
    decode_overhead_ms: float
    allreduce_step_bytes: float
    decode_request_bytes: float
    cap_slowdown: float = 1.0
    moe_compute_slowdown: float = 1.0
    moe_read_slowdown: float = 1.0
    moe_layer_overhead_ms: float = 0.0
    source: str = ""
    version: str = ""   # the engine and version a preset was fitted on, for reports ('' the paper's 2023 stack)
    #: the KV tokens each sequence of an estimated decode step holds (None: not bound to a stream yet)
    context_tokens: int | None = field(default=None, compare=False)
    #: {held-out GPU: its errors} of a fit that saw neither that GPU nor the models asked for (a shipped
    #: preset's, written when it was fitted: benchmarks/fit_stack_presets.py)
    held_out: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in PARAMETER_DOCS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise SplitwisePlanError(f"stack {self.name!r}: {name} must be a finite number, got {value!r}")
            if value < 0 or (name.startswith("eff_") and not 0 < value <= 1):
                raise SplitwisePlanError(f"stack {self.name!r}: {name} out of range: {value}")
        if self.cap_slowdown < 1:
            raise SplitwisePlanError(f"stack {self.name!r}: cap_slowdown must be at least 1, got {self.cap_slowdown}")
        for name, default in MOE_DEFAULTS.items():
            value, least = getattr(self, name), "positive" if default else "not negative"
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or value < 0 or (default and value == 0)):
                raise SplitwisePlanError(f"stack {self.name!r}: {name} must be a finite number, {least}, got {value!r}")

    def with_context(self, tokens: float) -> "Stack":
        """The same stack, its estimated decode steps read at ``tokens`` of context per sequence."""
        return dataclasses.replace(self, context_tokens=max(1, int(round(tokens))))

    def parameters(self) -> dict:
        """The numeric parameters by name, in the order of ``PARAMETER_DOCS``."""
        return {name: float(getattr(self, name)) for name in PARAMETER_DOCS}

    def moe_parameters(self) -> dict:
        """A mixture of experts' efficiencies by name (``MOE_PARAMETER_DOCS``)."""
        return {name: float(getattr(self, name)) for name in MOE_PARAMETER_DOCS}

    def to_toml(self) -> str:
        """The stack as TOML text, each parameter with its meaning in a comment."""
        lines = ["# Serving-stack efficiency for the analytic latency model (splitwise_plan.perf.analytic).",
                 f'name = "{self.name}"',
                 f"source = {_toml_string(self.source)}"] + ([f"version = {_toml_string(self.version)}"] if self.version
                                                              else []) + [""]
        for name, value in self.parameters().items():
            lines.append(f"# {PARAMETER_DOCS[name]}")
            lines.append(f"{name} = {value:.6g}")
        for name, value in self.moe_parameters().items():
            if value != MOE_DEFAULTS[name]:
                lines += [f"# {MOE_PARAMETER_DOCS[name]}", f"{name} = {value:.6g}"]
        return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    """A one-line TOML basic string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def shipped_stacks() -> list[str]:
    """The names of the shipped stacks: the paper's 2023 stack and today's engines' presets."""
    return sorted(p.stem for p in (data_dir("profiles") / STACKS_FOLDER).glob("*.toml"))


def load_stack(path_or_name: str | Path | None = None) -> Stack:
    """Read a stack: ``None`` for the shipped default, a shipped stack's name, a TOML file's path, or
    ``aiconfigurator:BACKEND[@VERSION]`` (its measured kernels: :mod:`.aiconfigurator`)."""
    if path_or_name is None:
        path_or_name = DEFAULT_STACK
    text = str(path_or_name)
    from splitwise_plan.perf import aiconfigurator
    if aiconfigurator.is_spec(path_or_name):
        return aiconfigurator.parse_spec(text, cap_slowdown=load_stack().cap_slowdown, cap_reference=CAP_REFERENCE)
    if isinstance(path_or_name, str) and "/" not in text and not text.endswith(".toml"):
        return _shipped(ALIASES.get(text.lower(), text))
    return _read(Path(path_or_name))


@functools.lru_cache(maxsize=None)
def _shipped(name: str) -> Stack:
    """A shipped stack, read once per process (a plan builds many simulators)."""
    path = data_dir("profiles") / STACKS_FOLDER / f"{name}.toml"
    if not path.is_file():
        raise SplitwisePlanError(f"no shipped stack named {name!r}; valid: auto, {', '.join(shipped_stacks())} "
                                 "(or default), aiconfigurator:BACKEND[@VERSION], or a stack TOML file's path")
    return _read(path)


def _read(path: Path) -> Stack:
    """The stack of the TOML file at ``path``."""
    doc = read_toml(path, "stack")
    known = {f.name for f in fields(Stack)}
    unknown = sorted(set(doc) - known)
    if unknown:
        raise SplitwisePlanError(f"stack file {path}: unknown key(s) {', '.join(unknown)}")
    missing = [k for k in PARAMETER_DOCS if k not in doc]
    if missing:
        raise SplitwisePlanError(f"stack file {path} lacks {', '.join(missing)}")
    return Stack(**{"name": path.stem, "source": str(path), **doc})
