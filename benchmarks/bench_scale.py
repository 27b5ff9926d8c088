"""Benchmark plans at fleet rates (issue 51): wall time and peak memory of the planner at 70, 280, 1,000
and 5,000 req/s, the growth exponent of each against the rate, and the issue's targets.

    python benchmarks/bench_scale.py                        # 70, 280, 1000 and 5000 req/s, default designs
    python benchmarks/bench_scale.py --rates 70,280 --repeat 3
    python benchmarks/bench_scale.py --cases hh1000,llama1000   # the issue's named cases only

Each plan runs in a fresh process (``python -m splitwise_plan ... --quiet --json FILE``) with the
kernels compiled and cached (a small plan runs first). A run under a minute is repeated ``--repeat``
times and its median printed; a longer one runs once, stopped at ``--cap`` seconds (10 minutes). Peak
memory is the child's maximum resident set (``getrusage``). The growth exponent is the slope of
log(time) and log(memory) against log(rate) between successive rates and over the whole range: a plan
whose cost grows no faster than the rate has an exponent of 1 or less.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

#: the issue's named cases: (arguments, time target s, memory target GiB)
CASES = {
    "hh1000": (["--goal", "min-cost", "--rps", "1000", "--designs", "HH"], None, None),
    "llama1000": (["--goal", "min-cost", "--rps", "1000", "--model", "llama-3.1-70b", "--workload", "conversation",
                   "--designs", "H100:H100,H200:H200,H100:H200,B200:B200"], 120.0, 2.0),
}
#: targets of the default designs by rate: (time s, memory GiB)
RATE_TARGETS = {1000: (60.0, 2.0), 5000: (300.0, 4.0)}


# runs the plan as its own child and prints the child's peak resident set (KiB): a fresh process has no
# other children, so the figure is this plan's alone
_WRAPPER = ("import resource, subprocess, sys; "
            "c = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode; "
            "print(c, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def run_plan(args: list[str], cap: float) -> dict:
    """One plan in a fresh process: wall seconds, peak RSS (GiB), exit code, winner and simulations."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _WRAPPER, sys.executable, "-m", "splitwise_plan", *args,
                                 "--quiet", "--json", out], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "SPLITWISE_PLAN_CACHE_DIR": tmp}, start_new_session=True)
        try:
            code, kib = (int(x) for x in proc.communicate(timeout=cap)[0].split())
        except subprocess.TimeoutExpired:   # the plan too, not only its wrapper
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            code, kib = None, math.nan
        wall = time.perf_counter() - t0
        row = {"seconds": wall, "gib": kib / 2**20, "exit": code}
        if code in (0, 1) and os.path.exists(out):
            with open(out) as f:
                rep = json.load(f)
            row["winner"] = rep["plan"].get("winner")
            row["sims"] = (rep["plan"].get("evaluations"), rep["plan"].get("confirmations"))
            row["answers"] = {r["short"]: (r["status"], r.get("prompt_machines"), r.get("token_machines"))
                              for r in rep["results"]}
        return row


def measure(args: list[str], repeat: int, cap: float) -> dict:
    """A plan's figures: the median of ``repeat`` runs when one takes under a minute, else one run."""
    first = run_plan(args, cap)
    rows = [first]
    if first["exit"] is not None and first["seconds"] < 60.0:
        rows += [run_plan(args, cap) for _ in range(repeat - 1)]
    med = dict(first)
    med["seconds"] = statistics.median(r["seconds"] for r in rows)
    med["gib"] = max(r["gib"] for r in rows)
    med["runs"] = [round(r["seconds"], 1) for r in rows]
    return med


def verdict(value: float, target: float | None) -> str:
    return "" if target is None else (" met" if value <= target else " NOT met")


def show(name: str, row: dict, t_target=None, m_target=None) -> None:
    done = "stopped at the cap" if row["exit"] is None else f"exit {row['exit']}"
    print(f"{name:28s} {row['seconds']:8.1f} s{verdict(row['seconds'], t_target):9s}"
          f"{row['gib']:6.2f} GiB{verdict(row['gib'], m_target):9s} {done}; runs {row['runs']}")
    if "answers" in row:
        sims = row["sims"]
        print(f"{'':28s} winner {row['winner']}; sims {sims[0]}+{sims[1]}; {row['answers']}")


def exponents(rates: list[float], rows: list[dict], key: str) -> str:
    """The slope of log(figure) against log(rate), step by step and over the whole range."""
    pts = [(r, row[key]) for r, row in zip(rates, rows) if row["exit"] is not None and row[key] > 0]
    if len(pts) < 2:
        return "n/a"
    slope = [math.log(b[1] / a[1]) / math.log(b[0] / a[0]) for a, b in zip(pts, pts[1:])]
    whole = math.log(pts[-1][1] / pts[0][1]) / math.log(pts[-1][0] / pts[0][0])
    steps = ", ".join(f"{a[0]:g}->{b[0]:g}: {s:.2f}" for a, b, s in zip(pts, pts[1:], slope))
    return f"{steps}; whole range {whole:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="70,280,1000,5000")
    ap.add_argument("--cases", default="", help="also these named cases: " + ", ".join(CASES))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cap", type=float, default=600.0, help="seconds a run may take before it is stopped")
    a = ap.parse_args()
    run_plan(["--goal", "min-cost", "--rps", "20", "--duration", "20", "--seeds", "1"], a.cap)   # kernels cached
    rates = [float(r) for r in a.rates.split(",") if r]
    rows = []
    for rate in rates:
        row = measure(["--goal", "min-cost", "--rps", f"{rate:g}"], a.repeat, a.cap)
        rows.append(row)
        show(f"default designs, {rate:g} req/s", row, *RATE_TARGETS.get(int(rate), (None, None)))
    if len(rates) > 1:
        print(f"growth exponent of time:   {exponents(rates, rows, 'seconds')}")
        print(f"growth exponent of memory: {exponents(rates, rows, 'gib')}")
    for name in filter(None, a.cases.split(",")):
        args, t_target, m_target = CASES[name]
        show(name, measure(args, a.repeat, a.cap), t_target, m_target)


if __name__ == "__main__":
    main()
