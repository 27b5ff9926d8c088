"""``splitwise-plan simulate`` and ``sweep``: tables, JSON, CSV, plots and one-line errors.

Short streams (20 s at 5-10 req/s) and the discrete-event method keep these fast.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from splitwise_plan.cli import main
from splitwise_plan.inputs.workloads import load_workload

FAST = ["--duration", "20", "--method", "events", "--quiet"]
ISSUE3_KEYS = {"design", "model", "prompt_machines", "token_machines", "machines", "requests", "completed",
               "latency_s", "slowdown", "slo", "cost", "power"}


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, out, err):
    assert code == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err


# --- the fluid model's caution -------------------------------------------------------------------

def test_the_fluid_method_cautions_where_a_token_instance_holds_few_kv_caches(capsys, tmp_path):
    """Llama2-70B at TP2 keeps about 7 mean coding requests' KV caches an instance, where the fluid model
    reads up to 3x the oracle (README, known limits of the fluid model): sweep, simulate and check say so, even with --quiet,
    and name the way out; at TP4, with BLOOM-176B, or with the oracle they say nothing of it."""
    tp2 = ["--model", "llama2-70b", "--tp", 2, "--rps", 5, "--duration", 20, "--quiet"]
    cluster = tmp_path / "tp2.toml"
    cluster.write_text('design = "HA"\nprompt_machines = 7\ntoken_machines = 6\nmodel = "llama2-70b"\n'
                       'tensor_parallel = 2\n')
    for argv in (("sweep", "--design", "HA", "--prompt", "7:8", "--token", 6, "--method", "fluid", *tp2),
                 ("simulate", "--design", "HH", "--prompt", 7, "--token", 6, "--method", "fluid", *tp2, "--json"),
                 ("check", cluster, "--method", "fluid", *tp2[4:])):
        code, out, err = run(capsys, *argv)
        assert code in (0, 1), err   # (check: 1 where the cluster fails)
        held = re.search(r"caution: a token instance of splitwise-h[ah] holds about (\d+) of", err)
        assert held and 4 <= int(held.group(1)) <= 10, err   # 37 GB of ~2 GB coding requests (a 20 s stream's mean)
        assert "--method events" in err and "caution" not in out
    for argv in (("sweep", "--design", "HA", "--prompt", "7:8", "--token", 6, *tp2, "--method", "events"),
                 ("sweep", "--design", "HA", "--prompt", "7:8", "--token", 6, *tp2[:2], "--tp", 4, *tp2[4:]),
                 ("sweep", "--design", "HA", "--prompt", "7:8", "--token", 6, "--rps", 5, "--duration", 20, "--quiet"),
                 ("sweep", "--design", "A100", "--machines", "7:8", *tp2),
                 ("check", cluster, *tp2[4:])):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert "caution" not in err, argv


def test_the_fluid_method_cautions_on_a_bursty_trace(capsys, tmp_path):
    """In bursts the fluid model can read TBT P99 low near the frontier (README, known limits): a sweep of a
    Splitwise design on a trace whose busiest 10 s run at about 2.2x its mean rate says so, even with --quiet;
    the same trace evened out, a baseline, or the oracle say nothing of it."""
    import numpy as np

    from splitwise_plan.inputs.workloads import RequestStream
    steady = load_workload("coding").generate(4.0, duration_s=60.0, seed=3)
    extra = load_workload("coding").generate(8.0, duration_s=10.0, seed=4)
    a = np.concatenate([steady.arrival_s, extra.arrival_s + 20.0])
    order = np.argsort(a, kind="stable")
    burst = RequestStream(a[order], np.concatenate([steady.prompt_tokens, extra.prompt_tokens])[order],
                          np.concatenate([steady.output_tokens, extra.output_tokens])[order])
    burst.to_csv(tmp_path / "burst.csv")
    even = RequestStream(np.linspace(0.0, burst.arrival_s[-1], len(burst)), burst.prompt_tokens, burst.output_tokens)
    even.to_csv(tmp_path / "even.csv")
    grid = ["--prompt", "2:3", "--token", 1, "--quiet"]
    code, out, err = run(capsys, "sweep", "--design", "HH", *grid, "--trace", tmp_path / "burst.csv")
    assert code == 0, err
    said = re.search(r"caution: this stream's busiest 10 s arrive at ([\d.]+)x its mean rate", err)
    assert said and 2.0 <= float(said.group(1)) <= 2.6, err   # (4 + 8) / (4 + 8 / 6) = 2.25 at the rates' means
    assert "--method events" in err and "caution:" not in out
    for argv in (("sweep", "--design", "HH", *grid, "--trace", tmp_path / "even.csv"),
                 ("sweep", "--design", "A100", "--machines", "2:3", "--quiet", "--trace", tmp_path / "burst.csv"),
                 ("sweep", "--design", "HH", *grid, "--trace", tmp_path / "burst.csv", "--method", "events")):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert "caution:" not in err, argv


def test_a_sweep_simulates_event_by_event_where_the_fluid_model_is_unreliable(capsys, tmp_path):
    """By default (--method auto) a grid where a token instance holds few KV caches (Llama2-70B TP2) is
    simulated by the oracle, as `simulate` does each point, and says so even with --quiet; with
    --method fluid it is not (and cautions instead); BLOOM-176B at TP8 stays with the fluid model."""
    tp2 = ["--model", "llama2-70b", "--tp", 2, "--rps", 30, "--duration", 20, "--quiet"]
    code, out, err = run(capsys, "sweep", "--design", "HA", "--prompt", "2:3", "--token", 2, *tp2,
                         "--json", tmp_path / "s.json")
    assert code == 0, err
    assert re.search(r"note: a token instance of splitwise-ha holds about \d+ .* simulated event by event", err), err
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["inputs"]["method"] == "events"
    for row in doc["results"]:
        code, out, err = run(capsys, "simulate", "--design", "HA", "--prompt", row["prompt_machines"],
                             "--token", row["token_machines"], *tp2, "--json")
        assert code == 0, err
        assert json.loads(out)["latency_s"] == row["latency_s"]
    code, out, err = run(capsys, "sweep", "--design", "HA", "--prompt", "2:3", "--token", 2, *tp2,
                         "--method", "fluid", "--json", tmp_path / "f.json")
    assert code == 0 and "caution:" in err and "note:" not in err, err
    assert json.loads((tmp_path / "f.json").read_text())["inputs"]["method"] == "fluid"
    code, out, err = run(capsys, "sweep", "--design", "HA", "--prompt", "2:3", "--token", 2, *tp2[4:],
                         "--method", "AUTO", "--json", tmp_path / "b.json")
    assert code == 0 and "note:" not in err, err
    assert json.loads((tmp_path / "b.json").read_text())["inputs"]["method"] == "fluid"


def test_without_the_fluid_simulator_a_sweep_runs_event_by_event(capsys, monkeypatch):
    """A build without the fluid model: --method auto takes the oracle, --method fluid is one line, exit 2."""
    import splitwise_plan.sim.simulator as simulator
    monkeypatch.setattr(simulator, "fluid_available", lambda: False)
    args = ["sweep", "--design", "HH", "--prompt", "2:3", "--token", 1, "--rps", 5, "--duration", 20, "--quiet"]
    code, out, err = run(capsys, *args, "--json")
    assert code == 0 and json.loads(out)["inputs"]["method"] == "events", err
    code, out, err = run(capsys, *args, "--method", "fluid")
    assert code == 2 and err.strip().splitlines() == [
        "error: the fluid simulator is not available in this build; use --method events"], err


# --- simulate ----------------------------------------------------------------------------------

def test_simulate_table(capsys):
    code, out, err = run(capsys, "simulate", "--design", "HH", "--prompt", 2, "--token", 1, "--rps", 5, *FAST)
    assert code == 0, err
    for word in ("TTFT", "TBT", "E2E", "P50", "P90", "P99", "slowdown", "latency, s", "SLO limit",
                 "cost", "power", "method events"):
        assert word in out
    assert "Traceback" not in err
    # each row's numbers are the JSON's, seconds under "latency, s" and the slowdown under "slowdown"
    doc = json.loads(run(capsys, "simulate", "--design", "HH", "--prompt", 2, "--token", 1, "--rps", 5, *FAST,
                         "--json")[1])
    cells = [[c.strip() for c in line.split("\u2502")[1:-1]] for line in out.splitlines() if line.count("\u2502") > 6]
    shown = {(c[0].lower(), c[1].lower()): (float(c[2]), float(c[3])) for c in cells}
    assert len(shown) == 9
    for (metric, pct), (secs, slow) in shown.items():
        assert secs == pytest.approx(doc["latency_s"][metric][pct], rel=1e-3)
        assert slow == pytest.approx(doc["slowdown"][metric][pct], rel=1e-3)


def test_simulate_json_stdout_is_one_object_with_issue3_schema(capsys):
    code, out, err = run(capsys, "simulate", "--design", "splitwise-HH", "-p", 2, "-t", 1, "--rps", 5, *FAST, "--json")
    assert code == 0, err
    doc = json.loads(out)  # nothing else on stdout
    assert ISSUE3_KEYS <= set(doc)
    assert doc["design"] == "splitwise-hh" and doc["machines"] == 3
    for block in ("latency_s", "slowdown"):
        assert set(doc[block]) == {"ttft", "tbt", "e2e"}
        for m in doc[block].values():
            assert {"p50", "p90", "p99"} <= set(m)
    assert isinstance(doc["slo"]["met"], bool) and isinstance(doc["slo"]["violations"], list)


def test_one_design_point_defaults_to_the_discrete_event_method_and_a_grid_to_the_fluid_one(capsys, tmp_path):
    from splitwise_plan.sim.simulator import Simulator
    args = ["--design", "HH", "-p", 2, "-t", 1, "--rps", 8, "--duration", 20, "--quiet", "--json"]
    code, out, err = run(capsys, "simulate", *args)
    assert code == 0, err
    stream = load_workload("coding").generate(8, duration_s=20, seed=0)
    for method in ("events", "fluid"):
        r = Simulator(stream, method=method).run("HH", 2, 1)
        same = json.loads(out)["latency_s"] == json.loads(json.dumps(r.to_dict()["latency_s"]))
        assert same == (method == "events"), method
    code, out, err = run(capsys, "sweep", "--design", "HH", "--prompt", "2:3", "--token", "1", "--rps", 8,
                         "--duration", 20, "--quiet", "--json", tmp_path / "s.json")
    assert code == 0, err
    assert json.loads((tmp_path / "s.json").read_text())["inputs"]["method"] == "fluid"


def test_simulate_says_when_it_stopped_an_overloaded_design(capsys):
    code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 1, "-t", 1, "--rps", 40, "--duration", 60)
    assert code == 0, err
    assert "overloaded: a prompt waited over 30 s" in out and "method events" in out


def test_simulate_exit_0_when_slos_fail(capsys):
    code, out, err = run(capsys, "simulate", "--design", "hh", "-p", 1, "-t", 1, "--rps", 10, *FAST, "--json")
    assert code == 0
    assert json.loads(out)["slo"]["met"] is False


def test_a_workload_file_is_reported_as_the_file_not_a_shipped_workload(capsys, tmp_path, monkeypatch):
    """Her own sizes in a file named coding.csv are hers: the report names the file, never the
    shipped coding workload it would read as."""
    (tmp_path / "sub").mkdir()
    load_workload("conversation").generate(20, duration_s=30, seed=0).to_csv(tmp_path / "sub" / "coding.csv")
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 2, "-t", 1, "--rps", 5, *FAST,
                         "--workload", "sub/coding.csv", "--json", "r.json")
    assert code == 0, err
    assert json.loads((tmp_path / "r.json").read_text())["inputs"]["workload"] == "sub/coding.csv"
    assert "sub/coding.csv at 5 req/s" in out

def test_simulate_json_and_csv_files(capsys, tmp_path):
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, err = run(capsys, "simulate", "--design", "a100", "--machines", 3, "--rps", 5, *FAST, "--seeds", 1,
                         "--seed", 3, "--json", j, "--csv", c)
    assert code == 0, err
    doc = json.loads(j.read_text())
    assert doc["schema_version"] == 2 and doc["command"] == "simulate"
    inputs = doc["inputs"]
    for key in ("model", "workload", "rate_rps", "duration_s", "seed", "slo_file", "machines_file",
                "machine_catalog", "method"):
        assert key in inputs
    assert inputs["seed"] == 3 and inputs["rate_rps"] == 5 and inputs["workload"] == "coding"
    assert doc["tool"]["version"]
    assert len(doc["results"]) == 1 and ISSUE3_KEYS <= set(doc["results"][0])
    assert doc["results"][0]["design"] == "baseline-a100" and doc["results"][0]["token_machines"] == 0
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 1 and rows[0]["design"] == "baseline-a100"
    assert "TTFT" in out  # the table is still printed


def test_simulate_writes_one_row_per_request(capsys, tmp_path):
    f = tmp_path / "requests.csv"
    code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 2, "-t", 1, "--rps", 5, *FAST, "--requests", f)
    assert code == 0, err
    rows = list(csv.DictReader(f.open()))
    n = len(load_workload("coding").generate(5.0, duration_s=20.0, seed=0))
    assert len(rows) == n and [int(r["request"]) for r in rows] == list(range(n))
    assert set(rows[0]) == {"request", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tbt_s", "e2e_s",
                            "ttft_slowdown", "tbt_slowdown", "e2e_slowdown", "finished"}
    r = rows[0]
    assert float(r["tbt_s"]) == pytest.approx((float(r["e2e_s"]) - float(r["ttft_s"])) / int(r["output_tokens"]))
    assert_user_error(*run(capsys, "simulate", "--design", "HH", "-p", 2, "-t", 1, "--rps", 5, *FAST,
                           "--requests", tmp_path / "no" / "dir.csv"))


def test_simulate_trace_replay(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    load_workload("conversation").generate(5, duration_s=15, seed=1).to_csv(trace)
    j = tmp_path / "r.json"
    code, out, err = run(capsys, "simulate", "--design", "HA", "-p", 2, "-t", 1, "--trace", trace,
                         "--method", "events", "--quiet", "--json", j)
    assert code == 0, err
    doc = json.loads(j.read_text())
    assert doc["inputs"]["trace"] == str(trace) and doc["inputs"]["seed"] is None
    assert doc["results"][0]["requests"] == doc["inputs"]["requests"] > 0


def test_a_trace_with_a_rate_is_the_trace_time_scaled_to_it(capsys, tmp_path):
    """--trace with --rps replays the trace at that rate (as a plan over a trace and check --headroom
    replay it): the same results as the file with every arrival time scaled by hand. It was refused,
    so a max-throughput answer over a trace could not be simulated at its rate."""
    from splitwise_plan.inputs.workloads import RequestStream, load_trace
    trace, by_hand = tmp_path / "t.csv", tmp_path / "t2.csv"
    load_workload("coding").generate(4, duration_s=20, seed=1).to_csv(trace)
    own = load_trace(trace)
    k = own.rate / 10.0
    RequestStream(own.arrival_s * k, own.prompt_tokens, own.output_tokens).to_csv(by_hand)
    docs = []
    for args in (["--trace", trace, "--rps", 10], ["--trace", by_hand]):
        code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 2, "-t", 1, *args, "--method", "events",
                             "--json", "-")
        assert code == 0, err
        docs.append(json.loads(out))
    assert docs[0]["latency_s"] == docs[1]["latency_s"] and docs[0]["requests"] == len(own)
    code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 2, "-t", 1, "--trace", trace, "--rps", 10,
                         "--method", "events", "--quiet")
    assert f"time-scaled from {own.rate:.4g} to 10 req/s" in out


@pytest.mark.parametrize("args", [
    ["--design", "XX", "-p", 1, "-t", 1, "--rps", 5],                      # unknown design
    ["--design", "HH", "-p", 1, "--rps", 5],                               # missing token count
    ["--design", "HH", "--rps", 5],                                        # missing counts
    ["--design", "A100", "--rps", 5],                                      # baseline without --machines
    ["--design", "A100", "-p", 2, "-t", 1, "--rps", 5],                    # baseline with pools
    ["--design", "HH", "--machines", 3, "--rps", 5],                       # Splitwise with --machines
    ["--design", "HH", "-p", 0, "-t", 1, "--rps", 5],                      # zero machines
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--model", "gpt-9"],  # unknown model
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 0],                      # non-positive rps
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", -5],
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", "abc"],                  # not a number
    ["--design", "HH", "-p", 1, "-t", 1],                                  # no rate, no trace
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--duration", 0],
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--tp", 3],           # no profile at TP3
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--workload", "nope"],
    ["--design", "HH", "-p", 1, "-t", 1, "--trace", "missing.csv"],
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--trace", "x.csv"],  # a missing trace to scale
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--slo", "missing.toml"],
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--machines-file", "missing.toml"],
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--method", "magic"],
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--json", "/no/such/dir/r.json"],  # unwritable
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--csv", "/no/such/dir/r.csv"],
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--no-such-option"],
    ["-p", 1, "-t", 1, "--rps", 5],                                        # no design
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--transfer", "rdma"],   # unknown transfer mode
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--bandwidth", 0],       # no bandwidth
    ["--design", "HH", "-p", 1, "-t", 1, "--rps", 5, "--bandwidth", "inf"],
])
def test_simulate_bad_input_is_one_line_exit_2(capsys, args):
    assert_user_error(*run(capsys, "simulate", "--method", "events", "--duration", 5, *args))


EXAMPLE_CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"


@pytest.mark.parametrize("value", ["0", "-5", "inf"])
def test_a_bad_rate_reads_the_same_in_every_command(capsys, value):
    """The plan, simulate, sweep and check each name --rps and what is wrong with it in the same words."""
    said = set()
    for argv in (["--rps", value], ["simulate", "--design", "HH", "-p", 1, "-t", 1, "--rps", value],
                 ["sweep", "--design", "HH", "--prompt", "1:2", "--token", "1", "--rps", value],
                 ["check", EXAMPLE_CLUSTER, "--rps", value]):
        code, out, err = run(capsys, *argv)
        assert_user_error(code, out, err)
        said.add(err.strip())
    assert said == {f"error: --rps must be positive and finite, got {float(value)!r}"}


def test_output_path_is_a_directory(capsys, tmp_path):
    assert_user_error(*run(capsys, "simulate", "--design", "HH", "-p", 1, "-t", 1, "--rps", 5, *FAST,
                           "--csv", tmp_path))


def test_an_output_never_overwrites_an_input(capsys, tmp_path):
    """--json, --csv or --requests naming the trace, the SLO or machine file is refused before it is replaced."""
    trace, slo = tmp_path / "t.csv", tmp_path / "s.toml"
    load_workload("coding").generate(5, duration_s=10, seed=1).to_csv(trace)
    slo.write_text((Path(__file__).parents[2] / "slos" / "paper.toml").read_text())
    before = trace.read_bytes(), slo.read_bytes()
    for args in (["--trace", trace, "--csv", trace], ["--trace", trace, "--requests", trace],
                 ["--rps", 5, "--duration", 10, "--slo", slo, "--json", slo],
                 ["--trace", trace, "--slo", slo, "--json", str(tmp_path / "." / "s.toml")]):
        code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 2, "-t", 1, "--method", "events",
                             "--quiet", *args)
        assert_user_error(code, out, err)
        assert "writing it would replace that input" in err
    assert (trace.read_bytes(), slo.read_bytes()) == before
    code, out, err = run(capsys, "--goal", "min-cost", "--trace", trace, "--designs", "HH", "--csv", trace)
    assert_user_error(code, out, err)
    assert "writing it would replace that input" in err and trace.read_bytes() == before[0]


@pytest.mark.parametrize("flag", ["--json", "--csv", "--requests", "--json={}", "--csv={}"])
def test_an_output_path_ending_in_a_slash_names_a_folder(capsys, tmp_path, flag):
    """Path() drops the slash: "out/" once wrote a file named out."""
    folder = f"{tmp_path / 'out'}/"
    args = [flag.format(folder)] if "=" in flag else [flag, folder]
    code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 1, "-t", 1, "--rps", 5, *FAST, *args)
    assert_user_error(code, out, err)
    assert "names a folder" in err and not (tmp_path / "out").exists()
    code, out, err = run(capsys, "--rps", 5, "--designs", "HH", "--duration", 5, *args)   # the planner too
    assert_user_error(code, out, err)
    assert "names a folder" in err and not (tmp_path / "out").exists()


def test_model_and_machine_names_in_any_case(capsys, tmp_path):
    cluster = tmp_path / "c.toml"
    cluster.write_text('design = "HH"\nprompt_machines = 4\ntoken_machines = 2\nprompt_machine_type = "DGX-H100"\n'
                       'model = "Llama2-70B"\n')
    machines = tmp_path / "m.toml"
    machines.write_text("[machines.DGX-H100]\ncost = 5.0\n")   # overrides the builtin dgx-h100's cost
    code, out, err = run(capsys, "simulate", "--design", "hh", "-p", 4, "-t", 2, "--rps", 5, *FAST,
                         "--model", "LLAMA2-70B", "--machines-file", machines, "--json", "-")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"] == "llama2-70b" and doc["cost"] == pytest.approx(6 * 5.0)
    code, out, err = run(capsys, "check", cluster, "--rps", 5, "--duration", 20, "--json", "-")
    assert code in (0, 1), err
    assert json.loads(out)["inputs"]["model"] == "llama2-70b"
    # two tables that differ only in case would be one machine: refused, not merged
    machines.write_text("[machines.mybox]\nhardware = 'h100-80gb'\ngpus = 8\nhbm_gib_per_gpu = 80\ncost = 1\n"
                        "power = 1\n[machines.MyBox]\ncost = 2\n")
    code, out, err = run(capsys, "simulate", "--design", "HH", "-p", 4, "-t", 2, "--rps", 5, *FAST,
                         "--machines-file", machines)
    assert_user_error(code, out, err)
    assert "name one machine" in err


# --- sweep -----------------------------------------------------------------------------------------

def test_sweep_csv_json_plot(capsys, tmp_path):
    c, j, png = tmp_path / "s.csv", tmp_path / "s.json", tmp_path / "s.png"
    code, out, err = run(capsys, "sweep", "--design", "HH", "--prompt", "1:3", "--token", "1,2", "--rps", 5,
                         *FAST, "--csv", c, "--json", j, "--plot", png)
    assert code == 0, err
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == 3 * 2
    assert {(int(r["prompt_machines"]), int(r["token_machines"])) for r in rows} == {
        (p, t) for p in (1, 2, 3) for t in (1, 2)}
    for col in ("cost", "power", "slo_met", "ttft_p99_slowdown", "tbt_p50_s", "tightest_ratio"):
        assert col in rows[0]
    doc = json.loads(j.read_text())
    assert doc["schema_version"] == 2 and doc["command"] == "sweep" and len(doc["results"]) == 6
    assert doc["sweep"]["points"] == 6
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_sweeps_csv_json_and_html_give_each_point_the_same_numbers(capsys, tmp_path):
    """Each CSV cell is the JSON's value of that point, in its column (latency in seconds under ``_s``,
    slowdown under ``_slowdown``, each pool's utilization under its name), and the HTML table names
    each point's tightest SLO as the CSV does (it left that column empty)."""
    c, j, h = tmp_path / "s.csv", tmp_path / "s.json", tmp_path / "s.html"
    code, _, err = run(capsys, "sweep", "--design", "HH", "--prompt", "1:3", "--token", "1,2", "--rps", 5,
                       *FAST, "--csv", c, "--json", j, "--plot", h)
    assert code == 0, err
    rows = {(int(r["prompt_machines"]), int(r["token_machines"])): r for r in csv.DictReader(c.open())}
    docs = {(d["prompt_machines"], d["token_machines"]): d for d in json.loads(j.read_text())["results"]}
    assert rows.keys() == docs.keys()
    page = h.read_text()
    for key, d in docs.items():
        row = rows[key]
        for m in ("ttft", "tbt", "e2e"):
            for p in ("p50", "p90", "p99"):
                assert float(row[f"{m}_{p}_s"]) == pytest.approx(d["latency_s"][m][p], rel=1e-12)
                assert float(row[f"{m}_{p}_slowdown"]) == pytest.approx(d["slowdown"][m][p], rel=1e-12)
        for pool in ("prompt", "token"):
            assert float(row[f"{pool}_utilization"]) == pytest.approx(d["pool_utilization"][pool], abs=1e-6)
        assert row["tightest_slo"] and f"<td>{row['tightest_slo']}</td>" in page
    # latency and slowdown are not one number twice: a request's TTFT alone is about its prompt's time
    # on a DGX-A100 (well under a second at these sizes), and a slowdown is that ratio
    light = docs[(3, 2)]
    assert light["slowdown"]["ttft"]["p50"] != pytest.approx(light["latency_s"]["ttft"]["p50"], rel=0.05)


@pytest.mark.parametrize("spec, n", [("2:6:2", 3), ("4", 1), ("1,3,5", 3), ("1:2,5", 3)])
def test_sweep_range_forms(capsys, tmp_path, spec, n):
    c = tmp_path / "s.csv"
    code, out, err = run(capsys, "sweep", "--design", "A100", "--machines", spec, "--rps", 5, *FAST, "--csv", c)
    assert code == 0, err
    rows = list(csv.DictReader(c.open()))
    assert len(rows) == n
    # each row names its stream, as the plan's rows do: sweeps at several rates can be stacked
    assert {(r["rate_rps"], r["seed"]) for r in rows} == {("5.0", "0")}


@pytest.mark.parametrize("ext", ["svg", "html"])
def test_sweep_plot_formats(capsys, tmp_path, ext):
    p = tmp_path / f"s.{ext}"
    code, out, err = run(capsys, "sweep", "--design", "hh", "-p", "1:2", "-t", "1:2", "--rps", 5, *FAST, "--plot", p)
    assert code == 0, err
    text = p.read_text()
    assert "<svg" in text
    if ext == "html":
        assert "<table>" in text


def test_the_kv_transfer_is_an_input_of_every_report(capsys, tmp_path):
    args = ("--design", "HH", "-p", 2, "-t", 1, "--rps", 5, *FAST)
    code, out, err = run(capsys, "simulate", *args, "--transfer", "LayerWise", "--bandwidth", 50)
    assert code == 0, err
    assert "KV transfer layerwise at 50 GiB/s" in out
    code, out, err = run(capsys, "simulate", *args, "--transfer", "layerwise", "--bandwidth", 50, "--json")
    over = json.loads(out)
    code, out, err = run(capsys, "simulate", *args, "--json")
    serial = json.loads(out)
    # layer-wise at 50 GiB/s moves the KV cache as if at 500 GiB/s: decodes start sooner than at 200
    assert over["latency_s"]["e2e"]["p50"] < serial["latency_s"]["e2e"]["p50"]
    code, out, err = run(capsys, "sweep", "--design", "HH", "-p", "1:2", "-t", 1, "--rps", 5, *FAST, "--json",
                         "--bandwidth", 12.5)
    assert code == 0, err
    assert json.loads(out)["inputs"]["kv_transfer"] == {"mode": "serialized", "bandwidth_gib_s": 12.5}


def test_a_stopped_sweep_with_no_file_says_it_kept_nothing(capsys, monkeypatch):
    import splitwise_plan.cli.simulate as cs

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cs, "run_grid", stop)
    code, out, err = run(capsys, "sweep", "--design", "HH", "--prompt", "1:3", "--token", "1,2", "--rps", 5, *FAST,
                         "--json", "-")
    assert code != 0 and "stopped: nothing is kept" in err


def test_sweep_json_stdout(capsys):
    code, out, err = run(capsys, "sweep", "--design", "HH", "-p", "1:2", "-t", 1, "--rps", 5, *FAST, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["results"]) == 2 and doc["schema_version"] == 2


@pytest.mark.parametrize("args", [
    ["--design", "HH", "--prompt", "5:3", "--token", "1"],          # reversed range
    ["--design", "HH", "--prompt", "1:3:0", "--token", "1"],        # zero step
    ["--design", "HH", "--prompt", "a:b", "--token", "1"],          # not numbers
    ["--design", "HH", "--prompt", "1:2:3:4", "--token", "1"],
    ["--design", "HH", "--prompt", "0:3", "--token", "1"],          # zero machines
    ["--design", "HH", "--prompt", "1:3"],                          # missing token range
    ["--design", "A100", "--prompt", "1:3", "--token", "1"],        # baseline with pools
    ["--design", "nope", "--prompt", "1:3", "--token", "1"],
    ["--design", "HH", "--prompt", "1:2", "--token", "1", "--plot", "x.pdf"],   # bad plot extension
    ["--design", "HH", "--prompt", "1:2", "--token", "1", "--plot", "/no/such/dir/x.png"],
])
def test_sweep_bad_input(capsys, args):
    assert_user_error(*run(capsys, "sweep", "--rps", 5, "--method", "events", "--duration", 5, *args))


@pytest.mark.parametrize("method", ["events", "fluid"])
@pytest.mark.parametrize("design", [["-d", "HH", "-p", "2:8:3", "-t", "1:2"], ["-d", "H100", "-m", "2:14:6"]])
def test_stop_early_keeps_the_verdicts_and_the_passing_rows(capsys, design, method):
    """Either simulator stops a design once its SLOs can no longer hold (the oracle on its finished requests,
    the fluid model on lower bounds; a fluid baseline once ran in full, with a note): against the full sweep,
    the same verdicts, the passing rows unchanged, the failing ones stopped with fewer requests done
    (the fluid model judges every 256 requests: a design it cannot yet decide runs on as in full)."""
    args = ["sweep", *design, "--rps", 12, "--duration", 20 if method == "events" else 60, "--method", method, "--quiet"]
    full, early = (json.loads(run(capsys, *args, *extra, "--json")[1])["results"] for extra in ([], ["--stop-early"]))
    assert [r["slo"]["met"] for r in early] == [r["slo"]["met"] for r in full]
    assert any(r["slo"]["met"] for r in full) and any(r["stopped_early"] for r in early)
    for a, b in zip(full, early):
        if a["slo"]["met"] or (method == "fluid" and not b["stopped_early"]):
            assert a == b
        else:
            assert b["stopped_early"] and b["completed"] < a["completed"], (a, b)
