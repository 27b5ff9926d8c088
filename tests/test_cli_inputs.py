"""The CLI: listing commands, and bad input reported as one line with exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from splitwise_plan import __version__
from splitwise_plan.cli import app, main

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def assert_user_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_version():
    r = run("version")
    assert r.exit_code == 0 and r.stdout.strip() == __version__ == "0.1.0"


def test_no_subcommand_prints_help():
    r = run()
    assert r.exit_code == 0
    for cmd in ("profiles", "workloads", "version"):
        assert cmd in r.stdout


def test_profiles_lists_entries_and_mape():
    r = run("profiles")
    assert r.exit_code == 0, r.output
    for word in ("bloom-176b", "llama2-70b", "h100-80gb-pcap", "MAPE", "mean of all"):
        assert word in r.stdout
    assert "\x1b[" not in r.stdout  # no colour codes when not a terminal


def test_workloads_lists_both_with_stats():
    r = run("workloads", "--rate", "70", "--duration", "60")
    assert r.exit_code == 0, r.output
    for word in ("coding", "conversation", "1469.0", "129.0", "coding @ 70 req/s"):
        assert word in r.stdout


def test_slos_and_machines():
    assert "1.25" in run("slos").stdout
    r = run("machines")
    assert r.exit_code == 0 and "dgx-h100-cap" in r.stdout and "30.8" in r.stdout


@pytest.mark.parametrize("args,files,needle", [
    (("profiles", "--profiles", "{tmp}/none.csv"), {}, "profile file not found"),
    (("profiles", "--profiles", "{tmp}/p.csv"), {"p.csv": "model,hardware\nm,g\n"}, "lacks column(s)"),
    (("workloads", "chat"), {}, "unknown workload 'chat'; valid: coding, conversation"),
    (("workloads", "{tmp}/none.csv"), {}, "workload file not found"),
    (("workloads", "{tmp}/t.csv"), {"t.csv": "a,b\n1,2\n"}, "expected the Azure format"),
    (("workloads", "--rate", "0"), {}, "rate (requests per second) must be positive"),
    (("workloads", "--rate", "70", "--duration", "-1"), {}, "duration (seconds) must be positive"),
    (("slos", "--slos", "{tmp}/none.toml"), {}, "SLO file not found"),
    (("slos", "--slos", "{tmp}/s.toml"), {"s.toml": "[ttft]\np50 = -2\n"}, "must be a positive number"),
    (("machines", "--machines", "{tmp}/m.toml"), {"m.toml": "[machines.x\n"}, "not valid TOML"),
    (("machines", "--machines", "{tmp}/m.toml"), {"m.toml": "[machines.x]\ncost = 1\n"},
     "a new machine needs"),
])
def test_bad_input_exit_2_one_line(tmp_path, args, files, needle):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = run(*(a.format(tmp=tmp_path) for a in args))
    assert_user_error(r, needle)


def test_main_returns_2_for_user_error(tmp_path, capsys):
    assert main(["profiles", "--profiles", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: profile file not found") and err.count("\n") == 1


def test_python_m_subprocess_one_line_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "splitwise_plan", "workloads", str(tmp_path / "x.csv")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: workload file not found") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr
