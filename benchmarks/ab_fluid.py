"""Before and after a change of the fluid model: its pass/fail and cheapest points against the oracle's, fast.

    python benchmarks/ab_fluid.py              # the fluid model as it is now, against the cached oracle
    python benchmarks/ab_fluid.py --refresh    # recompute the oracle's results first (about 6 minutes)

The oracle (``sim/events``) does not change with ``sim/fluid``, so its results over the 564 points
are computed once and kept (``--cache``); each run then simulates only the fluid model (about
35 s), so two variants compare within minutes, on one machine state. The points: 144 near the
Splitwise frontiers (coding at 70 req/s, seeds 0 and 1), 276 around the planner's answers in the
six scenarios of ``bench_simulator.py --scenarios`` (fixed here, as planned on 2026-12-02, so a
fluid change does not move them) and 144 of the oracle comparison of ``bench_simulator.py``.
Prints, per set, the pass/fail agreement, the points missed (tightest SLO ratio, fluid vs
oracle) and the designs whose cheapest passing point costs differently; then the totals.
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_simulator as bench  # noqa: E402

from splitwise_plan.inputs.workloads import load_workload  # noqa: E402
from splitwise_plan.sim.simulator import Simulator  # noqa: E402

# the planner's answers (seed 0) in each scenario of bench_simulator.SCENARIOS, planned on 2026-12-02
ANSWERS = {
    ("bloom-176b", "conversation", 70.0, 8): [("HA", 13, 14), ("AA", 29, 15), ("HHcap", 13, 11), ("HH", 13, 11)],
    ("bloom-176b", "coding", 100.0, 8): [("AA", 77, 7), ("HA", 38, 3), ("HHcap", 36, 4), ("HH", 31, 9)],
    ("llama2-70b", "coding", 120.0, 8): [("AA", 49, 4), ("HH", 24, 4), ("HA", 23, 11), ("HHcap", 25, 4)],
    ("llama2-70b", "conversation", 150.0, 8): [("AA", 31, 12), ("HA", 15, 12), ("HHcap", 15, 8), ("HH", 15, 8)],
    ("llama2-70b", "coding", 70.0, 2): [("HA", 7, 8), ("HHcap", 9, 3), ("HH", 9, 3)],
    ("llama2-70b", "conversation", 70.0, 4): [("HA", 5, 8), ("AA", 14, 6), ("HHcap", 5, 5), ("HH", 5, 5)],
}


def point_sets() -> list:
    """(name, model, tensor parallelism, workload, rate, duration, seed, points) of every set compared."""
    sets = [(f"frontier seed {seed}", "bloom-176b", 8, "coding", 70.0, 120.0, seed, list(bench.FRONTIER))
            for seed in (0, 1)]
    for (model, workload, rate, tp), answers in ANSWERS.items():
        pts = [(d, p + dp, t + dt) for d, p, t in answers for dp in (-2, 0, 2) for dt in (-1, 0, 1, 2)
               if p + dp >= 1 and t + dt >= 1]
        sets.append((f"{model} TP{tp} {workload} {rate:g}", model, tp, workload, rate, 120.0, 1, pts))
    for model, near in bench.NEAR.items():
        for workload in ("coding", "conversation"):
            for rate in bench.RATES[model]:
                pts = [(d, max(1, round(p * rate / 70 * k)), max(0 if t == 0 else 1, round(t * rate / 70)))
                       for d, (p, t) in near.items() for k in (0.9, 1.0, 1.1)]
                sets.append((f"oracle {model} {workload} {rate:g}", model, 8, workload, rate, 60.0, 7, pts))
    return sets


def simulate(method: str) -> dict:
    """Per set: of each point, what the comparison reads of its result (kept small for the cache)."""
    out = {}
    for name, model, tp, workload, rate, duration, seed, pts in point_sets():
        stream = load_workload(workload).generate(rate, duration_s=duration, seed=seed)
        results = Simulator(stream, model, tensor_parallel=tp, method=method).run_points(pts)
        out[name] = [SimpleNamespace(slo_met=r.slo_met, ratio=_ratio(r), raw=bench._raw(r), cost=r.cost,
                                     overloaded=r.overloaded) for r in results]
    return out


def _ratio(r) -> float:
    return float(r.tightest["ratio"]) if r.tightest else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "splitwise-ab-oracle-2.pkl"),
                    help="the oracle's results, computed when absent or with --refresh (default: %(default)s)")
    ap.add_argument("--refresh", action="store_true", help="recompute the oracle's results")
    args = ap.parse_args()
    if args.refresh or not os.path.isfile(args.cache):
        t0 = time.perf_counter()
        oracle = simulate("events")
        with open(args.cache + ".tmp", "wb") as f:
            pickle.dump(oracle, f)
        os.replace(args.cache + ".tmp", args.cache)
        print(f"[ab] the oracle's results over {sum(len(v) for v in oracle.values())} points, kept in {args.cache} "
              f"({time.perf_counter() - t0:.0f} s)")
    with open(args.cache, "rb") as f:
        oracle = pickle.load(f)
    t0 = time.perf_counter()
    fluid = simulate("fluid")
    wall = time.perf_counter() - t0
    agree = total = same = designs = 0
    errs = []
    for name, _, _, _, _, _, _, pts in point_sets():
        fr, orc = fluid[name], oracle[name]
        a = sum(f.slo_met == o.slo_met for f, o in zip(fr, orc))
        agree, total = agree + a, total + len(pts)
        missed = [f"{d} {p}+{t} ({f.ratio:.2f} vs {o.ratio:.2f})" for (d, p, t), f, o in zip(pts, fr, orc)
                  if f.slo_met != o.slo_met]
        errs += [np.median(np.abs(f.raw / o.raw - 1)) for f, o in zip(fr, orc)
                 if not o.overloaded and np.isfinite(o.raw).all()]
        dearer = []
        if not name.startswith("oracle"):   # those sets are sizes around fixed counts, not a design's neighbourhood
            for design, f, o in bench._cheapest(pts, fr, orc):
                designs += 1
                if bench._same_cost(f[0], o[0]):
                    same += 1
                else:
                    dearer.append(f"{design} {f[0]:.2f} vs {o[0]:.2f}")
        print(f"[ab] {name}: pass/fail {a}/{len(pts)}; missed: {'; '.join(missed) or 'none'}; "
              f"cheapest passing cost differs: {', '.join(dearer) or 'none'}")
    print(f"[ab] all: pass/fail agreement {agree}/{total} = {agree / total:.1%}, the same cheapest passing cost for "
          f"{same} of {designs} designs, median relative error of the nine raw percentiles {np.median(errs):.2%} "
          f"(the fluid model in {wall:.0f} s)")


if __name__ == "__main__":
    main()
