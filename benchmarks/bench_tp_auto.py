"""``--tp auto`` against ``--tp 8``: wall time and answer of the same plan, Llama-3.1-70B on four designs.

    python benchmarks/bench_tp_auto.py                    # at 100 and 1,000 req/s
    python benchmarks/bench_tp_auto.py --rates 100 --repeat 3

Each run is a fresh ``splitwise-plan`` process with an empty plan cache (no checkpoint to resume), the two
TPs one after the other at each rate; prints each run's seconds and each design's answer, then the median
ratio auto / 8 against the target (at most 3x) and whether auto is at least as cheap. It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

DESIGNS = "H100:H100,H200:H200,B200:B200,H100:H200"
TARGET = 3.0


def run(rate: float, tp: str) -> tuple[float, dict]:
    """(seconds, {design: (cost, its TP)}) of one plan in a fresh process and cache."""
    with tempfile.TemporaryDirectory() as cache:
        out = os.path.join(cache, "plan.json")
        env = {**os.environ, "SPLITWISE_PLAN_CACHE_DIR": cache}
        cmd = [sys.executable, "-m", "splitwise_plan", "--rps", str(rate), "--model", "llama-3.1-70b", "--workload",
               "conversation", "--designs", DESIGNS, "--tp", tp, "-q", "--json", out]
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        doc = json.load(open(out))
    answers = {r["design"]: (r["cost"], r.get("prompt_tp"), r.get("token_tp")) for r in doc["results"]}
    return seconds, answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100,1000")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    for rate in (float(r) for r in args.rates.split(",")):
        times, cheapest = {"8": [], "auto": []}, {}
        for _ in range(args.repeat):
            for tp in ("8", "auto"):
                seconds, answers = run(rate, tp)
                times[tp].append(seconds)
                print(f"[tp-auto] {rate:g} req/s --tp {tp}: {seconds:.1f} s")
                for design, (cost, p, t) in sorted(answers.items(), key=lambda kv: kv[1][0] or 1e18):
                    print(f"    {design}: " + ("no answer" if cost is None else f"{cost:,.2f} USD/h")
                          + (f" (TP {p}:{t})" if p else ""))
                cheapest[tp] = min((c for c, *_ in answers.values() if c is not None), default=float("inf"))
        ratio = statistics.median(times["auto"]) / statistics.median(times["8"])
        print(f"[tp-auto] {rate:g} req/s: winner {cheapest['auto']:,.2f} (auto) against {cheapest['8']:,.2f} (TP8), "
              f"{'at least as cheap' if cheapest['auto'] <= cheapest['8'] + 1e-6 else 'DEARER'}; time auto / 8 = "
              f"{ratio:.2f}x (median of {args.repeat}; target <= {TARGET:g}x: {'met' if ratio <= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
