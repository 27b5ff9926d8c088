"""Budgets for ``--goal max-throughput``: a number, or machines such as ``40xH100``.

``40xH100`` means the cost (``--budget-cost``) or the provisioned power
(``--budget-power``) of 40 DGX-H100 machines; terms may be added, as in
``20xH100+30xA100``. Machine names are those of the catalog (``dgx-h100``, or a
machine of ``--machines-file``) or the short forms ``A100``, ``H100``, ``H100cap`` and
the built-in machines' short names (``B300``, ``GB200``, ``L40S``: ``SHORT_NAMES``).
"""

from __future__ import annotations

import math
import re

from splitwise_plan.errors import SplitwisePlanError, choices, input_name
from splitwise_plan.inputs.designs import SHORT_NAMES
from splitwise_plan.inputs.machines import BUILTIN_MACHINES, Machine

BUDGET_KINDS = ("cost", "power")
SHORT_MACHINES = {"a100": "dgx-a100", "h100": "dgx-h100", "h100cap": "dgx-h100-cap",
                  "h100-cap": "dgx-h100-cap", "h100pcap": "dgx-h100-cap", "hhcap": "dgx-h100-cap"}
_TERM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*[x\*]\s*([A-Za-z0-9_.\-]+)\s*$", re.IGNORECASE)


def resolve_machine(name: str, machines: dict[str, Machine] | None = None) -> Machine:
    """A machine by catalog name or short form (A100, H100, H100cap, GB200: ``SHORT_NAMES``), in any case."""
    pool = BUILTIN_MACHINES if machines is None else machines
    key = name.strip()
    for cand in (key, key.lower(), SHORT_MACHINES.get(key.lower(), ""), SHORT_NAMES.get(key.lower(), ""),
                 f"dgx-{key.lower()}"):
        if cand in pool:
            return pool[cand]
    raise SplitwisePlanError(
        f"budget machine {name!r} is unknown; valid: {choices(pool)} or A100, H100, H100cap")


def parse_budget(spec, kind: str, machines: dict[str, Machine] | None = None) -> float:
    """The budget in the catalog's units: a positive number, or ``N x MACHINE`` terms joined by ``+``."""
    if kind not in BUDGET_KINDS:
        raise SplitwisePlanError(f"budget kind {kind!r} is unknown; valid: {', '.join(BUDGET_KINDS)}")
    flag = input_name(f"budget_{kind}")
    if isinstance(spec, bool):
        raise SplitwisePlanError(f"{flag} must be a number or machines like 40xH100, got {spec!r}")
    if isinstance(spec, (int, float)):
        value = float(spec)
    else:
        text = str(spec).strip()
        if not text:
            raise SplitwisePlanError(f"{flag} is empty; give a number or machines like 40xH100")
        try:
            value = float(text)
        except ValueError:
            value = 0.0
            for term in text.split("+"):
                m = _TERM.match(term)
                if not m:
                    raise SplitwisePlanError(
                        f"{flag} {text!r} is not a number or machines like 40xH100 (term {term.strip()!r})") from None
                count = float(m.group(1))
                value += count * getattr(resolve_machine(m.group(2), machines), kind)
    if not math.isfinite(value) or value <= 0:
        raise SplitwisePlanError(f"{flag} must be positive and finite, got {spec!r}")
    return value
