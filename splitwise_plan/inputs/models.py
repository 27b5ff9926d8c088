"""LLM architectures: what the simulator needs to size the KV cache and the weights."""

from __future__ import annotations

from dataclasses import dataclass

from splitwise_plan.errors import SplitwisePlanError, by_name, choices


@dataclass(frozen=True)
class ModelSpec:
    """One LLM. KV bytes per token follow the reference: 2 * hidden * layers * dtype (no GQA)."""

    name: str
    num_layers: int
    hidden_size: int
    weights_bytes: int
    dtype_bytes: int = 2

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies across the whole model."""
        return 2 * self.hidden_size * self.num_layers * self.dtype_bytes


BUILTIN_MODELS: dict[str, ModelSpec] = {
    "bloom-176b": ModelSpec("bloom-176b", num_layers=70, hidden_size=14336, weights_bytes=329_000_000_000),
    "llama2-70b": ModelSpec("llama2-70b", num_layers=80, hidden_size=8192, weights_bytes=135_000_000_000),
}


def get_model(name: str, models: dict[str, ModelSpec] | None = None) -> ModelSpec:
    """Look up a model by name; an unknown name raises with the valid ones."""
    pool = BUILTIN_MODELS if models is None else models
    try:
        return by_name(pool, name)
    except (KeyError, TypeError):
        known = " (the architectures the tool knows: a profile of another model cannot size its KV cache " \
                "and weights)" if models is None else ""
        raise SplitwisePlanError(f"unknown model {name!r}; valid: {choices(pool)}{known}") from None


def check_fits(model: ModelSpec, machine, gpus: int = 0) -> None:
    """A user error unless an instance of ``model`` on ``gpus`` GPUs of ``machine`` (0: all of them)
    holds its weights in their HBM, with room left for the KV cache."""
    hbm = machine.hbm_of(gpus)
    if hbm <= model.weights_bytes:
        where = (f"{hbm / 2**30:.4g} GiB of HBM of {machine.name}" if not gpus or gpus == machine.gpus else
                 f"{hbm / 2**30:.4g} GiB of HBM of an instance on {gpus} of the {machine.gpus} GPUs of {machine.name}")
        raise SplitwisePlanError(
            f"the weights of {model.name} ({model.weights_bytes / 1e9:.0f} GB) do not fit in the {where}")
