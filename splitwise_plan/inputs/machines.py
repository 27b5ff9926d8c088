"""Machines: one 8-GPU server (DGX A100/H100/H200/B200/B300, an 8-GPU slice of a GB200 NVL72 rack, an MI300X
platform, an 8x L40S PCIe server), its GPUs and memory, the data-sheet numbers of its GPUs (HBM bandwidth,
dense bf16/fp8 TFLOPS, GPU-to-GPU bandwidth, power cap), its price per hour and provisioned power (in named
units, USD/h and kW by default), and where those numbers come from; the machine files that override or
extend the catalog, and short names (``H200``)."""

from __future__ import annotations

import json
import math
import numbers
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from splitwise_plan.errors import SplitwisePlanError, by_name, choices, whole_number
from splitwise_plan.inputs.designs import RESERVED_NAMES, SHORT_NAMES
from splitwise_plan.inputs.paths import read_toml

GIB = 1024**3


#: Upper bounds of a machine's numbers: far beyond any machine, and within what the simulators compute with.
_MOST = {"gpus": 4096, "hbm_bytes_per_gpu": 2**50, "hbm_gib_per_gpu": 2**20, "cost": 1e12, "power": 1e12,
         "hbm_bandwidth_tbps": 1e4, "bf16_tflops": 1e7, "fp8_tflops": 1e7, "interconnect_gbps": 1e7,
         "power_cap": 1.0}
#: A GPU's data-sheet numbers, each optional (None: unknown, or for ``fp8_tflops`` no fp8, for
#: ``power_cap`` not capped): HBM bandwidth per GPU (TB/s), dense bf16 and fp8 TFLOPS per GPU, its
#: GPU-to-GPU bandwidth within the machine (GB/s, NVLink or Infinity Fabric, both directions), and the
#: fraction of its rated power a capped variant runs at.
SHEET_KEYS = ("hbm_bandwidth_tbps", "bf16_tflops", "fp8_tflops", "interconnect_gbps", "power_cap")


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


#: The units of a machine's numbers unless a machine file names others in its ``[units]`` table.
DEFAULT_COST_UNIT = "USD/h"
DEFAULT_POWER_UNIT = "kW"


@dataclass(frozen=True)
class Machine:
    """A DGX machine type.

    ``hardware`` names the GPU in the performance profiles (``a100-80gb`` ...).
    ``cost`` is the price of one machine per hour in ``cost_unit`` (USD/h unless a machine file says
    otherwise), ``power`` its provisioned power in ``power_unit`` (kW). ``source`` says where the
    numbers come from; ``base`` names the machine this one derives from (the power-capped DGX-H100
    is a DGX-H100), whose cost and power overrides it follows, and whose data sheet it takes.
    The data-sheet numbers (``SHEET_KEYS``) are per GPU and None when unknown: ``hbm_bandwidth_tbps``
    (TB/s), ``bf16_tflops`` and ``fp8_tflops`` (dense; no fp8: None), ``interconnect_gbps`` (GB/s
    within the machine) and ``power_cap`` (a capped variant's fraction of rated power, at most 1).
    """

    name: str
    hardware: str
    gpus: int
    hbm_bytes_per_gpu: int
    cost: float
    power: float
    cost_unit: str = DEFAULT_COST_UNIT
    power_unit: str = DEFAULT_POWER_UNIT
    source: str = ""
    base: str | None = None
    hbm_bandwidth_tbps: float | None = None
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    interconnect_gbps: float | None = None
    power_cap: float | None = None

    def __post_init__(self) -> None:
        """Numbers as plain Python ones within ``_MOST``; a user error names the machine and field."""
        for key in ("name", "hardware", "cost_unit", "power_unit"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key).strip():
                raise SplitwisePlanError(f"machine {self.name!r}: {key} must be a non-empty string")
        object.__setattr__(self, "hardware", self.hardware.strip().lower())   # the profiles' name, in any case
        for key in ("cost_unit", "power_unit"):
            object.__setattr__(self, key, getattr(self, key).strip())
        if not isinstance(self.source, str):
            raise SplitwisePlanError(f"machine {self.name!r}: source must be a string, got {self.source!r}")
        if self.base is not None and (not isinstance(self.base, str) or not self.base.strip()):
            raise SplitwisePlanError(f"machine {self.name!r}: base must name a machine, got {self.base!r}")
        where = f"machine {self.name!r}"
        for key in ("gpus", "hbm_bytes_per_gpu"):
            object.__setattr__(self, key, whole_number(getattr(self, key), f"{where}: {key}", 1, _MOST[key]))
        for key in ("cost", "power"):
            object.__setattr__(self, key, _number(where, key, getattr(self, key)))
        for key in SHEET_KEYS:   # unknown stays None
            if getattr(self, key) is not None:
                object.__setattr__(self, key, _number(where, key, getattr(self, key)))

    @property
    def hbm_bytes(self) -> int:
        """HBM of all GPUs in the machine, bytes."""
        return self.hbm_of()

    def hbm_of(self, gpus: int = 0) -> int:
        """HBM of ``gpus`` of its GPUs (0: all of them), bytes: a model instance's on those GPUs."""
        return (gpus or self.gpus) * self.hbm_bytes_per_gpu


# --- the builtin catalog, in real units ---------------------------------------------

#: The Splitwise paper's DGX-H100 : DGX-A100 cost ratio (its relative prices 4.76 and 2.21), kept exactly
#: so that cheapest-design answers are the paper's.
PAPER_COST_RATIO = 4.76 / 2.21
#: The paper caps the power of its power-capped (token) DGX-H100 machines at 70% of rated power.
PAPER_POWER_CAP = 0.7
#: AWS on-demand list prices, USD per machine-hour, us-east-1 unless said, as the AWS price list gave them in
#: 2026 (after AWS's June 2025 cut of P4 and P5 prices): p5.48xlarge (8x H100) 55.04 and p4de.24xlarge (8x A100
#: 80GB) 27.44705 as retrieved 2026-11-09 (datareceipts/data-receipts, 109-gpu-pricing/hyperscalers.json);
#: p5en.48xlarge (8x H200) 63.296 as listed 2026-08-06 (dstackai/dstack PR 4110); p6-b200.48xlarge (8x B200)
#: 113.9328, p6-b300.48xlarge (8x B300, us-west-2) 142.416 and g6e.48xlarge (8x L40S) 30.13118 in SkyPilot's
#: AWS catalog (skypilot-org/skypilot-catalog, catalogs/v8/aws/vms.csv, read 2026-12; built from the AWS price list).
H100_USD_PER_HOUR = 55.04
AWS_A100_USD_PER_HOUR = 27.44705
H200_USD_PER_HOUR = 63.296
B200_USD_PER_HOUR = 113.9328
B300_USD_PER_HOUR = 142.416
L40S_USD_PER_HOUR = 30.13118
#: Oracle Cloud BM.GPU.MI300X.8 (8x MI300X) on-demand, us-chicago-1, USD per hour (SkyPilot's OCI catalog,
#: catalogs/v8/oci/vms.csv, read 2026-12).
MI300X_USD_PER_HOUR = 48.0
#: The DGX A100's price, an estimate: the H100's at the paper's cost ratio, so that the paper's cheapest designs
#: stay its answers (25.55 USD/h; AWS's p4de.24xlarge lists 27.45, 7% more).
A100_USD_PER_HOUR = H100_USD_PER_HOUR / PAPER_COST_RATIO
#: Maximum system power from the NVIDIA DGX A100, DGX H100, DGX H200 and DGX B200 data sheets, kW.
A100_KW = 6.5
H100_KW = 10.2
H200_KW = 10.2
B200_KW = 14.3
#: Maximum system power from the NVIDIA DGX B300 data sheet (about 14 kW), kW.
B300_KW = 14.0
#: A GB200 NVL72 rack's power, kW: about 120 kW (NVIDIA's and vendors' figures are 120 to 132 kW).
GB200_NVL72_KW = 120.0
#: The 8-GPU slices of a GB200 NVL72 rack: 72 GPUs in 18 compute trays of 4, a slice is 2 trays.
GB200_NVL72_SLICES = 72 // 8
#: A GB200 slice's power, kW, an estimate: the rack's shared evenly by its 9 slices (its NVLink switch trays
#: and power shelves included): 13.33 kW. NVIDIA DPS's shipped DGX_GB200 compute-tray specification (2 Grace
#: CPUs, 4 GPUs; docs.nvidia.com/datacenter/dps) gives at most 6,667 W, so 2 trays agree: 13.33 kW.
GB200_KW = GB200_NVL72_KW / GB200_NVL72_SLICES
#: An 8x L40S PCIe server's power, kW, an estimate as MI300X_KW's: 8 GPUs at their 350 W board power
#: (NVIDIA L40S data sheet) and about 4 kW of host (CPUs, memory, NICs, fans): 2.8 + 4 kW.
L40S_KW = 6.8
#: An 8x MI300X platform's power, kW, an estimate: 8 GPUs at their 750 W board power (AMD Instinct
#: MI300X data sheet) and about 4 kW of host (CPUs, memory, NICs, fans), as in a DGX H100's 10.2 kW.
MI300X_KW = 10.0
#: GB200: AWS sells its P6e-GB200 UltraServers by Capacity Blocks only (no on-demand price): an 8-GPU slice is
#: priced at its estimated power to the DGX H100's (13.33 / 10.2 kW); a stated guess.
GB200_COST_RATIO = GB200_KW / H100_KW
#: Data sheets of the GPUs, per GPU: HBM TB/s, dense bf16 and fp8 TFLOPS (the sheets' "with sparsity"
#: numbers halved), GPU-to-GPU GB/s within the machine (both directions, as NVIDIA gives NVLink's).
A100_SHEET = {"hbm_bandwidth_tbps": 2.039, "bf16_tflops": 312.0, "fp8_tflops": None, "interconnect_gbps": 600.0}
H100_SHEET = {"hbm_bandwidth_tbps": 3.35, "bf16_tflops": 989.0, "fp8_tflops": 1979.0, "interconnect_gbps": 900.0}
H200_SHEET = {**H100_SHEET, "hbm_bandwidth_tbps": 4.8}
B200_SHEET = {"hbm_bandwidth_tbps": 8.0, "bf16_tflops": 2250.0, "fp8_tflops": 4500.0, "interconnect_gbps": 1800.0}
#: MI300X: 7 Infinity Fabric links of 128 GB/s (both directions) each, one to each other GPU of the
#: 8: 896 GB/s per GPU when it talks to all seven (one pair of GPUs shares only one link, 128 GB/s).
MI300X_SHEET = {"hbm_bandwidth_tbps": 5.3, "bf16_tflops": 1307.0, "fp8_tflops": 2615.0, "interconnect_gbps": 896.0}
#: B300, GB200 and L40S: the NVIDIA data sheets' numbers as aiconfigurator-core's system files (systems/b300_sxm,
#: gb200 and l40s.yaml) quote them, their NVLink (PCIe) bandwidth doubled to both directions. B300: 62 TB/s
#: of HBM in all / 8 GPUs. L40S: no NVLink, its GPUs talk over PCIe Gen4 x16 (32 GB/s each way).
B300_SHEET = {"hbm_bandwidth_tbps": 7.75, "bf16_tflops": 2250.0, "fp8_tflops": 4500.0, "interconnect_gbps": 1800.0}
GB200_SHEET = {"hbm_bandwidth_tbps": 8.0, "bf16_tflops": 2500.0, "fp8_tflops": 5000.0, "interconnect_gbps": 1800.0}
L40S_SHEET = {"hbm_bandwidth_tbps": 0.864, "bf16_tflops": 362.05, "fp8_tflops": 733.0, "interconnect_gbps": 64.0}
#: Data sheets' GB are 10^9 bytes (the A100 and H100 entries keep the 80 GiB they always had).
GB = 10**9

BUILTIN_MACHINES: dict[str, Machine] = {
    "dgx-a100": Machine(
        "dgx-a100", "a100-80gb", 8, 80 * GIB, cost=A100_USD_PER_HOUR, power=A100_KW, **A100_SHEET,
        source="cost: an estimate, the DGX H100's list price / (4.76/2.21), the Splitwise paper's H100:A100 cost "
               "ratio, which keeps the paper's answers (AWS p4de.24xlarge lists 27.45 USD/h on demand, us-east-1, "
               "2026-11-09); "
               "power: NVIDIA DGX A100 data sheet, max system power; GPU: NVIDIA A100 80GB SXM data sheet "
               "(2.039 TB/s, 312 dense bf16 TFLOPS, no fp8, NVLink 600 GB/s)"),
    "dgx-h100": Machine(
        "dgx-h100", "h100-80gb", 8, 80 * GIB, cost=H100_USD_PER_HOUR, power=H100_KW, **H100_SHEET,
        source="cost: list price, AWS p5.48xlarge (8x H100) on demand, us-east-1, as of 2026-11-09; "
               "power: NVIDIA DGX H100 data sheet, max system power; GPU: NVIDIA H100 SXM data sheet "
               "(3.35 TB/s, 989 dense bf16 and 1979 dense fp8 TFLOPS, NVLink 900 GB/s)"),
    "dgx-h100-cap": Machine(
        "dgx-h100-cap", "h100-80gb-pcap", 8, 80 * GIB, cost=H100_USD_PER_HOUR,
        power=round(PAPER_POWER_CAP * H100_KW, 6), base="dgx-h100", **H100_SHEET, power_cap=PAPER_POWER_CAP,
        source="cost: the DGX H100's (a power cap does not change the price); "
               "power: 70% of the DGX H100's, the Splitwise paper's power cap; GPU: the NVIDIA H100 SXM "
               "data sheet's, as the DGX H100's"),
    "dgx-h200": Machine(
        "dgx-h200", "h200-141gb", 8, 141 * GB, cost=H200_USD_PER_HOUR, power=H200_KW,
        **H200_SHEET,
        source="cost: list price, AWS p5en.48xlarge (8x H200) on demand, us-east-1, as of 2026-08-06; "
               "power: NVIDIA DGX H200 data sheet, max system power; GPU: NVIDIA H200 SXM data sheet "
               "(141 GB HBM3e, 4.8 TB/s, 989 dense bf16 and 1979 dense fp8 TFLOPS, NVLink 900 GB/s)"),
    "dgx-b200": Machine(
        "dgx-b200", "b200-180gb", 8, 180 * GB, cost=B200_USD_PER_HOUR, power=B200_KW,
        **B200_SHEET,
        source="cost: list price, AWS p6-b200.48xlarge (8x B200) on demand, us-east-1 (SkyPilot's AWS catalog, "
               "read 2026-12); power: NVIDIA DGX B200 data sheet, max system power "
               "(about 14.3 kW); GPU: NVIDIA DGX B200 and HGX B200 data sheets (1,440 GB HBM3e in all, "
               "8 TB/s, 2250 dense bf16 and 4500 dense fp8 TFLOPS, NVLink 1800 GB/s)"),
    "dgx-b300": Machine(
        "dgx-b300", "b300-288gb", 8, 288 * GB, cost=B300_USD_PER_HOUR, power=B300_KW,
        **B300_SHEET,
        source="cost: list price, AWS p6-b300.48xlarge (8x B300) on demand, us-west-2 (SkyPilot's AWS catalog, "
               "read 2026-12); power: NVIDIA DGX B300 data sheet, max system power "
               "(about 14 kW); GPU: NVIDIA Blackwell Ultra (B300) data sheet as aiconfigurator-core's b300_sxm "
               "system quotes it (288 GB HBM3e, 7.75 TB/s = 62 TB/s in all / 8, 2250 dense bf16 and 4500 dense "
               "fp8 TFLOPS, NVLink 1800 GB/s)"),
    "gb200-8": Machine(
        "gb200-8", "gb200-186gb", 8, 186 * GB, cost=H100_USD_PER_HOUR * GB200_COST_RATIO, power=GB200_KW,
        **GB200_SHEET,
        source="8 GPUs (2 compute trays of 4) of a GB200 NVL72 rack; cost: an estimate, the DGX H100's x "
               "13.33/10.2, the slice's estimated power to the DGX H100's max power (AWS sells GB200 by Capacity "
               "Blocks only: no on-demand list price); power: an estimate, the NVL72 rack's about 120 kW (NVIDIA and vendors give 120 to "
               "132 kW) / 9 slices of 8 GPUs = 13.33 kW; GPU: NVIDIA GB200 NVL72 data sheet (13.4 TB HBM3e "
               "per 72 GPUs: 186 GB each) and NVIDIA Blackwell data sheet as aiconfigurator-core's gb200 system "
               "quotes it (8 TB/s, 2500 dense bf16 and 5000 dense fp8 TFLOPS, NVLink 1800 GB/s)"),
    "mi300x-8": Machine(
        "mi300x-8", "mi300x-192gb", 8, 192 * GB, cost=MI300X_USD_PER_HOUR, power=MI300X_KW,
        **MI300X_SHEET,
        source="cost: list price, Oracle Cloud BM.GPU.MI300X.8 on demand, us-chicago-1 (SkyPilot's OCI catalog, "
               "read 2026-12); "
               "power: an estimate, 8x 750 W GPU board power (AMD Instinct MI300X data sheet) plus about "
               "4 kW of host; GPU: AMD Instinct MI300X data sheet (192 GB HBM3, 5.3 TB/s, 1307 dense "
               "bf16 and 2615 dense fp8 TFLOPS, Infinity Fabric 7 links x 128 GB/s = 896 GB/s)"),
    "l40s-8": Machine(
        "l40s-8", "l40s-48gb", 8, 48 * GB, cost=L40S_USD_PER_HOUR, power=L40S_KW,
        **L40S_SHEET,
        source="an 8x L40S PCIe server; cost: list price, AWS g6e.48xlarge (8x L40S) on demand, us-east-1 "
               "(SkyPilot's AWS catalog, read 2026-12); power: an estimate, 8x 350 W GPU board power "
               "(NVIDIA L40S data sheet) plus about 4 kW of host; GPU: NVIDIA L40S data sheet as "
               "aiconfigurator-core's l40s system quotes it (48 GB GDDR6, 864 GB/s, 362.05 dense bf16 and 733 "
               "dense fp8 TFLOPS; no NVLink: PCIe Gen4 x16, 32 GB/s each way = 64 GB/s)"),
}


def catalog_units(machines) -> tuple[str, str]:
    """The (cost unit, power unit) of ``machines`` (Machines, or a mapping of names to them), or a
    user error when they price or power in different units (their sums would mean nothing).
    No machines: the default units."""
    pool = list(machines.values()) if isinstance(machines, Mapping) else list(machines)
    units = []
    for what, key, default in (("cost", "cost_unit", DEFAULT_COST_UNIT), ("power", "power_unit", DEFAULT_POWER_UNIT)):
        seen = {}
        for m in pool:
            seen.setdefault(getattr(m, key, default), m.name)
        if len(seen) > 1:
            raise SplitwisePlanError(
                f"machines give {what} in different units ({', '.join(f'{n}: {u}' for u, n in seen.items())}); "
                f"a machine file that sets [units] {what} must set the {what} of every machine used")
        units.append(next(iter(seen), default))
    return units[0], units[1]


# --- loading user overrides -------------------------------------------------

MACHINE_KEYS = ("hardware", "gpus", "hbm_bytes_per_gpu", "hbm_gib_per_gpu", "cost", "power", "source", "base",
                *SHEET_KEYS)
UNIT_KEYS = ("cost", "power")
_NUMBERS = ("hardware", "gpus", "hbm_bytes_per_gpu", "cost", "power")


def load_machines(path: str | Path | None = None) -> dict[str, Machine]:
    """Builtin machines, overridden or extended by a TOML file's ``[machines.NAME]`` tables.

    An existing name may set any subset of ``hardware``, ``gpus``, ``hbm_bytes_per_gpu``
    (or ``hbm_gib_per_gpu``), ``cost``, ``power``, ``source`` and ``base``; a new name must set the
    first five, or name a ``base`` to take those it does not set from. The cost and power a file
    sets are in its ``[units]`` (``cost``, ``power``; default USD/h and kW); a number the file
    does not set keeps its own unit. A machine whose ``base``'s cost or power the file sets, and
    that does not set its own, follows it: the cost is copied, the power scaled by the same factor.
    The data-sheet numbers (``SHEET_KEYS``) are optional; a machine with a base takes those it does
    not set from it (a builtin variant follows the numbers the file changes on its base). A table
    that sets ``power_cap`` but not ``power`` and has a base provisions that share of the base's
    uncapped power. Names are matched in any case, so the catalog keeps each (key and ``Machine.name``) in lower case.
    """
    machines = dict(BUILTIN_MACHINES)
    if path is None:
        return machines
    doc = read_toml(path, "machine")
    units = _file_units(path, doc)
    given = {}   # catalog name -> (where, the fields the table sets)
    for raw, spec in _machine_tables(path, doc).items():
        where = f"machine file {path}, {_table(raw)}"
        builtin = _builtin_named(raw)
        # DGX-H100 overrides dgx-h100: one machine, under its builtin name; B200 is b200, as designs name it
        given[builtin.name if builtin is not None else raw.lower()] = (where, _table_fields(where, spec))
    known = set(machines) | set(given)
    for name, (where, fields) in given.items():
        if "base" in fields:
            fields["base"] = _base_name(where, fields["base"], name, known)
    # machines whose cost, power or data-sheet number the file set (or changed through their base)
    changed: dict[str, set] = {key: set() for key in ("cost", "power", *SHEET_KEYS)}
    for name in _bases_first(path, given, machines):
        where, fields = given.get(name, (f"machine file {path}, {_table(name)}", {}))
        old = BUILTIN_MACHINES.get(name)
        base = fields.get("base", old.base if old is not None else None)
        if name not in given and not any(base in names for names in changed.values()):
            continue   # a builtin the file leaves alone
        values = _resolve(path, name, fields, old, machines.get(base), units, changed)
        try:
            machines[name] = Machine(name=name, **values)
        except SplitwisePlanError as exc:   # Machine's own checks, said of the file's table as the others are
            raise SplitwisePlanError(f"{where}: {str(exc).removeprefix(f'machine {name!r}: ')}") from None
    return machines


def _file_units(path, doc: dict) -> dict:
    """The ``[units]`` table of a machine file: {"cost": unit, "power": unit}, defaults where it names none."""
    units = doc.get("units", {})
    if not isinstance(units, dict):
        raise SplitwisePlanError(f"machine file {path}: units must be a table, [units] with cost and/or power")
    unknown = sorted(set(units) - set(UNIT_KEYS))
    if unknown:
        raise SplitwisePlanError(f"machine file {path}, [units]: unknown key(s) {', '.join(unknown)}; "
                                 f"valid: {', '.join(UNIT_KEYS)}")
    for key, unit in units.items():
        if not isinstance(unit, str) or not unit.strip():
            raise SplitwisePlanError(f"machine file {path}, [units]: {key} must be a non-empty string such as "
                                     f"{'EUR/h' if key == 'cost' else 'W'!r}, got {unit!r}")
    return {"cost": units.get("cost", DEFAULT_COST_UNIT).strip(),
            "power": units.get("power", DEFAULT_POWER_UNIT).strip()}


def _machine_tables(path, doc: dict) -> dict:
    """The file's ``[machines.NAME]`` tables, each name checked and none twice (in any case)."""
    unknown_top = sorted(set(doc) - {"machines", "units"})
    if unknown_top:
        raise SplitwisePlanError(
            f"machine file {path}: unknown top-level key(s) {', '.join(unknown_top)}; "
            "put each machine in a [machines.NAME] table, and units in [units]")
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
    return tables


def _table_fields(where: str, spec) -> dict:
    """The fields one ``[machines.NAME]`` table sets, checked (``hbm_gib_per_gpu`` as bytes)."""
    if not isinstance(spec, dict):
        raise SplitwisePlanError(f"{where} must be a table")
    unknown = sorted(set(spec) - set(MACHINE_KEYS))
    if unknown:
        raise SplitwisePlanError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(MACHINE_KEYS)}")
    if "hbm_bytes_per_gpu" in spec and "hbm_gib_per_gpu" in spec:
        raise SplitwisePlanError(f"{where}: give hbm_bytes_per_gpu or hbm_gib_per_gpu, not both")
    fields = {}
    for key in ("hardware", "base"):
        if key in spec:
            if not isinstance(spec[key], str) or not spec[key].strip():
                raise SplitwisePlanError(f"{where}: {key} must be a non-empty string, got {spec[key]!r}")
            fields[key] = spec[key]   # (Machine makes hardware the profiles' lower-case name)
    if "source" in spec:
        if not isinstance(spec["source"], str):
            raise SplitwisePlanError(f"{where}: source must be a string, got {spec['source']!r}")
        fields["source"] = spec["source"].strip()
    if "gpus" in spec:
        fields["gpus"] = _number(where, "gpus", spec["gpus"], integer=True)
    if "hbm_bytes_per_gpu" in spec:
        fields["hbm_bytes_per_gpu"] = _number(where, "hbm_bytes_per_gpu", spec["hbm_bytes_per_gpu"], integer=True)
    if "hbm_gib_per_gpu" in spec:
        fields["hbm_bytes_per_gpu"] = int(round(_number(where, "hbm_gib_per_gpu", spec["hbm_gib_per_gpu"]) * GIB))
        if fields["hbm_bytes_per_gpu"] < 1:   # rounds to no byte: said of the key the file gives
            raise SplitwisePlanError(f"{where}: hbm_gib_per_gpu must be at least {1 / GIB:.3g} (one byte), "
                                     f"got {spec['hbm_gib_per_gpu']!r}")
    for key in ("cost", "power", *SHEET_KEYS):
        if key in spec:
            fields[key] = _number(where, key, spec[key])
    return fields


def _base_name(where: str, base: str, name: str, known: set) -> str:
    """A table's ``base`` as the catalog names it, or a user error when it names no machine or itself."""
    builtin = _builtin_named(base.strip())
    base = builtin.name if builtin is not None else base.strip().lower()
    if base not in known:
        raise SplitwisePlanError(f"{where}: base {base!r} names no machine; valid: {choices(known - {name})}")
    if base == name:
        raise SplitwisePlanError(f"{where}: base names the machine itself; name the machine it derives from")
    return base


def _bases_first(path, given: dict, machines: dict) -> list[str]:
    """Every catalog name, each after its base (a user error naming the tables when bases go round)."""
    def base_of(name):
        return given[name][1].get("base") if "base" in given.get(name, (None, {}))[1] else (
            machines[name].base if name in machines else None)
    order, done = [], set()
    for name in list(machines) + [n for n in given if n not in machines]:
        chain = []
        while name is not None and name not in done:
            if name in chain:
                loop = chain[chain.index(name):] + [name]
                raise SplitwisePlanError(f"machine file {path}: the bases of {', '.join(map(_table, loop[:-1]))} "
                                         f"go round ({' -> '.join(loop)}); a machine cannot derive from itself")
            chain.append(name)
            name = base_of(name)
        for n in reversed(chain):
            done.add(n)
            order.append(n)
    return order


def _resolve(path, name: str, fields: dict, old: Machine | None, base: Machine | None, units: dict,
             changed: dict) -> dict:
    """A machine's fields from the file's ``fields``, the builtin ``old`` and its resolved ``base``;
    records in ``changed`` whether its cost, power and data-sheet numbers are the file's (set, followed
    or inherited)."""
    start = old if old is not None else base   # a new machine takes what it does not set from its base
    values = {} if start is None else {
        "hardware": start.hardware, "gpus": start.gpus, "hbm_bytes_per_gpu": start.hbm_bytes_per_gpu,
        "cost": start.cost, "power": start.power, "cost_unit": start.cost_unit, "power_unit": start.power_unit}
    values.update({k: fields[k] for k in ("hardware", "gpus", "hbm_bytes_per_gpu") if k in fields})
    values["base"] = fields.get("base", old.base if old is not None else None)
    sheet_followed = _resolve_sheet(name, fields, old, base, values, changed)
    followed = []
    for key in ("cost", "power"):
        if key in fields:
            values[key], values[f"{key}_unit"] = fields[key], units[key]
        elif key == "power" and "power_cap" in fields and base is not None:
            # a capped variant: that share of its base's uncapped power, in the base's unit
            values[key] = base.power * fields["power_cap"] / (base.power_cap or 1.0)
            values["power_unit"] = base.power_unit
        elif base is not None and (old is None or base.name in changed[key]):
            factor = 1.0
            if key == "power" and old is not None and base.name in BUILTIN_MACHINES:
                was = BUILTIN_MACHINES[base.name]   # the capped machine keeps its share of its base's power
                factor = old.power / was.power if was.power_unit == old.power_unit else 1.0
            values[key], values[f"{key}_unit"] = getattr(base, key) * factor, getattr(base, f"{key}_unit")
            followed.append(key)
        else:
            continue
        changed[key].add(name)
    followed += ["data sheet"] if sheet_followed else []
    missing = [k for k in _NUMBERS if k not in values]
    if missing:
        raise SplitwisePlanError(
            f"machine file {path}, {_table(name)}: a new machine needs "
            f"{', '.join('hbm_gib_per_gpu (or hbm_bytes_per_gpu)' if k == 'hbm_bytes_per_gpu' else k for k in missing)} "
            f"or a base to take them from (builtin names that can be partly overridden: {choices(BUILTIN_MACHINES)})")
    values["source"] = _source(path, fields, old, values["base"], followed)
    return values


def _resolve_sheet(name: str, fields: dict, old: Machine | None, base: Machine | None, values: dict,
                   changed: dict) -> bool:
    """Fill ``values`` with a machine's data-sheet numbers: the file's, else its base's when it is new or
    the file changed them on its base, else its builtin ones; records in ``changed`` the numbers that
    differ from the builtin's. True when a builtin machine follows a number of its base."""
    followed = False
    for key in SHEET_KEYS:
        if key in fields:
            values[key] = fields[key]
        elif base is not None and (old is None or base.name in changed[key]):
            values[key] = getattr(base, key)
            followed = followed or old is not None
        else:
            values[key] = getattr(old, key, None)
        if old is None or values[key] != getattr(old, key):
            changed[key].add(name)
    return followed


def _source(path, fields: dict, old: Machine | None, base: str | None, followed: list) -> str:
    """Where a machine's numbers come from: the table's ``source``, else the file when it set them."""
    if "source" in fields:
        return fields["source"]
    if any(key in fields for key in ("cost", "power", *SHEET_KEYS)) or old is None:
        return f"machine file {path}"
    if followed:
        return f"{' and '.join(followed)} follow {base} in machine file {path}"
    return old.source


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


#: Short names of the builtin machines, as designs and budgets write them (``H100:H200``,
#: ``baseline:MI300X``, ``40xB200``), in lower case.
#: The short names an error lists, as users write them.
_SHORT_SHOWN = ("A100", "H100", "H100cap", "H200", "B200", "B300", "GB200", "MI300X", "L40S")


def with_short_names(machines: dict) -> dict:
    """``machines`` with the built-ins' short names (``h200``: ``dgx-h200``, ``SHORT_NAMES``) added as
    further keys of the same machines, where the catalog has no machine of that name itself: a design
    such as ``H100:H200`` then names its pools' machines."""
    out = dict(machines)
    for short, full in SHORT_NAMES.items():
        if short not in out and full in out:
            out[short] = out[full]
    return out


def is_short_name(name: str, machine) -> bool:
    """Whether catalog key ``name`` is a short name of ``machine`` (added by :func:`with_short_names`)."""
    return name in SHORT_NAMES and machine.name.lower() != name


def machine_by_name(machines: Mapping[str, Machine] | None, name: str) -> Machine:
    """The machine of ``machines`` (None: the builtins) that ``name`` names, in any case: its catalog name
    (``dgx-h200``), a short name (``H200``, ``B200``, ``GB200``, ``L40S``, ``H100cap``: ``SHORT_NAMES``), its name
    without ``dgx-``, or its hardware (``h200-141gb``; of several machines, the one without a base).
    A catalog name comes first, so a machine file's own ``b200`` is that machine, not ``dgx-b200``.
    An unknown or ambiguous name is a user error listing the valid ones."""
    pool = BUILTIN_MACHINES if machines is None else machines
    if not isinstance(name, str) or not name.strip():
        raise SplitwisePlanError(f"a machine is named by a non-empty string such as 'dgx-h100' or 'H100', "
                                 f"got {name!r}")
    key = name.strip().lower()
    for cand in (name.strip(), SHORT_NAMES.get(key), f"dgx-{key}"):
        if cand is not None:
            try:
                return by_name(pool, cand)
            except KeyError:
                pass
    same = [m for m in pool.values() if getattr(m, "hardware", None) == key]
    same = list({id(m): m for m in same}.values())   # (a short name's key holds its machine again)
    if len(same) > 1:   # a variant (base) shares its base's hardware: the base
        same = [m for m in same if m.base is None] or same
    if len(same) == 1:
        return same[0]
    if same:
        raise SplitwisePlanError(f"machine {name!r} is the hardware of {choices(m.name for m in same)}; "
                                 "name one of them")
    shorts = ", ".join(n for n in _SHORT_SHOWN if SHORT_NAMES[n.lower()] in pool)
    raise SplitwisePlanError(f"unknown machine {name!r}; valid: {choices(pool)}"
                             + (f" (or a short name: {shorts})" if shorts else ""))
