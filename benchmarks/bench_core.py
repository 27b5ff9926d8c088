"""The compiled core's targets (issue 43), as one table: each figure measured now, beside its target.

    python benchmarks/bench_core.py              # all but the plans at 280 and 1000 req/s (about 2 minutes)
    python benchmarks/bench_core.py --rate 280   # also the plan at 280 req/s (add --rate 1000: minutes)

Prints, medians of ``--repeat`` runs (the machine is shared: compare figures of one run):
- the event simulator and the fluid model on one 2-minute design point at 70 req/s of coding
  (Splitwise-HH 27+3), warm; the fluid model also per design in the batch of the 39x39 grid;
- the planner's command ``splitwise-plan --goal min-cost --rps R`` in a fresh process, warm (its kernels
  compiled and cached), at 70 req/s and each ``--rate``, and once with an empty compile cache (as the
  first run after install);
- the 39x39 Splitwise-HH sweep at 70 req/s as a command (two processes on 2 cores).
It asserts nothing: the tests assert behaviour.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splitwise_plan.inputs.workloads import load_workload  # noqa: E402
from splitwise_plan.sim.simulator import Simulator  # noqa: E402


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _command_s(args: list[str], repeat: int) -> float:
    def run():
        subprocess.run([sys.executable, "-m", "splitwise_plan", *args], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run()   # warm: the kernels compiled and cached, the files in the page cache
    return _median_s(run, repeat)


def simulators(repeat: int) -> list[tuple[str, str, str]]:
    stream = load_workload("coding").generate(70, duration_s=120, seed=0)
    rows = []
    for method in ("events", "fluid"):
        sim = Simulator(stream, method=method)
        sim.run("HH", 27, 3)   # warm
        ms = 1e3 * _median_s(lambda s=sim: s.run("HH", 27, 3), repeat)
        target = "<= 10 ms" if method == "events" else "<= 2 ms"
        rows.append((f"{method}: one design point, HH 27+3 at 70 req/s, 2 min", f"{ms:.1f} ms", target))
    sim = Simulator(stream, method="fluid")
    grid = [(p, t) for p in range(1, 40) for t in range(1, 40)]
    sim.run_many("HH", grid[:8])
    ms = 1e3 * _median_s(lambda: sim.run_many("HH", grid), 1) / len(grid)
    rows.append(("fluid: a design point in the batch of the 39x39 grid", f"{ms:.1f} ms", "<= 2 ms"))
    return rows


def first_run() -> list[tuple[str, str, str]]:
    """The default plan in a fresh process with an empty compile cache: as the first run after install."""
    import os
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "splitwise_plan", "--goal", "min-cost", "--rps", "70", "-q"], cwd=REPO,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "NUMBA_CACHE_DIR": tmp})
        s = time.perf_counter() - t0
    return [("splitwise-plan --goal min-cost --rps 70, first run (compiling)", f"{s:.1f} s", "<= 12 s")]


def commands(rates: list[float], repeat: int) -> list[tuple[str, str, str]]:
    targets = {70.0: "<= 3 s", 280.0: "<= 15 s", 1000.0: "<= 60 s"}
    rows = []
    for rate in [70.0, *rates]:
        s = _command_s(["--goal", "min-cost", "--rps", f"{rate:g}", "-q"], repeat if rate == 70 else 1)
        rows.append((f"splitwise-plan --goal min-cost --rps {rate:g}, warm", f"{s:.1f} s", targets.get(rate, "")))
    with tempfile.TemporaryDirectory() as tmp:
        s = _command_s(["sweep", "--design", "HH", "--prompt", "1:39", "--token", "1:39", "--rps", "70",
                        "--csv", str(Path(tmp) / "grid.csv"), "-q"], repeat)
    rows.append(("39x39 Splitwise-HH sweep at 70 req/s, command", f"{s:.1f} s", "<= 3 s"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rate", type=float, action="append", default=[], help="also plan at this rate (req/s)")
    args = ap.parse_args()
    rows = simulators(args.repeat) + first_run() + commands(args.rate, args.repeat)
    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'now':>9}  target")
    for name, now, target in rows:
        print(f"{name:<{width}}  {now:>9}  {target}")


if __name__ == "__main__":
    main()
