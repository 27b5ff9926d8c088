"""Reading a user's CSV files (profiles and traces): decompressed as the name says, with one-line errors.

A parser failure, an over-long line, a non-numeric or out-of-range cell each become a
``SplitwisePlanError`` naming the file, the line and the column. A large file is parsed in chunks,
with a progress callback, so that its reading can be followed and stopped.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np  # (pandas is imported where it is used: processes that only simulate need none)

if TYPE_CHECKING:   # for the annotations only
    import pandas as pd

from splitwise_plan.errors import SplitwisePlanError

MAX_TOKENS = 1_000_000   # prompt or output tokens of one request at most (a million-token context)


CHUNK_ROWS = 500_000   # rows parsed at a time: a stop signal is handled between two chunks


def read_user_csv(path: Path, what: str, on_progress=None) -> pd.DataFrame:
    """Read a CSV (decompressed as its name says), turning parser failures into one-line user errors.

    The rows are parsed :data:`CHUNK_ROWS` at a time, so that a large file's reading can be stopped (a
    signal is handled between two chunks) and followed: ``on_progress(bytes_read, bytes_total)`` after
    each chunk (of the decompressed bytes). The file is held once, as bytes (no decoded copy of it).
    """
    import io
    import warnings

    import pandas as pd
    data = _file_bytes(path, what)
    _check_utf8(data, path, what)
    _check_text(data, path, what)
    buf = io.BytesIO(data)
    try:
        with warnings.catch_warnings(record=True) as said:   # a row longer than the header
            warnings.simplefilter("always", pd.errors.ParserWarning)
            chunks = []
            for chunk in pd.read_csv(buf, skipinitialspace=True, index_col=False,   # (not: its first field an index)
                                     chunksize=CHUNK_ROWS):
                chunks.append(chunk)
                if on_progress is not None:
                    on_progress(buf.tell(), len(data))
    except pd.errors.EmptyDataError:
        raise SplitwisePlanError(f"{what} file {path} is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise SplitwisePlanError(f"{what} file {path} is not a readable CSV: {exc}") from None
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in said):
        raise SplitwisePlanError(f"{what} file {path}, line {_long_row(data.decode('utf-8-sig'))}: more fields "
                                 "than the header's columns")
    header = data[:data.find(b"\n") + 1 or len(data)]   # (for a repeated column's name below)
    del buf, data   # the file's bytes go before the chunks are joined: the peak is the frame twice, not more
    df = chunks[0] if len(chunks) == 1 else pd.concat(chunks, ignore_index=True)
    del chunks
    df.columns = [str(c).strip() for c in df.columns]
    if any("." in c for c in df.columns):   # pandas renames a repeated column X to X.1: which one is meant?
        names = [str(c).strip() for c in pd.read_csv(io.BytesIO(header), header=None, nrows=1, dtype=str).iloc[0]]
        twice = sorted({c for c in names if names.count(c) > 1})
        if twice:
            raise SplitwisePlanError(f"{what} file {path}: column {twice[0]} appears more than once")
    return df


def _check_utf8(data: bytes, path: Path, what: str, piece: int = 1 << 24) -> None:
    """A user error unless ``data`` is UTF-8 text, decoded a piece at a time (no decoded copy is kept)."""
    import codecs
    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    try:
        for lo in range(0, len(data), piece):
            decoder.decode(data[lo:lo + piece])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as exc:
        raise SplitwisePlanError(f"{what} file {path} is not a readable CSV: {exc}") from None


#: File name endings pandas would decompress, longest first, and what they are.
_COMPRESSED = ((".tar.gz", "tar"), (".tar.bz2", "tar"), (".tar.xz", "tar"), (".tar", "tar"), (".gz", "gzip"),
               (".bz2", "bzip2"), (".xz", "xz"), (".zip", "zip"), (".zst", "zstd"))


def _file_bytes(path: Path, what: str) -> bytes:
    """The file's bytes, decompressed as its name says (.gz, .bz2, .xz; a .zip or .tar of one file; .zst with
    the zstandard package): a file that is not what its name says, or a missing codec, is a user error."""
    import bz2
    import gzip
    import lzma
    import tarfile
    import zipfile
    import zlib
    name = path.name.lower()
    suffix, kind = next(((s, k) for s, k in _COMPRESSED if name.endswith(s)), ("", None))
    try:
        if kind is None:
            return path.read_bytes()
        if kind in ("gzip", "bzip2", "xz"):
            with {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}[kind](path, "rb") as fh:
                return fh.read()
        if kind == "zstd":
            return _zstd_bytes(path, what)
        if kind == "zip":
            with zipfile.ZipFile(path) as z:
                members = [m for m in z.namelist() if not m.endswith("/") and not m.startswith("__MACOSX/")]
                if len(members) == 1:
                    return z.read(members[0])
        else:
            with tarfile.open(path, "r:*") as t:
                members = [m for m in t.getmembers() if m.isfile()]
                if len(members) == 1:
                    return t.extractfile(members[0]).read()
        raise SplitwisePlanError(f"{what} file {path} is a {kind} archive of {len(members)} files; "
                                 "it must hold one CSV")
    except SplitwisePlanError:
        raise
    except OSError as exc:
        if exc.errno is not None:   # the file itself (permissions, a folder): not its format
            raise SplitwisePlanError(f"{what} file {path} cannot be read: {exc.strerror or exc}") from None
        raise SplitwisePlanError(f"{what} file {path} cannot be read as {kind} (its name ends in {suffix}): "
                                 f"{exc}") from None
    except (EOFError, ValueError, RuntimeError, NotImplementedError, zlib.error, lzma.LZMAError,
            zipfile.BadZipFile, tarfile.TarError) as exc:   # truncated, corrupt, encrypted, an unknown method
        raise SplitwisePlanError(f"{what} file {path} cannot be read as {kind} (its name ends in {suffix}): "
                                 f"{exc}") from None


def _zstd_bytes(path: Path, what: str) -> bytes:
    """A .zst file decompressed, with the optional zstandard package pandas uses for it."""
    try:
        import zstandard
    except ImportError:
        raise SplitwisePlanError(f"{what} file {path} is zstd-compressed (.zst), which needs the zstandard "
                                 "package (pip install zstandard); or give it uncompressed, or as .gz") from None
    try:
        with open(path, "rb") as fh, zstandard.ZstdDecompressor().stream_reader(fh) as r:
            return r.read()
    except zstandard.ZstdError as exc:
        raise SplitwisePlanError(f"{what} file {path} cannot be read as zstd (its name ends in .zst): {exc}") from None


def _line_of(text: str, pos: int) -> int:
    """The line number (from 1) of character ``pos`` of ``text``, lines ending as the CSV parser ends them."""
    import re
    return len(re.findall(r"\r\n|\r|\n", text[:pos])) + 1


#: The control characters refused in a CSV (bytes below 32 but tab, newline and carriage return; and DEL):
#: in UTF-8 no other character's bytes take these values, so they are looked for in the bytes.
_CONTROL = np.zeros(256, dtype=bool)
_CONTROL[[*range(0x00, 0x09), 0x0b, 0x0c, *range(0x0e, 0x20), 0x7f]] = True


def _first_control(raw: np.ndarray, piece: int = 1 << 24):
    """The offset of the first control byte of ``raw`` (None: none), looked for a piece at a time."""
    for lo in range(0, raw.size, piece):
        hit = np.flatnonzero(_CONTROL[raw[lo:lo + piece]])
        if hit.size:
            return lo + int(hit[0])
    return None


def _check_text(data: bytes, path: Path, what: str) -> None:
    """Refuse control characters (a binary file; they would reach the terminal raw in a message) and
    comment lines (the CSV parser would read ``# ...`` as a row or the header), naming the line."""
    import re
    pos = _first_control(np.frombuffer(data, dtype=np.uint8))
    if pos is not None:
        text = data[:pos + 1].decode("utf-8-sig", errors="replace")
        raise SplitwisePlanError(f"{what} file {path} is not a text CSV: line {_line_of(text, len(text) - 1)} holds "
                                 f"the control character {text[-1]!r}")
    if b"#" not in data:   # (the usual case, at once: the pattern below is slow on a large file)
        return
    text = data.decode("utf-8-sig")
    m = re.search(r"(?:^|[\r\n])[ \t]*(#[^\r\n]*)", text)
    if m:
        raise SplitwisePlanError(f"{what} file {path}, line {_line_of(text, m.start(1))} is a comment "
                                 f"({m.group(1)[:40]!r}): comment lines are not supported; delete it")


def _long_row(text: str) -> int:
    """The line number of the first row of ``text`` with more fields than the header."""
    import csv
    import io
    rows = csv.reader(io.StringIO(text, newline=""))
    width = len(next(rows, []))
    return next((k for k, row in enumerate(rows, 2) if len(row) > width), 2)


def bad_row(df: pd.DataFrame, mask) -> tuple[int, object]:
    """File line number (header = line 1) and raw value of the first row flagged in ``mask``."""
    i = int(np.flatnonzero(np.asarray(mask))[0])
    return i + 2, i


def numeric_column(df: pd.DataFrame, col: str, path: Path, what: str, *,
                   integer: bool, positive: bool = True, most: float = math.inf) -> np.ndarray:
    """Validate and convert one numeric column (values at most ``most``); the error names file, line,
    column and value."""
    import pandas as pd
    raw = df[col]
    vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(vals) | bool_cells(raw)   # pandas reads a column of True/False as bools, to_numeric as 1/0
    kind = "a finite number"
    if integer:
        bad |= np.isfinite(vals) & (vals != np.round(vals))
        kind = "an integer"
    if positive:
        bad |= np.isfinite(vals) & (vals <= 0)
        kind = "a positive integer" if integer else "a positive finite number"
    if math.isfinite(most):
        bad |= vals > most
        kind += f" of at most {most:,.0f}"
    if bad.any():
        line, i = bad_row(df, bad)
        cell = raw.iloc[i]
        shown = "an empty or NaN value" if pd.isna(cell) else repr(str(cell.item() if hasattr(cell, "item") else cell))
        raise SplitwisePlanError(f"{what} file {path}, line {line}, column {col}: {shown} is not {kind}")
    return vals.astype(np.int64) if integer else vals


def bool_cells(raw: pd.Series) -> np.ndarray:
    """Which cells pandas read as booleans (``True``, ``false``, ...): words, not the numbers 1 and 0."""
    import pandas as pd
    if pd.api.types.is_bool_dtype(raw.dtype):
        return np.ones(len(raw), dtype=bool)
    if raw.dtype != object:
        return np.zeros(len(raw), dtype=bool)
    return np.fromiter((isinstance(v, (bool, np.bool_)) for v in raw), dtype=bool, count=len(raw))


