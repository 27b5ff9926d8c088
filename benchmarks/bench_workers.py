"""Benchmark `splitwise-plan worker`: wall time of 1 worker process against 2 on the same study.

    python benchmarks/bench_workers.py                       # HH at 70 req/s, fluid, 128 trials, SQLite
    python benchmarks/bench_workers.py --storage postgresql://USER@HOST:PORT/DB
    python benchmarks/bench_workers.py --trials 64 --duration 60 --workers 1,2

For each worker count the script makes a fresh study of the planner's question (one
design, ``study.prepare``), starts that many ``python -m splitwise_plan worker``
processes at once, and waits for them. The study holds ``--trials`` TPE trials whatever
the number of workers; each count runs ``--repeat`` times, interleaved, and the fastest
run counts (the machine may be shared); ``wall`` runs from the start of the processes to the end of the
last one (imports and the capacity model included), ``search`` is the longest worker's
ask/simulate/tell loop. Trials whose point is already stored are told without a
simulation, so the simulation counts are printed too. Without ``--storage`` it uses
$SPLITWISE_TEST_POSTGRES when set (``.ci/run`` sets it), else a SQLite file in a
temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splitwise_plan.planning import PlanRequest, stored  # noqa: E402
from splitwise_plan.search import storage as st  # noqa: E402


def run(url: str, args, workers: int) -> dict:
    req = PlanRequest(goal="min-cost", rps=args.rps, duration=args.duration, designs=(args.design,),
                      search_method=args.method, storage=url, study=f"bench-workers-{uuid.uuid4().hex[:8]}-{workers}")
    name = stored.prepare(req, args.design, n_trials=args.trials)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "splitwise_plan", "worker", "--storage", url, "--study", name,
           "--trials", str(args.trials), "--batch", str(args.batch), "--json", "-", "--quiet"]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(workers)]
    outs = []
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"worker failed ({p.returncode}): {err.strip()}")
        outs.append(json.loads(out))
    wall = time.perf_counter() - t0
    rows = [o["studies"][0] for o in outs]
    study = st.open_study(url, name, must_exist=True)[0]
    table = st.trial_table(study)
    sims = [(r["prompt"], r["token"]) for r in table if r["state"] == "COMPLETE" and r["simulated"]]
    return {"workers": workers, "wall": wall, "search": max(r["seconds"] for r in rows),
            "told": [r["told"] for r in rows], "simulated": sum(r["simulated"] for r in rows),
            "unique_sims": len(set(sims)), "complete": sum(r["state"] == "COMPLETE" for r in table),
            "best": rows[-1]["best"], "study": name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--storage", default=None, help="storage URL (default: $SPLITWISE_TEST_POSTGRES or SQLite)")
    ap.add_argument("--design", default="HH")
    ap.add_argument("--rps", type=float, default=70.0)
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--method", default="fluid")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--workers", default="1,2", help="comma list of worker counts")
    ap.add_argument("--repeat", type=int, default=2,
                    help="runs per worker count, interleaved; the fastest counts (the machine may be shared)")
    args = ap.parse_args()

    tmp = None
    url = args.storage or os.environ.get("SPLITWISE_TEST_POSTGRES")
    if not url:
        tmp = tempfile.TemporaryDirectory(prefix="bench-workers-")
        url = f"sqlite:///{tmp.name}/plan.db"
    counts = [int(x) for x in args.workers.split(",")]
    print(f"study: {args.design} at {args.rps:g} req/s, {args.duration:g} s, {args.method}, {args.trials} TPE trials, "
          f"batch {args.batch}; storage {st.redact(st.normalize_storage(url))}; {os.cpu_count()} cores")
    print(f"{'workers':>7}{'wall s':>9}{'search s':>10}{'sims':>6}{'sims/s':>8}  trials told per worker   best")
    fastest: dict = {}
    for _ in range(max(1, args.repeat)):
        for k in counts:
            r = run(url, args, k)
            best = f"{r['best']['prompt']}+{r['best']['token']}" if r["best"] else "-"
            print(f"{k:>7}{r['wall']:>9.2f}{r['search']:>10.2f}{r['simulated']:>6}{r['simulated'] / r['wall']:>8.2f}  "
                  f"{'+'.join(map(str, r['told'])):<24} {best}", flush=True)
            assert r["simulated"] == r["unique_sims"], "a point was simulated twice"
            if k not in fastest or r["wall"] < fastest[k]["wall"]:
                fastest[k] = r
    res = [fastest[k] for k in counts]
    if len(res) >= 2:
        a, b = res[0], res[-1]
        print(f"speed-up of {b['workers']} workers over {a['workers']} (fastest of {args.repeat} each): wall {a['wall'] / b['wall']:.2f}x, "
              f"search loop {a['search'] / b['search']:.2f}x, simulations per second "
              f"{(b['simulated'] / b['wall']) / (a['simulated'] / a['wall']):.2f}x")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
