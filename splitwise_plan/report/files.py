"""Output files: their paths checked before a run, and every file written atomically.

A file is written to a temporary file in the destination folder and moved over the destination
with ``os.replace`` only once it is complete, so an interrupted run never leaves a half-written
report (the old file, if any, stays as it was). A symbolic link stays a link; a device or pipe
such as ``/dev/stdout`` is written directly.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

from splitwise_plan.errors import SplitwisePlanError

PLOT_FORMATS = {".png": "png", ".svg": "svg", ".html": "html", ".htm": "html"}

# the outputs, by option of the command line and argument of the API
_OUTPUT_KINDS = {"--json": "JSON report", "--csv": "CSV report", "--plot": "plot", "--requests": "per-request CSV",
                 "json_path": "JSON report", "csv_path": "CSV report", "plot_path": "plot"}


def check_outputs(outputs: Mapping, inputs: Mapping | None = None) -> None:
    """Before anything is written: every output ({option: path or None}) writable, no two of them one
    file, and none of them a file of ``inputs`` ({option: path}) that writing it would destroy."""
    seen = {os.path.realpath(Path(os.fspath(v)).expanduser()): k for k, v in (inputs or {}).items()
            if v is not None and os.path.isfile(Path(os.fspath(v)).expanduser())}
    reads = set(seen.values())
    from splitwise_plan.inputs.paths import shipped_files
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


def plot_format(path: str | Path) -> str:
    """``png``, ``svg`` or ``html`` from the file extension, else a one-line user error."""
    fmt = PLOT_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise SplitwisePlanError(f"plot file {path}: unknown extension {Path(path).suffix or '(none)'!r}; "
                                 "use .png, .svg or .html")
    return fmt


def check_plot_path(path: str | Path) -> Path:
    """Validate a ``--plot`` path before a long run: known extension and a writable folder."""
    plot_format(path)
    return check_writable(path, "plot")
