"""Machines: one DGX server, its GPUs and memory, and its cost and provisioned power."""

from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass
from pathlib import Path

from splitwise_plan.errors import SplitwisePlanError, by_name, choices, whole_number
from splitwise_plan.inputs.designs import RESERVED_NAMES
from splitwise_plan.inputs.paths import read_toml

GIB = 1024**3


#: Upper bounds of a machine's numbers: far beyond any machine, and within what the simulators compute with.
_MOST = {"gpus": 4096, "hbm_bytes_per_gpu": 2**50, "hbm_gib_per_gpu": 2**20, "cost": 1e12, "power": 1e12}


def _number(where: str, key: str, value, *, integer: bool = False) -> float | int:
    """Check that a TOML value is a positive finite number (an integer if asked), at most ``_MOST[key]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise SplitwisePlanError(f"{where}: {key} must be a number, got {value!r}")
    value = value.item() if hasattr(value, "item") else value   # a numpy number as a Python one
    if not math.isfinite(value) or value <= 0:
        raise SplitwisePlanError(f"{where}: {key} must be positive and finite, got {value!r}")
    if value > _MOST[key]:
        raise SplitwisePlanError(f"{where}: {key} must be at most {_MOST[key]:g}, got {value!r}")
    if integer:
        if float(value) != int(value):
            raise SplitwisePlanError(f"{where}: {key} must be an integer, got {value!r}")
        return int(value)
    return float(value)


@dataclass(frozen=True)
class Machine:
    """A DGX machine type.

    ``hardware`` names the GPU in the performance profiles (``a100-80gb`` ...).
    ``cost`` and ``power`` are per machine in the reference's relative units.
    """

    name: str
    hardware: str
    gpus: int
    hbm_bytes_per_gpu: int
    cost: float
    power: float

    def __post_init__(self) -> None:
        """Numbers as plain Python ones within ``_MOST``; a user error names the machine and field."""
        for key in ("name", "hardware"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key).strip():
                raise SplitwisePlanError(f"machine {self.name!r}: {key} must be a non-empty string")
        object.__setattr__(self, "hardware", self.hardware.strip().lower())   # the profiles' name, in any case
        where = f"machine {self.name!r}"
        for key in ("gpus", "hbm_bytes_per_gpu"):
            object.__setattr__(self, key, whole_number(getattr(self, key), f"{where}: {key}", 1, _MOST[key]))
        for key in ("cost", "power"):
            object.__setattr__(self, key, _number(where, key, getattr(self, key)))

    @property
    def hbm_bytes(self) -> int:
        """HBM of all GPUs in the machine, bytes."""
        return self.hbm_of()

    def hbm_of(self, gpus: int = 0) -> int:
        """HBM of ``gpus`` of its GPUs (0: all of them), bytes: a model instance's on those GPUs."""
        return (gpus or self.gpus) * self.hbm_bytes_per_gpu


BUILTIN_MACHINES: dict[str, Machine] = {
    "dgx-a100": Machine("dgx-a100", "a100-80gb", 8, 80 * GIB, cost=2.21, power=24.8),
    "dgx-h100": Machine("dgx-h100", "h100-80gb", 8, 80 * GIB, cost=4.76, power=44.0),
    "dgx-h100-cap": Machine("dgx-h100-cap", "h100-80gb-pcap", 8, 80 * GIB, cost=4.76, power=30.8),
}


# --- loading user overrides -------------------------------------------------

MACHINE_KEYS = ("hardware", "gpus", "hbm_bytes_per_gpu", "hbm_gib_per_gpu", "cost", "power")


def load_machines(path: str | Path | None = None) -> dict[str, Machine]:
    """Builtin machines, overridden or extended by a TOML file's ``[machines.NAME]`` tables.

    An existing name may set any subset of ``hardware``, ``gpus``, ``hbm_bytes_per_gpu``
    (or ``hbm_gib_per_gpu``), ``cost`` and ``power``; a new name must set all of them.
    Names are matched in any case, so the catalog keeps each (key and ``Machine.name``) in lower case.
    """
    machines = dict(BUILTIN_MACHINES)
    if path is None:
        return machines
    doc = read_toml(path, "machine")
    unknown_top = sorted(set(doc) - {"machines"})
    if unknown_top:
        raise SplitwisePlanError(
            f"machine file {path}: unknown top-level key(s) {', '.join(unknown_top)}; "
            "put each machine in a [machines.NAME] table")
    tables = doc.get("machines", {})
    if not isinstance(tables, dict) or not tables:
        raise SplitwisePlanError(f"machine file {path} defines no [machines.NAME] table")
    seen: dict = {}
    for name in tables:   # names are matched in any case: two that differ only in case are one
        _check_name(path, name)
        other = seen.setdefault(str(name).lower(), name)
        if other != name:
            raise SplitwisePlanError(f"machine file {path}: {_table(other)} and {_table(name)} name one "
                                     "machine (names are matched in any case); keep one")
    for name, spec in tables.items():
        where = f"machine file {path}, {_table(name)}"
        if not isinstance(spec, dict):
            raise SplitwisePlanError(f"{where} must be a table")
        unknown = sorted(set(spec) - set(MACHINE_KEYS))
        if unknown:
            raise SplitwisePlanError(
                f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(MACHINE_KEYS)}")
        if "hbm_bytes_per_gpu" in spec and "hbm_gib_per_gpu" in spec:
            raise SplitwisePlanError(f"{where}: give hbm_bytes_per_gpu or hbm_gib_per_gpu, not both")
        builtin = _builtin_named(name)
        # DGX-H100 overrides dgx-h100: one machine, under its builtin name; B200 is b200, as designs name it
        name = builtin.name if builtin is not None else name.lower()
        base = machines.get(name)
        fields = {} if base is None else {
            "hardware": base.hardware, "gpus": base.gpus,
            "hbm_bytes_per_gpu": base.hbm_bytes_per_gpu, "cost": base.cost, "power": base.power}
        if "hardware" in spec:
            hw = spec["hardware"]
            if not isinstance(hw, str) or not hw.strip():
                raise SplitwisePlanError(f"{where}: hardware must be a non-empty string, got {hw!r}")
            fields["hardware"] = hw   # (Machine makes it the profiles' lower-case name)
        if "gpus" in spec:
            fields["gpus"] = _number(where, "gpus", spec["gpus"], integer=True)
        if "hbm_bytes_per_gpu" in spec:
            fields["hbm_bytes_per_gpu"] = _number(where, "hbm_bytes_per_gpu", spec["hbm_bytes_per_gpu"],
                                                  integer=True)
        if "hbm_gib_per_gpu" in spec:
            fields["hbm_bytes_per_gpu"] = int(round(_number(where, "hbm_gib_per_gpu",
                                                            spec["hbm_gib_per_gpu"]) * GIB))
            if fields["hbm_bytes_per_gpu"] < 1:   # rounds to no byte: said of the key the file gives
                raise SplitwisePlanError(f"{where}: hbm_gib_per_gpu must be at least {1 / GIB:.3g} (one byte), "
                                         f"got {spec['hbm_gib_per_gpu']!r}")
        for key in ("cost", "power"):
            if key in spec:
                fields[key] = _number(where, key, spec[key])
        missing = [k for k in ("hardware", "gpus", "hbm_bytes_per_gpu", "cost", "power") if k not in fields]
        if missing:
            raise SplitwisePlanError(
                f"{where}: a new machine needs "
                f"{', '.join('hbm_gib_per_gpu (or hbm_bytes_per_gpu)' if k == 'hbm_bytes_per_gpu' else k for k in missing)} "
                f"(builtin names that can be partly overridden: {choices(BUILTIN_MACHINES)})")
        try:
            machines[name] = Machine(name=name, **fields)
        except SplitwisePlanError as exc:   # Machine's own checks, said of the file's table as the others are
            raise SplitwisePlanError(f"{where}: {str(exc).removeprefix(f'machine {name!r}: ')}") from None
    return machines


def _table(name) -> str:
    """``[machines.NAME]`` as a TOML file writes it: NAME quoted unless it is a bare key."""
    name = str(name)
    return f"[machines.{name if re.fullmatch(r'[A-Za-z0-9_-]+', name) else json.dumps(name, ensure_ascii=False)}]"


def _check_name(path, name) -> None:
    """A user error naming the file and table unless some command can name machine type ``name``:
    ``--design P:T`` and ``--designs a,b`` split at ``:`` and ``,``, and read a design's name as the design."""
    where = f"machine file {path}, {_table(name)}"
    if not name or name != name.strip():
        raise SplitwisePlanError(f"{where}: a machine name must be non-empty, without spaces around it")
    bad = [c for c in ":," if c in name]
    if bad:
        raise SplitwisePlanError(f"{where}: a machine name cannot hold {' or '.join(repr(c) for c in bad)} "
                                 "(they separate names in --design PROMPT:TOKEN and --designs a,b)")
    if name.lower() in RESERVED_NAMES:
        what = "starts a baseline:MACHINE design" if name.lower() == "baseline" else "names a design"
        raise SplitwisePlanError(f"{where}: {name!r} {what}, so it cannot name a machine type; "
                                 "choose another name")


def _builtin_named(name: str):
    """The builtin machine ``name`` names, whatever its case, or None."""
    try:
        return by_name(BUILTIN_MACHINES, name)
    except KeyError:
        return None


def get_machine(name: str, machines: dict[str, Machine] | None = None) -> Machine:
    """Look up a machine by name; an unknown name raises with the valid ones."""
    pool = BUILTIN_MACHINES if machines is None else machines
    try:
        return by_name(pool, name)
    except (KeyError, TypeError):
        raise SplitwisePlanError(f"unknown machine {name!r}; valid: {choices(pool)}") from None
