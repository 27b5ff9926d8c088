"""The command line's answers are the golden ones of ``tests/golden/`` (see its README).

The events reports were written by the flat package at commit 0134b96 (before the reorganisation of
issue 42); the fluid model's by the compiled fluid model (issue 43). Each command runs again here and
must write the same report to the last digit, apart from what a run cannot repeat: ``created_utc`` and
the ``seconds`` a step took. They ran one stream each (``--seeds 1``; simulate and check confirm on the plan's 3 now).
The machine catalog a report embeds may have gained machines since: those
the golden report holds must be there unchanged, and the others are left out of the comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitwise_plan.cli import main

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden"


def _without_timings(doc):
    """The report with its creation time and its run times dropped (at any depth)."""
    if isinstance(doc, dict):
        return {k: _without_timings(v) for k, v in doc.items() if k != "created_utc" and "seconds" not in k}
    if isinstance(doc, list):
        return [_without_timings(v) for v in doc]
    return doc


def _run(args, capsys, monkeypatch) -> str:
    monkeypatch.chdir(REPO)   # reports name their input files as given: examples/cluster.toml
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    return out


@pytest.mark.parametrize("golden, args", [
    ("simulate_hh_27_3.json", ["simulate", "--design", "HH", "--prompt", "27", "--token", "3", "--rps", "70", "--json",
                               "--seeds", "1"]),
    ("simulate_ha_fluid_conversation.json", ["simulate", "--design", "HA", "--prompt", "26", "--token", "6", "--rps",
                                             "70", "--method", "fluid", "--workload", "conversation", "--json",
                                             "--seeds", "1"]),
])
def test_simulate_json_is_the_golden_one(golden, args, capsys, monkeypatch):
    printed = json.loads(_run(args, capsys, monkeypatch))
    assert printed == json.loads((GOLDEN / golden).read_text())


@pytest.mark.parametrize("golden, args", [
    ("check_cluster.json", ["check", "examples/cluster.toml", "--rps", "60", "--headroom", "0.2", "-q", "--seeds", "1"]),
    ("plan_30rps_hh_a100.json", ["--goal", "min-cost", "--rps", "30", "--designs", "HH,A100", "-q"]),
    ("plan_default.json", ["--goal", "min-cost", "--rps", "70", "-q"]),
])
def test_reports_are_the_golden_ones(golden, args, tmp_path, capsys, monkeypatch):
    out = tmp_path / golden
    _run([*args, "--json", str(out)], capsys, monkeypatch)
    report, expected = json.loads(out.read_text()), json.loads((GOLDEN / golden).read_text())
    catalog, kept = report["inputs"]["machine_catalog"], expected["inputs"]["machine_catalog"]
    assert set(kept) <= set(catalog)   # machines added to the catalog since: not compared
    report["inputs"]["machine_catalog"] = {name: catalog[name] for name in kept}
    assert _without_timings(report) == _without_timings(expected)


def test_sweep_csv_is_the_golden_one(tmp_path, capsys, monkeypatch):
    out = tmp_path / "sweep.csv"
    _run(["sweep", "--design", "HH", "--prompt", "20:26", "--token", "1:4", "--rps", "70", "--csv", str(out), "-q"],
         capsys, monkeypatch)
    assert out.read_text() == (GOLDEN / "sweep_hh.csv").read_text()


def test_the_comparison_sees_a_changed_number(tmp_path):
    """The comparison can fail: one digit changed in a golden report is seen; a timing is not."""
    doc = json.loads((GOLDEN / "plan_30rps_hh_a100.json").read_text())
    other = json.loads(json.dumps(doc))
    other["results"][0]["cost"] += 0.01
    assert _without_timings(other) != _without_timings(doc)
    other = json.loads(json.dumps(doc))
    other["created_utc"], other["plan"]["seconds"] = "2030-01-01T00:00:00Z", 99.0
    assert _without_timings(other) == _without_timings(doc)
