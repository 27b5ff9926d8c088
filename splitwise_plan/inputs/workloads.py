"""Workloads and request streams: what arrives at the cluster, when, and how big.

A ``Workload`` is a bag of request sizes (prompt and output tokens) from a trace;
``Workload.generate`` draws a seeded Poisson stream from it, as the reference's
trace generator does. ``load_trace`` replays a trace file exactly instead.
"""

from __future__ import annotations

import math
import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np  # (pandas is imported where it is used: processes that only simulate need none)

if TYPE_CHECKING:   # for the annotations only
    import pandas as pd

from splitwise_plan.errors import SplitwisePlanError, choices, input_name, positive_number, seed_value
from splitwise_plan.inputs.paths import data_file, user_file
from splitwise_plan.inputs.tables import MAX_TOKENS, bool_cells, numeric_column, read_user_csv

#: Named workloads shipped with the package (Azure LLM inference traces 2023).
SHIPPED_WORKLOADS = {"coding": "coding.csv", "conversation": "conversation.csv"}
ALIASES = {"code": "coding", "conv": "conversation"}
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
REFERENCE_COLUMNS = ("arrival_timestamp", "prompt_size", "token_size")
DEFAULT_DURATION_S = 120.0
MAX_SPAN_S = 1e12   # a trace's arrivals span at most this (31,700 years): further is another unit than seconds


def workload_names() -> list[str]:
    """Names of the shipped workloads."""
    return sorted(SHIPPED_WORKLOADS)


# --- how large a stream this machine can simulate ----------------------------------------------------

#: Memory one request of a stream takes while it is simulated, bytes: measured with ``simulate`` at
#: 60 req/s over 100 to 60,000 s (6,000 to 3.6 million requests), the peak resident memory grows by
#: about 260 bytes a request with the events method (210 with fluid); this adds a fifth for the
#: per-request results and the report.
BYTES_PER_REQUEST = 320
MEMORY_SHARE = 0.5   # a stream may take at most this share of the memory available when it is drawn
MAX_REQUESTS = 50_000_000   # at most, whatever the memory (and where the available memory is unknown)
DRAW_PIECE = 1 << 20   # arrivals drawn this many at a time: a stop signal is handled between two pieces


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation (Linux's MemAvailable, else the free physical
    pages as ``os.sysconf`` counts them); None where neither says."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def max_stream_requests() -> int:
    """The most requests a stream may hold here: what :data:`MEMORY_SHARE` of the available memory
    simulates at :data:`BYTES_PER_REQUEST` each, at most :data:`MAX_REQUESTS` (the fixed cap where the
    available memory is unknown)."""
    avail = available_memory()
    if avail is None:
        return MAX_REQUESTS
    return int(min(MAX_REQUESTS, max(avail * MEMORY_SHARE / BYTES_PER_REQUEST, 1.0)))


def check_stream_size(expected: float, rate: float, duration_s: float) -> None:
    """A user error when a stream of ``expected`` requests (``rate`` x ``duration_s``) would not fit in
    this machine's memory once simulated: one line naming both inputs and the limit."""
    most = max_stream_requests()
    if expected > most:
        avail = available_memory()
        where = (f"what {MEMORY_SHARE:.0%} of the {avail / 2**30:.3g} GiB of memory available simulates at about "
                 f"{BYTES_PER_REQUEST} bytes a request" if avail is not None and most < MAX_REQUESTS
                 else "the most one stream may hold")
        raise SplitwisePlanError(
            f"{input_name('rps')} x {input_name('duration')} = {rate:g} x {duration_s:g} s = {expected:,.0f} requests "
            f"is more than {most:,} ({where}); lower {input_name('rps')} or {input_name('duration')}")


def _arrival_times(rng, mean_gap: float, n: int) -> np.ndarray:
    """The cumulative sum of ``n`` exponential gaps of mean ``mean_gap``, drawn and summed a piece at a
    time (the same numbers, to the bit, as one draw of ``n`` and one ``np.cumsum``), so that a stop
    signal is handled within a fraction of a second however long the stream."""
    out = np.empty(n, dtype=np.float64)
    for lo in range(0, n, DRAW_PIECE):
        gaps = rng.exponential(mean_gap, size=min(DRAW_PIECE, n - lo))
        if lo:
            gaps[0] += out[lo - 1]   # as the running sum adds it: the same rounding as one cumsum
        np.cumsum(gaps, out=out[lo:lo + gaps.size])
    return out




def _numbers(values, where: str) -> np.ndarray:
    """``values`` as a contiguous float64 array, or a user error naming ``where``."""
    if getattr(getattr(values, "dtype", None), "kind", "") in ("m", "M"):   # datetimes, durations: nanoseconds
        raise SplitwisePlanError(f"{where}: give arrivals as seconds (numbers), not {values.dtype} values; "
                                 "e.g. (t - t[0]).dt.total_seconds() for pandas timestamps")
    try:
        return np.ascontiguousarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SplitwisePlanError(f"{where}: arrivals and token counts must be arrays of numbers") from None


def _tokens(values, where: str) -> np.ndarray:
    """Token counts as int64: whole numbers from 1 to ``MAX_TOKENS`` (not truncated), or a user error."""
    x = _numbers(values, where)
    if x.size and not (np.all(x == np.round(x)) and x.min() >= 1 and x.max() <= MAX_TOKENS):   # NaN fails too
        raise SplitwisePlanError(f"{where}: prompt and output tokens must be whole numbers between 1 and {MAX_TOKENS:,}")
    return x.astype(np.int64)


@dataclass(frozen=True, eq=False)
class RequestStream:
    """Requests in arrival order: arrival seconds from 0, prompt tokens, output tokens (first included)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    name: str = "stream"
    horizon_s: float | None = None  # the stream's nominal length when generated; None = last arrival

    def __post_init__(self) -> None:
        where = f"request stream {self.name!r}"
        a = _numbers(self.arrival_s, where)
        p, o = _tokens(self.prompt_tokens, where), _tokens(self.output_tokens, where)
        if a.ndim != 1 or a.shape != p.shape or a.shape != o.shape:
            raise SplitwisePlanError(f"{where}: arrival_s, prompt_tokens and output_tokens must be 1-D arrays of one length")
        if a.size and (not np.all(np.isfinite(a)) or a[0] < 0 or np.any(np.diff(a) < 0)):
            raise SplitwisePlanError(f"request stream {self.name!r}: arrivals must be finite, >= 0 and sorted")
        if self.horizon_s is not None:   # the stream's length: its rate's denominator
            h = self.horizon_s
            if isinstance(h, bool) or not isinstance(h, numbers.Real) or not math.isfinite(h) or h <= 0 \
                    or (a.size and h < a[-1]):
                raise SplitwisePlanError(f"{where}: horizon_s must be a number of seconds > 0 and at least the last "
                                         f"arrival, got {h!r}")
            object.__setattr__(self, "horizon_s", float(h))
        for arr in (a, p, o):
            arr.setflags(write=False)
        object.__setattr__(self, "arrival_s", a)
        object.__setattr__(self, "prompt_tokens", p)
        object.__setattr__(self, "output_tokens", o)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    @property
    def duration_s(self) -> float:
        """Length of the stream in seconds: the generation horizon, else the last arrival."""
        if self.horizon_s is not None:
            return float(self.horizon_s)
        return float(self.arrival_s[-1]) if len(self) else 0.0

    @property
    def rate(self) -> float:
        """Mean arrival rate, requests per second (NaN for a zero-length stream)."""
        d = self.duration_s
        return len(self) / d if d > 0 else float("nan")

    def burst(self, window_s: float = 10.0) -> float:
        """How far the busiest ``window_s`` seconds outrun the mean rate: their arrivals over the mean's
        (1.0 for a stream shorter than the window or too sparse to tell a burst from chance, where the
        busiest window holds fewer than the mean plus 5 standard deviations of Poisson arrivals)."""
        a = self.arrival_s
        mean = self.rate * window_s
        if not self.duration_s > window_s or not mean > 0:
            return 1.0
        peak = float((np.searchsorted(a, a + window_s, side="left") - np.arange(a.size)).max())
        return peak / mean if peak >= mean + 5.0 * math.sqrt(mean) else 1.0

    def at_rate(self, rate: float) -> "RequestStream":
        """The same requests, their arrivals (and length) time-scaled so the mean rate is ``rate``: a
        trace replayed faster or slower, as the planner and ``check --headroom`` replay it."""
        if not self.duration_s > 0:
            raise SplitwisePlanError(f"request stream {self.name!r}: all its requests arrive at one instant, so it "
                                     "has no rate to scale")
        k = self.rate / positive_number(rate, "rate (requests per second)")
        return RequestStream(self.arrival_s * k, self.prompt_tokens, self.output_tokens, name=f"{self.name}@{rate:g}rps",
                             horizon_s=None if self.horizon_s is None else self.horizon_s * k)

    def to_frame(self) -> pd.DataFrame:
        """The stream in the reference simulator's trace format (one row per request)."""
        import pandas as pd
        n = len(self)
        return pd.DataFrame({
            "request_id": np.arange(n), "request_type": np.full(n, 2), "application_id": np.zeros(n, np.int64),
            "arrival_timestamp": self.arrival_s, "batch_size": np.ones(n, np.int64),
            "prompt_size": self.prompt_tokens, "token_size": self.output_tokens})

    def to_csv(self, path: str | Path) -> None:
        """Write the stream as a reference-format trace CSV: ``load_trace`` replays its requests as they
        are, less the whole seconds before the first one, and lasting to the last arrival (a generated
        stream's horizon, after its last arrival, is not in the file)."""
        self.to_frame().to_csv(path, index=False, float_format="%.17g")


@dataclass(frozen=True, eq=False)
class Workload:
    """Request sizes (prompt and output tokens) to draw streams from."""

    name: str
    prompt_tokens: np.ndarray = field(repr=False)
    output_tokens: np.ndarray = field(repr=False)
    source: str = ""

    def __post_init__(self) -> None:
        p, o = (_tokens(x, f"workload {self.name!r}") for x in (self.prompt_tokens, self.output_tokens))
        if p.ndim != 1 or o.ndim != 1 or p.size == 0 or o.size == 0:
            raise SplitwisePlanError(f"workload {self.name!r} needs non-empty 1-D size samples")
        object.__setattr__(self, "prompt_tokens", p)
        object.__setattr__(self, "output_tokens", o)

    def generate(self, rate: float, duration_s: float = DEFAULT_DURATION_S, seed: int = 0,
                 paired: bool = False) -> RequestStream:
        """Seeded Poisson stream at ``rate`` req/s over ``duration_s`` s with sizes drawn from the trace.

        Gaps are exponential with mean 1/rate and arrivals at or past ``duration_s`` are cut.
        Prompt and output sizes are sampled with replacement, independently as the reference
        generator does, or as (prompt, output) pairs of one trace row when ``paired``.
        """
        rate = positive_number(rate, "rate (requests per second)")
        duration_s = positive_number(duration_s, "duration (seconds)")
        rng = np.random.default_rng(seed_value(seed))
        expected = rate * duration_s
        check_stream_size(expected, rate, duration_s)
        chunk = int(expected + 10.0 * np.sqrt(expected) + 16)
        arrivals = _arrival_times(rng, 1.0 / rate, chunk)
        while arrivals[-1] < duration_s:  # rare: the first chunk fell short of the horizon
            more = arrivals[-1] + _arrival_times(rng, 1.0 / rate, chunk)
            arrivals = np.concatenate([arrivals, more])
        arrivals = arrivals[arrivals < duration_s]
        n = arrivals.size
        if paired and self.prompt_tokens.size != self.output_tokens.size:
            raise SplitwisePlanError(f"workload {self.name!r}: paired sampling draws (prompt, output) rows, but it has "
                                     f"{self.prompt_tokens.size} prompt and {self.output_tokens.size} output sizes")
        i = rng.integers(0, self.prompt_tokens.size, size=n)
        j = i if paired else rng.integers(0, self.output_tokens.size, size=n)
        return RequestStream(arrivals, self.prompt_tokens[i], self.output_tokens[j],
                             name=f"{self.name}@{rate:g}rps", horizon_s=duration_s)

    def summary(self) -> dict:
        """Size statistics: count, mean and P50/P90/P99 of prompt and output tokens."""
        out: dict = {"name": self.name, "requests": int(self.prompt_tokens.size)}
        for label, arr in (("prompt", self.prompt_tokens), ("output", self.output_tokens)):
            out[f"{label}_mean"] = float(arr.mean())
            for q in (50, 90, 99):
                out[f"{label}_p{q}"] = float(np.percentile(arr, q))
        return out


def _resolve(name_or_path: str | Path, what: str = "workload") -> tuple[str, Path]:
    """(workload name, file) for a shipped workload name or a user trace path."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise SplitwisePlanError(f"a {what} is a name ({choices(SHIPPED_WORKLOADS)}) or a path, got {name_or_path!r}")
    key = str(name_or_path)
    if not key.strip():   # Path("") is ".", the current folder
        raise SplitwisePlanError(f"the {what} is empty; give a name ({choices(SHIPPED_WORKLOADS)}) or a path")
    if key == "-":   # the usual name of standard input, which is read more than once (a study hashes it)
        raise SplitwisePlanError(f"the {what} '-' would be standard input, which is not supported; give a file "
                                 "(./- for a file named -)")
    name = ALIASES.get(key, key)
    if name not in SHIPPED_WORKLOADS and not Path(key).expanduser().exists():   # CODING is coding
        name = ALIASES.get(key.lower(), key.lower())
    if name in SHIPPED_WORKLOADS:
        return name, data_file("workloads", SHIPPED_WORKLOADS[name])
    p = Path(name_or_path).expanduser()
    if p.exists() or p.suffix or "/" in key or "\\" in key:
        return p.stem, user_file(p, what)
    raise SplitwisePlanError(
        f"unknown workload {key!r}; valid: {choices(SHIPPED_WORKLOADS)} or a path to a trace CSV (Azure or reference format)")


def load_trace(path: str | Path, on_progress=None) -> RequestStream:
    """Replay a trace file exactly: Azure format (TIMESTAMP, ContextTokens, GeneratedTokens)
    or the reference simulator's (arrival_timestamp, prompt_size, token_size).

    Azure timestamps become seconds after the first request; reference arrivals are kept
    to the second, less the whole seconds before the first request (a window cut from a
    longer log replays at its own rate, with no idle lead-in, and a trace that starts at 0
    replays exactly). Rows are put in arrival order (stable) if the file is not sorted.
    ``on_progress(bytes_read, bytes_total)`` follows a large file's reading (see ``read_user_csv``).
    """
    name, p = _resolve(path, "trace")
    df = _known_column_names(read_user_csv(p, "trace", on_progress), p)
    cols = set(df.columns)
    if set(AZURE_COLUMNS) <= cols and set(REFERENCE_COLUMNS) <= cols:
        raise SplitwisePlanError(f"trace file {p} has both the Azure columns ({', '.join(AZURE_COLUMNS)}) and the "
                                 f"reference ones ({', '.join(REFERENCE_COLUMNS)}): which to replay is ambiguous; "
                                 "keep one set")
    if set(AZURE_COLUMNS) <= cols:
        prompt_col, output_col = "ContextTokens", "GeneratedTokens"
        arrivals = _azure_seconds(df, p)
        time_col = "TIMESTAMP"
    elif set(REFERENCE_COLUMNS) <= cols:
        prompt_col, output_col = "prompt_size", "token_size"
        if len(df) == 0:
            raise SplitwisePlanError(f"trace file {p} has no data rows")
        arrivals = numeric_column(df, "arrival_timestamp", p, "trace", integer=False, positive=False)
        if arrivals.min() < 0:
            line = int(np.argmin(arrivals)) + 2
            raise SplitwisePlanError(f"trace file {p}, line {line}, column arrival_timestamp: negative time")
        arrivals = arrivals - math.floor(arrivals.min())
        time_col = "arrival_timestamp"
    else:
        raise SplitwisePlanError(
            f"trace file {p} has columns {', '.join(df.columns) or '(none)'}; expected the Azure format "
            f"({', '.join(AZURE_COLUMNS)}) or the reference format ({', '.join(REFERENCE_COLUMNS)})")
    if arrivals.max() - arrivals.min() > MAX_SPAN_S:   # the simulators count time in int64 steps
        i = int(np.argmax(arrivals))
        raise SplitwisePlanError(
            f"trace file {p}, line {i + 2}, column {time_col}: {str(df[time_col].iloc[i])!r} makes the trace span "
            f"{arrivals[i] - arrivals.min():.3g} s, more than the {MAX_SPAN_S:g} s allowed; are the times in another "
            "unit than seconds (ms, ns)?")
    prompt = numeric_column(df, prompt_col, p, "trace", integer=True, most=MAX_TOKENS)
    output = numeric_column(df, output_col, p, "trace", integer=True, most=MAX_TOKENS)
    order = np.argsort(arrivals, kind="stable")
    return RequestStream(arrivals[order], prompt[order], output[order], name=name)


def nonempty(stream: RequestStream, rate: float, duration_s: float, seed: int | None = None) -> RequestStream:
    """``stream``, drawn at ``rate`` over ``duration_s``, unless it holds no request: a user error
    naming the flags to raise (the simulator's own "empty stream" says nothing of why)."""
    if len(stream) == 0:
        raise SplitwisePlanError(f"{rate:g} req/s over {duration_s:g} s gives no request"
                                 + ("" if seed is None else f" (seed {seed})") + f"; raise {input_name('rps')} or {input_name('duration')}")
    return stream


def _known_column_names(df: pd.DataFrame, p: Path) -> pd.DataFrame:
    """The trace's columns named as the formats spell them, whatever their case and surrounding
    spaces (``arrival_timestamp`` for ``ARRIVAL_TIMESTAMP``); two spellings of one column are ambiguous."""
    known = {c.lower(): c for c in AZURE_COLUMNS + REFERENCE_COLUMNS}
    names = [known.get(str(c).strip().lower(), c) for c in df.columns]
    for n in AZURE_COLUMNS + REFERENCE_COLUMNS:
        same = [str(c) for c, m in zip(df.columns, names) if m == n]
        if len(same) > 1:
            raise SplitwisePlanError(f"trace file {p}: columns {' and '.join(same)} are one column in any case, "
                                     "so which to read is ambiguous; keep one")
    return df.set_axis(names, axis=1) if len(set(names)) == len(names) else df


def _azure_seconds(df: pd.DataFrame, p: Path) -> np.ndarray:
    """Azure TIMESTAMP column (wall clock text, or plain seconds) as seconds after the first row."""
    import pandas as pd
    if len(df) == 0:
        raise SplitwisePlanError(f"trace file {p} has no data rows")
    raw = df["TIMESTAMP"]
    as_number = pd.to_numeric(raw, errors="coerce").mask(bool_cells(raw))   # True is no time (pandas: 1)
    if as_number.notna().all():
        secs = as_number.to_numpy(np.float64)
    else:
        ts = pd.to_datetime(raw.astype(str).str.strip(), format="ISO8601", errors="coerce", utc=True)
        bad = ts.isna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise SplitwisePlanError(
                f"trace file {p}, line {i + 2}, column TIMESTAMP: {str(raw.iloc[i])!r} is not a time "
                "like 2023-11-16 18:17:03.9799600")
        ns = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        secs = (ns - ns.min()).astype(np.float64) / 1e9
        return secs
    if not np.all(np.isfinite(secs)):
        raise SplitwisePlanError(f"trace file {p}: TIMESTAMP has a non-finite value")
    return secs - secs.min()


def load_workload(name_or_path: str | Path, on_progress=None) -> Workload:
    """A shipped workload (``coding``, ``conversation``) or the sizes in a trace CSV of either format
    (``on_progress``: see :func:`load_trace`)."""
    name, p = _resolve(name_or_path)  # checks the name or file first, as a workload
    stream = load_trace(p, on_progress)
    if name not in SHIPPED_WORKLOADS or p != data_file("workloads", SHIPPED_WORKLOADS[name]):
        name = os.fspath(name_or_path)   # a user's file is named as given: reports must not read as a shipped one
    return Workload(name, stream.prompt_tokens, stream.output_tokens, source=str(p))
