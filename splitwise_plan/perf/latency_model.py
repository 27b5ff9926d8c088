"""Latency model: how long a batch takes on one machine, from a measured profile.

Follows the reference simulator's rules: per ``batch_tokens`` medians of the
profile, piecewise-linear interpolation with linear extrapolation at both ends;
a prompt-only batch costs ``prompt(sum of prompt tokens)``, a decode-only batch
``token(number of decoding requests)`` and a mixed batch
``1.1 * prompt(prompt tokens + decoding requests)``. An estimated token curve holds ``context_tokens`` of KV
cache per sequence; a decode-only batch that holds ``C`` in all takes ``kv_s_per_token * (C - n * context_tokens)``
more (the measured profiles have no context: their ``kv_s_per_token`` is 0).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

import numpy as np

#: The KV tokens each sequence of an estimated decode step holds, where no request stream gives its own.
DECODE_CONTEXT = 1024


def phase_rows(model: str, hardware: str, tensor_parallel: int, sizes, prefill_ms, decode_ms) -> list[dict]:
    """Profile rows (the ``perf_model.csv`` schema) that put the prefill of ``x`` tokens and the decode step of ``x``
    sequences at batch tokens ``x``, as this model reads them, for each ``x`` of ``sizes`` (an estimate's rows)."""
    return [dict(model=model, hardware=hardware, prompt_size=int(x), batch_size=1, token_size=1, prompt_time=float(p),
                 token_time=float(d), tensor_parallel=int(tensor_parallel))
            for x, p, d in zip(sizes, prefill_ms, decode_ms)]

MIXED_BATCH_FACTOR = 1.1


@dataclass(frozen=True)
class PhaseCurve:
    """Seconds as a piecewise-linear function of batch tokens, extrapolated linearly."""

    xs: np.ndarray = field(repr=False)
    ys: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        xs = np.asarray(self.xs, dtype=np.float64)
        ys = np.asarray(self.ys, dtype=np.float64)
        if xs.ndim != 1 or xs.shape != ys.shape or xs.size < 2:
            raise ValueError("a phase curve needs at least two (batch_tokens, seconds) points")
        if np.any(np.diff(xs) <= 0):
            raise ValueError("batch_tokens of a phase curve must be strictly increasing")
        object.__setattr__(self, "xs", xs)
        object.__setattr__(self, "ys", ys)
        # Slopes and intercepts of each segment, extended at both ends.
        slopes = np.diff(ys) / np.diff(xs)
        object.__setattr__(self, "_slopes", slopes)
        object.__setattr__(self, "_floor", 1e-3 * float(ys.min()))
        object.__setattr__(self, "_lists", (xs.tolist(), ys.tolist(), slopes.tolist()))

    def __call__(self, x):
        """Evaluate at ``x`` (scalar or array); numpy-vectorized.

        Never below a thousandth of the fastest measured batch: a falling last (or steep first)
        segment would extrapolate to zero or negative times far from the measurements; where
        the extrapolation stays above that, it is the reference's value."""
        x = np.asarray(x, dtype=np.float64)
        xs, ys, slopes = self.xs, self.ys, self._slopes  # type: ignore[attr-defined]
        seg = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, xs.size - 2)
        out = np.maximum(ys[seg] + slopes[seg] * (x - xs[seg]), self._floor)  # type: ignore[attr-defined]
        return out if out.ndim else float(out)

    def at(self, x: float) -> float:
        """``self(x)`` for one number in plain Python: the same value, ~20x faster than numpy on a scalar."""
        xs, ys, slopes = self._lists  # type: ignore[attr-defined]
        seg = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
        return max(ys[seg] + slopes[seg] * (x - xs[seg]), self._floor)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class LatencyModel:
    """Batch times of one (model, hardware, tensor parallelism) in seconds."""

    model: str
    hardware: str
    tensor_parallel: int
    prompt: PhaseCurve
    token: PhaseCurve
    #: seconds a decode step takes per KV token its sequences hold beyond ``context_tokens`` each (0: blind to it)
    kv_s_per_token: float = 0.0
    #: the KV tokens per sequence the token curve was read at
    context_tokens: float = 0.0

    def prompt_time(self, prompt_tokens):
        """Prompt-only batch holding ``prompt_tokens`` prompt tokens in all."""
        return self.prompt(prompt_tokens)

    def token_time(self, n_decode, context=None):
        """One decode iteration of ``n_decode`` requests; holding ``context`` KV tokens in all, where given."""
        t = self.token(n_decode)
        if context is None or not self.kv_s_per_token:
            return t
        extra = self.kv_s_per_token * (np.asarray(context, np.float64) - np.asarray(n_decode) * self.context_tokens)
        out = np.maximum(t + extra, self.token._floor)  # type: ignore[attr-defined]
        return out if out.ndim else float(out)

    def mixed_time(self, prompt_tokens, n_decode):
        """A batch that mixes prompts and decoding requests."""
        return MIXED_BATCH_FACTOR * self.prompt(np.asarray(prompt_tokens) + np.asarray(n_decode))

    def iteration_time(self, prompt_tokens, n_decode):
        """Any batch: picks the prompt-only, decode-only or mixed rule (vectorized)."""
        p = np.asarray(prompt_tokens, dtype=np.float64)
        d = np.asarray(n_decode, dtype=np.float64)
        out = np.where(
            d <= 0,
            self.prompt(p),
            np.where(p <= 0, self.token(d), MIXED_BATCH_FACTOR * self.prompt(p + d)),
        )
        return out if out.ndim else float(out)

    def iteration_time_at(self, prompt_tokens: float, n_decode: float) -> float:
        """``iteration_time`` of one batch, in plain Python (the discrete-event oracle's hot path)."""
        if n_decode <= 0:
            return self.prompt.at(float(prompt_tokens))
        if prompt_tokens <= 0:
            return self.token.at(float(n_decode))
        return MIXED_BATCH_FACTOR * self.prompt.at(float(prompt_tokens + n_decode))

    def slowed(self, prompt: float = 0.0, decode: float = 0.0) -> "LatencyModel":
        """The same machine with every prompt batch ``prompt`` (a fraction: 0.2 is 20%) and every decode step
        ``decode`` slower (its growth with the context too): what a latency error band asks a plan to hold at.
        A mixed batch (a baseline's) is timed by the prompt curve, so it takes the prompt's share."""
        if not prompt and not decode:
            return self
        return replace(self, prompt=PhaseCurve(self.prompt.xs, self.prompt.ys * (1.0 + prompt)),
                       token=PhaseCurve(self.token.xs, self.token.ys * (1.0 + decode)),
                       kv_s_per_token=self.kv_s_per_token * (1.0 + decode))

    @classmethod
    def from_medians(cls, model: str, hardware: str, tensor_parallel: int,
                     batch_tokens, prompt_ms, token_ms) -> "LatencyModel":
        """Build from per-batch_tokens median times given in milliseconds."""
        bt = np.asarray(batch_tokens, dtype=np.float64)
        return cls(model, hardware, int(tensor_parallel),
                   PhaseCurve(bt, np.asarray(prompt_ms, dtype=np.float64) / 1000.0),
                   PhaseCurve(bt, np.asarray(token_ms, dtype=np.float64) / 1000.0))


def reference_latencies(reference: LatencyModel, prompt_tokens, output_tokens):
    """Per-request (ttft, tbt, e2e) seconds alone on the reference machine, the slowdown denominators.

    As the reference simulator: ttft = prompt(prompt_size), tbt = token(prompt_size),
    e2e = ttft + tbt * (output_tokens - 1).
    """
    p = np.asarray(prompt_tokens, dtype=np.float64)
    n = np.asarray(output_tokens, dtype=np.float64)
    ttft = np.asarray(reference.prompt_time(p), dtype=np.float64)
    tbt = np.asarray(reference.token_time(p), dtype=np.float64)
    return ttft, tbt, ttft + tbt * (n - 1.0)
