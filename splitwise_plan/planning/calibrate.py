"""The simulator held against a real serving benchmark: the benchmark's server is a one-machine baseline design
(one model instance on the server's GPUs), its client an open stream at the benchmark's request rate with its
lengths; the simulated TTFT, TPOT and E2E are put beside the benchmark's, statistic by statistic, with the error.

TPOT is as the benchmark tools define it: ``(E2E - TTFT) / (output tokens - 1)`` over the requests of more than
one output token (the simulator's TBT divides by all of them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.designs import get_design
from splitwise_plan.inputs.serving_bench import ServingBenchmark
from splitwise_plan.inputs.workloads import RequestStream

METRICS = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class Calibration:
    """The comparison: ``rows`` of {metric, statistic, benchmark_ms, simulated_ms, error} (error: simulated /
    benchmark - 1; None where the benchmark's is 0); the server simulated, the latency source and the streams."""

    benchmark: ServingBenchmark
    server: str
    source: str
    method: str
    seeds: tuple
    lengths: str
    rows: list

    def median_abs_error(self) -> float | None:
        errors = [abs(r["error"]) for r in self.rows if r["error"] is not None and np.isfinite(r["error"])]
        return float(np.median(errors)) if errors else None

    def to_dict(self) -> dict:
        from splitwise_plan.planning.result import json_number
        b = self.benchmark
        return {"benchmark": {"file": str(b.path), "tool": b.tool, "rate_rps": b.rate, "burstiness": b.burstiness,
                              "requests": b.completed, "mean_prompt_tokens": b.mean_input,
                              "mean_output_tokens": b.mean_output},
                "server": self.server, "source": self.source, "method": self.method, "seeds": list(self.seeds),
                "lengths": self.lengths, "median_abs_error": json_number(self.median_abs_error()),
                "rows": [{k: json_number(v) if isinstance(v, float) else v for k, v in r.items()} for r in self.rows]}


def benchmark_stream(bench: ServingBenchmark, seed: int) -> tuple[RequestStream, str]:
    """The benchmark's client as a stream: ``completed`` requests, gaps exponential at its rate (gamma of shape
    ``burstiness`` and the same mean otherwise, as vLLM draws them), and its lengths; with how they were drawn."""
    rng = np.random.default_rng(seed)
    n = bench.completed
    mean_gap = 1.0 / bench.rate
    gaps = rng.exponential(mean_gap, n) if bench.burstiness == 1 else \
        rng.gamma(bench.burstiness, mean_gap / bench.burstiness, n)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    if bench.input_lens is not None:
        prompt, output = np.asarray(bench.input_lens), np.asarray(bench.output_lens)
        how = "each request's, from the file"
    elif bench.lengths[0] == "uniform":
        _, ins, outs, ratio = bench.lengths
        prompt = rng.integers(max(int(ins * ratio), 1), ins + 1, n)
        output = np.maximum(rng.integers(int(outs * ratio), outs + 1, n), 1)
        how = f"drawn as its random dataset draws them (up to {ins} and {outs} tokens, range ratio {ratio:g})"
    else:
        prompt = np.full(n, max(round(bench.mean_input), 1))
        output = np.full(n, max(round(bench.mean_output), 1))
        how = "the file's means for every request (vLLM's --save-detailed gives each request's)"
    stream = RequestStream(arrivals, prompt, output, name=f"{bench.path.name} seed {seed}",
                           horizon_s=float(arrivals[-1] + mean_gap))
    return stream, how


def server_machine(machine, tp: int):
    """The benchmark's server: ``tp`` GPUs of ``machine`` (the machine itself where it has that many)."""
    if tp == machine.gpus:
        return machine
    if tp > machine.gpus:
        raise SplitwisePlanError(f"--tp {tp}: {machine.name} has {machine.gpus} GPUs; a server of TP {tp} needs "
                                 "that many on one machine")
    return dataclasses.replace(machine, name=f"{machine.name}-tp{tp}", gpus=tp,
                               cost=machine.cost * tp / machine.gpus, power=machine.power * tp / machine.gpus)


def calibrate(bench: ServingBenchmark, model, machine, tp: int, *, stack=None, profiles=None, machines=None,
              seeds: int = 3, seed: int = 0, method: str = "events") -> Calibration:
    """Simulate ``bench``'s server (``tp`` GPUs of ``machine``, serving ``model`` with ``stack``'s latencies or
    ``profiles``' measured ones) on ``seeds`` streams of its client, and compare each statistic it reports.
    ``machines``: the catalog (default the built-in one), which holds the SLOs' reference machine; ``stack``
    None: the plan's rule (``auto``)."""
    from splitwise_plan.inputs.machines import BUILTIN_MACHINES
    from splitwise_plan.perf.profiles import ProfileSet
    from splitwise_plan.perf.sources import resolve_stack
    from splitwise_plan.sim.simulator import Simulator

    profiles = profiles if profiles is not None else ProfileSet.load()
    stack = resolve_stack(None, profiles, model)[0] if stack is None else stack
    server = server_machine(machine, tp)
    catalog = {**(machines if machines is not None else BUILTIN_MACHINES), server.name: server}
    design = get_design(f"baseline:{server.name}")
    columns, how, source = {"ttft": [], "tpot": [], "e2e": []}, "", ""
    for k in range(seeds):
        stream, how = benchmark_stream(bench, seed + k)
        sim = Simulator(stream, model, tensor_parallel=tp, profiles=profiles, machines=catalog,
                        method=method, stack=stack)
        _, table = sim.run_requests(design, 1)   # (a baseline's machines are its first count)
        source = sim.latency_source(sim.machine(server.name)).detail
        for metric, values in per_request(table).items():
            columns[metric].append(values)
    simulated = {m: np.concatenate(v) for m, v in columns.items()}
    rows = [_row(metric, stat, ms, simulated[metric]) for (metric, stat), ms in _ordered(bench.latency_ms)]
    where = server.name if server is machine else f"{tp} GPU{'s' * (tp > 1)} of {machine.name}"
    return Calibration(bench, f"one server: {model.name} on {where} at TP{tp}", source, method,
                       tuple(range(seed, seed + seeds)), how, rows)


def per_request(table: dict) -> dict:
    """TTFT, TPOT and E2E of each request in ms, as the benchmark tools compute them (an unfinished request's
    latencies are +inf; TPOT only of requests of more than one output token)."""
    ttft = np.where(table["finished"], table["ttft_s"], np.inf) * 1e3
    e2e = np.where(table["finished"], table["e2e_s"], np.inf) * 1e3
    out = np.asarray(table["output_tokens"])
    many = out > 1
    with np.errstate(invalid="ignore"):
        tpot = np.where(table["finished"][many], (e2e[many] - ttft[many]) / (out[many] - 1), np.inf)
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e}


def _ordered(latency_ms: dict) -> list:
    key = {m: i for i, m in enumerate(METRICS)}
    return sorted(latency_ms.items(), key=lambda kv: (key[kv[0][0]], kv[0][1] != "mean",
                                                      0.0 if kv[0][1] == "mean" else kv[0][1]))


def _row(metric: str, stat, bench_ms: float, values: np.ndarray) -> dict:
    if values.size == 0:
        sim_ms = float("nan")
    elif stat == "mean":
        sim_ms = float(np.mean(values))
    else:
        sim_ms = float(np.percentile(values, stat))   # (linear, as both tools compute theirs)
        sim_ms = np.inf if np.isnan(sim_ms) else sim_ms   # (between two unfinished requests)
    error = sim_ms / bench_ms - 1 if bench_ms > 0 and np.isfinite(sim_ms) else None
    label = "mean" if stat == "mean" else "median" if stat == 50 else f"P{stat:g}"
    return {"metric": metric, "statistic": label, "benchmark_ms": bench_ms, "simulated_ms": sim_ms, "error": error}
