"""The fluid model against the event simulator at fleet rates: 280, 1,000 and 5,000 req/s, and Llama-3.1-70B.

    python benchmarks/ab_fluid_scale.py               # the fluid model as it is now, on the kept points
    python benchmarks/ab_fluid_scale.py --refresh     # find the points and the oracle's results anew (~15 min)
    python benchmarks/ab_fluid_scale.py --sets llama  # only the sets whose name holds "llama"
    python benchmarks/ab_fluid_scale.py --sets llama-3.1 --stack vllm   # its latencies from another stack

The audit of ``ab_fluid_wide.py`` stops at 200 req/s and the paper's models. Here each set is a
Poisson stream of one shipped workload at a fleet rate, and each design's points lie on the fluid
model's pass/fail frontier, where a disagreement costs a plan confirmations: in three prompt
columns from the capacity ILP's bound up (the first three with a frontier), the smallest token count the fluid model passes, the one
below it ("edge"), and 3% fewer and more token machines ("3%") (a baseline: its smallest passing count, one fewer,
3% fewer and more). The points are found once and kept in ``ab_fluid_scale.json``; the oracle's
results (the event simulator's) are cached in a temporary file (``--cache``), so a change of the
fluid model compares in a few minutes. Prints each set's pass/fail agreement and its misses with
the oracle's tightest SLO ratio, then the totals against the target: 95% agreement, each miss
within 5% of its SLO's limit. It asserts nothing.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from splitwise_plan.inputs.designs import get_design  # noqa: E402
from splitwise_plan.inputs.workloads import load_workload  # noqa: E402
from splitwise_plan.perf.stack import load_stack  # noqa: E402
from splitwise_plan.search.bound import capacity_model  # noqa: E402
from splitwise_plan.sim.simulator import Simulator  # noqa: E402

POINTS = Path(__file__).with_suffix(".json")
TARGET, NEAR = 0.95, 1.05   # agreement; a miss's oracle ratio within 5% of the limit
PAPER = ("AA", "HH", "HA", "HHcap", "A100", "H100")
NEW_GPUS = ("H100:H100", "H200:H200", "H100:H200", "B200:B200")
# (name, model, workload, rate, duration s, seed, designs)
SETS = [
    ("bloom coding 280rps", "bloom-176b", "coding", 280, 120, 31, PAPER),
    ("bloom conversation 280rps", "bloom-176b", "conversation", 280, 120, 32, PAPER),
    ("llama2 conversation 280rps", "llama2-70b", "conversation", 280, 120, 33, ("AA", "HH", "HA", "H100")),
    ("bloom coding 1000rps", "bloom-176b", "coding", 1000, 120, 34, PAPER),
    ("bloom conversation 1000rps", "bloom-176b", "conversation", 1000, 120, 35, ("AA", "HH", "HA", "A100", "H100")),
    ("bloom coding 5000rps", "bloom-176b", "coding", 5000, 60, 36, ("AA", "HH", "H100")),
    ("llama-3.1-70b conversation 280rps", "llama-3.1-70b", "conversation", 280, 120, 37, NEW_GPUS),
    ("llama-3.1-70b conversation 1000rps", "llama-3.1-70b", "conversation", 1000, 120, 38, NEW_GPUS),
]


def simulator(s: tuple, method: str, stack=None) -> Simulator:
    name, model, workload, rate, duration, seed, _ = s
    stream = load_workload(workload).generate(float(rate), duration_s=float(duration), seed=seed)
    return Simulator(stream, model, method=method, stack=stack)


def _passes(sim: Simulator, design: str, pts: list) -> list[bool]:
    return [bool(r.slo_met) for r in sim.run_points([(design, p, t) for p, t in pts])]


def _smallest_passing(sim: Simulator, design: str, p: int, lo: int, what: str) -> int | None:
    """The smallest count that the fluid model passes in a column (``what``: "token" at ``p`` prompt
    machines, "prompt" at ``p`` token machines or for a baseline), from ``lo`` (failing or the floor) up:
    gallop, then bisect; None where 16 times ``lo`` still fails (the column lacks the other pool)."""
    def ok(n: int) -> bool:
        return _passes(sim, design, [(n, p) if what == "prompt" else (p, n)])[0]
    hi, step, top = max(lo, 1), max(1, lo // 8), 16 * max(lo, 8)
    while not ok(hi):
        lo, hi, step = hi, hi + step, step * 2
        if hi > top:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi


def _around(n: int) -> dict[int, str]:
    """The counts around a column's smallest passing count ``n``: "edge" (it and the one below) or "3%" off."""
    near = {m: "3%" for m in (round(n * 0.97), round(n * 1.03)) if m > 0}
    return near | {m: "edge" for m in (n, n - 1) if m > 0}


def frontier_points(s: tuple, design: str, fluid: Simulator) -> list[list]:
    """The design's audit points near the fluid model's frontier, each [prompt, token, kind] (module doc)."""
    d = get_design(design)
    bound = capacity_model(fluid, d).ilp_bound("cost")
    if d.is_baseline:
        n = _smallest_passing(fluid, design, 0, bound.prompt, "prompt")
        return [] if n is None else [[m, 0, kind] for m, kind in sorted(_around(n).items())]
    pts, columns = {}, 0
    p0 = bound.prompt
    if p0 * 4 < bound.token:   # the bound runs prompts on token machines: from the fewest prompt machines that
        p0 = _smallest_passing(fluid, design, 2 * bound.token, 1, "prompt") or p0   # pass beside ample ones
    for f in (1.0, 1.1, 1.25, 1.5, 2.0):   # the first three prompt columns with a frontier
        p = max(1, round(p0 * f))
        t = _smallest_passing(fluid, design, p, max(1, bound.token // 2), "token")
        if t is not None:
            pts |= {(p, m): kind for m, kind in _around(t).items()}
            columns += 1
            if columns == 3:
                break
    return [[p, t, kind] for (p, t), kind in sorted(pts.items())]


def find_points(sets: list, stack=None) -> dict:
    """{set name: {design: points}}, the fluid model's frontier of each set's designs."""
    found = {}
    for s in sets:
        t0 = time.perf_counter()
        fluid = simulator(s, "fluid", stack)
        found[_key(s, stack)] = {d: frontier_points(s, d, fluid) for d in s[6]}
        print(f"[scale] {s[0]}: points found in {time.perf_counter() - t0:.0f} s", flush=True)
    return found


def _key(s: tuple, stack) -> str:
    """A set's name, and its stack where not the default (its points and results are kept apart)."""
    return s[0] if stack is None else f"{s[0]} stack {stack.name}"


def verdicts(results) -> list[dict]:
    return [dict(slo=bool(r.slo_met), ratio=float(r.tightest.get("ratio", math.inf)) if r.tightest else math.inf)
            for r in results]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--refresh", action="store_true", help="find the points and the oracle's results anew")
    ap.add_argument("--sets", default="", help="only the sets whose name holds this text")
    ap.add_argument("--stack", default=None, help="the latencies' stack (default: the simulator's own default); "
                                                 "e.g. vllm, or aiconfigurator:vllm with the extra")
    ap.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "splitwise-ab-scale-oracle.pkl"))
    args = ap.parse_args()
    stack = load_stack(args.stack) if args.stack else None
    sets = [s for s in SETS if args.sets in s[0]]
    kept = json.loads(POINTS.read_text()) if POINTS.exists() else {}
    missing = [s for s in sets if args.refresh or _key(s, stack) not in kept]
    if missing:
        kept.update(find_points(missing, stack))
        POINTS.write_text(json.dumps(kept, indent=1) + "\n")
    cache = {} if args.refresh or not os.path.exists(args.cache) else pickle.load(open(args.cache, "rb"))
    total = agree = near = 0
    by_kind: dict = {}
    t0 = time.perf_counter()
    for s in sets:
        key = _key(s, stack)
        pts = [(d, p, t) for d, dpts in kept[key].items() for p, t, _ in dpts]
        kinds = [kind for dpts in kept[key].values() for _, _, kind in dpts]
        if key not in cache or len(cache[key]) != len(pts):
            events = simulator(s, "events", stack)
            cache[key] = verdicts(events.run(*pt) for pt in pts)
            with open(args.cache + ".tmp", "wb") as f:
                pickle.dump(cache, f)
            os.replace(args.cache + ".tmp", args.cache)
        fluid = verdicts(simulator(s, "fluid", stack).run_points(pts))
        misses = [(pt, f, o) for pt, f, o in zip(pts, fluid, cache[key]) if f["slo"] != o["slo"]]
        for kind, f, o in zip(kinds, fluid, cache[key]):
            n_ok = by_kind.setdefault(kind, [0, 0])
            n_ok[0] += 1
            n_ok[1] += f["slo"] == o["slo"]
        total += len(pts)
        agree += len(pts) - len(misses)
        near += sum(abs(o["ratio"] - 1.0) <= NEAR - 1.0 for _, _, o in misses)
        text = ", ".join(f"{d} {p}+{t} fluid {'pass' if f['slo'] else 'fail'} {f['ratio']:.3f} / events {o['ratio']:.3f}"
                         for (d, p, t), f, o in misses)
        none = [d for d, dpts in kept[key].items() if not dpts]
        print(f"[scale] {key}: pass/fail {len(pts) - len(misses)}/{len(pts)}" + (f"; misses: {text}" if misses else "")
              + (f"; no frontier found in its columns: {', '.join(none)}" if none else ""), flush=True)
    if total:
        ok = agree / total >= TARGET and near == total - agree
        print(f"[scale] all: pass/fail agreement {agree}/{total} = {agree / total:.1%} (target {TARGET:.0%}); "
              f"misses within {NEAR - 1:.0%} of the limit: {near}/{total - agree}: "
              f"{'met' if ok else 'NOT met'} ({time.perf_counter() - t0:.0f} s)")
        print("[scale] by kind: " + "; ".join(f"{k}: {a}/{n} = {a / n:.1%}" for k, (n, a) in sorted(by_kind.items()))
              + " (edge: a column's smallest count the fluid model passed when the points were found, and the one "
              "below it; 3%: 3% fewer or more)")


if __name__ == "__main__":
    main()
