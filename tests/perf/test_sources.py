"""Where latencies come from: a measured profile wins; elsewhere the analytic estimate from the model's
architecture and the machine's data sheet, and every report says which. Checked against the measured
profile, the estimate itself and hand-built cases."""

from __future__ import annotations

import json

import numpy as np
import pytest

from splitwise_plan.cli import main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.machines import BUILTIN_MACHINES
from splitwise_plan.inputs.models import get_model
from splitwise_plan.inputs.workloads import load_workload
from splitwise_plan.perf.analytic import DECODE_CONTEXT, curve_rows, predict_times
from splitwise_plan.perf.profiles import ProfileSet, load_profiles
from splitwise_plan.perf.sources import (
    ESTIMATED,
    MEASURED,
    accelerator_of,
    architecture_of,
    sourced_latency,
    with_estimates,
)
from splitwise_plan.perf.stack import load_stack
from splitwise_plan.sim.simulator import Simulator

STREAM = load_workload("conversation").generate(5.0, duration_s=20.0, seed=0)


def test_a_measured_profile_wins_over_the_estimate():
    profiles = load_profiles()
    h100 = BUILTIN_MACHINES["dgx-h100"]
    got = sourced_latency(profiles, get_model("llama2-70b"), h100, 8)
    assert got.kind == MEASURED and got.detail == "measured (perf_model.csv)"
    assert got.latency is profiles.latency_model("llama2-70b", "h100-80gb", 8)
    sim = Simulator(STREAM, "llama2-70b")
    assert sim.reference_source == "measured (perf_model.csv)"


def test_a_model_no_profile_measured_is_estimated_from_the_data_sheet():
    """Llama-3.1-70B on an H200: the simulator's latency curves are the estimate's rows, as a profile."""
    import pandas as pd
    model, h200 = get_model("llama-3.1-70b"), BUILTIN_MACHINES["dgx-h200"]
    got = sourced_latency(load_profiles(), model, h200, 8)
    assert got.kind == ESTIMATED and got.detail == "estimated from data sheets (stack paper-2023)"
    arch, accel = architecture_of(model), accelerator_of(h200)
    direct = ProfileSet(pd.DataFrame(curve_rows(arch, accel, 8, load_stack()))).latency_model(model.name, "h200-141gb", 8)
    for x in (128, 1024, 8192):
        assert got.latency.prompt_time(x) == pytest.approx(direct.prompt_time(x), rel=1e-12)
        assert got.latency.token_time(x) == pytest.approx(direct.token_time(x), rel=1e-12)
    # a step of n decodes is the analytic model's step of n sequences at 1,024 tokens of context each: it grows
    # with the batch (the reference's grid of rows had it flat from 1 to 128 decodes)
    _, step = predict_times(arch, accel, 8, load_stack(), DECODE_CONTEXT, np.array([1, 32, 128]), 0)
    assert [got.latency.token_time(n) * 1e3 for n in (1, 32, 128)] == pytest.approx(list(step), rel=1e-9)
    assert step[0] < step[1] < step[2]
    sim = Simulator(STREAM, model)
    assert sim.latency_source(h200).kind == ESTIMATED and sim.reference_source.startswith("estimated")


def test_a_gpu_with_more_bandwidth_decodes_faster_and_the_estimates_are_added_once():
    model = get_model("llama-3.1-70b")
    h100, h200 = BUILTIN_MACHINES["dgx-h100"], BUILTIN_MACHINES["dgx-h200"]   # same FLOP/s, 4.8 vs 3.35 TB/s
    profiles = with_estimates(load_profiles(), model, [(h100, 8), (h200, 8), (h200, 8)])
    assert set(profiles.estimates) == {("llama-3.1-70b", "h100-80gb", 8), ("llama-3.1-70b", "h200-141gb", 8)}
    slow, fast = (profiles.latency_model(model.name, m.hardware, 8) for m in (h100, h200))
    assert fast.token_time(8) < slow.token_time(8)
    assert with_estimates(profiles, model, [(h200, 8)]) is profiles   # nothing missing: nothing added


def test_slowdown_slos_need_a_model_that_fits_the_reference_machine(tmp_path):
    """Llama-3.1-405B (812 GB at bf16) cannot run alone on a DGX-A100: slowdown SLOs are refused in one
    line; the same limits in seconds plan on B200 machines."""
    with pytest.raises(SplitwisePlanError, match="give the SLOs in seconds"):
        Simulator(STREAM, "llama-3.1-405b")
    slo = tmp_path / "s.toml"
    slo.write_text('unit = "seconds"\n[ttft]\np99 = 10.0\n[tbt]\np99 = 0.5\n')
    from splitwise_plan.inputs.slos import load_slos
    sim = Simulator(STREAM, "llama-3.1-405b", slos=load_slos(slo))
    assert "does not fit there" in sim.reference_source
    assert sim.run("B200:B200", 2, 2).slo_met in (True, False)


def test_a_users_config_json_plans_with_sourced_latencies(tmp_path, capsys):
    """A Hugging Face config.json in a folder of the user's: the plan answers, and its JSON report says
    where each pool's latencies came from."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}))
    out = tmp_path / "p.json"
    code = main(["--goal", "min-cost", "--rps", "10", "--model", str(folder), "--designs", "H100:H200,HH",
                 "--duration", "20", "--seeds", "1", "--json", str(out), "-q"])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    doc = json.loads(out.read_text())
    assert doc["inputs"]["model"] == str(folder)
    # no profile measured it: --stack auto estimates at today's vLLM preset, and says which and why
    vllm = "estimated from data sheets (stack vllm, vllm 0.24.0 (a100_sxm 0.14.0))"
    assert doc["inputs"]["latency_sources"] == {"dgx-h100": vllm, "dgx-h200": vllm, "reference": vllm}
    assert doc["inputs"]["stack"] == "vllm (auto: no profile measured my-model, so today's vllm preset)"
    text = " ".join(printed.out.split())
    assert "latencies: dgx-h100, dgx-h200, slowdown reference estimated from data sheets" in text
    assert "stack: vllm (auto: no profile measured my-model" in text


def test_auto_keeps_the_papers_stack_for_the_papers_models(tmp_path, capsys):
    # BLOOM-176B on H200 pools: no profile measured it there, but it has measured profiles (the paper's 2023
    # stack): its estimate is of that stack, and the report reads as before (no stack named)
    out = tmp_path / "p.json"
    code = main(["--goal", "min-cost", "--rps", "5", "--designs", "H200:H200", "--duration", "20", "--seeds", "1",
                 "--json", str(out), "-q"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads(out.read_text())
    assert doc["inputs"]["latency_sources"]["dgx-h200"] == "estimated from data sheets (stack paper-2023)"
    assert "stack" not in doc["inputs"] and doc["inputs"]["latency_sources"]["reference"].startswith("measured")


@pytest.mark.parametrize("config, message", [
    ({"num_hidden_layers": 32, "hidden_size": 4096}, "missing num_attention_heads"),
    ({"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "intermediate_size": 14336,
      "vocab_size": 32000, "num_local_experts": 8}, "mixture-of-experts"),
])
def test_a_bad_or_moe_config_is_one_line_and_exit_2(tmp_path, capsys, config, message):
    f = tmp_path / "config.json"
    f.write_text(json.dumps(config))
    code = main(["--goal", "min-cost", "--rps", "10", "--model", str(f), "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0] and str(f) in err[0]


def test_a_model_too_big_for_every_design_is_exit_2(capsys):
    code = main(["--goal", "min-cost", "--rps", "10", "--model", "llama-3.1-405b", "--designs", "H100:H100", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "do not fit" in err


def test_profiles_fit_recovers_a_stack_that_predicts_its_own_timings(tmp_path, capsys):
    """Timings of Llama-2-70B on an H100 at TP8 (the shipped profile's medians) fitted into a stack: it
    predicts them back closely, and a plan can name it."""
    import pandas as pd
    t = load_profiles().table
    t = t[(t.model == "llama2-70b") & (t.hardware == "h100-80gb") & (t.tensor_parallel == 8)]
    med = t.groupby(["prompt_size", "batch_size", "token_size"])[["prompt_time", "token_time"]].median().reset_index()
    bench = tmp_path / "bench.csv"
    med.to_csv(bench, index=False)
    stack = tmp_path / "mine.toml"
    code = main(["profiles", "fit", str(bench), "--model", "llama2-70b", "--machine", "H100", "--out", str(stack)])
    out = capsys.readouterr().out
    assert code == 0, out
    median = float(out.split("median error ")[1].split("%")[0])
    assert median < 10.0
    fitted = load_stack(stack)
    assert fitted.name == "mine" and "llama2-70b on dgx-h100" in fitted.source
    sim = Simulator(STREAM, "llama-3.1-8b", stack=fitted)
    assert sim.latency_source(BUILTIN_MACHINES["dgx-h200"]).detail == "estimated from data sheets (stack mine)"
    pd.testing.assert_frame_equal(med, pd.read_csv(bench))   # (the file is read, not written)
    report = tmp_path / "s.json"
    code = main(["simulate", "--design", "B200:B200", "--prompt", "2", "--token", "1", "--rps", "5", "--duration", "20",
                 "--model", "llama-3.1-70b", "--dtype", "fp8", "--stack", str(stack), "--method", "fluid",
                 "--json", str(report), "-q"])
    assert code == 0, capsys.readouterr().err
    inputs = json.loads(report.read_text())["inputs"]
    assert inputs["dtype"] == "fp8" and inputs["latency_sources"] == {
        "dgx-b200": "estimated from data sheets (stack mine)", "reference": "estimated from data sheets (stack mine)"}


def test_a_plans_estimated_reference_says_it_is_estimated():
    """A plan's inputs hold the estimate of the reference GPU among their profiles: it is still an
    estimate, not a measurement, wherever it is read from."""
    from splitwise_plan.perf.sources import reference_latency
    from splitwise_plan.planning import Inputs, PlanRequest
    inp = Inputs.load(PlanRequest(goal="min-cost", rps=10, model="llama-3.1-70b", designs="H100:H200"))
    ref = reference_latency(inp.slos, inp.profiles, inp.model, inp.machines)
    assert (ref.kind, ref.detail) == (ESTIMATED, "estimated from data sheets (stack vllm, vllm 0.24.0 (a100_sxm 0.14.0))")
    paper = Inputs.load(PlanRequest(goal="min-cost", rps=10, designs="HH"))
    assert reference_latency(paper.slos, paper.profiles, paper.model, paper.machines).kind == MEASURED


def test_default_is_the_papers_stack_by_its_old_name():
    from splitwise_plan.perf.stack import load_stack
    paper = load_stack("paper-2023")
    assert paper.name == "paper-2023" and load_stack("default").parameters() == paper.parameters()
    assert load_stack().parameters() == paper.parameters()
    with pytest.raises(SplitwisePlanError, match=r"no shipped stack named 'vlm'; valid: auto, paper-2023, sglang, "
                                                  r"trtllm, vllm \(or default\)"):
        load_stack("vlm")


def _sglang_runs(stack_name: str) -> list[dict]:
    """What SGLang's bench_one_batch appends to its --result-filename, one JSON object a line (keys and units as
    python/sglang/bench_one_batch.py's latency_test_run_once records them: seconds), for Llama-3.1-70B on an
    H100 at TP8 timed as the named stack predicts them (the truth a fit must recover)."""
    from splitwise_plan.perf.analytic import predict_times
    from splitwise_plan.perf.sources import accelerator_of, architecture_of
    arch, accel = architecture_of(get_model("llama-3.1-70b")), accelerator_of(BUILTIN_MACHINES["dgx-h100"])
    runs = []
    for bs in (1, 8, 32, 64):
        for il in (256, 1024, 4096):
            for ol in (1, 256):
                prompt, decode = predict_times(arch, accel, 8, load_stack(stack_name), il, bs, ol)
                run = {"run_name": "test_run", "batch_size": bs, "input_len": il, "output_len": ol,
                       "prefill_latency": float(prompt) / 1e3, "prefill_throughput": il * bs / (float(prompt) / 1e3)}
                if ol > 1:   # (bench_one_batch records a decode median only where there is a decode step)
                    run |= {"median_decode_latency": float(decode) / 1e3,
                            "median_decode_throughput": bs / (float(decode) / 1e3)}
                run |= {"total_latency": 1.0, "overall_throughput": 1.0}
                runs.append(run)
    return runs


def test_profiles_fit_reads_sglang_bench_one_batch_results(tmp_path, capsys):
    bench = tmp_path / "results.jsonl"
    bench.write_text("".join(json.dumps(r) + "\n" for r in _sglang_runs("vllm")))
    out_toml = tmp_path / "sgl.toml"
    code = main(["profiles", "fit", str(bench), "--model", "llama-3.1-70b", "--machine", "H100", "--out",
                 str(out_toml)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "fitted on 12 rows" in out and "(SGLang bench_one_batch)" in out   # (the 12 of output_len 1 left out)
    assert float(out.split("median error ")[1].split("%")[0]) < 2.0          # it recovers the stack it was timed at
    assert "SGLang bench_one_batch" in load_stack(out_toml).source


@pytest.mark.parametrize("line, needle", [
    ('{"batch_size": 1, "input_len": 512}', "line 1: no output_len, prefill_latency"),
    ('{"batch_size": 1, "input_len": 512, "output_len": 8, "prefill_latency": 0.05, "median_decode_latency": -1}',
     "line 1: median_decode_latency must be a positive number, got -1"),
    ('{"batch_size": 1, "input_len": 512, "output_len": 1, "prefill_latency": 0.05}', "no run with a decode step"),
])
def test_a_bad_sglang_result_is_one_line(tmp_path, capsys, line, needle):
    bench = tmp_path / "bad.jsonl"
    bench.write_text(line + "\n")
    assert main(["profiles", "fit", str(bench), "--model", "llama-3.1-70b", "--machine", "H100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0] and str(bench) in err[0]


def test_a_users_moe_config_json_plans_like_the_built_in(tmp_path, capsys):
    """A mixture of experts' config.json in a folder of the user's (Qwen3-30B-A3B's published values): the plan
    answers as the built-in's does, its latencies estimated at today's vLLM preset."""
    folder = tmp_path / "qwen3-moe"
    folder.mkdir()
    from splitwise_plan.inputs.paths import data_file
    doc = json.loads(data_file("models", "qwen3-30b-a3b.json").read_text())
    (folder / "config.json").write_text(json.dumps({k: v for k, v in doc.items() if not k.startswith("_")}))
    reports = {}
    for model in (str(folder), "qwen3-30b-a3b"):
        out = tmp_path / f"{len(reports)}.json"
        code = main(["--goal", "min-cost", "--rps", "20", "--model", model, "--designs", "H100:H100", "--tp", "8",
                     "--duration", "20", "--seeds", "1", "--json", str(out), "-q"])
        assert code == 0, capsys.readouterr().err
        reports[model] = json.loads(out.read_text())
    mine, builtin = reports[str(folder)], reports["qwen3-30b-a3b"]
    vllm = "estimated from data sheets (stack vllm, vllm 0.24.0 (a100_sxm 0.14.0))"
    assert mine["inputs"]["latency_sources"] == {"dgx-h100": vllm, "reference": vllm}
    same = lambda doc: [(r["prompt_machines"], r["token_machines"], r["cost"], r["slo_headroom"], r["tightest"])   # noqa: E731
                        for r in doc["results"]]
    assert mine["plan"]["winner"] == builtin["plan"]["winner"] and same(mine) == same(builtin)


def test_deepseek_v3_at_fp8_on_a_dgx_h100_is_refused_in_one_line(capsys):
    code = main(["--goal", "min-cost", "--rps", "50", "--model", "deepseek-v3", "--designs", "H100:H100", "--tp", "8",
                 "-q"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "the weights of deepseek-v3 (671 GB) do not fit in the 640 GiB of HBM of dgx-h100" in err[0]
    assert "98% of it, and weights may take at most 90%" in err[0]


def test_a_moe_model_the_paper_reference_holds_only_without_a_batch_still_has_slowdowns():
    # DeepSeek-V3 at fp8 (671 GB) alone on a DGX-A100 (687 GB): a lone request needs no batch's KV cache, so the
    # slowdown reference holds it although no serving instance of the A100 would (98% > 90%)
    from splitwise_plan.inputs.machines import load_machines
    from splitwise_plan.inputs.slos import load_slos
    from splitwise_plan.perf.sources import reference_latency, reference_machine
    slos, machines, model = load_slos(), load_machines(), get_model("deepseek-v3")
    machine, problem = reference_machine(slos, model, machines)
    assert machine.name == "dgx-a100" and problem == ""
    ref = reference_latency(slos, load_profiles(), model, machines, load_stack("vllm"))
    assert ref.kind == ESTIMATED and "stack vllm" in ref.detail
