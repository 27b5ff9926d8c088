"""The fluid model against the oracle on other traces, rates and systems than the benchmark's: 939 points, fast.

    python benchmarks/ab_fluid_wide.py              # the fluid model as it is now, against the cached oracle
    python benchmarks/ab_fluid_wide.py --refresh    # recompute the oracle's results first (about 7 minutes)

The 27 sets of ``ab_fluid_wide.json`` come from a fidelity audit of 2026-12-02: each is a stream and
the points around each design's cheapest passing point in the fluid model of that day (so near the
frontiers on purpose: agreement is lower here than in ``bench_simulator.py``'s wider sets). The
streams: Poisson at 10 to 200 req/s, layer-wise and 12.5 GiB/s transfer, Llama2-70B at TP2, TP4
and TP8, a 3x burst of 10 s in 120 s (coding and conversation), and the busiest 300 s of the Azure
traces, at their own times and compressed 8x (built from ``../shared``; those sets are skipped, said
so, where it is absent). As ``ab_fluid.py``, the oracle's results are computed once and kept (``--cache``),
so a change of the fluid model compares within a minute. Prints each set's pass/fail agreement and
its misses by kind (the fluid model passes where the oracle fails, or the reverse), then the totals
and the median relative error of the nine raw percentiles.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_simulator import SHARED  # noqa: E402

from splitwise_plan.inputs.workloads import RequestStream, load_workload  # noqa: E402
from splitwise_plan.sim.cluster import SchedulerConfig  # noqa: E402
from splitwise_plan.sim.simulator import Simulator  # noqa: E402

SETS = Path(__file__).with_suffix(".json")


def _merged(base: RequestStream, burst: RequestStream, at: float, name: str) -> RequestStream:
    """``base`` with ``burst``'s requests added from ``at`` seconds on."""
    a = np.concatenate([base.arrival_s, burst.arrival_s + at])
    order = np.argsort(a, kind="stable")
    p = np.concatenate([base.prompt_tokens, burst.prompt_tokens])[order]
    o = np.concatenate([base.output_tokens, burst.output_tokens])[order]
    return RequestStream(a[order], p, o, name=name)


def _azure(kind: str):
    """(arrival seconds, prompt, output) of the Azure trace ``kind`` (code or conv), or None without ../shared."""
    import pandas as pd
    path = SHARED / "data" / "azure-llm-2023" / f"AzureLLMInferenceTrace_{kind}.csv"
    if not path.is_file():
        return None
    df = pd.read_csv(path)
    t = pd.to_datetime(df.TIMESTAMP)
    return (t - t.min()).dt.total_seconds().to_numpy(), df.ContextTokens.to_numpy(), df.GeneratedTokens.to_numpy()


def trace(name: str) -> RequestStream | None:
    """The audit's trace ``name``: a burst built from the shipped workloads, or a slice of an Azure trace."""
    bursts = {"burst_coding40": ("coding", 11, 12), "burst_conv40": ("conversation", 13, 14),
              "burst_coding40_b": ("coding", 21, 22), "burst_conv40_bloom": ("conversation", 23, 24)}
    if name in bursts:   # 40 req/s for 120 s, and 80 req/s more from 50 to 60 s
        workload, s0, s1 = bursts[name]
        wl = load_workload(workload)
        return _merged(wl.generate(40, duration_s=120, seed=s0), wl.generate(80, duration_s=10, seed=s1), 50.0, name)
    kind, how = name.split("_")[1], name.split("_")[2]   # azure_{code,conv}_{busy300,x8}
    data = _azure(kind)
    if data is None:
        return None
    s, p, o = data
    j = np.searchsorted(s, s + 300.0)
    i = int(np.argmax(j - np.arange(len(s))))   # the busiest 300 s
    if how == "busy300":
        return RequestStream(s[i:j[i]] - s[i], p[i:j[i]], o[i:j[i]], name=name)
    k = np.searchsorted(s, s[i] + 600.0)         # 600 s from there, 8x faster
    return RequestStream((s[i:k] - s[i]) / 8.0, p[i:k], o[i:k], name=name)


def stream_of(spec: str) -> RequestStream | None:
    kind, *args = spec.split()
    if kind == "generate":
        workload, rate, duration, seed = args
        return load_workload(workload).generate(float(rate), duration_s=float(duration), seed=int(seed))
    return trace(args[0])


def simulator(entry: dict, stream: RequestStream, method: str) -> Simulator:
    sched = SchedulerConfig.with_transfer(*entry["transfer"]) if entry["transfer"] else None
    return Simulator(stream, entry["model"], tensor_parallel=entry["tp"], scheduler=sched, method=method)


def summary(r) -> dict:
    return dict(slo=bool(r.slo_met), over=bool(r.overloaded),
                raw=[float(r.latency_s[m][p]) for m in ("ttft", "tbt", "e2e") for p in (50, 90, 99)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", action="store_true", help="recompute the oracle's results")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "splitwise-ab-wide-oracle.pkl"))
    args = ap.parse_args()
    sets = json.loads(SETS.read_text())
    cache = {} if args.refresh or not os.path.exists(args.cache) else pickle.load(open(args.cache, "rb"))
    total = agree = false_pass = false_fail = 0
    errors: list = []
    t0 = time.perf_counter()
    for entry in sets:
        stream = stream_of(entry["stream"])
        if stream is None:
            print(f"[wide] {entry['name']}: skipped (the Azure traces are not at {SHARED / 'data'})")
            continue
        pts = [tuple(p) for p in entry["points"]]
        if entry["name"] not in cache:   # one point at a time, as the oracle runs
            cache[entry["name"]] = [summary(simulator(entry, stream, "events").run(*pt)) for pt in pts]
            tmp = args.cache + ".tmp"
            with open(tmp, "wb") as f:
                pickle.dump(cache, f)
            os.replace(tmp, args.cache)
        fluid = [summary(r) for r in simulator(entry, stream, "fluid").run_points(pts)]
        fp = sum(f["slo"] and not o["slo"] for f, o in zip(fluid, cache[entry["name"]]))
        ff = sum(o["slo"] and not f["slo"] for f, o in zip(fluid, cache[entry["name"]]))
        for f, o in zip(fluid, cache[entry["name"]]):
            if not (f["over"] or o["over"]) and all(map(math.isfinite, f["raw"] + o["raw"])):
                errors += [abs(x / y - 1.0) for x, y in zip(f["raw"], o["raw"]) if y > 0]
        total += len(pts)
        agree += len(pts) - fp - ff
        false_pass += fp
        false_fail += ff
        print(f"[wide] {entry['name']}: pass/fail {len(pts) - fp - ff}/{len(pts)} (fluid passes, oracle fails: {fp}; "
              f"the reverse: {ff})")
    if total:
        print(f"[wide] all: pass/fail agreement {agree}/{total} = {agree / total:.1%}, fluid passes where the oracle fails "
              f"{false_pass}, the reverse {false_fail}, median relative error of the nine raw percentiles "
              f"{float(np.median(errors)):.2%} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
