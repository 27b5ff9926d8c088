"""``calibrate``: a serving benchmark's result read in its tool's own format, and the simulator put beside it.

The files are written here as the tools write them: vLLM's ``vllm bench serve --save-result`` JSON (keys as
``vllm/benchmarks/serve.py`` builds ``result_json``: request_rate, burstiness, max_concurrency, completed,
total_input_tokens, total_output_tokens, and mean_/median_/pNN_ of ttft, tpot, itl, e2el in ms), and SGLang's
``bench_serving --output-file`` JSON lines (keys as ``python/sglang/bench_serving.py`` writes them, with
random_input_len, random_output_len, random_range_ratio and ``*_e2e_latency_ms``).

The truth is hand-composed: at a rate so low that no two requests meet, a request's TTFT is the prefill of its
prompt, its TPOT one decode step of a batch of one, and its E2E the TTFT plus a step per output token after the
first, each read from the latency model itself.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from splitwise_plan.cli import main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.machines import BUILTIN_MACHINES
from splitwise_plan.inputs.models import get_model
from splitwise_plan.inputs.serving_bench import SGLANG, VLLM, read_serving_benchmark
from splitwise_plan.inputs.workloads import RequestStream
from splitwise_plan.perf.profiles import ProfileSet
from splitwise_plan.perf.sources import for_requests, sourced_latency
from splitwise_plan.perf.stack import load_stack
from splitwise_plan.planning.calibrate import benchmark_stream, calibrate

PROMPT, OUTPUT, N = 1000, 3, 10


def _alone_ms():
    """TTFT, TPOT and E2E (ms) of one request of PROMPT and OUTPUT tokens alone on one H100 at TP1."""
    stream = RequestStream(np.zeros(1), np.array([PROMPT]), np.array([OUTPUT]))   # (its mean context)
    lm = sourced_latency(ProfileSet.load(), get_model("llama-3.1-8b"), BUILTIN_MACHINES["dgx-h100"], 1,
                         for_requests(load_stack("vllm"), stream)).latency
    ttft, tpot = float(lm.prompt_time(PROMPT)) * 1e3, float(lm.token_time(1)) * 1e3
    return ttft, tpot, ttft + (OUTPUT - 1) * tpot


def _vllm_result(ttft, tpot, e2e, **extra) -> dict:
    run = {"date": "20261201-120000", "endpoint_type": "vllm", "backend": "vllm", "label": None,
           "model_id": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
           "num_prompts": N, "request_rate": 0.001, "burstiness": 1.0, "max_concurrency": None, "duration": 9000.0,
           "completed": N, "failed": 0, "total_input_tokens": PROMPT * N, "total_output_tokens": OUTPUT * N,
           "request_throughput": 0.001, "request_goodput": None, "output_throughput": 0.003,
           "total_token_throughput": 1.0, "max_output_tokens_per_s": 50.0, "max_concurrent_requests": 1,
           "rtfx": 0.0, "latencies": [e2e / 1e3] * N}
    for name, ms in (("ttft", ttft), ("tpot", tpot), ("itl", tpot), ("e2el", e2e)):
        run.update({f"mean_{name}_ms": ms, f"median_{name}_ms": ms, f"std_{name}_ms": 0.0, f"p99_{name}_ms": ms})
    run.update(extra)
    return run


def test_vllm_result_is_read_in_its_own_keys(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_vllm_result(100.0, 10.0, 120.0, p90_ttft_ms=95.0)))
    bench = read_serving_benchmark(path)
    assert bench.tool == VLLM and bench.rate == 0.001 and bench.completed == N
    assert (bench.mean_input, bench.mean_output) == (PROMPT, OUTPUT)
    assert bench.latency_ms[("ttft", 50.0)] == 100.0 and bench.latency_ms[("ttft", 90.0)] == 95.0
    assert bench.latency_ms[("e2e", 99.0)] == 120.0 and bench.latency_ms[("tpot", "mean")] == 10.0
    assert bench.left_out == ("itl",)


def test_simulated_latencies_of_lone_requests_are_the_latency_models(tmp_path):
    """Each statistic measured 25% slower than the simulator's: every error is -20% (1/1.25 - 1)."""
    ttft, tpot, e2e = _alone_ms()
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_vllm_result(1.25 * ttft, 1.25 * tpot, 1.25 * e2e)))
    cal = calibrate(read_serving_benchmark(path), get_model("llama-3.1-8b"), BUILTIN_MACHINES["dgx-h100"], 1,
                    stack=load_stack("vllm"), seeds=2)
    assert len(cal.rows) == 9 and {r["metric"] for r in cal.rows} == {"ttft", "tpot", "e2e"}
    for r in cal.rows:
        assert r["error"] == pytest.approx(-0.2, abs=0.002), r
    assert cal.median_abs_error() == pytest.approx(0.2, abs=0.002)
    assert cal.server == "one server: llama-3.1-8b on 1 GPU of dgx-h100 at TP1"


def test_each_requests_lengths_are_used_where_the_file_holds_them(tmp_path):
    ins, outs = [100 + 7 * i for i in range(N)], [2 + i for i in range(N)]
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_vllm_result(100.0, 10.0, 120.0, input_lens=ins, output_lens=outs,
                                            total_input_tokens=sum(ins), total_output_tokens=sum(outs))))
    stream, how = benchmark_stream(read_serving_benchmark(path), 3)
    assert stream.prompt_tokens.tolist() == ins and stream.output_tokens.tolist() == outs
    assert "each request's" in how


def test_sglang_lines_pick_a_run_and_draw_its_random_lengths(tmp_path):
    """SGLang's random dataset draws lengths uniformly in [max(int(len * ratio), 1), len]."""
    def run(rate, p50):
        return {"backend": "sglang", "dataset_name": "random", "request_rate": rate, "max_concurrency": None,
                "sharegpt_output_len": None, "random_input_len": 2048, "random_output_len": 256,
                "random_range_ratio": 0.5, "duration": 300.0, "completed": 2000, "total_input_tokens": 3_073_000,
                "total_output_tokens": 384_000, "mean_e2e_latency_ms": 4000.0, "median_e2e_latency_ms": p50,
                "std_e2e_latency_ms": 900.0, "p99_e2e_latency_ms": 8000.0, "mean_ttft_ms": 150.0,
                "median_ttft_ms": 120.0, "std_ttft_ms": 80.0, "p99_ttft_ms": 600.0, "mean_tpot_ms": 20.0,
                "median_tpot_ms": 19.0, "std_tpot_ms": 3.0, "p99_tpot_ms": 30.0, "mean_itl_ms": 20.0,
                "median_itl_ms": 18.0, "std_itl_ms": 9.0, "p99_itl_ms": 70.0, "concurrency": 60.0}
    path = tmp_path / "sglang.jsonl"
    path.write_text(json.dumps(run(4.0, 3900.0)) + "\n" + json.dumps(run(8.0, 5100.0)) + "\n")
    last, first = read_serving_benchmark(path), read_serving_benchmark(path, line=1)
    assert last.tool == SGLANG and (last.rate, first.rate) == (8.0, 4.0)
    assert last.latency_ms[("e2e", 50.0)] == 5100.0 and "run 2 of 2" in last.describe()
    stream, how = benchmark_stream(last, 0)
    assert stream.prompt_tokens.min() >= 1024 and stream.prompt_tokens.max() <= 2048
    assert stream.output_tokens.min() >= 128 and stream.output_tokens.max() <= 256
    assert np.mean(stream.prompt_tokens) == pytest.approx(1536, rel=0.02) and "range ratio 0.5" in how
    assert len(stream) == 2000 and stream.rate == pytest.approx(8.0, rel=0.1)
    with pytest.raises(SplitwisePlanError, match="--line must be between 1 and 2"):
        read_serving_benchmark(path, line=3)


@pytest.mark.parametrize("extra, message", [
    ({"request_rate": "inf"}, "request_rate is 'inf'; calibrate needs a run at a fixed --request-rate"),
    ({"max_concurrency": 4}, "max_concurrency 4 held requests back"),
    ({"completed": 0}, "completed must be a positive number"),
])
def test_runs_the_simulator_cannot_mirror_are_one_line_errors(tmp_path, capsys, extra, message):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_vllm_result(100.0, 10.0, 120.0, **extra)))
    assert main(["calibrate", str(path), "--machine", "H100", "--tp", "1"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_file_of_neither_tool_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"request_rate": 2.0, "completed": 10, "total_input_tokens": 10,
                                "total_output_tokens": 10, "throughput": 5.0}))
    assert main(["calibrate", str(path), "--machine", "H100", "--tp", "1", "--model", "llama-3.1-8b"]) == 2
    assert "no latency statistics" in capsys.readouterr().err


def test_calibrate_command_prints_the_error_of_each_statistic(tmp_path, capsys):
    ttft, tpot, e2e = _alone_ms()
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_vllm_result(1.25 * ttft, 1.25 * tpot, 1.25 * e2e)))
    assert main(["calibrate", str(path), "--machine", "H100", "--tp", "1", "--seeds", "1"]) == 0   # model_id's
    out = capsys.readouterr().out
    assert out.count("-20.0%") == 9 and "ITL not compared" in out and "median |error| over the 9 statistics" in out
    assert main(["calibrate", str(path), "--machine", "H100", "--tp", "1", "--seeds", "1", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["benchmark"]["tool"] == VLLM and doc["seeds"] == [0] and len(doc["rows"]) == 9
    assert doc["rows"][0]["error"] == pytest.approx(-0.2, abs=0.002) and doc["stack"].startswith("vllm (auto")
