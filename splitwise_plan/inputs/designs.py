"""Cluster designs of the paper: Splitwise-AA/HH/HA/HHcap and the two baselines; and any of the catalog's machines."""

from __future__ import annotations

from dataclasses import dataclass

from splitwise_plan.errors import SplitwisePlanError, whole_number


@dataclass(frozen=True)
class Design:
    """A design names the machine type of each pool, and may fix each pool's tensor parallelism.

    Baselines have one pool (``prompt_machine``) whose machines run both phases
    with mixed continuous batching; Splitwise designs have a prompt pool and a
    token pool and ship each request's KV cache between them. ``tp`` is (the prompt
    pool's TP, the token pool's; a baseline's one pool reads the first), or None: the
    simulator's. A design with a TP is named after it: ``splitwise-hh@tp4:2``.
    """

    name: str
    short: str
    prompt_machine: str
    token_machine: str | None
    tp: tuple[int, int] | None = None

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


#: How a design's name gives its pools' tensor parallelism: ``splitwise-hh@tp4:2``, ``baseline-h100@tp4``.
TP_MARK = "@tp"


def parse_tp(value, what: str = "--tp") -> tuple[int, int]:
    """A tensor parallelism for both pools (``8``) or for each (``4:2``: the prompt pool's, the token pool's) as a
    pair; a one-line user error naming ``what`` otherwise."""
    if isinstance(value, tuple) and len(value) == 2:
        parts = list(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        parts = [value, value]
    else:
        parts = str(value).strip().split(":")
        parts = parts * 2 if len(parts) == 1 else parts
    try:
        if len(parts) != 2:
            raise ValueError
        numbers = [int(x.strip()) if isinstance(x, str) else x for x in parts]
    except ValueError:
        raise SplitwisePlanError(f"{what} takes a tensor parallelism for every pool (8) or the prompt pool's and the "
                                 f"token pool's (4:2), each a whole number from 1 to 1024; got {value!r}") from None
    return tuple(whole_number(x, what, 1, 1024) for x in numbers)


def tp_label(tp: tuple[int, int], baseline: bool = False) -> str:
    """``8`` for (8, 8) or a baseline's; ``4:2`` for (4, 2)."""
    return str(tp[0]) if baseline or tp[0] == tp[1] else f"{tp[0]}:{tp[1]}"


def with_tp(design: "Design", tp, what: str = "--tp") -> "Design":
    """``design`` with each pool's tensor parallelism fixed to ``tp`` (see :func:`parse_tp`), named after it."""
    base = base_design(design)
    pair = parse_tp(tp, what)
    label = f"{TP_MARK}{tp_label(pair, base.is_baseline)}"
    return Design(base.name + label, base.short + label, base.prompt_machine, base.token_machine,
                  (pair[0], pair[0]) if base.is_baseline else pair)


def base_design(design: "Design") -> "Design":
    """``design`` without a fixed tensor parallelism."""
    return design if design.tp is None else get_design(design.name.split(TP_MARK)[0])


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
    if TP_MARK in name.lower():   # splitwise-hh@tp4:2
        at = name.lower().index(TP_MARK)
        return with_tp(get_design(name[:at]), name[at + len(TP_MARK):], f"design {name!r}: its TP")
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


#: The paper's designs as reports name them: its own name, then its pools' machines.
_PAPER_LABELS = {"splitwise-aa": "Splitwise-AA", "splitwise-hh": "Splitwise-HH", "splitwise-ha": "Splitwise-HA",
                 "splitwise-hhcap": "Splitwise-HHcap", "baseline-a100": "Baseline-A100", "baseline-h100": "Baseline-H100"}
#: The built-in machines by the GPU name reports give them (the reverse of SHORT_NAMES)
_MACHINE_LABELS = {"dgx-a100": "A100", "dgx-h100": "H100", "dgx-h100-cap": "H100cap", "dgx-h200": "H200",
                   "dgx-b200": "B200", "dgx-b300": "B300", "gb200-8": "GB200", "mi300x-8": "MI300X", "l40s-8": "L40S"}


def machine_label(name: str) -> str:
    """A machine type as reports name it: ``H200`` for the built-in ``dgx-h200`` (or ``h200``), else its own name."""
    key = str(name).lower()
    return _MACHINE_LABELS.get(SHORT_NAMES.get(key, key), str(name))


def display_name(design) -> str:
    """The one name reports give a design: ``Splitwise-HH (H100:H100)``, ``Baseline-A100``, ``H100:H200``,
    ``Baseline-B200``; with its TPs where it fixes them: ``H200:H200 TP2``, ``Splitwise-HH (H100:H100) TP2:4``."""
    d = get_design(design)
    base = base_design(d)
    pools = ":".join(machine_label(m) for m in base.machines)
    if base.name in _PAPER_LABELS:
        name = _PAPER_LABELS[base.name] + ("" if base.is_baseline else f" ({pools})")
    else:
        name = f"Baseline-{pools}" if base.is_baseline else pools
    return name if d.tp is None else f"{name} TP{tp_label(d.tp, d.is_baseline)}"


#: Machines a pool may have: far beyond any inference fleet, and small enough that a
#: simulation's per-machine arrays stay within memory.
MAX_POOL = 10_000


def pool_size(count, what: str) -> int:
    """``count`` machines as a pool size (1 to ``MAX_POOL``), or a user error naming ``what``."""
    return whole_number(count, what, 1, MAX_POOL, " machines")
