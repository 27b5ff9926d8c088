"""Latency SLOs: which percentile of TTFT, TBT and E2E must stay below which limit.

Limits are slowdowns (latency over the same request alone on the reference
machine, a DGX-A100 at TP8 in the paper) or absolute seconds. Every SLO must
hold strictly below its limit, as in the reference's ``find_within_slo``.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from splitwise_plan.errors import SplitwisePlanError, whole_number
from splitwise_plan.inputs.paths import data_file, read_toml

METRICS = ("ttft", "tbt", "e2e")
UNITS = ("slowdown", "seconds")
SHIPPED_SLOS = "paper.toml"
_PCT_KEY = re.compile(r"^p(\d+(?:\.\d+)?)$")
_TOP_KEYS = {"name", "description", "unit", "reference_hardware", "reference_tensor_parallel", "slo", *METRICS}


def _pct(value: float) -> float | int:
    """Percentile as an int when whole (50, 90, 99) so it matches int dictionary keys."""
    return int(value) if float(value).is_integer() else float(value)


@dataclass(frozen=True)
class SLO:
    """One objective: the ``percentile`` of ``metric`` must stay strictly below ``limit``."""

    metric: str
    percentile: float
    limit: float
    unit: str = "slowdown"

    def __post_init__(self) -> None:
        for name in ("metric", "unit"):   # TTFT is ttft
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, getattr(self, name).strip().lower())
        if self.metric not in METRICS:
            raise SplitwisePlanError(f"unknown SLO metric {self.metric!r}; valid: {', '.join(METRICS)}")
        if self.unit not in UNITS:
            raise SplitwisePlanError(f"unknown SLO unit {self.unit!r} for {self.metric}; valid: {', '.join(UNITS)}")
        p = self.percentile
        if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real) or not 0 < p < 100:
            raise SplitwisePlanError(f"SLO percentile for {self.metric} must be between 0 and 100 (exclusive), got {p!r}")
        lim = self.limit
        if isinstance(lim, (bool, np.bool_)) or not isinstance(lim, numbers.Real) or not math.isfinite(lim) or lim <= 0:
            raise SplitwisePlanError(f"SLO limit for {self.metric} P{p} must be a positive number, got {lim!r}")
        object.__setattr__(self, "percentile", _pct(p))
        object.__setattr__(self, "limit", float(lim))

    @property
    def label(self) -> str:
        """Short name like ``TTFT P99``."""
        return f"{self.metric.upper()} P{self.percentile:g}"


def _lookup(pcts: dict, slo: SLO) -> float:
    """The measured value an SLO is checked against, from ``{metric: {percentile: value}}``."""
    by_metric = pcts.get(slo.metric) if pcts else None
    if by_metric is None:
        raise SplitwisePlanError(f"no {slo.unit} percentiles given for metric {slo.metric!r}")
    for key in (slo.percentile, float(slo.percentile), int(slo.percentile), f"p{slo.percentile:g}"):
        if key in by_metric:
            return float(by_metric[key])
    raise SplitwisePlanError(f"no {slo.unit} value given for {slo.label}")


@dataclass(frozen=True)
class SLOSet:
    """The SLOs a cluster design must meet, all at once."""

    slos: tuple[SLO, ...]
    name: str = "custom"
    reference_hardware: str = "a100-80gb"
    reference_tensor_parallel: int = 8
    source: str | None = field(default=None, compare=False, repr=False)   # the file it was read from

    def __post_init__(self) -> None:
        try:
            slos = tuple(self.slos)
        except TypeError:
            slos = None
        if slos is None or not all(isinstance(s, SLO) for s in slos):
            raise SplitwisePlanError(f"SLO set {self.name!r}: slos must be SLO objects, e.g. SLO('ttft', 99, 6.0), "
                                     f"got {self.slos!r}")
        if not slos:
            raise SplitwisePlanError(f"SLO set {self.name!r} has no SLO")
        hw, tp = self.reference_hardware, self.reference_tensor_parallel
        if not isinstance(hw, str) or not hw.strip():
            raise SplitwisePlanError(f"SLO set {self.name!r}: reference_hardware must be a hardware name, got {hw!r}")
        object.__setattr__(self, "reference_hardware", hw.strip().lower())   # any case, as the profiles
        object.__setattr__(self, "reference_tensor_parallel",
                           whole_number(tp, f"SLO set {self.name!r}: reference_tensor_parallel", 1))
        seen = set()
        for s in slos:
            key = (s.metric, s.percentile, s.unit)
            if key in seen:
                raise SplitwisePlanError(f"SLO set {self.name!r} gives {s.label} ({s.unit}) twice")
            seen.add(key)
        object.__setattr__(self, "slos", slos)

    def __len__(self) -> int:
        return len(self.slos)

    @property
    def reference_of(self) -> str:
        """Where the reference is set, for messages: "SLO file mine.toml" or "SLO set 'paper'"."""
        return f"SLO file {self.source}" if self.source else f"SLO set {self.name!r}"

    def __iter__(self):
        return iter(self.slos)

    def percentiles(self) -> dict[str, tuple[float, ...]]:
        """Sorted percentiles needed per metric, e.g. ``{'ttft': (50, 90, 99), ...}``."""
        out: dict[str, set] = {}
        for s in self.slos:
            out.setdefault(s.metric, set()).add(s.percentile)
        return {m: tuple(sorted(out[m])) for m in METRICS if m in out}

    @property
    def needs_slowdown(self) -> bool:
        """True when some limit is a slowdown, so per-request reference latencies are needed."""
        return any(s.unit == "slowdown" for s in self.slos)

    def assess(self, slowdown_pcts: dict | None, latency_pcts: dict | None) -> list[dict]:
        """Every SLO with its value, limit, ``ratio`` = value/limit, ``margin`` = limit - value and ``met``."""
        rows = []
        for s in self.slos:
            value = _lookup(slowdown_pcts if s.unit == "slowdown" else latency_pcts, s)
            met = bool(value < s.limit)  # NaN never meets an SLO
            rows.append({"metric": s.metric, "percentile": s.percentile, "value": value,
                         "limit": s.limit, "unit": s.unit, "margin": s.limit - value,
                         "ratio": value / s.limit, "met": met})
        return rows

    def evaluate(self, slowdown_pcts: dict | None, latency_pcts: dict | None) -> tuple[bool, list[dict]]:
        """(all met?, violations) where each violation is {metric, percentile, value, limit, unit, margin}."""
        violations = [{k: r[k] for k in ("metric", "percentile", "value", "limit", "unit", "margin")}
                      for r in self.assess(slowdown_pcts, latency_pcts) if not r["met"]]
        return (not violations, violations)

    def tightest(self, slowdown_pcts: dict | None, latency_pcts: dict | None) -> dict:
        """The SLO closest to (or furthest past) its limit: the largest value/limit ratio."""
        rows = self.assess(slowdown_pcts, latency_pcts)
        return max(rows, key=lambda r: (math.inf if math.isnan(r["ratio"]) else r["ratio"]))


def _parse(doc: dict, where: str, source: str | None = None) -> SLOSet:
    """Build an SLOSet from a parsed TOML document (see ``slos/paper.toml``)."""
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise SplitwisePlanError(
            f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(sorted(_TOP_KEYS))}")
    default_unit = doc.get("unit", "slowdown")
    slos: list[SLO] = []
    try:
        for metric in METRICS:
            table = doc.get(metric)
            if table is None:
                continue
            if not isinstance(table, dict):
                raise SplitwisePlanError(f"{where}: [{metric}] must be a table of pNN = limit")
            unit = table.get("unit", default_unit)
            for key, limit in table.items():
                if key == "unit":
                    continue
                m = _PCT_KEY.match(key)
                if not m:
                    raise SplitwisePlanError(
                        f"{where}: [{metric}] key {key!r} is not a percentile like p50, p99 or \"p99.9\"")
                if isinstance(limit, dict) and len(limit) == 1:   # p99.9 = 6 unquoted: TOML's p99 = {9 = 6}
                    (tail, value), = limit.items()
                    raise SplitwisePlanError(f"{where}: [{metric}] {key}.{tail} reads as a table {key} holding {tail}; "
                                             f"quote a fractional percentile's key: \"{key}.{tail}\" = {value!r}")
                pct = float(m.group(1))
                if not 0 < pct < 100:   # (said as written: 99.99999999999999999 reads as 100)
                    raise SplitwisePlanError(f"{where}: [{metric}] key {key!r}: a percentile must be between 0 and "
                                             "100 (exclusive)")
                slos.append(SLO(metric, _pct(pct), limit, unit))
        entries = doc.get("slo", [])
        if not isinstance(entries, list):
            raise SplitwisePlanError(f"{where}: slo must be an array of tables ([[slo]])")
        for i, e in enumerate(entries, 1):
            if not isinstance(e, dict):
                raise SplitwisePlanError(f"{where}: [[slo]] entry {i} must be a table")
            missing = [k for k in ("metric", "percentile", "limit") if k not in e]
            extra = sorted(set(e) - {"metric", "percentile", "limit", "unit"})
            if missing or extra:
                raise SplitwisePlanError(
                    f"{where}: [[slo]] entry {i} needs metric, percentile, limit (and optional unit); "
                    f"missing: {', '.join(missing) or '-'}; unknown: {', '.join(extra) or '-'}")
            slos.append(SLO(e["metric"], e["percentile"], e["limit"], e.get("unit", default_unit)))
        tp = doc.get("reference_tensor_parallel", 8)
        if isinstance(tp, bool) or not isinstance(tp, int) or tp <= 0:
            raise SplitwisePlanError(f"reference_tensor_parallel must be a positive integer, got {tp!r}")
        hw = doc.get("reference_hardware", "a100-80gb")
        if not isinstance(hw, str) or not hw:
            raise SplitwisePlanError(f"reference_hardware must be a non-empty string, got {hw!r}")
        return SLOSet(tuple(slos), name=str(doc.get("name", "custom")),
                      reference_hardware=hw, reference_tensor_parallel=tp, source=source)
    except SplitwisePlanError as exc:
        msg = str(exc)
        raise SplitwisePlanError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def load_slos(path: str | Path | None = None) -> SLOSet:
    """Load the paper's SLOs (``path=None``, shipped ``slos/paper.toml``) or a user TOML file."""
    p = data_file("slos", SHIPPED_SLOS) if path is None else path
    return _parse(read_toml(p, "SLO"), f"SLO file {p}", None if path is None else str(p))

