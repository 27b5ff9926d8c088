"""Results as JSON records: numpy values as plain ones, a dict with other keys than strings as its pairs.

What a checkpoint line and a stored trial keep of a result (:meth:`SimulationResult.to_record
<splitwise_plan.sim.simulator.SimulationResult.to_record>`), read back exactly.
"""

from __future__ import annotations

import numpy as np


def to_json(x):
    """``x`` as JSON-able data: numpy scalars and arrays as plain numbers and lists."""
    if isinstance(x, dict):
        if all(isinstance(k, str) for k in x):
            return {k: to_json(v) for k, v in x.items()}
        return {"__pairs__": [[to_json(k), to_json(v)] for k, v in x.items()]}
    if isinstance(x, (list, tuple)):
        return [to_json(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return [to_json(v) for v in x.tolist()]
    return x


def from_json(x):
    """The inverse of :func:`to_json`."""
    if isinstance(x, dict):
        if set(x) == {"__pairs__"}:
            return {_key(k): from_json(v) for k, v in x["__pairs__"]}
        return {k: from_json(v) for k, v in x.items()}
    if isinstance(x, list):
        return [from_json(v) for v in x]
    return x


def _key(k):
    if isinstance(k, float) and k.is_integer():
        return int(k)
    return k
