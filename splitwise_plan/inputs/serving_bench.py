"""A serving benchmark's result, which ``calibrate`` holds the simulator against. Two tools' own output is read:

- vLLM's ``vllm bench serve --save-result`` (``vllm/benchmarks/serve.py``): one JSON object with
  ``request_rate`` (a number, or "inf"), ``burstiness``, ``max_concurrency``, ``completed``,
  ``total_input_tokens``, ``total_output_tokens``, and ``mean_``/``median_``/``pNN_`` of ``ttft``, ``tpot``,
  ``itl`` and ``e2el`` in ms (``--percentile-metrics`` and ``--metric-percentiles`` choose which); with
  ``--save-detailed`` also each request's ``input_lens`` and ``output_lens``.
- SGLang's ``python -m sglang.bench_serving --output-file`` (``python/sglang/bench_serving.py``): JSON lines,
  one per run, with ``request_rate``, ``max_concurrency``, ``dataset_name``, ``random_input_len``,
  ``random_output_len``, ``random_range_ratio``, ``completed``, the token totals, and ``mean_``/``median_``/
  ``p90_``/``p99_`` of ``ttft_ms``, ``tpot_ms``, ``itl_ms`` and ``e2e_latency_ms``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from splitwise_plan.errors import SplitwisePlanError

VLLM = "vLLM bench serve"
SGLANG = "SGLang bench_serving"
#: The metrics both tools report per request and the simulator has: their names in each tool's keys.
METRIC_KEYS = {"ttft": ("ttft",), "tpot": ("tpot",), "e2e": ("e2el", "e2e_latency")}
_STAT = re.compile(r"^(mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|e2e_latency)_ms$")


@dataclass(frozen=True)
class ServingBenchmark:
    """One benchmark run against one server at a fixed request rate.

    ``latency_ms`` maps (metric, statistic) to ms: metric ``ttft``, ``tpot`` or ``e2e``; statistic ``mean`` or
    a percentile (50 for the median). ``input_lens``/``output_lens``: each request's tokens where the file
    holds them; else ``lengths`` says how the stream's lengths are drawn (``fixed`` at the means, or
    ``uniform`` between ``low`` and the means' upper ends as SGLang's random dataset draws them)."""

    path: Path
    tool: str
    rate: float
    burstiness: float
    completed: int
    mean_input: float
    mean_output: float
    latency_ms: dict = field(repr=False)
    input_lens: tuple | None = None
    output_lens: tuple | None = None
    lengths: tuple = ("fixed",)
    run: str = ""
    left_out: tuple = ()   # metrics the file reports that the simulator has no counterpart of (ITL)
    model_id: str | None = None   # the model the file says was served (vLLM's model_id), if it does

    def describe(self) -> str:
        """One line: the tool, the rate and the requests."""
        burst = "" if self.burstiness == 1 else f", burstiness {self.burstiness:g}"
        return (f"{self.tool} {self.path.name}{self.run}: {self.completed:,} requests at {self.rate:g} req/s"
                f"{burst}, prompts {self.mean_input:,.0f} and outputs {self.mean_output:,.0f} tokens on average")


def read_serving_benchmark(path, line: int | None = None) -> ServingBenchmark:
    """The run in the file at ``path``: vLLM's JSON, or one line of SGLang's JSON lines (``line``, counted from 1
    among its runs; default the last). A one-line user error where it is not such a file, or not a run at a
    fixed request rate from an unbounded client (the simulator's open stream)."""
    from splitwise_plan.inputs.paths import read_text, user_file

    p = user_file(path, "serving benchmark")
    text = read_text(p, f"serving benchmark {p}")
    where = f"serving benchmark {p}"
    try:
        runs = [json.loads(text)]
    except json.JSONDecodeError:
        runs = []
        for n, raw in enumerate(text.splitlines(), 1):
            if raw.strip():
                try:
                    runs.append(json.loads(raw))
                except json.JSONDecodeError as exc:
                    raise SplitwisePlanError(f"{where} line {n}: not JSON ({exc.msg}); give vLLM bench serve's "
                                             "--save-result JSON or SGLang bench_serving's --output-file") from None
    if not runs or not all(isinstance(r, dict) for r in runs):
        raise SplitwisePlanError(f"{where}: not a JSON object per run")
    if line is not None and not 1 <= line <= len(runs):
        raise SplitwisePlanError(f"--line must be between 1 and {len(runs)} (the runs in {p}), got {line}")
    k = len(runs) if line is None else line
    run = runs[k - 1]
    where += f" run {k}" if len(runs) > 1 else ""
    tool = SGLANG if "e2e_latency_ms" in "".join(run) or "random_input_len" in run else VLLM
    return _benchmark(p, where, run, tool, f" (run {k} of {len(runs)})" if len(runs) > 1 else "")


def _number(where: str, run: dict, key: str, *, default=None, positive: bool = True) -> float:
    value = run.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (value <= 0 if positive else value < 0):
        raise SplitwisePlanError(f"{where}: {key} must be a {'positive' if positive else 'non-negative'} "
                                 f"number, got {value!r}")
    return float(value)


def _benchmark(p: Path, where: str, run: dict, tool: str, label: str) -> ServingBenchmark:
    rate = run.get("request_rate")
    if rate in ("inf", None) or (isinstance(rate, float) and math.isinf(rate)):
        raise SplitwisePlanError(f"{where}: request_rate is {rate!r}; calibrate needs a run at a fixed "
                                 "--request-rate (the simulator's stream arrives at a rate, not all at once)")
    concurrency = run.get("max_concurrency")
    completed = int(_number(where, run, "completed"))
    if concurrency is not None and concurrency < completed:
        raise SplitwisePlanError(f"{where}: max_concurrency {concurrency} held requests back at the client; "
                                 "calibrate needs a run without --max-concurrency")
    latency, left_out = {}, set()
    for key, value in run.items():
        m = _STAT.match(key)
        if m is None or value is None:
            continue
        metric = next((k for k, names in METRIC_KEYS.items() if m.group(2) in names), None)
        if metric is None:
            left_out.add(m.group(2))
        else:
            stat = m.group(1)
            latency[(metric, "mean" if stat == "mean" else 50.0 if stat == "median" else float(stat[1:]))] = \
                _number(where, run, key, positive=False)
    if not latency:
        raise SplitwisePlanError(f"{where}: no latency statistics (keys such as median_ttft_ms, p99_tpot_ms); "
                                 f"is it {VLLM}'s --save-result JSON or {SGLANG}'s --output-file?")
    mean_in = _number(where, run, "total_input_tokens") / completed
    mean_out = _number(where, run, "total_output_tokens") / completed
    ins, outs = run.get("input_lens"), run.get("output_lens")
    if isinstance(ins, list) and isinstance(outs, list) and len(ins) == len(outs) and ins:
        ins, outs = _lengths(where, ins, "input_lens"), _lengths(where, outs, "output_lens")
    else:
        ins = outs = None
    return ServingBenchmark(p, tool, _number(where, {"request_rate": rate}, "request_rate"),
                            _number(where, run, "burstiness", default=1.0), completed, mean_in, mean_out, latency,
                            ins, outs, _drawn_lengths(run, tool), label, tuple(sorted(left_out)),
                            run.get("model_id") if isinstance(run.get("model_id"), str) else None)


def _lengths(where: str, values: list, key: str) -> tuple:
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise SplitwisePlanError(f"{where}: {key} must hold whole numbers of tokens")
    return tuple(max(v, 1) for v in values)


def _drawn_lengths(run: dict, tool: str) -> tuple:
    """How the stream's lengths are drawn where the file does not hold each request's: SGLang's random
    dataset draws each uniformly from ``[max(int(len * ratio), 1), len]`` (its ``sample_random_requests``),
    so ("uniform", input len, output len, ratio); anything else at the means, ("fixed",)."""
    if tool == SGLANG and str(run.get("dataset_name", "")).startswith("random"):
        try:
            ins, outs = int(run["random_input_len"]), int(run["random_output_len"])
            ratio = float(run.get("random_range_ratio", 0.0))
        except (KeyError, TypeError, ValueError):
            return ("fixed",)
        if ins >= 1 and outs >= 1 and 0 <= ratio <= 1:
            return ("uniform", ins, outs, ratio)
    return ("fixed",)
