"""The CLI: listing commands, and bad input reported as one line with exit status 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
    assert run("--version").stdout.strip() == __version__
    assert run("-h").exit_code == 0 and "Usage: splitwise-plan" in run("simulate", "-h").stdout


def test_no_subcommand_prints_help():
    r = run()
    assert r.exit_code == 0
    for cmd in ("profiles", "workloads", "version"):
        assert cmd in r.stdout


def test_planner_options_before_a_command_are_an_error_not_ignored(tmp_path):
    """``--json x.json simulate ...`` wrote no report and exited 0; ``--rps 10 simulate`` said --rps was missing."""
    out = tmp_path / "x.json"
    r = run("--json", str(out), "simulate", "--design", "HH", "-p", "2", "-t", "1", "--rps", "1", "--duration", "10")
    assert_user_error(r, f"--json {out} comes before the command 'simulate'")
    assert not out.exists()
    assert_user_error(run("--rps", "10", "simulate", "-d", "HH", "-p", "2", "-t", "1"), "put the command first")
    assert run("--help", "simulate").exit_code == 0   # help of the planner, as before


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
    from splitwise_plan.inputs.machines import load_machines
    r = run("machines")
    power = load_machines(None)["dgx-h100-cap"].power   # the catalog's own number, in its own unit
    assert r.exit_code == 0 and "dgx-h100-cap" in r.stdout and f"{power:g}" in r.stdout


@pytest.mark.parametrize("args,files,needle", [
    (("profiles", "--profiles", "{tmp}/none.csv"), {}, "profile file not found"),
    (("profiles", "--profiles", "{tmp}/p.csv"), {"p.csv": "model,hardware\nm,g\n"}, "lacks column(s)"),
    (("workloads", "chat"), {}, "unknown workload 'chat'; valid: coding, conversation"),
    (("workloads", ""), {}, "the workload is empty"),   # it read as the folder '.'
    (("slos", "--slos", ""), {}, "(an empty path reads as the current folder)"),
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


SIM = ("simulate", "-d", "HH", "--prompt", "3", "--token", "2", "--rps", "5", "--duration", "5")
CLUSTER = {"c.toml": 'design = "HH"\nprompt_machines = 2\ntoken_machines = 2\n'}


# inputs that once gave a traceback, a hang or a second line (a warning) instead of one error line
@pytest.mark.parametrize("args,files,needle", [
    ((*SIM, "--seed", "-1"), {}, "--seed must be a whole number >= 0, got -1"),
    (("profiles", "--seed", "-1"), {}, "--seed must be a whole number >= 0"),
    (("simulate", "-d", "HH", "--prompt", "10001", "--token", "2", "--rps", "5"), {},
     "--prompt must be between 1 and 10,000 machines, got 10001"),
    (("sweep", "-d", "HH", "--prompt", "99999999999999999999:99999999999999999999", "--token", "1", "--rps", "5"),
     {}, "each count must be between 1 and 10,000 machines"),
    (("check", "{tmp}/c.yaml", "--rps", "5"), {"c.yaml": "design: HH\nprompt_machines: 2\ntoken_machines: 2\n1: 2\n"},
     "unknown key(s) 1; valid:"),
    (("check", "{tmp}/c.toml", "--rps", "5"), {"c.toml": 'design = "HH"\nprompt_machines = 100000000\ntoken_machines = 1\n'},
     "c.toml: prompt_machines must be between 1 and 10,000 machines"),
    (("check", "{tmp}/c.toml", "--rps", "5"), {"c.toml": "design = 5\n"}, "c.toml: design must be a non-empty string, got 5"),
    (("machines", "--machines", "{tmp}/m.toml"), {"m.toml": "[machines.dgx-h100]\nhbm_gib_per_gpu = 1e300\n"},
     "hbm_gib_per_gpu must be at most"),
    ((*SIM, "--machines-file", "{tmp}/m.toml"), {"m.toml": "[machines.dgx-h100]\nhbm_gib_per_gpu = 1\n"},
     "splitwise-hh: the weights of bloom-176b (329 GB) do not fit in the 8 GiB of HBM of dgx-h100"),
    ((*SIM, "--csv", "{tmp}/a.csv", "--json", "{tmp}/a.csv"), {}, "--json and --csv name the same file"),
    ((*SIM, "--csv", "-"), {}, "--csv needs a file name: '-' (standard output) is for --json only"),
    ((*SIM, "--bandwidth", "1e-300"), {}, "--bandwidth must be between 0.001 and 1e6 GiB/s"),
    (("simulate", "-d", "HH", "--prompt", "3", "--token", "2", "--trace", "{tmp}/t.csv"),
     {"t.csv": "arrival_timestamp,prompt_size,token_size\n0,1e30,10\n"},
     "line 2, column prompt_size: '1e+30' is not a positive integer of at most 1,000,000"),
    (("check", "{tmp}/c.toml", "--trace", "{tmp}/t.csv", "--headroom", "0.5"),
     {**CLUSTER, "t.csv": "arrival_timestamp,prompt_size,token_size\n0,100,10\n0,200,10\n"},
     "all its requests arrive at one instant"),
    (("--goal", "max-throughput", "--budget-cost", "99999999xH100", "--designs", "HH"), {},
     "buys 1e+08 machines; a plan holds at most 10,000 a pool"),
    (("--goal", "max-throughput", "--budget-cost", "1", "--designs", "H100,HH"), {},
     "--budget-cost 1 buys no complete design: the least is baseline-h100's at "),
    (("worker", "--storage", "sqlite:///{tmp}/s.db", "--study", "x", "--json", "{tmp}"), {}, "is a directory"),
    (("worker", "--storage", "sqlite:///{tmp}/s.db", "--study", "x", "--wait", "-1"), {}, "--wait must be positive"),
    (("simulate", "-d", "HH", "--prompt", "3", "--token", "2", "--trace", "{tmp}/t.csv", "--duration", "30"),
     {"t.csv": "arrival_timestamp,prompt_size,token_size\n0,100,10\n"},
     "--trace replays the file as it is; --duration shapes a generated stream only"),
    (("--goal", "min-cost", "--trace", "{tmp}/t.csv", "--seed", "1", "--workload", "conversation"),
     {"t.csv": "arrival_timestamp,prompt_size,token_size\n0,100,10\n"}, "--workload, --seed shape a generated"),
    (("--goal", "max-throughput", "--budget-power", "40xH100", "--storage", "sqlite:///{tmp}/s.db"), {},
     "max-throughput does not use it"),
    (("machines", "--bogus"), {}, "No such option: --bogus (see --help)"),
    (("bogus",), {}, "No such command 'bogus'"),
])
def test_fuzzed_inputs_exit_2_one_line(tmp_path, args, files, needle):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = run(*(a.format(tmp=tmp_path) for a in args))
    assert_user_error(r, needle)
    assert r.stderr.count(str(tmp_path)) <= 1     # a file is named once
    assert not (tmp_path / "s.db").exists()       # a bad worker option fails before it opens the storage


def test_main_returns_2_for_user_error(tmp_path, capsys):
    assert main(["profiles", "--profiles", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: profile file not found") and err.count("\n") == 1


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="no /dev/stdout on this platform")
def test_json_to_stdout_and_another_report_to_stdout_is_an_error():
    proc = subprocess.run([sys.executable, "-m", "splitwise_plan", "simulate", "-d", "HH", "--prompt", "3", "--token",
                           "2", "--rps", "5", "--duration", "5", "--json", "-", "--csv", "/dev/stdout"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: --json - and --csv /dev/stdout both write to standard output: give --csv a file\n"


def test_python_m_subprocess_one_line_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "splitwise_plan", "workloads", str(tmp_path / "x.csv")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: workload file not found") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/stdout"), reason="no /dev/stdout on this platform")
@pytest.mark.parametrize("cmd, flag", [
    (["sweep", "-d", "HH", "-p", "3:4", "-t", "2", "--rps", "5", "--duration", "5"], "--csv"),
    (["simulate", "-d", "HH", "--prompt", "3", "--token", "2", "--rps", "5", "--duration", "5"], "--json"),
    (["check", "{cluster}", "--rps", "5", "--duration", "5"], "--json"),
])
def test_a_report_to_dev_stdout_is_all_stdout_carries(tmp_path, cmd, flag):
    """/dev/stdout as a report's file: stdout carries that report alone (the table goes to stderr),
    appended where stdout is redirected with >> rather than replacing the file; no checkpoint in /dev."""
    cluster = tmp_path / "c.toml"
    cluster.write_text('design = "HH"\nprompt_machines = 3\ntoken_machines = 2\n')
    out = tmp_path / "log.txt"
    out.write_text("earlier line\n")
    argv = [str(cluster) if a == "{cluster}" else a for a in cmd] + [flag, "/dev/stdout", "--quiet"]
    with open(out, "a") as fh:
        proc = subprocess.run([sys.executable, "-m", "splitwise_plan", *argv], stdout=fh, stderr=subprocess.PIPE,
                              text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    first, report = out.read_text().split("\n", 1)
    assert first == "earlier line"
    if flag == "--json":
        assert json.loads(report)["command"] == cmd[0]
    else:
        assert report.startswith(("design,", "rate_rps,")) and len(report.strip().splitlines()) == 3   # header, 2 rows
    assert "design points" in proc.stderr or "SLO" in proc.stderr or "TTFT" in proc.stderr


def test_a_bug_is_one_line_and_exit_3_never_the_gates_1(monkeypatch, capsys):
    """An internal error in a command (here the simulator breaks) must not read as 'the SLOs fail'
    (exit 1) in a CI gate: one line naming it, exit 3."""
    from splitwise_plan.cli import main
    from splitwise_plan.sim import simulator

    def broken(*a, **k):
        raise AttributeError("'Inputs' object has no attribute 'profileset'")

    monkeypatch.setattr(simulator.Simulator, "run_requests", broken)
    monkeypatch.delenv("SPLITWISE_PLAN_TRACEBACK", raising=False)
    code = main(["check", str(Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"), "--rps", "5", "--duration", "5", "-q"])
    err = capsys.readouterr().err
    assert code == 3 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: internal error of splitwise-plan") and "AttributeError: 'Inputs'" in err


@pytest.mark.parametrize("args", [["profiles"], ["check", "examples/cluster.toml", "--rps", "5", "--duration", "5"],
                                  ["simulate", "-d", "HH", "-p", "2", "-t", "1", "--rps", "5", "--duration", "5",
                                   "--json", "-"]])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_sigpipes_status(args):
    """``... | head`` (its reader closes the pipe): exit 141, as a program that SIGPIPE ends, no message;
    rich made it 1 (for ``check``: "the SLOs fail") and ``check`` reported an internal error (3)."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "splitwise_plan", *args], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()   # gone before the command writes
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 141 and err == "", (proc.returncode, err)


def test_a_reader_gone_amid_a_json_report_larger_than_a_pipe_holds_is_seen():
    """``sweep ... --json - | head -c 1``: a buffered write of 200 KB into a 64 KB pipe ended with exit 0."""
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-m", "splitwise_plan", "sweep", "-d", "HH", "-p", "15:30", "-t", "1:6",
                             "--rps", "20", "--duration", "10", "--json", "-", "-q"], cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.read(1) == b"{"
    proc.stdout.close()
    err = proc.communicate(timeout=120)[1]
    # (the first run after install also says, once, that it compiles the simulator: not an error)
    said = [line for line in err.splitlines() if not line.startswith(b"compiling the fluid model (first run")]
    assert proc.returncode == 141 and said == [], (proc.returncode, err)


def test_a_closed_standard_output_still_writes_the_reports(tmp_path):
    """``>&-``: sys.stdout is None; the run goes on and writes its report (an internal error before)."""
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "splitwise_plan", "simulate", "-d", "HH", "-p", "2", "-t", "1",
                           "--rps", "5", "--duration", "5", "--json", str(out)],
                          preexec_fn=lambda: os.close(1), stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == f"wrote {out}\n", proc.stderr
    assert json.loads(out.read_text())["results"]


def test_bad_input_with_standard_error_open_for_reading_only_still_exits_2():
    """``2>&-`` behind a launcher that opened a file of its own at descriptor 2 (a pyenv shim opens its
    script there): the error line cannot be written, and the exit status still says bad input."""
    def stderr_read_only():
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 2)
        os.close(fd)

    proc = subprocess.run([sys.executable, "-m", "splitwise_plan", "simulate", "-d", "XX", "-p", "2", "-t", "1",
                           "--rps", "5"], preexec_fn=stderr_read_only, stdout=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="counts child processes through /proc")
@pytest.mark.parametrize("signame, times", [("SIGTERM", 1), ("SIGHUP", 1), ("SIGTERM", 2), ("SIGINT", 2)])
def test_sigterm_stops_the_run_and_its_worker_processes(tmp_path, signame, times):
    """A cancelled CI job sends SIGTERM, a closed terminal SIGHUP: the run stops as Ctrl-C stops it
    (exit 130, the finished design points kept) and leaves no worker process running on its own
    (on SIGHUP they ran on before, their parent gone). ``timeout`` signals the process and then its
    group: the same SIGTERM twice at once is one stop (it ended the run at once, keeping nothing), and so
    is the same SIGINT twice at once (``timeout -s INT``), which read as Ctrl-C pressed twice."""
    import signal
    import time
    cmd = [sys.executable, "-m", "splitwise_plan", "sweep", "-d", "HH", "-p", "1:39", "-t", "1:39", "--rps", "70",
           "--duration", "120", "--csv", str(tmp_path / "s.csv"), "--jobs", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers: set = set()
    deadline = time.monotonic() + 60
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        workers = {int(p) for p in open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()}
    assert len(workers) >= 2, "the sweep's worker processes never started"   # (else the test proves nothing)
    time.sleep(2)
    for k in range(times):
        time.sleep(0.05 * k)   # (a second signal sent at once merges with the first, still pending)
        proc.send_signal(getattr(signal, signame))
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    partial = (tmp_path / "s.csv.partial").exists()   # the points done kept (none yet, this early: no file)
    assert ("kept in" in err and partial) or ("nothing is kept" in err and not partial), err
    time.sleep(1)
    alive = [p for p in workers if os.path.exists(f"/proc/{p}") and "Z" not in open(f"/proc/{p}/stat").read().split()[2]]
    assert not alive, alive


def test_ctrl_c_while_the_command_loads_is_one_line_and_exit_130():
    """A Ctrl-C in the first ~0.3 s, while numpy, pandas and the CLI load, stopped the import with
    Python's traceback (numpy's asks to reinstall it). The SIGINT is sent as the CLI's module is
    looked up, as a hand would send it then."""
    probe = ("import os, signal, sys\n"
             "import splitwise_plan.__main__ as entry\n"
             "class CtrlC:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'splitwise_plan.cli.app':\n"
             "            os.kill(os.getpid(), signal.SIGINT)\n"
             "sys.meta_path.insert(0, CtrlC())\n"
             "sys.argv = ['splitwise-plan', 'simulate', '-d', 'HH', '-p', '2', '-t', '1', '--rps', '5']\n"
             "sys.exit(entry.main())\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130 and proc.stderr == "stopped (Ctrl-C) before it started\n", proc.stderr
    assert proc.stdout == ""


def test_the_package_loads_its_api_on_first_use():
    """``import splitwise_plan`` loads no numpy (the command answers a Ctrl-C at once); every public
    name still resolves, to the object its module defines."""
    import importlib
    probe = "import sys, splitwise_plan; print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120).stdout.strip() == "False"
    import splitwise_plan
    from splitwise_plan.report.plan import render
    for name in splitwise_plan.__all__:
        assert getattr(splitwise_plan, name) is not None, name
        assert name in dir(splitwise_plan)
    assert splitwise_plan.render_plan is render
    assert splitwise_plan.Simulator is importlib.import_module("splitwise_plan.sim.simulator").Simulator
    with pytest.raises(AttributeError):
        splitwise_plan.no_such_name


def test_help_command_shows_a_commands_help(capsys):
    """``splitwise-plan help check`` read 'help' as a stray planner argument and exited 2."""
    assert main(["help", "check"]) == 0
    out = capsys.readouterr().out
    assert "splitwise-plan check" in out and "--headroom" in out
    assert main(["help"]) == 0 and "--goal" in capsys.readouterr().out
    assert main(["help", "nope"]) == 2
    assert capsys.readouterr().err.startswith("error: help: no command 'nope'; the commands: ")


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="signals a process group")
@pytest.mark.parametrize("signame", ["SIGHUP", "SIGINT"])
def test_a_stop_sent_to_the_whole_group_is_two_plain_lines(signame):
    """A closed terminal signals the whole process group: loky's resource trackers died of SIGHUP and the
    plan printed 7 tracebacks as they were relaunched (the worker processes too, if hit while starting).
    The plan's searches, baselines and confirmations are threads now; the group's signal still ends it
    in at most two plain lines."""
    import signal
    import time
    cmd = [sys.executable, "-m", "splitwise_plan", "--goal", "min-cost", "--rps", "140"]   # about 10 s of work
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(3)   # well into the searches (its confirmations and baselines run in threads of its own)
    assert proc.poll() is None, "the plan ended before the signal (the test would prove nothing)"
    os.killpg(proc.pid, getattr(signal, signame))
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Fatal" not in err and "Warning" not in err, err
    assert len(err.strip().splitlines()) <= 2, err
