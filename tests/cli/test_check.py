"""``splitwise-plan check`` (the CI gate: exit 0/1/2) and ``capacity``, on tiny clusters and short streams."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from splitwise_plan.cli import main
from splitwise_plan.cli.check import find_capacity
from splitwise_plan.inputs.cluster_file import load_cluster
from splitwise_plan.inputs.workloads import load_trace, load_workload

REPO = Path(__file__).resolve().parents[2]
FAST = ["--duration", "20", "--method", "events", "--quiet", "--seeds", "1"]   # (one stream: the plan's 3 elsewhere)
SMALL = 'design = "HH"\nprompt_machines = 4\ntoken_machines = 2\n'   # holds the SLOs at 5 req/s
TINY = 'design = "splitwise-hh"\nprompt_machines = 1\ntoken_machines = 1\n'   # fails them at 10 req/s


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_check_passes_exit_0(capsys, write):
    code, out, err = run(capsys, "check", write("small.toml", SMALL), "--rps", 5, "--headroom", 0.2, *FAST)
    assert code == 0, out + err
    assert "PASS" in out and "method events" in out and "6 req/s" in out


def test_check_fails_exit_1_naming_each_slo(capsys, write):
    code, out, err = run(capsys, "check", write("tiny.toml", TINY), "--rps", 10, *FAST)
    assert code == 1, out + err
    assert "FAIL" in out and "method events" in out
    failing = [line for line in out.splitlines() if line.startswith("  - ")]
    assert failing and all("limit" in line and "margin -" in line for line in failing)
    assert any(m in out for m in ("TTFT P99", "TBT P99", "E2E P99"))


def test_headroom_turns_a_pass_into_a_fail(capsys, write):
    f = write("small.toml", SMALL)
    assert run(capsys, "check", f, "--rps", 5, *FAST)[0] == 0
    assert run(capsys, "check", f, "--rps", 5, "--headroom", 3, *FAST)[0] == 1


def test_check_json_report(capsys, write, tmp_path):
    j = tmp_path / "check.json"
    code, out, err = run(capsys, "check", write("small.toml", SMALL), "--rps", 5, "--headroom", 0.2, *FAST,
                         "--json", j)
    assert code == 0
    doc = json.loads(j.read_text())
    assert doc["schema_version"] == 2 and doc["command"] == "check"
    assert doc["check"]["passed"] is True and doc["check"]["headroom"] == 0.2
    assert doc["check"]["checked_rps"] == 6.0   # 5 x 1.2 to the digits printed: check --rps 6 is the same stream
    assert doc["check"]["cluster"]["design"] == "splitwise-hh" and doc["inputs"]["cluster_file"]
    # the inputs say the rate asked for (they said the raised one), and no one stream's request count
    assert doc["inputs"]["rate_rps"] == 5.0 and doc["inputs"]["requests"] is None
    assert doc["results"][0]["slo"]["met"] is True
    # each result says the rate it was simulated at (the raised one, then the rate asked for)
    assert [r["rate_rps"] for r in doc["results"]] == [x["rate_rps"] for x in doc["check"]["rates"]] == [
        pytest.approx(6.0), 5.0]


def test_check_csv_rows_name_their_stream(capsys, write, tmp_path):
    """Each rate checked is a row led by its stream (rate_rps, seed), as every other command's CSV rows are."""
    c = tmp_path / "check.csv"
    assert run(capsys, "check", write("small.toml", SMALL), "--rps", 5, "--headroom", 0.2, *FAST, "--seed", 3,
               "--csv", c)[0] == 0
    rows = pd.read_csv(c)
    assert list(rows.columns[:2]) == ["rate_rps", "seed"]
    assert rows.rate_rps.tolist() == [pytest.approx(6.0), 5.0] and rows.seed.tolist() == [3, 3]
    assert rows.headroom.tolist() == [0.2, 0.2] and rows.slo_met.all()


def test_a_failed_check_says_why_requests_read_not_finished(capsys, write):
    """A 900,000-token prompt no machine can hold: its nine percentiles read "not finished (inf)", and the
    verdict says that a request never got its KV-cache memory (as simulate does)."""
    trace = write("big.csv", "arrival_timestamp,prompt_size,token_size\n0.1,100,10\n0.5,900000,20\n")
    code, out, err = run(capsys, "check", write("small.toml", SMALL), "--trace", trace, "--method", "events")
    assert code == 1 and "not finished (inf)" in out
    assert out.rstrip().endswith("(1 of 2 requests never got their KV-cache memory)")


def test_a_headroom_check_whose_own_rate_gives_no_request_says_so(capsys, write):
    code, _, err = run(capsys, "check", write("small.toml", SMALL), "--rps", 0.02, "--headroom", 3, *FAST)
    assert code == 2 and "0.02 req/s over 20 s gives no request (seed 0); raise --rps or --duration" in err


def test_check_trace_with_headroom(capsys, write, tmp_path):
    trace = tmp_path / "t.csv"
    load_workload("coding").generate(4, duration_s=20, seed=2).to_csv(trace)
    j = tmp_path / "c.json"
    code, out, err = run(capsys, "check", write("small.toml", SMALL), "--trace", trace, "--headroom", 0.5,
                         "--method", "events", "--quiet", "--json", j)
    assert code in (0, 1), err
    doc = json.loads(j.read_text())
    assert doc["check"]["checked_rps"] == pytest.approx(1.5 * doc["check"]["rate_rps"])
    # the inputs describe the trace as given: its rate with its own span (the raised rate's stream
    # is the trace squeezed to two thirds of it, which the report gave beside the rate asked for)
    own = load_trace(trace)
    assert doc["inputs"]["rate_rps"] == pytest.approx(own.rate) == pytest.approx(doc["check"]["rate_rps"])
    assert doc["inputs"]["duration_s"] == pytest.approx(own.duration_s)


@pytest.mark.parametrize("text, match", [
    ("design = \n", "not valid TOML"),
    ('design = "XX"\nprompt_machines = 1\ntoken_machines = 1\n', "unknown"),
    ('design = "HH"\nprompt_machines = 1\n', "token_machines"),
    ('design = "A100"\nprompt_machines = 1\ntoken_machines = 1\n', "baseline"),
    ('design = "HH"\nprompt_machines = 1\ntoken_machines = 1\nmodel = "gpt-9"\n', "gpt-9"),
    ('design = "HH"\nprompt_machines = -1\ntoken_machines = 1\n', "at least 1"),
    ('prompt_machines = 1\ntoken_machines = 1\n', "design"),
    (SMALL + "tensor_parallel = 16\n", "bad.toml (bloom-176b at TP16 on dgx-h100): dgx-h100 has 8 GPUs, fewer"),
    (SMALL + "tensor_parallel = 2\n", "bad.toml (bloom-176b at TP2 on dgx-h100): the weights of bloom-176b"),
    (SMALL + 'model = "llama2-70b"\ntensor_parallel = 1\n', "bad.toml (llama2-70b at TP1 on dgx-h100): "),
])
def test_check_bad_cluster_file_exit_2(capsys, write, text, match):
    code, out, err = run(capsys, "check", write("bad.toml", text), "--rps", 5, *FAST)
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and match in err


@pytest.mark.parametrize("args", [
    ["missing.toml", "--rps", 5],
    ["{small}", "--rps", 0],
    ["{small}"],                                   # no rate
    ["{small}", "--rps", 5, "--headroom", -0.1],
    ["{small}", "--rps", 5, "--headroom", 1e9],     # a typo, not a load (it failed as 'rate x duration')
    ["{small}", "--rps", 5, "--headroom", "inf"],
    ["{small}", "--rps", 5, "--workload", "nope"],
    ["{small}", "--rps", 5, "--json", "/no/such/dir/c.json"],
])
def test_check_bad_input_exit_2(capsys, write, args):
    small = write("small.toml", SMALL)
    args = [str(small) if a == "{small}" else a for a in args]
    code, out, err = run(capsys, "check", *args, *FAST)
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")


def test_capacity_brackets_the_limit(capsys, write, tmp_path):
    f, j = write("small.toml", SMALL), tmp_path / "cap.json"
    code, out, err = run(capsys, "capacity", f, *FAST, "--json", j)
    assert code == 0, err
    doc = json.loads(j.read_text())
    cap = doc["capacity"]
    lo, hi = cap["capacity_rps"], cap["fails_at_rps"]
    assert doc["inputs"]["rate_rps"] is None and doc["inputs"]["requests"] is None   # no rate is an input here
    assert 0 < lo < hi <= lo * 1.01 + 1e-9
    assert f": {lo!r} req/s (fails at {hi!r};" in out   # the exact rates: check reproduces them
    assert float(f"{lo:.4g}") == lo and float(f"{hi:.4g}") == hi   # rates a user can type: 4 digits at 1%
    met = {t["rate_rps"]: t["slo_met"] for t in cap["trials"]}
    assert met[lo] is True and met[hi] is False
    held = {t["rate_rps"]: t["passed"] for t in cap["trials"]}   # every SLO met and every request finished
    assert held[lo] is True and held[hi] is False and all(t["completed"] <= t["requests"] for t in cap["trials"])
    assert doc["results"][0]["rate_rps"] == lo
    # check agrees: same seed and duration give the same stream
    assert run(capsys, "check", f, "--rps", lo, *FAST)[0] == 0
    assert run(capsys, "check", f, "--rps", hi, *FAST)[0] == 1


def test_check_fails_a_cluster_that_leaves_requests_unfinished(capsys, write):
    """Four 36 GiB GPUs hold Llama2-70B's weights with 18 GiB to spare: the longest prompts never get
    their KV cache, though too few for the P99s to see it. A gate must not pass requests that never end."""
    machines = write("m.toml", "[machines.dgx-h100]\ngpus = 4\nhbm_gib_per_gpu = 36\n")
    f = write("b.toml", 'design = "H100"\nmachines = 60\nmodel = "llama2-70b"\ntensor_parallel = 4\n')
    code, out, err = run(capsys, "check", f, "--rps", 40, "--duration", 60, "--machines-file", machines, "--seeds", 1)
    assert code == 1, out + err
    assert "FAIL: all 9 SLOs hold, but " in out and "requests never got their KV-cache memory" in out
    # nor does capacity count such a rate as held: the rate it reports must pass check
    code, out, err = run(capsys, "capacity", f, "--duration", 60, "--machines-file", machines, "--quiet", "--seeds", 1)
    held = float(out.split(": ")[1].split(" req/s")[0])
    assert code == 0 and held < 40, out + err
    assert run(capsys, "check", f, "--rps", held, "--duration", 60, "--machines-file", machines, "--seeds", 1)[0] == 0


def test_capacity_from_a_rate_far_past_the_cluster_finds_the_same_limit_quickly(capsys, write, tmp_path):
    """A first rate of 1e9 req/s once meant hours of simulating millions of requests."""
    f, j = write("small.toml", SMALL), tmp_path / "cap.json"
    code, out, err = run(capsys, "capacity", f, *FAST, "--json", j, "--start-rps", "1e9")
    assert code == 0, err
    doc = json.loads(j.read_text())
    cap = doc["capacity"]
    lo, hi = cap["capacity_rps"], cap["fails_at_rps"]
    assert doc["inputs"]["rate_rps"] is None and doc["inputs"]["requests"] is None   # no rate is an input here
    met = {t["rate_rps"]: t["slo_met"] for t in cap["trials"]}
    assert met[lo] is True and met[hi] is False and 0 < lo < hi <= lo * 1.01 + 1e-9
    assert 5 <= lo < 50                                  # SMALL holds 5 req/s; 6 machines never hold 50
    assert max(t["requests"] for t in cap["trials"]) < 20_000


def test_capacity_bad_input(capsys, write):
    f = write("small.toml", SMALL)
    for args in (["--precision", 0], ["--precision", 1.5], ["--duration", -1], ["--trace", "x.csv"],
                 ["--duration", "1e-300"], ["--duration", "1e9"]):
        code, out, err = run(capsys, "capacity", f, *args)
        assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1


class _R:
    def __init__(self, ok):
        self.slo_met = ok


@pytest.mark.parametrize("limit, start", [(37.3, 2.0), (0.9, 50.0), (1234.0, 1.0)])
def test_find_capacity_bisection(limit, start):
    cap, fail, trials = find_capacity(lambda r: _R(r <= limit), start=start, precision=0.01,
                                      min_rate=0.1, max_rate=1e5)
    assert cap <= limit < fail and (fail - cap) <= 0.01 * cap
    assert len(trials) < 30


def test_find_capacity_tries_rates_of_the_digits_the_precision_needs():
    """Rates a user can pass to check --rps: 4 significant digits at 1%, 5 at 0.1%."""
    for precision, digits in ((0.01, 4), (0.001, 5)):
        cap, fail, trials = find_capacity(lambda r: _R(r <= 74.56789), start=61.0, precision=precision,
                                          min_rate=0.1, max_rate=1e5)
        assert cap <= 74.56789 < fail and (fail - cap) <= precision * cap
        assert all(float(f"{rate:.{digits}g}") == rate for rate, _ in trials)


def test_find_capacity_rounds_its_bounds_inward():
    """A bound that stops the search (100 requests in 7 s, or the capacity model's top) is a rate of the digits too."""
    cap, fail, _ = find_capacity(lambda r: _R(True), start=4, min_rate=1 / 7, max_rate=12345.678901)
    assert cap == 12340.0 and fail is None
    cap, fail, _ = find_capacity(lambda r: _R(False), start=40, min_rate=100 / 7, max_rate=1e5)
    assert cap is None and fail == 14.29


def test_find_capacity_edges():
    cap, fail, _ = find_capacity(lambda r: _R(False), start=4, min_rate=0.5, max_rate=100)
    assert cap is None and fail == 0.5
    cap, fail, _ = find_capacity(lambda r: _R(True), start=4, min_rate=0.5, max_rate=100)
    assert cap == 100 and fail is None


def test_examples_ship_a_valid_cluster_and_ci_job():
    spec = load_cluster(REPO / "examples" / "cluster.toml")
    assert spec.design.name == "splitwise-hh" and spec.machines == 30
    ci = (REPO / "examples" / "ci-capacity-check.yml").read_text()
    assert "splitwise-plan check examples/cluster.toml" in ci and "--headroom" in ci
    yaml = pytest.importorskip("yaml")
    job = yaml.safe_load(ci)
    assert "check" in job["jobs"]


def test_capacity_of_a_cluster_that_holds_no_rate_points_to_a_longer_duration(capsys, write):
    """10 requests in 3 s (3.334 req/s, rounded up to the digits it tries) is the lowest rate tried."""
    code, out, err = run(capsys, "capacity", write("tiny.toml", TINY), "--duration", 3, "--method", "events", "--quiet")
    assert code == 1, out + err
    assert "none; the SLOs fail even at 3.334 req/s" in out and "is the lowest rate tried" in out


def test_a_cluster_at_a_tp_its_profiles_lack_is_estimated_as_the_plan_does(capsys, write, tmp_path):
    # (it was an error: "no profile"; the plan estimates such latencies from data sheets, and so does the gate)
    from splitwise_plan.inputs.paths import data_file
    df = pd.read_csv(data_file("profiles", "perf_model.csv"))
    df[df.tensor_parallel == 8].to_csv(tmp_path / "tp8.csv", index=False)
    cluster = write("tp4.toml", SMALL + 'model = "llama2-70b"\ntensor_parallel = 4\n')
    for cmd in (["check", cluster, "--rps", 5], ["capacity", cluster]):
        code, out, err = run(capsys, *cmd, "--profiles", tmp_path / "tp8.csv", *FAST, "--json", tmp_path / "r.json")
        assert code in (0, 1), err
        sources = json.loads((tmp_path / "r.json").read_text())["inputs"]["latency_sources"]
        assert sources["dgx-h100"].startswith("estimated from data sheets")


def test_a_cluster_whose_machines_cannot_hold_its_model_names_the_cluster_file(capsys, write):
    cluster = write("tp1.toml", SMALL + 'model = "llama2-70b"\ntensor_parallel = 1\n')
    code, out, err = run(capsys, "check", cluster, "--rps", 5, *FAST)
    assert code == 2 and err.startswith(f"error: cluster file {cluster} (llama2-70b at TP1 on dgx-h100): ")
    assert len(err.strip().splitlines()) == 1


def test_headroom_never_passes_a_cluster_that_fails_at_the_rate_asked_for(capsys, write):
    """Each rate is its own stream: near its limit a cluster can hold 42.75 req/s and fail 36. A gate
    with --headroom must be stricter than one without: it checks the rate itself too."""
    ha = write("ha.toml", 'design = "HA"\nprompt_machines = 17\ntoken_machines = 2\n')
    args = ["--rps", 36, "--duration", 30, "--quiet", "--seeds", 1]
    code, out, _ = run(capsys, "check", ha, *args)
    assert code == 1 and "TBT P99" in out
    code, out, _ = run(capsys, "check", ha, *args, "--headroom", 0.1875)
    assert code == 1
    assert "42.75 req/s (36 req/s + 19% headroom)" in out and out.count("PASS:") == 1 and out.count("FAIL:") == 1
    # the gate's verdict is the last line: a CI log's tail read PASS (the rate itself) on a failed gate
    assert out.strip().splitlines()[-1] == "check FAILED: 36 req/s with 19% headroom (fails at 36 req/s)"


def test_check_and_capacity_on_a_machine_named_in_upper_case(capsys, write):
    """A catalog entry [machines.B200] named by a cluster file: once a KeyError (exit 3) in check and capacity."""
    machines = write("m.toml", '[machines.B200]\nhardware = "h100-80gb"\ngpus = 8\nhbm_gib_per_gpu = 80\n'
                               'cost = 4.0\npower = 40.0\n')
    for cluster in (SMALL + 'prompt_machine_type = "B200"\n', 'design = "B200:dgx-a100"\nprompt_machines = 4\n'
                                                                 'token_machines = 2\n'):
        f = write("b.toml", cluster)
        code, out, err = run(capsys, "check", f, "--rps", 5, *FAST, "--machines-file", machines)
        assert code == 0, out + err
        assert "PASS" in out and "B200:" in out   # (its display name: B200:H100, B200:A100)
    code, out, err = run(capsys, "capacity", f, *FAST, "--machines-file", machines)
    assert code == 0 and "req/s" in out, out + err


LLAMA = ('design = "b200:b200"\nprompt_machines = 2\ntoken_machines = 1\nmodel = "llama-3.1-70b"\n'
         'tensor_parallel = 8\n')   # a model no shipped profile measured: its latencies estimated, as the plan's


@pytest.mark.parametrize("rps, holds", [(10, True), (120, False)])
def test_check_gates_a_model_with_estimated_latencies_as_simulate_judges_it(capsys, write, tmp_path, rps, holds):
    # check once read the profile table itself and refused such a model ("unknown model 'llama-3.1-70b'")
    args = ["--rps", rps, "--workload", "conversation", *FAST]
    code, out, err = run(capsys, "check", write("llama.toml", LLAMA), *args, "--json", tmp_path / "c.json")
    assert code in (0, 1), out + err
    sim_code, out, err = run(capsys, "simulate", "--design", "B200:B200", "--prompt", 2, "--token", 1, "--model",
                             "llama-3.1-70b", *args, "--json", tmp_path / "s.json")
    assert sim_code == 0, out + err
    checked, simulated = (json.loads((tmp_path / f).read_text()) for f in ("c.json", "s.json"))
    assert "estimated from data sheets" in checked["inputs"]["latency_sources"]["dgx-b200"]
    result = simulated["results"][0]
    assert result["slo"]["met"] is holds and code == (0 if holds else 1)
    for metric, pcts in result["slowdown"].items():
        assert checked["results"][0]["slowdown"][metric] == pytest.approx(pcts, rel=1e-9)
