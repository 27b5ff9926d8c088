"""Fidelity and speed of the simulators (issue 3). Prints figures and ratios; asserts nothing.

    python benchmarks/bench_simulator.py [--scenarios]
    python benchmarks/bench_simulator.py --breakdown    # only where a batch's time goes (~1 minute)

Reads the reference results from ../shared (skips that part when absent): both simulators on
its 75 rows (the discrete-event one is what ``simulate``, ``check`` and ``capacity`` run by
default; about 40 s), then plans the reference's trace (the fluid search, answers confirmed
by the oracle); compares the fluid model with the discrete-event oracle on 72 varied points
per model and on 144 points near the Splitwise frontiers at 70 req/s (about 3 minutes);
times batches of designs, the whole Splitwise-HH 39x39 grid, the Baseline-A100 line of 1..139
machines and the Baseline-H100 line of 1..79, and the grid's sweep on 2 cores (this process and a worker),
through the API and as a command, each three times with the median reported, with and
without the early verdict (about 6 minutes). ``--scenarios`` also compares the fluid model
with the oracle around the planner's answers in four other workload, model and rate
scenarios (about 7 minutes). ``--breakdown`` times the batch of 127 by what becomes of its
designs (pass, fail, overloaded), beside one design alone and 128 copies of one that passes.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

from splitwise_plan.inputs.workloads import load_trace, load_workload
from splitwise_plan.sim.simulator import Simulator

SHARED = Path(os.environ.get("SPLITWISE_SHARED", Path(__file__).resolve().parents[2] / "shared"))
COLS = [f"{m}_p{p}_s" for m in ("ttft", "tbt", "e2e") for p in (50, 90, 99)]
REF_SECONDS_PER_POINT = 13.0   # reference simulator, one 2-minute design point at 70 req/s


def _raw(r):
    return np.array([r.latency_s[m][p] for m in ("ttft", "tbt", "e2e") for p in (50, 90, 99)])


def fidelity(method: str) -> None:
    base = SHARED / "data" / "splitwise-sim"
    if not (base / "reference_results_calibration.csv").is_file():
        print(f"[fidelity] skipped: no reference data under {base}")
        return
    table = pd.read_csv(base / "reference_results_calibration.csv")
    sim = Simulator(load_trace(base / "rr_code_70_2min.csv"), method=method)
    agree, errs, cheapest, exact = 0, [], [], 0
    t0 = time.perf_counter()
    for system, g in table.groupby("system", sort=False):
        res = sim.run_many(system, list(zip(g.n_prompt, g.n_token)))
        ours_pass = [r.slo_met for r in res]
        agree += sum(a == bool(b) for a, b in zip(ours_pass, g.all_slos_met))
        for (_, row), r in zip(g.iterrows(), res):
            err = np.abs(_raw(r) / row[COLS].to_numpy(float) - 1)
            exact += bool(err.max() < 1e-4)
            if row.ttft_slowdown_p50 < 10:          # not overloaded
                errs.append(np.median(err))
        ref_cost = g[g.all_slos_met].cost.min()
        our_cost = min((r.cost for r in res if r.slo_met), default=float("nan"))
        cheapest.append((system, ref_cost, our_cost))
    wall = time.perf_counter() - t0
    print(f"[fidelity:{method}] pass/fail agreement {agree}/{len(table)} = {agree / len(table):.1%} (target >= 95%)")
    print(f"[fidelity:{method}] median relative error of the nine raw percentiles, rows not overloaded: "
          f"{np.median(errs):.2%} (target <= 10%); rows with all nine within 0.01%: {exact}")
    for system, rc, oc in cheapest:
        print(f"[fidelity:{method}] cheapest passing {system}: reference cost {rc:.2f}, ours {oc:.2f} "
              f"({'same' if abs(rc - oc) < 1e-6 else 'differs'})")
    print(f"[fidelity:{method}] {len(table)} rows in {wall:.1f} s")


# machine counts near each design's cheapest passing size at 70 req/s of coding, per model;
# the points scale them with the rate (0.9x, 1x and 1.1x the prompt pool)
NEAR = {"bloom-176b": {"HH": (24, 5), "HHcap": (24, 5), "HA": (26, 6), "AA": (55, 7), "H100": (52, 0), "A100": (118, 0)},
        "llama2-70b": {"HH": (17, 1), "HHcap": (17, 1), "HA": (16, 2), "AA": (33, 3), "H100": (34, 0), "A100": (82, 0)}}
RATES = {"bloom-176b": (30.0, 70.0), "llama2-70b": (40.0, 120.0)}


def oracle_agreement() -> None:
    """The fluid model against the discrete-event oracle: both models, varied designs, rates and both workloads."""
    for model, near in NEAR.items():
        agree = total = 0
        errs, util = [], []
        t0 = time.perf_counter()
        for workload in ("coding", "conversation"):
            for rate in RATES[model]:
                stream = load_workload(workload).generate(rate, duration_s=60.0, seed=7)
                fluid = Simulator(stream, model=model, method="fluid")
                events = Simulator(stream, model=model, method="events")
                for design, (p, t) in near.items():
                    pts = [(max(1, round(p * rate / 70 * k)), max(0 if t == 0 else 1, round(t * rate / 70)))
                           for k in (0.9, 1.0, 1.1)]
                    for f, o in zip(fluid.run_many(design, pts), events.run_many(design, pts)):
                        total += 1
                        agree += f.slo_met == o.slo_met
                        if not f.overloaded:
                            util.append(abs(f.utilization - o.utilization))
                        if not o.overloaded and np.isfinite(_raw(o)).all():
                            errs.append(np.median(np.abs(_raw(f) / _raw(o) - 1)))
        rates = " and ".join(f"{r:g}" for r in RATES[model])
        print(f"[oracle] {model}: fluid vs discrete-event oracle, {total} points (6 designs x 3 sizes x {rates} req/s x "
              f"coding and conversation, 60 s streams): pass/fail agreement {agree}/{total} = {agree / total:.1%}, "
              f"median relative error of the nine raw percentiles {np.median(errs):.1%}; machine utilization "
              f"within {np.median(util):.3f} (median) and {np.max(util):.3f} (max) of the oracle's, the points "
              f"not overloaded ({time.perf_counter() - t0:.0f} s)")


# points around each Splitwise design's cheapest designs at 70 req/s of coding: where the planner searches
FRONTIER = ([("HH", p, t) for p in (21, 23, 25, 27) for t in (2, 4, 5, 6, 8)]
            + [("HA", p, t) for p in (22, 24, 26, 28) for t in (1, 4, 6, 8, 11)]
            + [("AA", p, t) for p in (48, 52, 55, 60) for t in (5, 6, 7, 9)]
            + [("HHcap", p, t) for p in (23, 25, 27, 28) for t in (1, 3, 5, 7)])


def _agreement(points, fluid, events) -> tuple:
    """Per pair of results of ``points``: the pass/fail agreements, the median relative errors of the nine
    raw percentiles, the utilization differences, and the points missed (with both tightest SLO ratios)."""
    agree = sum(f.slo_met == o.slo_met for f, o in zip(fluid, events))
    errs = [np.median(np.abs(_raw(f) / _raw(o) - 1)) for f, o in zip(fluid, events)]
    util = [abs(f.utilization - o.utilization) for f, o in zip(fluid, events)]
    missed = [f"{d} {p}+{t} ({f.tightest['ratio']:.2f} vs {o.tightest['ratio']:.2f})"
              for (d, p, t), f, o in zip(points, fluid, events) if f.slo_met != o.slo_met]
    return agree, errs, util, missed


def frontier_agreement() -> None:
    """The fluid model against the oracle where the planner's search decides: near the frontier, 2-minute streams."""
    agree = total = 0
    errs, missed, util, cheapest = [], [], [], []
    t0 = time.perf_counter()
    for seed in (0, 1):
        stream = load_workload("coding").generate(70.0, duration_s=120.0, seed=seed)
        fluid = Simulator(stream).run_points(FRONTIER)
        events = Simulator(stream, method="events").run_points(FRONTIER)
        a, e, u, m = _agreement(FRONTIER, fluid, events)
        agree, total = agree + a, total + len(FRONTIER)
        cheapest += [(f"seed {seed} {d}", f, o) for d, f, o in _cheapest(FRONTIER, fluid, events)]
        errs += e
        util += u
        missed += [f"seed {seed} {x}" for x in m]
    print(f"[oracle] bloom-176b near the Splitwise frontiers (coding 70 req/s, 120 s, seeds 0 and 1, {total} points): "
          f"pass/fail agreement {agree}/{total} = {agree / total:.1%}, median relative error of the nine raw "
          f"percentiles {np.median(errs):.1%}, of the machine utilization {np.median(util):.3f} (max "
          f"{np.max(util):.3f}); missed (tightest SLO ratio, fluid vs oracle): {'; '.join(missed) or 'none'}; "
          f"the same cost of the cheapest passing point for {sum(_same_cost(f[0], o[0]) for _, f, o in cheapest)} of "
          f"{len(cheapest)} designs ({'; '.join(f'{d} {f[2]} vs {o[2]}' for d, f, o in cheapest if not _same_cost(f[0], o[0])) or 'all the same'}) "
          f"({time.perf_counter() - t0:.0f} s)")


# beyond the reference's trace and the frontier points above: other workloads, models and rates
SCENARIOS = (("bloom-176b", "conversation", 70.0, 8), ("bloom-176b", "coding", 100.0, 8),
             ("llama2-70b", "coding", 120.0, 8), ("llama2-70b", "conversation", 150.0, 8),
             ("llama2-70b", "coding", 70.0, 2), ("llama2-70b", "conversation", 70.0, 4))


def scenario_agreement() -> None:
    """The fluid model against the oracle around each Splitwise design's planned answer (prompt -2..+2 x
    token -1..+2) in other scenarios, on a stream of another seed than the plan's (about 7 minutes)."""
    from splitwise_plan import plan
    agree_all = total_all = same_all = designs_all = 0
    for model, workload, rate, tp in SCENARIOS:
        t0 = time.perf_counter()
        res = plan(goal="min-cost", rps=rate, model=model, workload=workload, designs="HH,HA,AA,HHcap", seed=0, tp=tp)
        points = [(d.short, d.prompt + dp, d.token + dt) for d in res.designs if d.status == "ok"
                  for dp in (-2, 0, 2) for dt in (-1, 0, 1, 2) if d.prompt + dp >= 1 and d.token + dt >= 1]
        stream = load_workload(workload).generate(rate, duration_s=120.0, seed=1)
        fluid = Simulator(stream, model, tensor_parallel=tp).run_points(points)
        events = Simulator(stream, model, tensor_parallel=tp, method="events").run_points(points)
        agree, errs, _, missed = _agreement(points, fluid, events)
        agree_all, total_all = agree_all + agree, total_all + len(points)
        cheapest = _cheapest(points, fluid, events)
        same_all += sum(_same_cost(f[0], o[0]) for _, f, o in cheapest)
        designs_all += len(cheapest)
        print(f"[scenario] {model} TP{tp}, {workload} at {rate:g} req/s, seed 1, around the plan's answers "
              f"({', '.join(f'{d.short} {d.prompt}+{d.token}' for d in res.designs if d.status == 'ok')}): pass/fail "
              f"agreement {agree}/{len(points)}, median relative error {np.median(errs):.1%}; missed (fluid vs "
              f"oracle): {'; '.join(missed) or 'none'}; cheapest passing point of each design, fluid vs oracle: "
              f"{', '.join(f'{d} {f[0]:.2f} ({f[2]}) vs {o[0]:.2f} ({o[2]})' for d, f, o in cheapest)} ({time.perf_counter() - t0:.0f} s)")
    print(f"[scenario] all: pass/fail agreement {agree_all}/{total_all} = {agree_all / total_all:.1%} (target >= 95%); "
          f"the same cost of the cheapest passing point for {same_all} of {designs_all} designs")


def _cheapest(points, fluid, events) -> list:
    """Per design of ``points``: the cost of its cheapest passing point by the fluid model and by the
    oracle, each with that point (prompt+token; the fewest machines among equal costs), NaN if none."""
    out = []
    for design in dict.fromkeys(d for d, _, _ in points):
        best = []
        for results in (fluid, events):
            ok = [(r.cost, p + t, f"{p}+{t}") for (d, p, t), r in zip(points, results) if d == design and r.slo_met]
            best.append(min(ok) if ok else (math.nan, 0, "none"))
        out.append((design, *best))
    return out


def _same_cost(a: float, b: float) -> bool:
    return abs(a - b) < 1e-6 or (math.isnan(a) and math.isnan(b))


def planner_answers() -> None:
    """The product's answer on the reference's trace: the fluid search, every answer confirmed by the oracle."""
    base = SHARED / "data" / "splitwise-sim"
    if not (base / "reference_results_calibration.csv").is_file():
        print(f"[planner] skipped: no reference data under {base}")
        return
    from splitwise_plan.planning import PlanRequest, plan
    table = pd.read_csv(base / "reference_results_calibration.csv")
    t0 = time.perf_counter()
    res = plan(PlanRequest(goal="min-cost", trace=str(base / "rr_code_70_2min.csv"), designs=("HH", "H100", "A100")))
    wall = time.perf_counter() - t0
    for system, g in table.groupby("system", sort=False):
        ref_cost = g[g.all_slos_met].cost.min()
        p = res.get(system)
        print(f"[planner] cheapest passing {system}: reference cost {ref_cost:.2f}, the planner's {p.cost:.2f} "
              f"({p.prompt}+{p.token}; {'same' if abs(p.cost - ref_cost) < 1e-6 else 'differs'})")
    print(f"[planner] splitwise-plan --goal min-cost --trace rr_code_70_2min.csv --designs HH,H100,A100: {wall:.1f} s")


class TreeMemory:
    """Samples the summed resident memory of a process (this one unless ``pid``) and all its
    descendants (Linux /proc)."""

    def __init__(self, pid: int | None = None, every: float = 0.02) -> None:
        self.pid, self.every, self.peak_mib = pid or os.getpid(), every, 0.0
        self.start_mib = 0.0                    # the tree's memory when sampling began
        self._stop = threading.Event()

    @staticmethod
    def _rss_kib(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/status") as f:
                return next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except OSError:
            return 0

    @staticmethod
    def _tree(pid: int) -> list:
        out, todo = [], [pid]
        while todo:
            p = todo.pop()
            out.append(p)
            try:
                with open(f"/proc/{p}/task/{p}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                pass
        return out

    def _sample(self) -> float:
        return sum(self._rss_kib(p) for p in self._tree(self.pid)) / 1024

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_mib = max(self.peak_mib, self._sample())
            self._stop.wait(self.every)

    def __enter__(self) -> "TreeMemory":
        self.start_mib = self._sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def host_yardstick(iterations: int = 20000) -> tuple[float, float]:
    """CPU microseconds an iteration of two fixed loops of the kinds the fluid model's loop makes:
    small numpy calls (an argmin over a designs x machines array, a gather, a scatter, a test), and
    scattered adds into a 64 MiB array (its release ring). The speed figures scale with them, so
    they tell a slow or busy host (its memory shared with other tenants) from a slower simulator."""
    rng = np.random.default_rng(0)
    keys = rng.random((16, 78))
    flat = keys.reshape(-1)
    at = rng.integers(0, flat.size, 16)
    add = rng.random(16)
    t0 = time.process_time()
    for _ in range(iterations):
        keys.argmin(axis=1)
        x = flat.take(at) + add
        flat[at] = x * 0.5
        (x > 0.5).nonzero()
    calls = (time.process_time() - t0) / iterations * 1e6
    ring = np.ones(8 * 2**20, dtype=np.complex64)
    cells = rng.integers(0, ring.size, (iterations // 10, 762))
    t0 = time.process_time()
    for c in cells:
        ring[c] += 1.0
    return calls, (time.process_time() - t0) / len(cells) * 1e6


def speed(repeats: int = 3) -> None:
    """CPU per design in a batch, the 39x39 sweep's wall time and peak memory, without and with
    the early verdict (a failing Splitwise design stops once an SLO can no longer hold).

    The machine is shared and noisy: batches and sweeps run ``repeats`` times and the median is
    the figure; every sweep starts its worker process afresh, as one ``sweep`` command does.
    """
    from joblib.externals.loky import get_reusable_executor
    marks = np.array([host_yardstick() for _ in range(repeats)])
    calls, ring = np.median(marks, axis=0)
    print(f"[speed] host yardstick (CPU an iteration, median of {repeats}): {calls:.2f} us for 4 small numpy calls, "
          f"{ring:.1f} us for 762 scattered adds into 64 MiB; the figures below scale with them")
    stream = load_workload("coding").generate(70.0, duration_s=120.0, seed=0)
    grid = [(p, t) for p in range(1, 40) for t in range(1, 40)]
    for early in (False, True):
        sim = Simulator(stream, stop_early=early)
        mode = "stop-early" if early else "full"
        for n, step in ((128, 12), (256, 6)):   # spread over the grid, as a sweep's chunks are
            batch = grid[::step][:n]
            runs = _cpu_ms_per_design(sim, batch, repeats)
            cpu_ms = float(np.median(runs))
            print(f"[speed:{mode}] {len(stream)} requests, batch of {len(batch)} designs: {cpu_ms:.1f} ms CPU per "
                  f"design, median of {_list(runs)} (target <= 10 ms); reference ~{REF_SECONDS_PER_POINT:.0f} s "
                  f"per point: {REF_SECONDS_PER_POINT * 1000 / cpu_ms:,.0f}x")
        near = [(p, t) for p in range(18, 34) for t in range(2, 18)]   # where a planner's candidates lie
        runs = _cpu_ms_per_design(sim, near, repeats)
        print(f"[speed:{mode}] batch of {len(near)} designs around the frontier (18-33 prompt x 2-17 token "
              f"machines): {float(np.median(runs)):.1f} ms CPU per design, median of {_list(runs)}")
        runs = _cpu_ms_per_design(sim, grid, repeats)
        print(f"[speed:{mode}] the whole 39x39 grid in one process: {float(np.median(runs)):.1f} ms CPU per design, "
              f"median of {_list(runs)} (target <= 2 ms)")
        for design, most in (("A100", 139), ("H100", 79)):   # the reference's baseline sweeps
            line = [(m, 0) for m in range(1, most + 1)]
            runs = _cpu_ms_per_design(sim, line, repeats, design=design)
            print(f"[speed:{mode}] Baseline-{design} over 1..{most} machines as one batch: {float(np.median(runs)):.1f} ms "
                  f"CPU per design ({float(np.median(runs)) * most / 1000:.2f} s for the line), median of {_list(runs)} "
                  f"(target <= 10 ms)")

        def sweep() -> list:
            get_reusable_executor().shutdown(wait=True)   # a cold start each time
            return sim.run_many("HH", grid, jobs=2)

        walls, peak, before, res = _timed_with_memory(sweep, repeats)
        wall = float(np.median(walls))
        ref = len(grid) * REF_SECONDS_PER_POINT
        print(f"[speed:{mode}] Splitwise-HH 39x39 sweep ({len(grid)} points, {sum(r.slo_met for r in res)} pass; "
              f"{sum(r.overloaded for r in res)} overloaded, {sum(r.stopped_early for r in res)} stopped by the "
              f"verdict), jobs=2 (this process and a fresh worker): {wall:.1f} s wall, median of {_list(walls)} "
              f"(target <= 10 s); reference ~{ref / 3600:.1f} CPU-hours: {ref / wall:,.0f}x")
        print(f"[speed:{mode}] peak memory of the sweeps, this process and its workers together (sampled every "
              f"20 ms): {peak:.0f} MiB, of which this benchmark held {before:.0f} MiB before that sweep began "
              f"(heap kept from the runs above); the command below, a fresh process, is the figure for the "
              f"target (<= 1024 MiB)")
        command_sweep(repeats, early)


def command_sweep(repeats: int, early: bool) -> None:
    """The same sweep as a user runs it: a fresh ``splitwise-plan sweep`` process, end to end."""
    import subprocess
    import tempfile
    mode = "stop-early" if early else "full"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "splitwise_plan", "sweep", "--design", "HH", "--prompt", "1:39", "--token", "1:39",
               "--rps", "70", "--csv", str(Path(tmp) / "sweep.csv"), "--quiet"] + ["--stop-early"] * early
        walls, cpus, peak = [], [], 0.0
        for _ in range(repeats):
            t0 = time.perf_counter()
            c0 = _children_cpu()
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
            with TreeMemory(proc.pid) as mem:   # the command's own tree, not this benchmark's
                if proc.wait():
                    raise subprocess.CalledProcessError(proc.returncode, cmd)
            walls.append(time.perf_counter() - t0)
            cpus.append(_children_cpu() - c0)
            peak = max(peak, mem.peak_mib)
    print(f"[speed:{mode}] the same sweep as a command (splitwise-plan sweep ... --csv FILE, its default: one process per core), end to end: "
          f"{float(np.median(walls)):.1f} s wall, median of {_list(walls)}, using {_list(cpus)} s of CPU (the command and "
          f"its workers; on this shared machine it grows with the load too); "
          f"peak {peak:.0f} MiB for the command and its workers (target <= 1024 MiB)")


def breakdown(repeats: int = 3) -> None:
    """Where a batch's time goes: the benchmark's batch of 127 designs spread over the grid, split by
    what the full run makes of each design, each part timed as a batch of its own, beside one design
    alone and 128 copies of one that passes (about a minute)."""
    stream = load_workload("coding").generate(70.0, duration_s=120.0, seed=0)
    grid = [(p, t) for p in range(1, 40) for t in range(1, 40)]
    batch = grid[::12][:128]
    sim = Simulator(stream, stop_early=False)
    res = sim.run_many("HH", batch)
    parts = [("the batch of 127 spread over the grid", batch),
             ("  its designs that pass", [pt for pt, r in zip(batch, res) if r.slo_met]),
             ("  its failing designs, not overloaded", [pt for pt, r in zip(batch, res) if not r.slo_met and not r.overloaded]),
             ("  its overloaded designs", [pt for pt, r in zip(batch, res) if r.overloaded]),
             ("one design (HH 27+3) alone", [(27, 3)]),
             ("128 copies of HH 27+3", [(27, 3)] * 128)]
    for name, pts in parts:
        ms = float(np.median(_cpu_ms_per_design(sim, pts, repeats)))
        print(f"[breakdown] {name}: {len(pts)} designs, {ms:.1f} ms CPU per design, "
              f"{ms * len(pts) / len(stream) * 1000:.0f} us per request of the batch")


def _children_cpu() -> float:
    """User and system CPU seconds of the finished child processes (their own children included)."""
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _cpu_ms_per_design(sim, points, repeats: int, design: str = "HH") -> list:
    """CPU milliseconds per design of ``run_many`` over ``points`` of ``design``, once per repeat."""
    runs = []
    for _ in range(repeats):
        c0 = time.process_time()
        sim.run_many(design, points)
        runs.append((time.process_time() - c0) / len(points) * 1000)
    return runs


def _timed_with_memory(run, repeats: int) -> tuple:
    """Wall seconds of each of ``repeats`` calls of ``run``, the peak memory of this process tree,
    what this process held before (at that peak's call) and the last call's result."""
    walls, peak, before, out = [], 0.0, 0.0, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        with TreeMemory() as mem:
            out = run()
        walls.append(time.perf_counter() - t0)
        if mem.peak_mib > peak:
            peak, before = mem.peak_mib, mem.start_mib
    return walls, peak, before, out


def _list(values) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--breakdown", action="store_true",
                    help="only where a batch's time goes, by what becomes of its designs (~1 min)")
    ap.add_argument("--scenarios", action="store_true",
                    help="also compare the fluid model with the oracle in other workloads, models and rates (~7 min)")
    args = ap.parse_args()
    if args.breakdown:
        breakdown()
        sys.exit(0)
    fidelity("fluid")
    fidelity("events")   # the default of simulate, check and capacity (one design point at a time)
    planner_answers()
    oracle_agreement()
    frontier_agreement()
    if args.scenarios:
        scenario_agreement()
    speed()
    sys.exit(0)
