"""Per-request latencies and their percentiles: TTFT, TBT and E2E.

TTFT runs from arrival to the end of the prompt phase; E2E to the last token;
TBT is ``(E2E - TTFT) / output_tokens``, as in the reference simulator.
"""

from __future__ import annotations

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
        v = np.where(np.isnan(v), np.inf, v)   # a copy: the percentile may reorder it in place
        with np.errstate(invalid="ignore"):   # interpolating between two unfinished (inf) requests
            q = np.percentile(v, list(pcts), axis=-1, overwrite_input=True)
        q = np.where(np.isnan(q), np.inf, q)    # inf - inf in the interpolation: still unfinished
        out[m] = {p: q[i] for i, p in enumerate(pcts)}
    return out
