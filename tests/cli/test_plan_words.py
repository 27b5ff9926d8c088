"""What the plan command says, in words a planner reads: one name per design, the simulators named for what they
do, a buyer's units, how sure the answer is, one summary across several rates, and CSVs without ``inf``.

Truth: the plan's own JSON report (the table and lines must say what it holds) and hand arithmetic.
"""

from __future__ import annotations

import csv
import json

from splitwise_plan.cli import main

SMALL = ["--designs", "HH,H100", "--duration", "20", "--seeds", "1", "--jobs", "1"]


def test_the_plan_says_its_words_and_figures(tmp_path, capsys):
    report, table = tmp_path / "plan.json", tmp_path / "plan.csv"
    assert main(["--rps", "10", *SMALL, "--latency-error", "0.1", "--json", str(report), "--csv", str(table)]) == 0
    out = " ".join(capsys.readouterr().out.split())   # (the caption wraps)
    doc = json.loads(report.read_text())
    plan, winner = doc["plan"], next(d for d in doc["results"] if d["design"] == doc["plan"]["winner"])
    assert "splitwise-hh " not in out and "Splitwise-HH (H100:H100)" in out and "Baseline-H100" in out
    assert winner["display_name"] in out and "sims" not in out and "unconfirmed" not in out
    assert "search's fast model" in out and "event simulation's confirmations" in out
    roles = doc["inputs"]["simulators"]
    assert (roles["search"]["name"], roles["confirm"]["name"]) == ("fast model", "event simulation")
    assert winner["gpus"] == 8 * winner["machines"]
    assert winner["cost_per_month"] == round(winner["cost"] * 730, 2)
    per_m = winner["cost"] / (10 * plan["output_tokens_per_request"] * 3600) * 1e6
    assert abs(winner["cost_per_million_output_tokens"] - per_m) < 1e-3 * per_m
    assert f"{winner['gpus']:,} GPUs" in out and f"{winner['cost_per_month']:,.0f} USD a month" in out
    assert plan["sureness"]["bands"] == {"h100-80gb": {"prompt": 0.1, "decode": 0.1, "basis": "10% given (--latency-error)"}}
    assert f"sureness: {plan['sureness']['text']}" in out
    rows = list(csv.reader(table.open()))
    assert rows and not any(cell in ("inf", "-inf", "nan") for row in rows for cell in row)


def test_several_rates_end_with_one_summary_and_headroom_raises_the_rate(tmp_path, capsys):
    assert main(["--rps", "8,10", *SMALL, "--headroom", "0.25", "--json", str(tmp_path / "p.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    summary = out[out.index("at each rate"):]
    for rate in (8, 10):
        doc = json.loads((tmp_path / f"p-{rate}rps.json").read_text())
        plan = doc["plan"]
        assert (plan["rate_rps"], plan["planned_rps"], plan["load_headroom"]) == (rate, rate * 1.25, 0.25)
        w = next(d for d in doc["results"] if d["design"] == plan["winner"])
        assert w["rate_rps"] == rate * 1.25   # every SLO held at the higher rate
        assert f"{w['cost']:,.2f}" in summary and w["display_name"].split(" (")[0] in summary
    assert "load headroom: every SLO held at 12.5 req/s (+25% over 10)" in out
