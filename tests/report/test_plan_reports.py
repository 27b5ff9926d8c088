"""The planner's reports: ``splitwise-plan --goal ... --json/--csv/--plot FILE``, ``--quiet``, progress.

Small, quick plans (HH and H100 at 10 req/s over a 20 s stream, confirmed with the fluid
model) keep these fast: each run takes well under a second.
"""

from __future__ import annotations

import csv
import json
import math
import time
from contextlib import contextmanager

import pandas as pd
import pytest

import splitwise_plan.cli.progress as progress_mod
import splitwise_plan.planning as planning
import splitwise_plan.planning.planner as planner
import splitwise_plan.report.formats as reports
import splitwise_plan.report.plan as plan_reports
from splitwise_plan.cli import main
from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.designs import display_name
from splitwise_plan.planning import DesignPlan, PlanRequest, PlanResult, plan
from splitwise_plan.report.plan import comparison, csv_columns, csv_rows, plan_report, plan_title, write_reports

QUICK = ["--goal", "min-cost", "--rps", "10", "--designs", "HH,H100", "--duration", "20",
         "--confirm-method", "fluid", "--jobs", "1", "--seeds", "1"]   # one stream: a CSV row per point, a count
SLO_KEYS = {f"p{p}" for p in (50, 90, 99)}


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, out, err, needle=""):
    assert code == 2, (out, err)
    assert "Traceback" not in err and "Traceback" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err


@pytest.fixture(scope="module")
def reports_dir(tmp_path_factory):
    """One quick plan writing all three reports (the planner runs once for the module)."""
    d = tmp_path_factory.mktemp("plan")
    code = main([*QUICK, "--quiet", "--json", str(d / "p.json"), "--csv", str(d / "p.csv"),
                 "--plot", str(d / "p.html")])
    assert code == 0
    return d


def test_json_report_schema_inputs_and_designs(reports_dir):
    doc = json.loads((reports_dir / "p.json").read_text())
    assert doc["schema_version"] == 2 and doc["command"] == "plan"
    assert doc["tool"]["name"] == "splitwise-plan" and doc["tool"]["version"]
    inp = doc["inputs"]
    assert (inp["model"], inp["workload"], inp["rate_rps"], inp["seed"]) == ("bloom-176b", "coding", 10.0, 0)
    assert inp["duration_s"] == 20.0 and inp["requests"] > 0
    assert inp["slo_file"] is None and len(inp["slos"]["objectives"]) == 9
    assert {"dgx-a100", "dgx-h100"} <= set(inp["machine_catalog"])
    from splitwise_plan.inputs.machines import BUILTIN_MACHINES
    for name, m in inp["machine_catalog"].items():   # the built-in catalog's real numbers, with their units
        assert (m["cost_unit"], m["power_unit"]) == ("USD/h", "kW"), name
        assert (m["cost"], m["power"]) == pytest.approx((BUILTIN_MACHINES[name].cost, BUILTIN_MACHINES[name].power))
    assert inp["goal"] == "min-cost" and inp["designs"] == ["splitwise-hh", "baseline-h100"]
    assert inp["confirm_method"] == "fluid" and inp["method"] == "fluid"
    by_name = {d["design"]: d for d in doc["results"]}
    assert set(by_name) == {"splitwise-hh", "baseline-h100"}
    for d in doc["results"]:
        assert d["status"] == "ok", d["note"]
        assert d["prompt_machines"] >= 1 and d["machines"] == d["prompt_machines"] + d["token_machines"]
        assert d["cost"] > 0 and d["power"] > 0 and 0 <= d["slo_headroom"] < 1
        assert d["slo_met"] is True and d["tightest"]["ratio"] < 1
        assert d["evaluations"] >= 1 and "note" in d
        for kind in ("slowdown", "latency_s"):
            assert set(d["result"][kind]) == {"ttft", "tbt", "e2e"}
            assert all(set(v) == SLO_KEYS for v in d["result"][kind].values())
        assert d["result"]["slo"]["met"] is True
    assert by_name["baseline-h100"]["token_machines"] == 0
    summary = doc["plan"]
    assert summary["winner"] in by_name and summary["goal"] == "min-cost"
    assert summary["winner"] == doc["results"][0]["design"]          # ranked by the goal
    assert all("vs Baseline-H100" in g for g in summary["gains"])
    higher = summary["at_higher_rate"]   # the winner checked at a higher rate than planned
    assert higher["rate_rps"] == pytest.approx(10.0 * higher["factor"]) and higher["factor"] > 1
    assert isinstance(higher["slo_met"], bool) and higher["seed"] == 0 and "ratio" in higher["tightest"]
    assert "NaN" not in (reports_dir / "p.json").read_text()


def test_csv_has_a_row_per_evaluated_point(reports_dir):
    doc = json.loads((reports_dir / "p.json").read_text())
    rows = list(csv.DictReader((reports_dir / "p.csv").open()))
    assert rows and {"design", "status", "phase", "chosen", "rate_rps", "prompt_machines", "token_machines",
                     "cost", "power", "slo_met", "ttft_p99_slowdown", "e2e_p50_s", "tightest_ratio"} <= set(rows[0])
    for d in doc["results"]:
        mine = [r for r in rows if r["design"] == d["design"]]
        assert sum(r["phase"] == "search" for r in mine) == d["evaluations"]    # every search simulation
        confirm = [r for r in mine if r["phase"] == "confirm" and r["chosen"] == "True"]
        assert len(confirm) == 1
        assert (int(confirm[0]["prompt_machines"]), int(confirm[0]["token_machines"])) == (
            d["prompt_machines"], d["token_machines"])
        assert any(r["chosen"] == "True" for r in mine if r["phase"] == "search")


def test_html_plot_compares_the_designs(reports_dir):
    page = (reports_dir / "p.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "Designs compared" in page
    assert "Splitwise-HH (H100:H100)" in page and "Baseline-H100" in page   # their display names
    assert "None" not in page   # a baseline's token pool is an empty cell, not Python's repr
    assert not [p for p in reports_dir.iterdir() if p.name.startswith(".")]   # no temporary files left


@pytest.mark.parametrize("ext, magic", [(".png", b"\x89PNG\r\n\x1a\n"), (".svg", b"<?xml")])
def test_png_and_svg_plots(capsys, tmp_path, ext, magic):
    p = tmp_path / f"cmp{ext}"
    code, out, err = run(capsys, *QUICK, "--plot", p)
    assert code == 0, err
    data = p.read_bytes()
    assert data.startswith(magic) and len(data) > 1000
    if ext == ".svg":
        assert b"<svg" in data[:1000]
    assert f"wrote {p}" in err and "Winner" in out


def test_json_to_stdout_instead_of_the_table(capsys):
    code, out, err = run(capsys, *QUICK, "--quiet", "--json", "-")
    assert code == 0, err
    doc = json.loads(out)      # nothing but the JSON on stdout
    assert doc["command"] == "plan" and len(doc["results"]) == 2
    assert err == ""


def test_a_plan_of_a_trace_reports_the_trace_not_the_generator_defaults(tmp_path):
    from splitwise_plan.inputs.workloads import load_workload
    trace = tmp_path / "t.csv"
    load_workload("coding").generate(8, duration_s=15, seed=3).to_csv(trace)
    req = PlanRequest(goal="min-cost", trace=str(trace), designs=("HH",), confirm_method="fluid", jobs=1)
    res = plan(req)
    doc = plan_report(res)
    assert doc["plan"]["workload"] is None and doc["plan"]["seed"] is None
    assert doc["plan"]["duration"] == doc["inputs"]["duration_s"] < 15 + 1e-9
    title = plan_title(req)
    assert str(trace) in title and "120 s" not in title and "seed" not in title
    assert plan_title(req, res.trace_s) == title
    trace.unlink()   # the report tells the inputs the plan ran on, without reading them again
    assert plan_report(res)["inputs"] == doc["inputs"]
    kept = json.dumps(doc, sort_keys=True)
    doc["inputs"]["designs"].append("x")   # a caller's edit of its report is its own
    doc["results"][0]["result"]["slowdown"]["ttft"]["p99"] = 1e9
    again, before = plan_report(res), json.loads(kept)
    for report in (again, before):   # the clock may tick between the two reports
        del report["created_utc"]
    assert json.dumps(again, sort_keys=True) == json.dumps(before, sort_keys=True)


def test_bare_json_prints_the_report_as_the_other_commands_do(capsys):
    code, out, err = run(capsys, *QUICK, "--json")
    assert code == 0, err
    assert json.loads(out)["plan"]["winner"]


@pytest.mark.parametrize("extra, needle", [
    (["--json", "{tmp}/no/such/dir/p.json"], "does not exist"),
    (["--csv", "{tmp}/no/such/dir/p.csv"], "does not exist"),
    (["--csv", "{tmp}"], "is a directory"),
    (["--plot", "{tmp}/p.pdf"], "unknown extension '.pdf'"),
    (["--plot", "{tmp}/p"], "unknown extension"),
    (["--plot", "{tmp}/no/such/dir/p.png"], "does not exist"),
])
def test_bad_output_path_fails_before_planning(capsys, tmp_path, monkeypatch, extra, needle):
    def boom(*a, **k):
        raise AssertionError("the planner ran before the output paths were checked")

    monkeypatch.setattr(planning, "plan", boom)
    code, out, err = run(capsys, *QUICK, *(a.format(tmp=tmp_path) for a in extra))
    assert_user_error(code, out, err, needle)


@pytest.mark.parametrize("args, needle", [
    (["--rps", "abc"], "--rps"),
    (["--goal"], "requires an argument"),
    (["--rps", "10", "--jsn", "x.json"], "No such option: --jsn"),
    (["--rps", "10", "--csv"], "requires an argument"),
])
def test_root_option_errors_are_one_line(capsys, args, needle):
    code, out, err = run(capsys, *args)
    assert_user_error(code, out, err, needle)


# --- progress --------------------------------------------------------------------------------

@pytest.fixture
def instant_progress(monkeypatch):
    """Show the progress bar at once (instead of after a second) so a quick plan shows it."""
    real = progress_mod.progress

    @contextmanager
    def now(total, description, **kw):
        kw["delay_s"] = 0.0
        with real(total, description, **kw) as bar:
            for _ in range(500):          # wait for the timer thread to show it
                if bar.shown or bar.quiet:
                    break
                time.sleep(0.01)
            yield bar

    monkeypatch.setattr(progress_mod, "progress", now)


def test_progress_is_one_plain_line_when_not_a_terminal(capsys, instant_progress):
    code, out, err = run(capsys, *QUICK)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("plan min-cost, 2 designs: 2/2 done in "), err
    assert "\x1b[" not in out and "\x1b[" not in err          # no colour, no cursor codes


def test_quiet_silences_progress_and_notes(capsys, instant_progress, tmp_path):
    code, out, err = run(capsys, *QUICK, "--quiet", "--csv", tmp_path / "p.csv")
    assert code == 0 and err == ""
    assert "Winner" in out and (tmp_path / "p.csv").exists()


def test_on_design_is_called_as_each_design_finishes():
    seen = []
    res = plan(goal="min-cost", rps=10, duration=20, designs="HH,H100", jobs=2, search_method="fluid",
               confirm_method="fluid", on_design=lambda dp: seen.append(dp.design))
    assert sorted(seen) == sorted(d.design for d in res.designs)
    assert all(d.evaluated for d in res.designs)           # the points come back from the workers


# --- report building without a run ------------------------------------------------------------

def _result_with_infeasible_design() -> PlanResult:
    req = PlanRequest(goal="min-cost", rps=10, duration=20, designs="HH,H100")
    ok = plan(req, jobs=1, confirm_method="fluid", designs="H100").designs[0]
    bad = DesignPlan("splitwise-hh", "HH", "infeasible", rate=10.0, grid_size=4,
                     note="no design within 2 prompt x 2 token machines meets the SLOs")
    return PlanResult(req, (ok, bad), ok.design, (), "fluid", 0.1)


def test_a_design_never_simulated_names_the_plans_stream_in_the_csv(write):
    """A design left out before any simulation (here A100 machines too small for the weights) had empty
    rate_rps, seed and model in its CSV row: stacked with other runs' CSVs it belonged to none of them."""
    f = write("m.toml", "[machines.dgx-a100]\nhbm_gib_per_gpu = 16\n")
    res = plan(goal="min-cost", rps=5, duration=10, designs="A100,H100", machines_file=str(f), jobs=1)
    row = next(r for r in csv_rows(res) if r["design"] == "baseline-a100")
    assert row["phase"] == "none" and "do not fit" in row["note"]
    assert (row["rate_rps"], row["seed"], row["model"]) == (5.0, 0, "bloom-176b")


def test_reports_of_an_infeasible_design(tmp_path):
    res = _result_with_infeasible_design()
    rows = csv_rows(res)
    none = [r for r in rows if r["design"] == "splitwise-hh"]
    assert len(none) == 1 and none[0]["phase"] == "none" and "meets the SLOs" in none[0]["note"]
    cmp = {d["design"]: d for d in comparison(res)}
    assert math.isnan(cmp["splitwise-hh"]["cost"]) and "infeasible" in cmp["splitwise-hh"]["label"]
    assert cmp["baseline-h100"]["throughput"] == 10.0
    doc = plan_report(res)
    hh = next(d for d in doc["results"] if d["design"] == "splitwise-hh")
    assert hh["status"] == "infeasible" and hh["result"] is None and hh["cost"] is None
    paths = write_reports(res, json_path=tmp_path / "r.json", csv_path=tmp_path / "r.csv",
                          plot_path=tmp_path / "r.png")
    assert [p.name for p in paths] == ["r.csv", "r.png", "r.json"]
    assert json.loads((tmp_path / "r.json").read_text())["plan"]["winner"] == "baseline-h100"


def test_interrupted_json_write_keeps_the_old_report(tmp_path, monkeypatch):
    res = _result_with_infeasible_design()
    p = tmp_path / "r.json"
    p.write_text('{"old": true}\n')

    def broken_dump(obj, fh, **kw):
        fh.write('{"schema_version": 1, "inp')
        raise KeyboardInterrupt

    monkeypatch.setattr(reports.json, "dump", broken_dump)
    with pytest.raises(KeyboardInterrupt):
        write_reports(res, json_path=p)
    assert json.loads(p.read_text()) == {"old": True}
    assert [x.name for x in tmp_path.iterdir()] == ["r.json"]


def test_render_in_a_notebook_is_wide_enough_for_every_number(monkeypatch):
    """A notebook's console is 115 columns: the table cut costs to '13…' there."""
    import rich.console as rc
    res = plan(PlanRequest(goal="min-cost", rps=10, designs=("HH", "H100"), duration=10, jobs=1,
                           confirm_method="fluid"))
    monkeypatch.setattr(rc, "_is_jupyter", lambda: True)
    widths = []
    monkeypatch.setattr(rc.Console, "print", lambda self, *a, **k: widths.append(self.width))
    plan_reports.render(res)
    assert widths and min(widths) >= 150
    widths.clear()
    plan_reports.render(res, console=rc.Console(width=100))   # a console of the caller's is theirs
    assert set(widths) == {100}


def test_a_terminal_too_narrow_for_the_nine_slos_shows_every_number_whole():
    """At 80 or 100 columns the nine SLO columns shrank every number to '5…': the table keeps each
    design's machines, cost, power and headroom whole and names the tightest SLO instead."""
    import rich.console as rc
    res = plan(PlanRequest(goal="min-cost", rps=10, designs=("HH", "HHcap", "H100"), duration=10, jobs=1,
                           confirm_method="fluid"))
    full = plan_reports._TABLE_WIDTH   # what render gives a notebook, which must show the nine
    for width in (80, 100, full, 200):
        con = rc.Console(width=width, record=True, color_system=None)
        plan_reports.render(res, console=con)
        text = con.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        table = text[:text.index("└")]
        assert "…" not in table
        rows = []   # each design's row: its cells, each joined over the lines it wraps onto
        for line in table.splitlines():
            if not line.startswith("│"):
                continue
            parts = [c.strip() for c in line.split("│")[1:-1]] if line.endswith("│") else None
            assert parts is not None, (width, line)   # not cut off at the right edge
            if parts[0]:
                rows.append([[c] if c else [] for c in parts])
            else:
                for cell, c in zip(rows[-1], parts):
                    cell.extend([c] if c else [])
        assert len(rows) == len(res.designs)
        for dp, cells in zip(res.designs, rows):
            # the design's name may wrap (on a narrow terminal it does); its numbers stay whole, on one line
            assert "".join(cells[1]).replace(" ", "") == display_name(dp.design).replace(" ", ""), (width, cells)
            row = " ".join(" ".join(c) for c in cells)
            numbers = [" ".join(c) for c in cells]
            r = dp.result
            h = dp.headroom
            headroom = f"{h:.1%}" if abs(h) < 0.02 and h != 0 else f"{h:.0%}"   # a small one with a decimal
            whole = [str(dp.prompt), f"{dp.cost:,.2f}", f"{dp.power:,.1f}", headroom]
            assert all(c in numbers for c in whole), (width, numbers, whole)
            t = r.tightest
            value = f"{r.slowdown[t['metric']][t['percentile']]:.2f}"
            if width < full:
                assert f"{t['metric'].upper()} P{t['percentile']:g} {value}x" in numbers, (width, numbers)
                assert "too narrow" in " ".join(text.split())
            else:
                assert "too narrow" not in " ".join(text.split()), f"the nine SLOs are not shown at {width} columns"
                assert f"{value}*" in numbers and "P50" in table, (width, row)


def test_an_infeasible_design_in_the_narrowest_table_has_no_count_in_its_headroom():
    import rich.console as rc
    con = rc.Console(width=70, record=True, color_system=None)
    plan_reports.render(_result_with_infeasible_design(), console=con)
    text = con.export_text()
    assert "sims" not in text.split("└")[0] and "0+0" not in text   # the counts are the column dropped
    # the infeasible design (ranked 2nd) on its row's first line: its name wraps at this width
    row = next(line for line in text.splitlines() if line.startswith("│") and line.split("│")[1].strip() == "2")
    assert "Splitwise-HH (H100:H100)".startswith(row.split("│")[2].strip())
    assert row.replace("│", " ").split()[-1] == "-"


def test_the_table_shows_the_plans_own_slos(tmp_path):
    """Her SLOs (P95 TTFT in seconds, P99.9 E2E as a slowdown) are the table's columns, with the
    values the verdict judged, the tightest starred; not the paper's nine slowdowns."""
    import rich.console as rc
    slo = tmp_path / "mine.toml"
    slo.write_text('name = "mine"\n[ttft]\nunit = "seconds"\np95 = 3.0\n[e2e]\n"p99.9" = 8\n')
    res = plan(PlanRequest(goal="min-cost", rps=10, designs=("H100",), duration=10, jobs=1,
                           confirm_method="fluid", slos=str(slo)))
    con = rc.Console(width=200, record=True, color_system=None)
    plan_reports.render(res, console=con)
    text = con.export_text()
    assert "P95" in text and "<3 s" in text and "P99.9" in text and "<8x" in text   # each with its limit
    assert "P50" not in text and "TBT" not in text
    r = res.get("H100").result
    ttft, e2e = r.latency_s["ttft"][95], r.slowdown["e2e"][99.9]
    row = next(line for line in text.splitlines() if "Baseline-H100" in line)
    assert f"{ttft:.3g}" in row and f"{e2e:.2f}" in row
    tight = r.tightest
    starred = f"{ttft:.3g}*" if tight["metric"] == "ttft" else f"{e2e:.2f}*"
    assert starred in row
    assert ("the plan's SLOs as slowdowns vs the request alone on a DGX-A100; columns marked s in seconds"
            in " ".join(text.split()))   # the caption, wrapped


def test_write_reports_takes_no_dash_for_a_file():
    """'-' is the command line's standard output; in the API it would have made a file named '-'."""
    with pytest.raises(SplitwisePlanError, match="json_path needs a file name, got '-'"):
        write_reports(_result_with_infeasible_design(), json_path="-")


def test_csv_rows_name_the_stream_of_their_numbers_over_several_seeds():
    res = plan(PlanRequest(goal="min-cost", rps=20, designs=("HH",), duration=10, jobs=1, seeds=2,
                           confirm_method="fluid"))
    rows = csv_rows(res)
    assert {r["seed"] for r in rows} <= {0, 1}
    confirm = next(r for r in rows if r["phase"] == "confirm")
    doc = plan_report(res)
    assert confirm["seed"] == doc["results"][0]["seed"]
    assert doc["inputs"]["requests"] is None   # not seed 0's count: each result has its own
    assert doc["results"][0]["result"]["requests"] == confirm["requests"]


def test_no_report_overwrites_the_tools_own_data():
    """The shipped SLOs, workloads and profiles are inputs of every run that names none: no report
    replaces them (from a source checkout or an editable install they are plain files)."""
    from splitwise_plan.inputs.paths import data_file
    for kind, name in (("slos", "paper.toml"), ("workloads", "coding.csv"), ("profiles", "perf_model.csv"),
                       ("profiles", "stacks/paper-2023.toml"), ("models", "llama-3.1-70b.json")):
        path = data_file(kind, name)
        before = path.read_bytes()
        with pytest.raises(SplitwisePlanError, match=f"shipped data file {kind}/{name}"):
            write_reports(_result_with_infeasible_design(), csv_path=path)
        assert path.read_bytes() == before


def _stable(path):
    """A plan's JSON report without what a run cannot repeat (its creation time, the seconds it took)."""
    doc = json.loads(path if isinstance(path, str) else path.read_text())   # (or the report's text itself)
    doc.pop("created_utc"), doc["plan"].pop("seconds")
    for d in doc["results"]:
        d.pop("seconds")
    return doc


def test_a_stopped_plan_keeps_its_finished_designs_and_the_same_command_goes_on(capsys, monkeypatch, tmp_path):
    """Ctrl-C after two of four designs: they are kept beside the report (OUTPUT.partial); the same command
    plans only the two others and writes the report an uninterrupted run writes; then the file is gone."""
    args = ["--goal", "min-cost", "--rps", "5", "--designs", "HH,HA,H100,A100", "--duration", "10",
            "--search-method", "events", "--confirm-method", "events", "--jobs", "1", "--quiet"]
    planned, real = [], planner._plan_one

    def stop_at_third(inputs, req, design, method, *memo):
        if len(planned) == 2:
            raise KeyboardInterrupt
        planned.append(design)
        return real(inputs, req, design, method, *memo)

    out = tmp_path / "p.json"
    monkeypatch.setattr(planner, "_plan_one", stop_at_third)
    code, _, err = run(capsys, *args, "--json", out)
    partial = tmp_path / "p.json.partial"
    assert code == 130 and not out.exists() and f"stopped: 2 of 4 designs are kept in {partial}" in err
    first = list(planned)

    def counted(inputs, req, design, method, *memo):
        planned.append(design)
        return real(inputs, req, design, method, *memo)

    planned.clear()
    monkeypatch.setattr(planner, "_plan_one", counted)
    code, _, err = run(capsys, *args[:-1], "--json", out)
    assert code == 0, err
    assert f"resuming: 2 of 4 designs kept in {partial}" in err and not partial.exists()
    assert sorted(planned + first) == sorted(["splitwise-hh", "splitwise-ha", "baseline-h100", "baseline-a100"])
    monkeypatch.setattr(planner, "_plan_one", real)
    assert run(capsys, *args, "--json", tmp_path / "fresh.json")[0] == 0

    assert _stable(out) == _stable(tmp_path / "fresh.json")
    # a plan with other inputs starts afresh, and moves the file it finds out of the way
    partial.write_text('{"format": "splitwise-plan plan checkpoint", "version": 1, "fingerprint": "x"}\n{}\n')
    code, _, err = run(capsys, *args[:-1], "--seed", "1", "--json", out)
    assert code == 0 and "made by a plan with other inputs" in err and (tmp_path / "p.json.partial.old").exists()


def _counted_simulations(monkeypatch) -> tuple[list, list]:
    """Count the simulations a plan runs (``runs``), and stop it (Ctrl-C) once ``stop_at[0]`` have run."""
    from splitwise_plan.sim.simulator import Simulator
    runs, real_points, real_run = [], Simulator.run_points, Simulator.run
    stop_at: list = []

    def points(self, pts, *a, **k):
        pts = list(pts)
        if stop_at and len(runs) >= stop_at[0]:
            raise KeyboardInterrupt
        runs.extend(pts)
        return real_points(self, pts, *a, **k)

    def one(self, *a, **k):
        runs.append(a)
        return real_run(self, *a, **k)

    monkeypatch.setattr(Simulator, "run_points", points)
    monkeypatch.setattr(Simulator, "run", one)
    return runs, stop_at


def test_a_design_stopped_mid_search_resumes_from_its_simulations(capsys, monkeypatch, tmp_path):
    """Ctrl-C in the middle of the designs' searches (none finished): their simulations so far are kept
    beside the report; the same command simulates none of them again and writes the report an
    uninterrupted run writes, simulation counts included."""
    args = ["--goal", "min-cost", "--rps", "20", "--designs", "HH,HA", "--duration", "20", "--seeds", "2",
            "--jobs", "1", "--quiet"]
    runs, stop_at = _counted_simulations(monkeypatch)
    assert run(capsys, *args, "--json", tmp_path / "fresh.json")[0] == 0
    full = len(runs)
    runs.clear()
    stop_at.append(full // 3)
    out, partial = tmp_path / "p.json", tmp_path / "p.json.partial"
    code, _, err = run(capsys, *args[:-1], "--json", out)
    assert code == 130 and not out.exists(), err
    assert f"stopped: 0 of 2 designs are kept in {partial}, with " in err and "simulations of the others" in err
    before = len(runs)
    runs.clear()
    stop_at.clear()
    code, _, err = run(capsys, *args[:-1], "--json", out)
    assert code == 0 and "resuming: 0 of 2 designs kept" in err and not partial.exists(), err
    assert len(runs) <= full - before + 2   # (a round cut short by the stop is run again)

    assert _stable(out) == _stable(tmp_path / "fresh.json")


def test_a_plan_with_no_report_file_keeps_its_progress_in_the_cache_and_the_same_command_goes_on(
        capsys, monkeypatch, tmp_path, plan_cache):
    """With no report file (the JSON on standard output), a stopped plan keeps its designs' simulations in
    the user cache folder (SPLITWISE_PLAN_CACHE_DIR/plans/, keyed by the plan's inputs); the same command
    resumes from them, simulating fewer, prints the report an uninterrupted run prints, and removes it."""
    args = ["--goal", "min-cost", "--rps", "20", "--designs", "HH,HA", "--duration", "20", "--seeds", "2",
            "--jobs", "1", "--json", "-", "--quiet"]
    runs, stop_at = _counted_simulations(monkeypatch)
    code, fresh, err = run(capsys, *args)
    assert code == 0 and not list((plan_cache / "plans").iterdir()), err   # a plan done keeps nothing
    full = len(runs)
    runs.clear()
    stop_at.append(full // 3)
    code, out, err = run(capsys, *args)
    kept = list((plan_cache / "plans").iterdir())
    assert code == 130 and out == "" and len(kept) == 1 and kept[0].suffix == ".partial", err
    assert f"stopped: 0 of 2 designs are kept in {kept[0]}, with " in err and "simulations of the others" in err
    assert not list(tmp_path.iterdir())   # (and nothing beside the test)
    before = len(runs)
    runs.clear()
    stop_at.clear()
    code, out, err = run(capsys, *args)
    assert code == 0 and f"resuming: 0 of 2 designs kept in {kept[0]}, and " in err, err
    assert not kept[0].exists() and not list((plan_cache / "plans").iterdir())
    assert len(runs) < full and len(runs) <= full - before + 2   # (a round cut short by the stop is run again)
    assert _stable(out) == _stable(fresh)
    # a plan with other inputs has a file of its own: the one kept is neither resumed nor moved
    runs.clear()
    stop_at.append(full // 3)
    assert run(capsys, *args)[0] == 130
    runs.clear()
    code, _, err = run(capsys, *args[:-1], "--seed", "7")
    assert code == 130 and "resuming" not in err
    assert len(list((plan_cache / "plans").iterdir())) == 2


def test_a_plan_whose_cache_folder_cannot_be_written_runs_and_says_nothing_is_kept(capsys, monkeypatch, tmp_path):
    """Where the cache folder cannot be made (here: under a file), a plan with no report file runs as one
    kept nothing before: no note while it runs, its report as ever, and a stop says nothing is kept, and why."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SPLITWISE_PLAN_CACHE_DIR", str(blocker / "cache"))
    args = ["--goal", "min-cost", "--rps", "5", "--designs", "H100", "--duration", "10", "--search-method",
            "events", "--confirm-method", "events", "--jobs", "1"]
    code, out, err = run(capsys, *args, "--json", "-", "--quiet")
    assert code == 0 and json.loads(out)["results"] and err == "", err

    def stop(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(planner, "_plan_one", stop)
    code, _, err = run(capsys, *args)
    assert code == 130 and (f"stopped: nothing is kept, since the plan writes no file and cannot write to "
                            f"{blocker / 'cache' / 'plans'} (set SPLITWISE_PLAN_CACHE_DIR") in err, err
    assert "--storage keeps every simulation" in err and sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_plan_stopped_by_bad_input_leaves_no_checkpoint(capsys, tmp_path):
    slo = tmp_path / "bad.toml"
    slo.write_text("x = \n")
    code, _, err = run(capsys, "--goal", "min-cost", "--rps", "5", "--slo", slo, "--json", tmp_path / "p.json")
    assert code == 2 and "not valid TOML" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


@pytest.mark.parametrize("args", [
    ["--goal", "min-cost", "--rps", "5", "--search-method", "events"],   # search and confirmation one method
    ["--goal", "max-throughput", "--budget-power", "4xH100", "--seeds", "2"],   # each row its worst stream's
])
def test_every_plan_row_names_its_stream(capsys, tmp_path, args):
    csv = tmp_path / "p.csv"
    code, _, err = run(capsys, *args, "--designs", "H100", "--duration", "10", "--seed", "3", "--jobs", "1",
                       "--csv", csv, "--quiet")
    assert code == 0, err
    rows = pd.read_csv(csv)
    seeds = int(args[args.index("--seeds") + 1]) if "--seeds" in args else PlanRequest(rps=1).seeds   # (the default)
    assert len(rows) > 1 and set(rows.seed) <= set(range(3, 3 + seeds))


def test_a_stopped_plans_designs_survive_bad_input_other_inputs_and_fewer_designs(capsys, monkeypatch, tmp_path):
    """What a stopped plan kept is neither moved aside by a rerun with a typo, nor by a run of other inputs
    stopped before any design of its own finished, nor dropped by a run naming fewer designs."""
    base = ["--goal", "min-cost", "--rps", "5", "--duration", "10", "--search-method", "events",
            "--confirm-method", "events", "--jobs", "1", "--json", tmp_path / "p.json"]
    both = base + ["--designs", "HH,H100"]
    partial, old = tmp_path / "p.json.partial", tmp_path / "p.json.partial.old"
    real = planner._plan_one
    calls = []

    def stop_after(k):
        def plan_one(inputs, req, design, method, *memo):
            if len(calls) == k:
                raise KeyboardInterrupt
            calls.append(design)
            return real(inputs, req, design, method, *memo)
        return plan_one

    monkeypatch.setattr(planner, "_plan_one", stop_after(1))
    assert run(capsys, *both)[0] == 130
    kept = partial.read_text()
    designs = [line for line in kept.splitlines() if '"type": "Kept"' not in line]   # (and its simulations)
    assert calls == ["splitwise-hh"] and len(designs) == 2
    code, _, err = run(capsys, *both, "--slo", tmp_path / "nothere.toml")   # a typo: nothing moves
    assert code == 2 and partial.read_text() == kept and not old.exists()
    calls.clear()
    monkeypatch.setattr(planner, "_plan_one", stop_after(0))
    code, _, err = run(capsys, *both, "--seed", "1")   # other inputs, stopped before a design of its own
    assert code == 130 and "stopped before any of its designs finished: nothing is kept" in err
    assert partial.read_text() == kept and not old.exists()
    monkeypatch.setattr(planner, "_plan_one", real)
    code, _, err = run(capsys, *base, "--designs", "H100")   # fewer designs: the kept one stays kept
    assert code == 0 and f"kept {partial}: it holds splitwise-hh, which this run does not name" in err
    code, _, err = run(capsys, *both)
    assert code == 0 and f"resuming: 2 of 2 designs kept in {partial}" in err and not partial.exists()


def test_plan_report_rates_and_bounds_say_their_unit(capsys, tmp_path):
    """A key holding a request rate ends in _rps: max-throughput's bound (the capacity model's highest
    rate) is bound_rps, a cost or power bound is bound; a replayed trace's plan reports the trace's rate;
    the CSV rows lead with their stream (rate_rps, seed), as every command's rows do."""
    j, c = tmp_path / "m.json", tmp_path / "m.csv"
    assert run(capsys, "--goal", "max-throughput", "--budget-power", "4xH100", "--designs", "HH,H100",
               "--duration", "10", "--jobs", "1", "--json", j, "--csv", c, "-q")[0] == 0
    for d in json.loads(j.read_text())["results"]:
        assert d["bound"] is None and d["bound_rps"] >= d["rate_rps"] > 0
    assert list(pd.read_csv(c).columns[:4]) == ["rate_rps", "seed", "design", "status"]
    trace = tmp_path / "t.csv"
    from splitwise_plan.inputs.workloads import load_workload
    stream = load_workload("coding").generate(5.0, duration_s=10.0, seed=2)
    stream.to_csv(trace)
    assert run(capsys, "--goal", "min-cost", "--trace", trace, "--designs", "H100", "--jobs", "1", "--json", j, "-q")[0] == 0
    doc = json.loads(j.read_text())
    from splitwise_plan.inputs.workloads import load_trace
    assert doc["plan"]["rate_rps"] == pytest.approx(load_trace(trace).rate) == doc["inputs"]["rate_rps"]
    assert doc["results"][0]["bound"] > 0 and doc["results"][0]["bound_rps"] is None


def test_render_plan_writes_to_a_text_file_and_says_when_nothing_was_simulated():
    """render_plan(console=io.StringIO()) raised AttributeError; a plan whose designs were all left out
    before any simulation read 'No design meets all SLOs.', though no SLO was looked at."""
    import io
    from dataclasses import replace

    from splitwise_plan import plan, render_plan
    from splitwise_plan.inputs.machines import BUILTIN_MACHINES
    res = plan(goal="max-throughput", budget_cost="1xA100", duration=10, designs="HH,A100", jobs=1)   # not 2 H100
    buf = io.StringIO()
    render_plan(res, console=buf)
    a100, h100 = BUILTIN_MACHINES["dgx-a100"].cost, BUILTIN_MACHINES["dgx-h100"].cost
    assert (f"the budget of {a100:,.4g} USD/h buys no complete splitwise-hh (its least is {2 * h100:,.4g} USD/h)"
            in " ".join(buf.getvalue().split()))
    none = replace(res, designs=[d for d in res.designs if d.design == "splitwise-hh"])
    buf = io.StringIO()
    render_plan(none, console=buf)
    assert "No design could be planned (none was simulated)" in buf.getvalue()


def test_the_plan_csv_header_is_one_whatever_the_results():
    """The columns were the rows' keys as first seen: a design never simulated moved 'note', none confirmed
    dropped it, all infeasible left 7 columns. A reader of several plans' CSVs needs one header."""
    from dataclasses import replace

    from splitwise_plan import plan
    from splitwise_plan.report.formats import csv_text
    ok = plan(goal="min-cost", rps=10, duration=10, designs="HH", jobs=1)
    some = plan(goal="max-throughput", budget_power="1xH100", duration=10, designs="HH,H100", jobs=1)
    none = replace(some, designs=tuple(d for d in some.designs if d.design == "splitwise-hh"))   # all infeasible
    headers = [csv_text(csv_rows(r), csv_columns(r)).splitlines()[0] for r in (ok, none)]
    assert headers[0] == headers[1]
    assert headers[0].split(",")[:6] == ["rate_rps", "seed", "design", "status", "phase", "chosen"]
    assert headers[0].endswith(",method,note") and set(csv_rows(ok)[0]) <= set(headers[0].split(","))


def test_a_design_with_no_answer_has_no_machine_count_in_the_json():
    """An infeasible design read 0 machines (a value) beside a null cost; the CSV left them empty."""
    from splitwise_plan import plan
    res = plan(goal="max-throughput", budget_power="1xH100", duration=10, designs="HH,H100", jobs=1)
    entry = next(e for e in plan_report(res)["results"] if e["design"] == "splitwise-hh")
    assert entry["cost"] is None
    assert (entry["prompt_machines"], entry["token_machines"], entry["machines"]) == (None, None, None)
