"""The plan's winner as a cluster file (``--cluster-out``), and the gate that re-checks it on the plan's streams.

Truth: the plan's own confirmation. A cluster file holds the plan's model, stack, TPs, rate, workload, duration,
seed and seeds, so ``check`` at the planned rate runs the streams the plan confirmed its answer on (the same
tightest SLO to the digit); at 1.5 times the rate the thin-headroom winner fails.
"""

from __future__ import annotations

import json
import tomllib

from splitwise_plan.cli import main


def test_plan_then_check_its_winner_on_a_model_that_is_not_the_papers(tmp_path, capsys):
    out, report = tmp_path / "cluster.toml", tmp_path / "plan.json"
    assert main(["--rps", "30", "--model", "llama-3.1-70b", "--workload", "conversation", "--designs", "H100:H100",
                 "--tp", "8", "--seeds", "2", "--duration", "60", "--cluster-out", str(out), "--json", str(report),
                 "-q"]) == 0
    capsys.readouterr()
    doc = tomllib.loads(out.read_text())
    plan = json.loads(report.read_text())
    winner = next(d for d in plan["results"] if d["design"] == plan["plan"]["winner"])
    assert (doc["prompt_machines"], doc["token_machines"]) == (winner["prompt_machines"], winner["token_machines"])
    assert (doc["model"], doc["tensor_parallel"], doc["stack"], doc["rps"]) == ("llama-3.1-70b", 8, "vllm", 30.0)
    assert (doc["workload"], doc["duration"], doc["seed"], doc["seeds"]) == ("conversation", 60.0, 0, 2)

    assert main(["check", str(out), "--json", str(tmp_path / "check.json"), "-q"]) == 0   # the planned rate
    check = json.loads((tmp_path / "check.json").read_text())
    tight = winner["tightest"]
    worst = max(r["slowdown"][tight["metric"]][f"p{tight['percentile']}"] for r in check["results"])
    assert abs(worst - tight["value"]) < 1e-9   # the plan's streams, simulated alike
    assert main(["check", str(out), "--rps", "45", "-q"]) == 1   # 1.5x
    capsys.readouterr()
    assert main(["capacity", str(out), "-q"]) == 0
    held = float(capsys.readouterr().out.split(": ")[1].split(" req/s")[0])
    assert 30 <= held < 45


def test_a_bad_plan_key_in_a_cluster_file_is_one_line(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('design = "HH"\nprompt_machines = 2\ntoken_machines = 1\nseeds = 0\n')
    assert main(["check", str(f), "--rps", "5"]) == 2
    err = capsys.readouterr().err
    assert "seeds must be at least 1" in err and len(err.strip().splitlines()) == 1
