"""The per-request golden set of both simulators: the scenarios, and how ``tests/golden/requests.npz`` was made.

Each scenario is a short stream, a model at a tensor parallelism, a scheduler and design points; the set
keeps, for both methods (events and fluid), every request's TTFT and E2E at each point. Together the
scenarios cover the six designs, both workloads, BLOOM-176B and Llama2-70B at TP8, TP4 and TP2, the mixed
and the strict pools, serialized and layer-wise transfer, a bursty stream, and overloaded and
out-of-memory designs. The reference's calibration runs (its 2-minute coding trace, 75 design points, from
``../shared``) are kept as each run's percentiles and sums of TTFT and E2E, and three of them whole.

``python tests/sim/golden_requests.py`` writes the set from the code as it is: only for a change that
means to change the simulators' answers, and the commit says why. ``tests/sim/test_golden_requests.py``
compares the code with it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "requests.npz"
METHODS = ("events", "fluid")
#: the calibration runs kept whole (system, prompt, token), besides every run's summary
CALIBRATION_WHOLE = (("splitwise-hh", 27, 3), ("baseline-h100", 52, 0), ("baseline-a100", 117, 0))


@dataclass(frozen=True)
class Scenario:
    """A stream and a system, and the design points simulated on them."""

    name: str
    stream: tuple            # ("coding", rate, seconds, seed), or ("burst", ...) / ("oom", ...), see make_stream
    points: tuple            # ((design, prompt machines, token machines), ...)
    model: str = "bloom-176b"
    tp: int = 8
    strict_pools: bool = False
    transfer: tuple = ("serialized", 200.0)


SCENARIOS = (
    Scenario("bloom-coding-70", ("coding", 70, 30, 0), (
        ("AA", 55, 6), ("HH", 27, 3), ("HA", 26, 6), ("HHcap", 28, 1), ("A100", 117, 0), ("H100", 51, 0),
        ("HH", 8, 1), ("A100", 40, 0))),
    Scenario("bloom-conversation-40", ("conversation", 40, 30, 1), (
        ("HH", 14, 6), ("HA", 12, 8), ("HHcap", 14, 4), ("H100", 30, 0))),
    Scenario("bloom-coding-70-overload", ("coding", 70, 90, 6), (("HH", 3, 1), ("A100", 12, 0))),
    Scenario("llama-tp8-coding-100", ("coding", 100, 30, 2), (
        ("HH", 20, 6), ("HH", 6, 2), ("AA", 40, 10), ("H100", 50, 0), ("H100", 10, 0)), model="llama2-70b", tp=8),
    Scenario("llama-tp4-coding-100", ("coding", 100, 30, 2), (("HH", 12, 6), ("HA", 14, 8), ("A100", 40, 0)),
             model="llama2-70b", tp=4),
    Scenario("llama-tp2-conversation-60", ("conversation", 60, 30, 3), (("HH", 4, 4), ("A100", 30, 0)),
             model="llama2-70b", tp=2),
    Scenario("strict-pools-conversation-40", ("conversation", 40, 30, 0), (("HH", 12, 2), ("HH", 15, 6)),
             strict_pools=True),
    Scenario("layerwise-12.5-coding-70", ("coding", 70, 30, 0), (("HH", 27, 3), ("HA", 26, 6)),
             transfer=("layerwise", 12.5)),
    Scenario("burst-coding", ("burst", 40, 30, 4), (("HH", 20, 3), ("H100", 45, 0))),
    Scenario("oom-coding", ("oom", 20, 20, 5), (("HH", 5, 2), ("A100", 10, 0))),
)


def make_stream(spec: tuple):
    """The stream of a scenario: a seeded Poisson stream of a shipped workload; ``burst`` adds 80 req/s
    more for 5 s from the tenth second; ``oom`` adds one request whose KV cache no machine can hold."""
    from splitwise_plan.inputs.workloads import RequestStream, load_workload

    kind, rate, seconds, seed = spec
    workload = "coding" if kind in ("burst", "oom") else kind
    base = load_workload(workload).generate(rate, duration_s=seconds, seed=seed)
    if kind not in ("burst", "oom"):
        return base
    if kind == "burst":
        extra = load_workload("coding").generate(80, duration_s=5.0, seed=seed + 100)
        arrival, prompt, output = (np.concatenate([base.arrival_s, extra.arrival_s + 10.0]),
                                   np.concatenate([base.prompt_tokens, extra.prompt_tokens]),
                                   np.concatenate([base.output_tokens, extra.output_tokens]))
    else:
        arrival, prompt, output = (np.append(base.arrival_s, 5.0), np.append(base.prompt_tokens, 900_000),
                                   np.append(base.output_tokens, 10))
    order = np.argsort(arrival, kind="stable")
    return RequestStream(arrival[order], prompt[order], output[order], name=kind, horizon_s=float(seconds))


def simulator(scenario: Scenario, method: str):
    """The simulator of a scenario."""
    from splitwise_plan.sim.cluster import SchedulerConfig
    from splitwise_plan.sim.simulator import Simulator

    scheduler = SchedulerConfig.with_transfer(*scenario.transfer)
    if scenario.strict_pools:
        scheduler = dataclasses.replace(scheduler, mixed_pool=False)
    return Simulator(make_stream(scenario.stream), scenario.model, tensor_parallel=scenario.tp,
                     scheduler=scheduler, method=method)


def key(scenario: str, method: str, design: str, prompt: int, token: int) -> str:
    return f"{scenario}|{method}|{design}|{prompt}|{token}"


def per_request(sim, design: str, prompt: int, token: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """(TTFT, E2E) of every request in stream order (NaN: unfinished), and the run's verdict flags."""
    result, table = sim.run_requests(design, prompt, token)
    flags = {"slo_met": bool(result.slo_met), "completed": int(result.completed),
             "oom": bool(result.oom), "overloaded": bool(result.overloaded)}
    return np.asarray(table["ttft_s"], dtype=np.float64), np.asarray(table["e2e_s"], dtype=np.float64), flags


def calibration(shared: Path):
    """(table of the reference's calibration runs, their stream) from ``shared/data/splitwise-sim``."""
    import pandas as pd

    from splitwise_plan.inputs.workloads import load_trace

    base = shared / "data" / "splitwise-sim"
    return pd.read_csv(base / "reference_results_calibration.csv"), load_trace(base / "rr_code_70_2min.csv")


def summary(result) -> list[float]:
    """A run's fingerprint: its nine raw percentiles and its completed requests."""
    flat = result.flat()
    return [float(flat[f"{m}_p{p}_s"]) for m in ("ttft", "tbt", "e2e") for p in (50, 90, 99)] + [
        float(result.completed)]


def write(shared: Path) -> None:
    """Simulate every scenario and calibration run with the code as it is, and keep the set."""
    arrays, flags = {}, {}
    for sc in SCENARIOS:
        for method in METHODS:
            sim = simulator(sc, method)
            for design, p, t in sc.points:
                k = key(sc.name, method, design, p, t)
                arrays[k + "|ttft"], arrays[k + "|e2e"], flags[k] = per_request(sim, design, p, t)
                print(k, flags[k], flush=True)
    table, stream = calibration(shared)
    from splitwise_plan.sim.simulator import Simulator
    for method in METHODS:
        sim = Simulator(stream, method=method)
        for system, g in table.groupby("system", sort=False):
            points = list(zip(g.n_prompt.astype(int), g.n_token.astype(int)))
            for (p, t), r in zip(points, sim.run_many(system, points)):
                arrays[f"calibration|{method}|{system}|{p}|{t}|summary"] = np.array(summary(r))
        for system, p, t in CALIBRATION_WHOLE:
            k = f"calibration|{method}|{system}|{p}|{t}"
            arrays[k + "|ttft"], arrays[k + "|e2e"], flags[k] = per_request(sim, system, p, t)
            print(k, flags[k], flush=True)
    arrays["flags"] = np.array(json.dumps(flags, sort_keys=True))
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(GOLDEN, **arrays)
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size / 1e6:.2f} MB, {len(arrays)} arrays)")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    write(Path(os.environ.get("SPLITWISE_SHARED", REPO.parent / "shared")))
