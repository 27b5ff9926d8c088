"""Per-request latencies and their percentiles: TTFT, TBT and E2E; and the verdict that stops a
design early, once its requests already break an SLO percentile whatever the others do.

TTFT runs from arrival to the end of the prompt phase; E2E to the last token;
TBT is ``(E2E - TTFT) / output_tokens``, as in the reference simulator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

METRICS = ("ttft", "tbt", "e2e")
PERCENTILES = (50, 90, 99)


def request_latencies(ttft, e2e, output_tokens) -> dict[str, np.ndarray]:
    """TTFT, TBT and E2E per request (arrays along the last axis)."""
    ttft = np.asarray(ttft, dtype=np.float64)
    e2e = np.asarray(e2e, dtype=np.float64)
    return {"ttft": ttft, "tbt": (e2e - ttft) / np.asarray(output_tokens, dtype=np.float64), "e2e": e2e}


def percentiles(values: dict[str, np.ndarray], pcts=PERCENTILES) -> dict[str, dict]:
    """Linear-interpolation percentiles along the last axis; an unfinished (NaN) request counts as +inf."""
    out = {}
    for m, v in values.items():
        v = np.where(np.isnan(v), np.inf, v)   # a copy: partitioned in place
        q = _linear_percentiles(v, pcts)
        q = np.where(np.isnan(q), np.inf, q)    # inf - inf in the interpolation: still unfinished
        out[m] = {p: q[i] for i, p in enumerate(pcts)}
    return out


def _linear_percentiles(v: np.ndarray, pcts) -> np.ndarray:
    """``np.percentile(v, pcts, axis=-1)`` (method "linear"), the same numbers, ~1.4x faster: one
    partition around just the ranks it reads (numpy also partitions around the last element).
    Reorders ``v`` in place."""
    n = v.shape[-1]
    virtual = np.true_divide(np.asarray(pcts, dtype=np.float64), 100) * (n - 1)
    below = np.floor(virtual).astype(np.intp)
    above = np.minimum(below + 1, n - 1)
    gamma = virtual - below
    v.partition(np.unique(np.concatenate([below, above])), axis=-1)
    a, b = v[..., below], v[..., above]
    with np.errstate(invalid="ignore"):     # interpolating between two unfinished (inf) requests
        diff = b - a
        out = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)   # numpy's symmetric lerp
    return np.moveaxis(out, -1, 0)


@dataclass(frozen=True)
class Verdict:
    """SLOs that stop a design as soon as its requests already break one of them.

    Each entry is (metric, per-request reference seconds or None for an SLO in seconds,
    limit, count): the SLO fails once ``count`` requests have a latency lower bound (what
    the rest of the run can only lengthen) at or past the limit, whatever the rest does.
    """

    slos: tuple

    @classmethod
    def of(cls, slos, reference, n: int) -> "Verdict":
        """From an SLO set and the per-request reference latencies (ttft, tbt, e2e) of ``n`` requests.

        A linear-interpolation percentile p is at least the sorted value at index
        floor((n-1) p/100), so n minus that many values at or past the limit break it
        (one more for rounding).
        """
        ref = dict(zip(("ttft", "tbt", "e2e"), reference))
        return cls(tuple((s.metric, np.asarray(ref[s.metric]) if s.unit == "slowdown" else None, float(s.limit),
                          n - math.floor((n - 1) * s.percentile / 100.0) + 1) for s in slos))

    def of_requests(self, keep: np.ndarray) -> "Verdict":
        """The verdict on the requests ``keep`` (a mask) alone: each of the others is unfinished, so it
        already breaks every SLO, and fewer of the rest need to."""
        lost = int(keep.size - np.count_nonzero(keep))
        return Verdict(tuple((metric, None if ref is None else ref[keep], limit, count - lost)
                             for metric, ref, limit, count in self.slos))
