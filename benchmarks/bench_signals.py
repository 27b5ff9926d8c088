"""How fast a run ends on SIGTERM (a cancelled CI job): the target is within 1 s. Each case starts the
command in a fresh process, sends SIGTERM once it is well under way, and times the exit; medians of
``--repeat`` runs are printed with the exit status and the run's last line.

    python benchmarks/bench_signals.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time

CASES = [   # (what, arguments, seconds before the signal)
    ("check on a 1.2M-request stream", ["check", "examples/cluster.toml", "--rps", "60", "--duration", "20000"], 2.0),
    ("plan at 280 req/s", ["--goal", "min-cost", "--rps", "280"], 5.0),
    ("sweep of 39x39 points on 2 cores", ["sweep", "-d", "HH", "-p", "1:39", "-t", "1:39", "--rps", "70",
                                          "--jobs", "2"], 5.0),
]


def once(args: list[str], wait: float) -> tuple[float, int, str]:
    """(seconds from SIGTERM to exit, exit status, last line on stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "splitwise_plan", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(wait)
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    lines = err.replace("\r", "\n").strip().splitlines()
    return time.perf_counter() - t0, proc.returncode, lines[-1] if lines else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    worst, statuses = 0.0, set()
    for what, argv, wait in CASES:
        runs = [once(argv, wait) for _ in range(args.repeat)]
        secs = [r[0] for r in runs]
        worst = max(worst, statistics.median(secs))
        statuses |= {r[1] for r in runs}
        print(f"{what:36s} median {statistics.median(secs):.2f} s (runs {', '.join(f'{s:.2f}' for s in secs)}); "
              f"exit {sorted({r[1] for r in runs})}")
        print(f"{'':36s} {runs[-1][2][-100:]}")
    met = worst <= 1.0 and statuses == {130}
    print(f"target: every run ends within 1 s of SIGTERM, with exit status 130: {'met' if met else 'NOT met'} "
          f"(slowest median {worst:.2f} s; statuses {sorted(statuses)})")


if __name__ == "__main__":
    main()
