"""Cluster designs of the paper: Splitwise-AA/HH/HA/HHcap and the two baselines; and any of the catalog's machines."""

from __future__ import annotations

from dataclasses import dataclass

from splitwise_plan.errors import SplitwisePlanError, whole_number


@dataclass(frozen=True)
class Design:
    """A design names the machine type of each pool.

    Baselines have one pool (``prompt_machine``) whose machines run both phases
    with mixed continuous batching; Splitwise designs have a prompt pool and a
    token pool and ship each request's KV cache between them.
    """

    name: str
    short: str
    prompt_machine: str
    token_machine: str | None

    @property
    def is_baseline(self) -> bool:
        return self.token_machine is None

    @property
    def machines(self) -> tuple[str, ...]:
        """The machine type of each pool: (prompt, token), or (machines,) for a baseline."""
        return (self.prompt_machine,) if self.token_machine is None else (self.prompt_machine, self.token_machine)


DESIGNS: dict[str, Design] = {
    d.name: d
    for d in (
        Design("splitwise-aa", "AA", "dgx-a100", "dgx-a100"),
        Design("splitwise-hh", "HH", "dgx-h100", "dgx-h100"),
        Design("splitwise-ha", "HA", "dgx-h100", "dgx-a100"),
        Design("splitwise-hhcap", "HHcap", "dgx-h100", "dgx-h100-cap"),
        Design("baseline-a100", "A100", "dgx-a100", None),
        Design("baseline-h100", "H100", "dgx-h100", None),
    )
}

#: Short names of the built-in machine types, as a design's pools may name them (``H100:H200``).
SHORT_NAMES = {"a100": "dgx-a100", "h100": "dgx-h100", "h100cap": "dgx-h100-cap", "h100-cap": "dgx-h100-cap",
               "h100pcap": "dgx-h100-cap", "h200": "dgx-h200", "b200": "dgx-b200", "b300": "dgx-b300",
               "gb200": "gb200-8", "mi300x": "mi300x-8", "l40s": "l40s-8"}

_BUILTIN_SHORT = {"a100": "dgx-a100", "h100": "dgx-h100"}

#: Names a machine type may not take, in lower case: a design's name or short form, or ``baseline``
#: (of ``baseline:MACHINE``), which ``--design`` and ``--designs`` would read as the design.
RESERVED_NAMES = frozenset({"baseline"} | {n.lower() for d in DESIGNS.values() for n in (d.name, d.short)})


def get_design(name: str) -> Design:
    """Look a design up by full or short name, in any case; or build one of the machine catalog's
    types: ``PROMPT:TOKEN`` (a Splitwise design, e.g. ``my-b200:dgx-a100``, or ``H100:H200`` by the
    built-in machines' short names, which :func:`~splitwise_plan.inputs.machines.with_short_names`
    adds to a catalog) or ``baseline:MACHINE``.

    A built design whose machines are a shipped design's is that design (``dgx-h100:dgx-a100`` is
    Splitwise-HA). Whether the machine types exist is the catalog's to say, where it is loaded.
    """
    if isinstance(name, Design):
        return name
    if not isinstance(name, str):
        raise SplitwisePlanError(f"a design is named by a string such as 'splitwise-hh' or 'HH', got {name!r}")
    key = name.strip().lower()
    for d in DESIGNS.values():
        if key in (d.name, d.short.lower()):
            return d
    if key.count(":") == 1:
        # A100 and H100 name no machine of a catalog's own (they are designs' short names): the built-ins
        first, second = (_BUILTIN_SHORT.get(part.strip(), part.strip()) for part in key.split(":"))
        if first and second:
            pools = (second, None) if first == "baseline" else (first, second)
            same = [d for d in DESIGNS.values() if (d.prompt_machine, d.token_machine) == pools]
            if same:
                return same[0]
            spec = f"baseline:{second}" if first == "baseline" else f"{first}:{second}"
            return Design(spec, spec, *pools)
    valid = ", ".join(f"{d.name} ({d.short})" for d in DESIGNS.values())
    raise SplitwisePlanError(f"design {name!r} is unknown; choose one of: {valid}, or machine types of the "
                             "catalog as PROMPT:TOKEN (Splitwise) or baseline:MACHINE")


#: Machines a pool may have: far beyond any inference fleet, and small enough that a
#: simulation's per-machine arrays stay within memory.
MAX_POOL = 10_000


def pool_size(count, what: str) -> int:
    """``count`` machines as a pool size (1 to ``MAX_POOL``), or a user error naming ``what``."""
    return whole_number(count, what, 1, MAX_POOL, " machines")
