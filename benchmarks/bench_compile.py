"""The first run after install (issue 51): the commands with an empty compile cache, against their targets.

    python benchmarks/bench_compile.py              # 3 runs of each (about 4 minutes on 2 cores)
    python benchmarks/bench_compile.py --repeat 1 --skip-plan

Each run is a fresh process whose numba cache is a new, empty folder (``NUMBA_CACHE_DIR``, which numba
prefers to every other place, the folder beside the package included): cold, it compiles every kernel the
command needs; warm, a second run on that folder loads them. A cold run must say ``compiling`` on stderr
and leave the event simulator's index in its folder, else the script says it was not cold. Prints, medians
of ``--repeat`` runs:
- ``splitwise-plan check examples/cluster.toml --rps 60``, cold and warm;
- ``splitwise-plan --goal min-cost --rps 70`` (the default plan), cold and warm;
- where a cold compile goes: each kernel's own compile time (numba's compile events, a kernel's steps
  and helpers excluded where they compile on their own), the event simulator's and then the fluid model's.
It asserts nothing: the tests assert behaviour.
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECK = ["check", str(REPO / "examples" / "cluster.toml"), "--rps", "60", "--quiet"]
PLAN = ["--goal", "min-cost", "--rps", "70", "--quiet"]
TARGETS = {"check, cold": 8.0, "plan, cold": 20.0, "plan, warm": 3.0}   # seconds (issue 51; docs/speed.md)

PER_KERNEL = r"""
import json, sys, time
from numba.core import event

stack, spent = [], {}

class Timer(event.Listener):   # each compile's own seconds: those of the compiles inside it subtracted
    def on_start(self, ev):
        stack.append([ev.data["dispatcher"], time.perf_counter(), 0.0])

    def on_end(self, ev):
        dispatcher, t0, inner = stack.pop()
        took = time.perf_counter() - t0
        if stack:
            stack[-1][2] += took
        fn = dispatcher.py_func
        name = fn.__module__.rsplit(".", 2)[-2] + "." + fn.__name__
        spent[name] = spent.get(name, 0.0) + took - inner

event.register("numba:compile", Timer())
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.sim.events.engine import compile_ahead as events_ahead
from splitwise_plan.sim.fluid.flow import compile_ahead as fluid_ahead
from splitwise_plan.sim.simulator import Simulator

cluster = Simulator(load_workload("coding").generate(1, duration_s=1.0, seed=0), method="events").cluster("HH", 1, 1)
walls = {}
for what, ahead in (("events", events_ahead), ("fluid", fluid_ahead)):
    t0 = time.perf_counter()
    ahead(cluster)
    walls[what] = time.perf_counter() - t0
print(json.dumps({"kernels": spent, "walls": walls}))
"""


def run(args: list[str], cache: str) -> tuple[float, str]:
    """Wall seconds of ``splitwise-plan args`` in a fresh process on numba cache ``cache``, and its stderr."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "splitwise_plan", *args], capture_output=True, text=True, env=env,
                         cwd=REPO)
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 1):
        sys.exit(f"{' '.join(args)} failed ({out.returncode}): {out.stderr.strip()[-500:]}")
    return wall, out.stderr


def was_cold(cache: str, stderr: str) -> bool:
    """Whether a run on an empty ``cache`` compiled: it said so, and the event simulator's index is there now."""
    return "compiling" in stderr and any(Path(cache).rglob("*run_events*.nbi"))


def measure(args: list[str], repeat: int) -> tuple[list[float], list[float], bool]:
    """Cold and warm wall seconds of ``args``, ``repeat`` of each (a new empty cache folder each), and whether
    every cold run was cold."""
    cold, warm, all_cold = [], [], True
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-compile-") as cache:
            wall, stderr = run(args, cache)
            cold.append(wall)
            all_cold &= was_cold(cache, stderr)
            warm.append(run(args, cache)[0])
    return cold, warm, all_cold


def per_kernel() -> dict:
    """Each kernel's own compile seconds, and the wall seconds of each simulator's compile, from an empty cache."""
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as cache:
        out = subprocess.run([sys.executable, "-c", PER_KERNEL], capture_output=True, text=True, cwd=REPO,
                             env=dict(os.environ, NUMBA_CACHE_DIR=cache), check=True)
    return json.loads(out.stdout.splitlines()[-1])


def line(name: str, times: list[float]) -> str:
    med = statistics.median(times)
    target = TARGETS.get(name)
    against = (f"target <= {target:g} s: {'met' if med <= target else 'NOT met'} ({med / target:.2f}x)"
               if target else "")
    return f"{name:12s} median {med:6.2f} s  (runs {', '.join(f'{t:.2f}' for t in times)})  {against}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-plan", action="store_true", help="only check and the per-kernel times")
    a = ap.parse_args()
    cases = {"check": CHECK} if a.skip_plan else {"check": CHECK, "plan": PLAN}
    for name, args in cases.items():
        cold, warm, all_cold = measure(args, a.repeat)
        print(line(f"{name}, cold", cold) + ("" if all_cold else "  (NOT cold: a kernel was in a cache)"))
        print(line(f"{name}, warm", warm))
        print(f"{'':12s} compile: cold - warm = {statistics.median(cold) - statistics.median(warm):.2f} s")
    found = per_kernel()
    for what, wall in found["walls"].items():
        print(f"compiling the {what} kernels alone, one process: {wall:.2f} s")
    total = sum(found["kernels"].values())
    for name, took in sorted(found["kernels"].items(), key=lambda kv: -kv[1]):
        print(f"  {name:30s} {took:6.2f} s  {took / total:4.0%}")


if __name__ == "__main__":
    main()
