"""Benchmark the planner: simulations used against the reference sweeps' grid, wall time against the reference.

    python benchmarks/bench_planner.py                 # the acceptance question: min-cost at 70 req/s, defaults
    python benchmarks/bench_planner.py --duration 30   # quicker
    python benchmarks/bench_planner.py --confirm-method fluid   # the search alone

It first times the command itself, ``splitwise-plan --goal min-cost --rps R --quiet``, in a
fresh process (``--repeat`` times, the median reported: the machine is shared and noisy).

The reference simulator answers the same question by sweeping every design's grid
(Splitwise-HH 39x39, -AA 69x69, -HA 39x69, -HHcap 39x39, Baseline-A100 1..139,
Baseline-H100 1..79: 10,712 design points) at about 10 s a point (the median wall
time of its calibration runs, read from ../shared when present).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from splitwise_plan.planning import REFERENCE_GRID, PlanRequest, plan  # noqa: E402

CALIBRATION = "data/splitwise-sim/reference_results_calibration.csv"


def reference_seconds_per_point() -> tuple[float, str]:
    shared = Path(os.environ.get("SPLITWISE_SHARED", Path(__file__).resolve().parents[2] / "shared"))
    path = shared / CALIBRATION
    if path.exists():
        import pandas as pd
        s = pd.read_csv(path)["sim_wall_s"]
        return float(s.median()), f"median sim_wall_s of {len(s)} reference runs ({path.name})"
    return 10.0, "about 10 s a point (the issue's figure; reference data not found)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rps", type=float, default=70.0)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--confirm-method", default="events")
    ap.add_argument("--strategy", default="frontier")
    ap.add_argument("--designs", default="AA,HH,HA,HHcap,A100,H100")
    ap.add_argument("--repeat", type=int, default=3, help="runs of the command to time (0: none)")
    args = ap.parse_args()

    cmd = [sys.executable, "-m", "splitwise_plan", "--goal", "min-cost", "--rps", f"{args.rps:g}", "--quiet",
           "--duration", f"{args.duration:g}", "--designs", args.designs]
    walls = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    if walls:
        print(f"the command ({' '.join(cmd[2:])}), {len(walls)} runs: median {statistics.median(walls):.1f} s wall "
              f"(target <= 10 s); runs {', '.join(f'{w:.1f}' for w in walls)} s")

    t0 = time.perf_counter()
    res = plan(PlanRequest(goal="min-cost", rps=args.rps, duration=args.duration, jobs=args.jobs,
                           confirm_method=args.confirm_method, strategy=args.strategy, designs=args.designs))
    wall = time.perf_counter() - t0
    per_point, source = reference_seconds_per_point()

    print(f"min-cost at {args.rps:g} req/s, {args.duration:g} s stream, search={res.search_method}, "
          f"confirm={args.confirm_method}, strategy={args.strategy}, jobs={args.jobs or os.cpu_count()}")
    print(f"{'design':<17}{'answer':>8}{'grid':>8}{'ILP-pruned':>11}{'search sims':>12}{'confirms':>9}"
          f"{'sims/grid':>10}{'seconds':>9}  status")
    grid_total = 0
    for d in sorted(res.designs, key=lambda d: list(REFERENCE_GRID).index(d.design)):
        answer = f"{d.prompt}+{d.token}" if d.status != "infeasible" else "-"
        grid_total += d.grid_size
        print(f"{d.design:<17}{answer:>8}{d.grid_size:>8}{d.candidates:>11}{d.evaluations:>12}{d.confirmations:>9}"
              f"{d.evaluations / max(d.grid_size, 1):>10.1%}{d.seconds:>9.2f}  {d.status}")
    sims = res.evaluations + res.confirmations
    ref_s = grid_total * per_point
    print(f"{'total':<17}{'':>8}{grid_total:>8}{'':>11}{res.evaluations:>12}{res.confirmations:>9}"
          f"{res.evaluations / max(grid_total, 1):>10.1%}")
    print(f"simulations: {sims} ({res.evaluations} search + {res.confirmations} confirm) against {grid_total} "
          f"grid points: {grid_total / max(sims, 1):.0f}x fewer")
    print(f"wall time: {wall:.1f} s; the reference sweep: {grid_total} points x {per_point:.1f} s "
          f"({source}) = {ref_s:,.0f} s ({ref_s / 3600:.1f} CPU-hours): {ref_s / wall:,.0f}x")
    print(f"winner: {res.winner}")
    for g in res.gains:
        print(f"  {g}")


if __name__ == "__main__":
    main()
