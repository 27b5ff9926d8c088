"""Measured prefill and decode timings, which ``profiles fit`` fits a serving stack to. Two formats are read:

- a CSV with the columns ``prompt_size``, ``batch_size``, ``prompt_time``, ``token_time`` (ms) and optionally
  ``token_size``;
- SGLang's ``bench_one_batch`` results, the JSON lines its ``--result-filename`` appends (one static batch
  each: ``batch_size``, ``input_len``, ``output_len``, ``prefill_latency`` and ``median_decode_latency`` in
  seconds, as ``python/sglang/bench_one_batch.py`` writes them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from splitwise_plan.errors import SplitwisePlanError

#: What a fit reads of each measurement: sizes in tokens and requests, times in ms.
COLUMNS = ("prompt_size", "batch_size", "token_size", "prompt_time", "token_time")
SGLANG = "SGLang bench_one_batch"
_SGLANG_KEYS = ("batch_size", "input_len", "output_len", "prefill_latency")


def read_timings(path) -> tuple[dict, str]:
    """The timings of the file at ``path`` as {column: list} (``COLUMNS``), and its format's name; a one-line
    user error naming the file, line and value where one is missing or wrong."""
    from splitwise_plan.inputs.paths import read_text, user_file

    p = user_file(path, "measured timings")
    text = read_text(p, f"measured timings {p}")
    first = next((line for line in text.splitlines() if line.strip()), "")
    if first.lstrip().startswith("{"):
        return _sglang_rows(p, text), SGLANG
    return _csv_rows(p), "CSV"


def _sglang_rows(p: Path, text: str) -> dict:
    """bench_one_batch's JSON lines; its runs of one output token (no decode step) are left out."""
    rows = {c: [] for c in COLUMNS}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            run = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SplitwisePlanError(f"measured timings {p} line {n}: not a JSON object ({exc.msg})") from None
        missing = [k for k in _SGLANG_KEYS if not isinstance(run, dict) or k not in run]
        if missing:
            raise SplitwisePlanError(f"measured timings {p} line {n}: no {', '.join(missing)} (SGLang "
                                     "bench_one_batch's results have batch_size, input_len, output_len, "
                                     "prefill_latency and median_decode_latency)")
        if run.get("median_decode_latency") is None:   # (output_len 1: its run has no decode step)
            continue
        for key in (*_SGLANG_KEYS, "median_decode_latency"):
            value = run[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise SplitwisePlanError(f"measured timings {p} line {n}: {key} must be a positive number, got {value!r}")
        rows["prompt_size"].append(int(run["input_len"]))
        rows["batch_size"].append(int(run["batch_size"]))
        rows["token_size"].append(int(run["output_len"]))
        rows["prompt_time"].append(1e3 * float(run["prefill_latency"]))
        rows["token_time"].append(1e3 * float(run["median_decode_latency"]))
    if not rows["prompt_size"]:
        raise SplitwisePlanError(f"measured timings {p}: no run with a decode step (an output_len above 1)")
    return rows


def _csv_rows(p: Path) -> dict:
    from splitwise_plan.inputs.tables import numeric_column, read_user_csv

    df = read_user_csv(p, "measured timings")
    missing = [c for c in ("prompt_size", "batch_size", "prompt_time", "token_time") if c not in df.columns]
    if missing:
        raise SplitwisePlanError(f"measured timings {p} lack column(s) {', '.join(missing)}; need prompt_size, "
                                 "batch_size, prompt_time and token_time (ms), token_size optional; or give "
                                 "SGLang bench_one_batch's --result-filename")
    cols = {c: list(numeric_column(df, c, p, "measured timings", integer=c.endswith("size")))
            for c in ("prompt_size", "batch_size", "prompt_time", "token_time")}
    cols["token_size"] = (list(numeric_column(df, "token_size", p, "measured timings", integer=True))
                          if "token_size" in df.columns else [128] * len(df))
    return {c: cols[c] for c in COLUMNS}
