"""How far an estimated latency may be off: per phase, the held-out P90 error of the source that made it.

A shipped stack carries the errors it made on a GPU (and models) it was not fitted on, as ``profiles`` prints
them; an estimate on that GPU takes that GPU's row, on another GPU the largest row of its kind (dense, or a
mixture of experts' ``moe`` rows). Measured latencies, and AIConfigurator's measured kernels, have no band:
a user gives one (``--latency-error``) where they doubt them.
"""

from __future__ import annotations

from typing import NamedTuple

#: The prefix of a stack's held-out rows measured on mixtures of experts ("moe h200-141gb")
MOE_ROW = "moe "


class Band(NamedTuple):
    """Per phase, how much slower than estimated the latencies may be (fractions: 0.2 is 20%), and whence."""

    prompt: float
    decode: float
    basis: str

    def slower(self) -> tuple[float, float]:
        return self.prompt, self.decode


def given_band(error: float) -> Band:
    """The band a user gives (``--latency-error 0.2``): every phase of every machine that much slower."""
    return Band(float(error), float(error), f"{error:.0%} given (--latency-error)")


def estimate_band(stack, model, hardware: str) -> Band | None:
    """The band of ``stack``'s estimate of ``model`` on ``hardware``: the held-out P90 error of prompt and decode
    times on that GPU where the stack was tested on it, else the largest of its rows of the model's kind; None
    when the stack holds no held-out errors (a stack a user fitted, or AIConfigurator's measured kernels)."""
    rows = {str(k).lower(): v for k, v in (getattr(stack, "held_out", None) or {}).items() if isinstance(v, dict)}
    moe = getattr(model, "experts", None) is not None
    kind = {k: v for k, v in rows.items() if k.startswith(MOE_ROW) == moe and _has_p90(v)}
    if not kind:
        return None
    key = (MOE_ROW if moe else "") + hardware.lower()
    if key in kind:
        row, where = kind[key], f"held-out P90 error on {hardware}"
    else:
        key = max(kind, key=lambda k: max(kind[k]["prompt_p90_pct"], kind[k]["decode_p90_pct"]))
        row, where = kind[key], f"largest held-out P90 error (on {key.removeprefix(MOE_ROW)})"
    return Band(row["prompt_p90_pct"] / 100.0, row["decode_p90_pct"] / 100.0,
                f"the {stack.name} stack's {where}{' on mixtures of experts' if moe else ''}")


def _has_p90(row: dict) -> bool:
    return all(isinstance(row.get(k), (int, float)) for k in ("prompt_p90_pct", "decode_p90_pct"))
