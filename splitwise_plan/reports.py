"""Report files: JSON and CSV that other tools read, written atomically.

Every file is written to a temporary file in the destination folder and moved over
the destination with ``os.replace`` only once it is complete, so an interrupted run
never leaves a half-written report (the old file, if any, stays as it was).

A JSON report is one object::

    {"schema_version": 2, "tool": {"name": "splitwise-plan", "version": ...},
     "command": "simulate", "created_utc": "...", "inputs": {...}, "results": [...], ...}

``inputs`` echoes what the results depend on (model, workload or trace, rate,
duration, seed, SLO file, machine catalog, profiles, method) and ``results`` holds one
object per evaluated design point in the schema of ``SimulationResult.to_dict``. A key
holding a request rate ends in ``_rps`` (``rate_rps``, ``checked_rps``, ``capacity_rps``).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from . import __version__
from .errors import SplitwisePlanError

#: Bumped whenever a key of the report object changes meaning or disappears.
SCHEMA_VERSION = 2
TOOL_NAME = "splitwise-plan"


# --- atomic writing -------------------------------------------------------------

def plural(n: int, word: str) -> str:
    """``n`` and ``word``, plural unless n is 1: "1 request", "2,366 requests"."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def machine_counts(prompt: int, token: int) -> str:
    """A design's machines in words: "27 prompt + 3 token machines", or "50 machines" for a baseline."""
    if token:
        return f"{prompt:,} prompt + {plural(token, 'token machine')}"
    return plural(prompt, "machine")


# the outputs, by option of the command line and argument of the API
_OUTPUT_KINDS = {"--json": "JSON report", "--csv": "CSV report", "--plot": "plot", "--requests": "per-request CSV",
                 "json_path": "JSON report", "csv_path": "CSV report", "plot_path": "plot"}


def check_outputs(outputs: Mapping, inputs: Mapping | None = None) -> None:
    """Before anything is written: every output ({option: path or None}) writable, no two of them one
    file, and none of them a file of ``inputs`` ({option: path}) that writing it would destroy."""
    seen = {os.path.realpath(Path(os.fspath(v)).expanduser()): k for k, v in (inputs or {}).items()
            if v is not None and os.path.isfile(Path(os.fspath(v)).expanduser())}
    reads = set(seen.values())
    from .paths import shipped_files
    shipped = shipped_files()
    for flag, p in outputs.items():
        if p is None:
            continue
        if not isinstance(p, (str, os.PathLike)):
            raise SplitwisePlanError(f"{flag} must be a file path, got {p!r}")
        if str(p) in ("", "-"):   # '-' is the command line's standard output, never a file named '-'
            raise SplitwisePlanError(f"{flag} needs a file name, got {str(p)!r}")
        key = os.path.realpath(Path(p).expanduser())
        if key in shipped:
            raise SplitwisePlanError(f"{flag} {p} is the shipped data file {shipped[key]} of splitwise-plan: "
                                     "writing it would break the tool's defaults")
        if seen.get(key) in reads:
            raise SplitwisePlanError(f"{flag} {p} is the file {seen[key]} reads: writing it would replace that input")
        if key in seen and key != os.devnull:   # (any number of reports may be thrown away)
            raise SplitwisePlanError(f"{seen[key]} and {flag} name the same file {p}: give each its own")
        seen[key] = flag
        if _OUTPUT_KINDS.get(flag) == "plot":
            from .plots import check_plot_path
            check_plot_path(p)
        else:
            check_writable(p, _OUTPUT_KINDS.get(flag, "output"))


def is_stdout(path) -> bool:
    """Is ``path`` this process's standard output (/dev/stdout, /dev/fd/1, the terminal, pipe or file it is)?"""
    try:
        a, b = os.stat(path), os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, TypeError):   # no such file yet, or stdout is no real file
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def check_writable(path: str | Path, what: str = "output") -> Path:
    """Fail early, with one line, when ``path`` cannot be written (before any long run): the folder of
    the file it names (through its links) must take a new file, as the atomic write will make one."""
    p = Path(path).expanduser()
    if str(path).endswith(("/", os.sep)):   # Path() drops the slash: a folder was meant
        raise SplitwisePlanError(f"{what} path {path} names a folder (it ends with /); give a file name")
    if p.is_dir():
        raise SplitwisePlanError(f"{what} path {p} is a directory; give a file name")
    if not_a_file(p) or is_stdout(p):   # a device, pipe or standard output: written into as it is
        return p
    target = Path(os.path.realpath(p)) if p.is_symlink() else p   # the file a link leads to is replaced
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.exists():
        raise SplitwisePlanError(f"cannot write {what} file {p}: folder {parent} does not exist")
    if not parent.is_dir():
        raise SplitwisePlanError(f"cannot write {what} file {p}: {parent} is not a folder")
    try:   # what the write will do; permission bits do not tell (root, read-only mounts, /sys)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SplitwisePlanError(f"cannot write {what} file {p}: folder {parent} takes no new file "
                                 f"({exc.strerror or exc})") from None
    if target.exists() and not os.access(target, os.W_OK):
        raise SplitwisePlanError(f"cannot write {what} file {p}: the file is read-only")
    return p


def not_a_file(path: Path) -> bool:
    """Is ``path`` (or what its links lead to) there but not a regular file: a device, pipe or socket?"""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _file_mode(path: Path) -> int:
    """Permission bits for the new file: the old file's, else 0666 minus the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", *, what: str = "output",
                encoding: str | None = "utf-8", newline: str | None = None) -> Iterator:
    """Open a temporary file beside ``path`` for writing; on success it replaces ``path``.

    A symbolic link stays: the file it points to is replaced. A device or pipe (``/dev/stdout``,
    ``/dev/null``) is written directly, as nothing there could be replaced.

    On any exception inside the block (or while replacing) the temporary file is
    removed and ``path`` is left untouched. OS errors become a one-line
    ``SplitwisePlanError``; other exceptions propagate unchanged.
    """
    p = check_writable(path, what)
    binary = "b" in mode
    kw = {} if binary else {"encoding": encoding, "newline": newline}
    if is_stdout(p):   # standard output, even redirected to a file: write into it (a >> redirect appends)
        sys.stdout.flush()
        with os.fdopen(os.dup(sys.stdout.fileno()), mode, **kw) as fh:
            yield fh
        return
    if not_a_file(p):   # a device, pipe or terminal: nothing to replace, write into it
        try:
            with open(p, mode, **kw) as fh:
                yield fh
        except OSError as exc:
            raise SplitwisePlanError(f"cannot write {what} file {p}: {exc.strerror or exc}") from None
        return
    if p.is_symlink():   # replace the file the link points to, not the link
        p = Path(os.path.realpath(p))
        check_writable(p, what)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise SplitwisePlanError(f"cannot write {what} file {p}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode(p))
        os.replace(tmp, p)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise SplitwisePlanError(f"cannot write {what} file {p}: {exc.strerror or exc}") from None
        raise


def atomic_write_text(path: str | Path, text: str, *, what: str = "output") -> Path:
    """Write ``text`` to ``path`` atomically."""
    with atomic_open(path, "w", what=what) as fh:
        fh.write(text)
    return Path(path).expanduser()


def atomic_write_bytes(path: str | Path, data: bytes, *, what: str = "output") -> Path:
    """Write ``data`` to ``path`` atomically."""
    with atomic_open(path, "wb", what=what) as fh:
        fh.write(data)
    return Path(path).expanduser()


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
    if v is None:
        return ""
    if hasattr(v, "item") and callable(v.item):
        v = v.item()
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ("inf" if v > 0 else "-inf" if v < 0 else "nan")
    return v


def csv_text(rows: Iterable[Mapping], columns: list[str] | None = None) -> str:
    """CSV text with a header and one line per row; missing cells are empty."""
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

def report_inputs(*, model: str, tensor_parallel: int, workload: str | None = None,
                  trace: str | Path | None = None, rate: float | None = None,
                  duration_s: float | None = None, seed: int | None = None, requests: int | None = None,
                  slo_file: str | Path | None = None, slos=None, machines_file: str | Path | None = None,
                  machines: Mapping | None = None, profiles_file: str | Path | None = None,
                  method: str | None = None, **extra) -> dict:
    """The inputs block of a report: everything the results depend on."""
    doc = {
        "model": model, "tensor_parallel": int(tensor_parallel),
        "workload": workload, "trace": str(trace) if trace is not None else None,
        # numbers of one type whoever calls (the API's plain 70 is the command line's 70.0)
        "rate_rps": None if rate is None else float(rate),
        "duration_s": None if duration_s is None else float(duration_s), "seed": seed, "requests": requests,
        "slo_file": str(slo_file) if slo_file is not None else None,
        "machines_file": str(machines_file) if machines_file is not None else None,
        "profiles_file": str(profiles_file) if profiles_file is not None else None,
        "method": method,
    }
    if slos is not None:
        doc["slos"] = {"name": slos.name, "reference_hardware": slos.reference_hardware,
                       "reference_tensor_parallel": slos.reference_tensor_parallel,
                       "objectives": [{"metric": s.metric, "percentile": s.percentile,
                                       "limit": s.limit, "unit": s.unit} for s in slos]}
    if machines is not None:
        doc["machine_catalog"] = {
            name: {"hardware": m.hardware, "gpus": m.gpus, "hbm_bytes_per_gpu": m.hbm_bytes_per_gpu,
                   "cost": m.cost, "power": m.power} for name, m in machines.items()}
    doc.update(extra)
    return doc


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
