"""The event simulator compiled (sim/events/kernels.py) against its pure-Python engine before the rewrite
(issue 43). Prints ms per design point and the ratio; asserts nothing (the golden tests do).

    python benchmarks/bench_events.py [--repeat 3]

Loads the old engine from git (``git show HEAD~N:splitwise_plan/sim/events/engine.py``, the last commit
whose engine is the pure-Python one) as a separate module, and times both in this process on the same
clusters and streams: Splitwise-HH 27+3 and Baseline-A100 117 on a 2-minute 70 req/s coding stream
(seed 0), and HH 27+3 at 280 req/s: the median of ``--repeat`` warm runs each, both engines giving the
same per-request times (checked). The cold first call (compiling, or loading the compiled kernels from
numba's cache) is timed in fresh processes: once with an empty cache folder, once with it filled.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
POINTS = (("coding", 70, "HH", 27, 3), ("coding", 70, "A100", 117, 0), ("coding", 280, "HH", 27, 3))
COLD = """
import time
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.sim.simulator import Simulator
sim = Simulator(load_workload("coding").generate(70, duration_s=120.0, seed=0), method="events")
cluster = sim.cluster("HH", 27, 3)
from splitwise_plan.sim.events.engine import simulate_events
t0 = time.perf_counter()
simulate_events(cluster, sim.stream, overload_s=sim.overload_s)
print(time.perf_counter() - t0)
"""


def old_engine():
    """The pure-Python engine of the last commit that has it, as module ``old_events_engine``."""
    source = None
    for back in range(0, 50):
        try:
            text = subprocess.run(["git", "show", f"HEAD~{back}:splitwise_plan/sim/events/engine.py"], cwd=REPO,
                                  capture_output=True, text=True, check=True).stdout
        except subprocess.CalledProcessError:
            break
        if "class _Sim" in text:
            source = text
            break
    if source is None:
        sys.exit("no pure-Python engine found in git history")
    path = Path(tempfile.mkdtemp()) / "old_events_engine.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("old_events_engine", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_events_engine"] = module
    spec.loader.exec_module(module)
    return module


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def same(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True) for f in ("ttft", "e2e", "busy_s")) and all(
        getattr(a, f) == getattr(b, f) for f in ("horizon_s", "oom", "overloaded", "failed"))


def cold() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for what in ("compile (empty cache)", "load from cache"):
            out = subprocess.run([sys.executable, "-c", COLD], env=env, capture_output=True, text=True, check=True)
            print(f"cold first call, {what}: {float(out.stdout.split()[-1]) * 1e3:.0f} ms (HH 27+3, 70 req/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from splitwise_plan.inputs.workloads import load_workload
    from splitwise_plan.sim.events.engine import simulate_events
    from splitwise_plan.sim.simulator import Simulator

    old = old_engine()
    cold()
    print(f"{'point':32s} {'requests':>8s} {'old ms':>9s} {'new ms':>9s} {'ratio':>7s}  same")
    for workload, rate, design, p, t in POINTS:
        stream = load_workload(workload).generate(rate, duration_s=120.0, seed=0)
        sim = Simulator(stream, method="events")
        cluster = sim.cluster(design, p, t)
        simulate_events(cluster, stream, overload_s=sim.overload_s)   # warm
        t_old, a = timed(lambda: old.simulate_events(cluster, stream, overload_s=sim.overload_s), args.repeat)
        t_new, b = timed(lambda: simulate_events(cluster, stream, overload_s=sim.overload_s), args.repeat)
        name = f"{design} {p}+{t} {workload} {rate} req/s"
        print(f"{name:32s} {len(stream):8d} {t_old * 1e3:9.1f} {t_new * 1e3:9.2f} {t_old / t_new:6.0f}x  {same(a, b)}")


if __name__ == "__main__":
    main()
