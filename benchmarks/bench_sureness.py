"""What saying how sure a plan is costs (issue 54): each plan timed whole, and with its sureness check and its
robust-alternative probe left out, in one process, alternately, after a warm-up run (compiled kernels loaded).

    python benchmarks/bench_sureness.py              # 3 runs of each (about 4 minutes on 2 cores)
    python benchmarks/bench_sureness.py --repeat 1

Plans: the default (BLOOM-176B at 70 req/s: measured latencies, no band; its winner fails at +5%, so the
rivals within 5% are probed there), and Llama-3.1-70B at 100 req/s on H100, H200 and B200 pairs (estimated
latencies: the winner is confirmed at its band, and re-planned with the runner-up where it fails).
Prints medians and the ratio; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

PLANS = {
    "default, 70 req/s": dict(goal="min-cost", rps=70),
    "llama-3.1-70b, 100 req/s": dict(goal="min-cost", rps=100, model="llama-3.1-70b", workload="conversation",
                                     designs="H100:H100,H200:H200,B200:B200"),
}


def _timed(kwargs: dict, judged: bool) -> tuple[float, object]:
    import splitwise_plan.planning.planner as planner

    real = planner._judged
    if not judged:
        planner._judged = lambda *a, **k: (None, None)
    try:
        t0 = time.perf_counter()
        result = planner.plan(**kwargs)
        return time.perf_counter() - t0, result
    finally:
        planner._judged = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    os.environ["SPLITWISE_PLAN_CACHE_DIR"] = tempfile.mkdtemp()
    for name, kwargs in PLANS.items():
        _timed(kwargs, True)   # warm-up: kernels compiled or loaded
        with_it, without = [], []
        for _ in range(a.repeat):
            t, result = _timed(kwargs, True)
            with_it.append(t)
            without.append(_timed(kwargs, False)[0])
        w, wo = statistics.median(with_it), statistics.median(without)
        sure = (result.sureness or {}).get("text", "-")
        alt = (result.alternative or {}).get("design", "none")
        print(f"{name}: with {w:.2f} s, without {wo:.2f} s (medians of {a.repeat}): x{w / wo:.2f}, +{w - wo:.2f} s")
        print(f"  sureness: {sure}")
        print(f"  robust alternative: {alt}")


if __name__ == "__main__":
    main()
