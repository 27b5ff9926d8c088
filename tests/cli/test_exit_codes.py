"""Exit statuses a pipeline can use (0 an answer, 1 no design meets the goal or the gate fails, 2 bad
input, 130 interrupted), failing fast within memory, and the options the commands share (--rps lists,
--seeds, --margin, --trace and --model for capacity) with their help."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from splitwise_plan.cli import main
from splitwise_plan.cli.options import parse_rates
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs import workloads

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "examples" / "cluster.toml"   # Splitwise-HH 27P+3T: holds about 73 req/s of coding
SMALL = 'design = "HH"\nprompt_machines = 4\ntoken_machines = 2\n'   # holds the SLOs at 5 req/s
FAST = ["--duration", "20", "--method", "events", "--quiet"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


# --- 1. exit statuses ------------------------------------------------------------------------------------

def test_a_budget_too_small_for_any_design_exits_1(capsys):
    code, out, err = run(capsys, "--budget-power", "1xA100", "--designs", "HH,A100", "-q")
    assert code == 1, out + err
    assert "No design meets" in out


def test_every_help_names_the_exit_statuses_and_no_bool_placeholder(capsys):
    from splitwise_plan.cli import app
    commands = [i.name for i in app.registered_commands]
    for argv in [["--help"], *([c, "--help"] for c in commands)]:
        code, out, _ = run(capsys, *argv)
        assert code == 0
        text = " ".join(out.split())
        assert "Exit status: 0 an answer; 1 no design meets the goal" in text and "130 interrupted" in text, argv
        assert "<bool>" not in out, argv


@pytest.mark.parametrize("command", ["simulate", "sweep", "check", "capacity", "worker", "profiles", "models", "workloads",
                                     "slos", "machines", "version"])
def test_each_command_shows_an_example(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0 and f"e.g. `splitwise-plan {command}" in " ".join(out.split())


def test_the_root_help_has_the_commands_panels(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "Advanced" in out and "Output" in out and "e.g." in out


# --- 2. failing fast, within memory -----------------------------------------------------------------------

def test_check_above_the_analytic_bound_fails_at_once(capsys, tmp_path):
    j = tmp_path / "c.json"
    code, out, err = run(capsys, "check", CLUSTER, "--rps", 100000, "-q", "--json", j)
    assert code == 1, err
    assert "100000 req/s is above the" in out and "can carry at most (analytic bound" in out
    doc = json.loads(j.read_text())
    assert doc["check"]["passed"] is False and doc["results"] == []
    assert doc["check"]["rates"][0]["analytic_bound_rps"] < 200


def test_a_large_stream_under_capacity_is_still_simulated(capsys):
    """70 req/s is under the cluster's capacity: over 100,000 requests the bound is asked, and lets it through."""
    code, out, err = run(capsys, "check", CLUSTER, "--rps", 70, "--duration", 1600, "-q")
    assert code in (0, 1), err
    assert "not simulated" not in out and ("PASS" in out or "SLOs" in out)


def test_the_bound_is_above_what_the_cluster_holds():
    """The analytic bound never rejects a rate the cluster holds: it is above the capacity found by simulation."""
    from splitwise_plan.cli.check import _load_spec
    from splitwise_plan.cli.inputs import rate_bound, resolve_inputs
    spec = _load_spec(CLUSTER, None)
    inp = resolve_inputs(model=spec.model, tp=8, workload="coding", rps=None, trace=None, duration=120, seed=0,
                         slo=None, machines_file=None, profiles=None, method="events", need_stream=False)
    assert rate_bound(inp, spec.design, 27, 3, None) > 74.0   # capacity: 73.12 req/s


def test_simulate_events_above_the_bound_exits_1_unsimulated(capsys):
    code, out, err = run(capsys, "simulate", "-d", "HH", "-p", 27, "-t", 3, "--rps", 100000, "-q")
    assert code == 1 and out == ""
    assert "is above the" in err and "--method fluid" in err


def test_a_stream_larger_than_memory_is_refused(capsys, monkeypatch):
    monkeypatch.setattr(workloads, "available_memory", lambda: 1 << 30)   # 1 GiB free
    code, out, err = run(capsys, "check", CLUSTER, "--rps", 60, "--duration", 100000)
    assert code == 2
    line = one_error_line(err)
    assert "--rps x --duration = 60 x 100000 s = 6,000,000 requests is more than" in line and "GiB" in line


def test_the_memory_cap_falls_back_to_a_fixed_one(monkeypatch):
    monkeypatch.setattr(workloads, "available_memory", lambda: None)
    assert workloads.max_stream_requests() == workloads.MAX_REQUESTS
    monkeypatch.setattr(workloads, "available_memory", lambda: 1 << 40)
    assert workloads.max_stream_requests() == workloads.MAX_REQUESTS


# --- 3. the shared options --------------------------------------------------------------------------------

def test_parse_rates():
    assert parse_rates("50,70") == [50.0, 70.0] and parse_rates(" 70 ") == [70.0] and parse_rates(None) is None
    assert parse_rates("50,50,60") == [50.0, 60.0]
    for bad, said in (("50,x", "'x' is not a number"), ("", "empty"), ("50,0", "must be positive")):
        with pytest.raises(SplitwisePlanError, match=said):
            parse_rates(bad)


def test_check_a_verdict_per_rate_exit_the_worst(capsys, write):
    small = write("small.toml", SMALL)
    code, out, err = run(capsys, "check", small, "--rps", "4,5", *FAST)
    assert code == 0, err
    assert [line.split(";")[0] for line in out.splitlines() if line.startswith("load:")] == [
        "load:  4 req/s", "load:  5 req/s"]
    assert "check PASSED: 2 rates" in out
    code, out, _ = run(capsys, "check", small, "--rps", "5,40", *FAST)
    assert code == 1 and "fails at 40 req/s" in out


def test_check_seeds_and_margin(capsys, write, tmp_path):
    small = write("small.toml", SMALL)
    c = tmp_path / "c.csv"
    code, out, err = run(capsys, "check", small, "--rps", 5, "--seeds", 3, *FAST, "--csv", c)
    assert code == 0, err
    assert "seeds 0..2" in out and "worst of 3 seeds" in out
    assert c.read_text().count("\n") == 4   # the header, a row per seed
    code, out, _ = run(capsys, "check", small, "--rps", 5, "--margin", 0.99, *FAST)
    assert code == 1 and "not with the margin" in out
    for bad in (["--seeds", 0], ["--margin", 1], ["--margin", -0.1]):
        code, _, err = run(capsys, "check", small, "--rps", 5, *bad, *FAST)
        assert code == 2 and bad[0] in one_error_line(err)


def test_capacity_takes_seeds_margin_model_and_a_trace(capsys, write, tmp_path):
    small = write("small.toml", SMALL)
    code, out, err = run(capsys, "capacity", small, "--seeds", 2, "--margin", 0.2, *FAST)
    assert code == 0, err
    assert "worst of seeds 0..1" in out and "margin 0.2" in out
    trace = tmp_path / "t.csv"
    workloads.load_workload("coding").generate(4, duration_s=30, seed=1).to_csv(trace)
    code, out, err = run(capsys, "capacity", small, "--trace", trace, "--method", "events", "-q")
    assert code == 0, err
    assert f"trace {trace} time-scaled" in out
    code, _, err = run(capsys, "capacity", small, "--trace", trace, "--duration", 30, "-q")
    assert code == 2 and "--duration" in one_error_line(err)
    code, out, err = run(capsys, "capacity", small, "--model", "llama2-70b", *FAST)
    assert code in (0, 1) and "llama2-70b" in out, err


def test_simulate_a_table_per_rate(capsys, tmp_path):
    j = tmp_path / "s.json"
    code, out, err = run(capsys, "simulate", "-d", "HH", "-p", 4, "-t", 2, "--rps", "4,5", *FAST, "--json", j)
    assert code == 0, err
    assert out.count("requests,") == 2 and "at 4 req/s" in out and "at 5 req/s" in out
    doc = json.loads(j.read_text())
    assert [r["rate_rps"] for r in doc["results"]] == [4.0, 5.0]
    code, _, err = run(capsys, "simulate", "-d", "HH", "-p", 4, "-t", 2, "--rps", "4,5", *FAST,
                       "--requests", tmp_path / "r.csv")
    assert code == 2 and "--requests" in one_error_line(err)


def test_the_plan_runs_once_per_rate(capsys, tmp_path, monkeypatch):
    """--rps 30,40 plans each rate (its files named by rate) and exits with the worst."""
    import splitwise_plan.cli.plan as cli_plan
    asked = []

    def fake(req, json_out, csv_out, plot, quiet, cluster_out=None):
        asked.append((req.rps, json_out))
        return SimpleNamespace(winner="splitwise-hh" if req.rps < 35 else None)   # no design meets the goal at 40
    monkeypatch.setattr(cli_plan, "_plan_and_report", fake)
    monkeypatch.setattr("splitwise_plan.report.plan.rates_table", lambda results: f"{len(results)} rates")
    code, _, err = run(capsys, "--goal", "min-cost", "--rps", "30,40", "--json", tmp_path / "p.json", "-q")
    assert code == 1, err
    assert asked == [(30.0, str(tmp_path / "p-30rps.json")), (40.0, str(tmp_path / "p-40rps.json"))]


# --- units in what the study commands print -----------------------------------------------------------

def test_check_names_slowdowns_with_their_seconds_and_limits(capsys, tmp_path):
    """A check line says what its numbers are: "TTFT P99 slowdown 3.91x (1.31 s) < 6x", the seconds
    being the run's own latency at that percentile (from the JSON report)."""
    import re
    report = tmp_path / "c.json"
    code, out, err = run(capsys, "check", CLUSTER, "--rps", "60", "--duration", "20", "--json", report)
    assert code == 0, out + err
    text = out + err
    m = re.search(r"tightest: (TTFT|TBT|E2E) P(\d+) slowdown ([\d.]+)x \(([\d.]+) s\) < ([\d.]+)x", text)
    assert m, text
    metric, pct = m.group(1).lower(), f"p{m.group(2)}"
    res = json.loads(report.read_text())["results"][0]
    assert float(m.group(3)) == pytest.approx(res["slowdown"][metric][pct], rel=5e-3)
    assert float(m.group(4)) == pytest.approx(res["latency_s"][metric][pct], rel=5e-3)


def test_simulate_and_sweep_print_costs_and_powers_with_the_catalogs_units(capsys, tmp_path):
    machines = tmp_path / "m.toml"
    machines.write_text('[units]\ncost = "EUR/h"\npower = "kW"\n'
                        '[machines.dgx-h100]\ncost = 80.0\n[machines.dgx-h100-cap]\ncost = 80.0\n'
                        '[machines.dgx-a100]\ncost = 38.0\n')
    code, out, err = run(capsys, "simulate", "--design", "HH", "--prompt", "4", "--token", "2", "--rps", "5",
                         "--machines-file", machines, "--method", "fluid", "--duration", "20")
    assert code == 0, err
    assert "cost 480.00 EUR/h, power 61.2 kW" in " ".join((out + err).split())
    code, out, err = run(capsys, "simulate", "--design", "HH", "--prompt", "4", "--token", "2", "--rps", "5",
                         "--machines-file", machines, "--method", "fluid", "--duration", "20", "--json")
    doc = json.loads(out)
    assert (doc["cost"], doc["cost_unit"], doc["power_unit"]) == (pytest.approx(480.0), "EUR/h", "kW")
    code, out, err = run(capsys, "sweep", "--design", "HH", "--prompt", "3:4", "--token", "1:2", "--rps", "5",
                         "--machines-file", machines, "--duration", "20")
    assert code == 0, err
    assert "EUR/h" in out + err and "kW" in out + err


@pytest.mark.parametrize("argv", [
    ["check", str(CLUSTER), "--rps", "60", "--duration", "40000"],   # 2.4M requests, simulated event by event
    ["--goal", "min-cost", "--rps", "280"],
])
def test_sigterm_ends_a_long_check_or_plan_with_one_line_and_exit_130(argv):
    """A cancelled CI job's SIGTERM, well into a long run: exit 130 and the one line of how far it got
    (benchmarks/bench_signals.py times it)."""
    import signal
    import subprocess
    import sys
    import time
    warm = subprocess.run([sys.executable, "-m", "splitwise_plan", "check", str(CLUSTER), "--rps", "5", "--duration",
                           "5", "-q"], capture_output=True, text=True, cwd=REPO)   # the kernels compiled and cached
    assert warm.returncode == 0, warm.stderr
    proc = subprocess.Popen([sys.executable, "-m", "splitwise_plan", *argv], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    time.sleep(2.5)
    assert proc.poll() is None, "the run ended before the signal (the test would prove nothing)"
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert proc.returncode == 130 and "stopped (SIGTERM)" in last and "Traceback" not in err, err


def test_an_slo_line_says_each_value_once_with_its_unit():
    """Hand-made rows: a slowdown with its seconds, one in seconds, and one left unknown by unfinished
    requests (its limit named once, not twice)."""
    from types import SimpleNamespace

    from splitwise_plan.cli.check import slo_text
    result = SimpleNamespace(latency_s={"ttft": {99: 1.31}, "e2e": {99: float("inf")}})
    slow = {"metric": "ttft", "percentile": 99, "value": 3.914, "limit": 6.0, "unit": "slowdown"}
    assert slo_text(slow, result) == "TTFT P99 slowdown 3.91x (1.31 s) < 6x"
    secs = {"metric": "tbt", "percentile": 90, "value": 0.0523, "limit": 0.1, "unit": "seconds"}
    assert slo_text(secs, result, ", limit < ") == "TBT P90 0.0523 s, limit < 0.1 s"
    lost = {"metric": "e2e", "percentile": 99, "value": float("inf"), "limit": 5.0, "unit": "slowdown"}
    assert slo_text(lost, result, ", limit < ") == "E2E P99 slowdown not finished (inf), limit < 5x"


def test_a_stop_landing_in_numbas_compiler_callback_is_sent_again():
    """SIGTERM while numba compiles a kernel can land in llvmlite's object-cache callback (called from C
    through ctypes), where a raised exception is printed and dropped: the run went on to the end and
    exited 0. There the handler sends the signal again instead, to land in plain Python."""
    import importlib
    import os
    import signal
    import threading

    entry = importlib.import_module("splitwise_plan.cli.main")
    ns: dict = {}
    exec(compile("import sys\nframe = sys._getframe()", os.path.join("x", "llvmlite", "binding", "executionengine.py"),
                 "exec"), ns)
    again = threading.Event()
    old = signal.signal(signal.SIGTERM, lambda signum, frame: again.set())
    try:
        entry._terminated(signal.SIGTERM, ns["frame"])   # returns, raising nothing where it would be dropped
        assert again.wait(10), "the signal was not sent again"
    finally:
        signal.signal(signal.SIGTERM, old)
