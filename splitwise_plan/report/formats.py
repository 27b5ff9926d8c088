"""Report documents: JSON and CSV that other tools read (written atomically by :mod:`.files`).

A JSON report is one object::

    {"schema_version": 2, "tool": {"name": "splitwise-plan", "version": ...},
     "command": "simulate", "created_utc": "...", "inputs": {...}, "results": [...], ...}

``inputs`` echoes what the results depend on (model, workload or trace, rate,
duration, seed, SLO file, machine catalog, profiles, method) and ``results`` holds one
object per evaluated design point in the schema of ``SimulationResult.to_dict``. A key
holding a request rate ends in ``_rps`` (``rate_rps``, ``checked_rps``, ``capacity_rps``).

A CSV report has one row per result; a cell is empty where a value was not measured (a JSON null:
None, inf or NaN, such as the latency percentile of requests that never finished).
"""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Mapping

from splitwise_plan import __version__
from splitwise_plan.errors import plural
from splitwise_plan.report.files import atomic_open, atomic_write_text

#: Bumped whenever a key of the report object changes meaning or disappears.
SCHEMA_VERSION = 2
TOOL_NAME = "splitwise-plan"


# --- in words -------------------------------------------------------------------

def machine_counts(prompt: int, token: int) -> str:
    """A design's machines in words: "27 prompt + 3 token machines", or "50 machines" for a baseline."""
    if token:
        return f"{prompt:,} prompt + {plural(token, 'token machine')}"
    return plural(prompt, "machine")


def percent(share: float) -> str:
    """A share as the plan's table shows it: a whole percent ("9%"), one under 2% with a decimal
    ("0.3%", "1.5%": not a flat 0% or 2%); "n/a" when it is not known (NaN, inf)."""
    x = float(share)
    if not math.isfinite(x):
        return "n/a"
    return f"{x:.1%}" if abs(x) < 0.02 and x != 0 else f"{x:.0%}"


# --- JSON -------------------------------------------------------------------------

def jsonable(obj):
    """Recursively convert to JSON-safe values: numpy scalars to Python, NaN/inf to None, paths to str."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "to_dict") and callable(obj.to_dict):
        return jsonable(obj.to_dict())
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalar
        obj = obj.item()
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    raise TypeError(f"cannot put {type(obj).__name__} into a JSON report")


def dumps(doc) -> str:
    """The JSON text of a report (indented, key order kept, strict: no NaN)."""
    return json.dumps(jsonable(doc), indent=2, allow_nan=False) + "\n"


def write_json(path: str | Path, doc, *, what: str = "JSON report") -> Path:
    """Write ``doc`` as JSON to ``path`` atomically."""
    data = jsonable(doc)
    with atomic_open(path, "w", what=what) as fh:
        json.dump(data, fh, indent=2, allow_nan=False)
        fh.write("\n")
    return Path(path).expanduser()


# --- CSV --------------------------------------------------------------------------

def _columns(rows: list[Mapping]) -> list[str]:
    cols: dict[str, None] = {}
    for r in rows:
        for k in r:
            cols.setdefault(str(k), None)
    return list(cols)


def _cell(v):
    """A CSV cell: empty where no value was measured (None, inf, -inf, NaN; numpy's too), so that
    ``pandas.read_csv`` reads the column as floats with NaN there; finite floats in full (``repr``)."""
    if v is None:
        return ""
    if hasattr(v, "item") and callable(v.item):
        v = v.item()
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return v


def csv_text(rows: Iterable[Mapping], columns: list[str] | None = None) -> str:
    """CSV text with a header and one line per row; missing cells and values not measured (inf, NaN)
    are empty."""
    rows = [dict(r) for r in rows]
    cols = columns or _columns(rows)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _cell(r.get(k)) for k in cols})
    return buf.getvalue()


def write_csv(path: str | Path, rows: Iterable[Mapping], columns: list[str] | None = None,
              *, what: str = "CSV report") -> Path:
    """Write rows (dicts, e.g. ``SimulationResult.flat()``) as CSV to ``path`` atomically."""
    return atomic_write_text(path, csv_text(rows, columns), what=what)


# --- report documents ---------------------------------------------------------------

def envelope(command: str) -> dict:
    """What every report (and the worker's summary) starts with: schema version, tool, command."""
    return {"schema_version": SCHEMA_VERSION, "tool": {"name": TOOL_NAME, "version": __version__},
            "command": command}


def build_report(command: str, inputs: Mapping, results: Iterable = (), **extra) -> dict:
    """A report object: schema version, tool, command, inputs, results (+ any extra sections)."""
    doc = {
        **envelope(command),
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "inputs": dict(inputs),
        "results": [r.to_dict() if hasattr(r, "to_dict") else dict(r) for r in results],
    }
    doc.update(extra)
    return doc
