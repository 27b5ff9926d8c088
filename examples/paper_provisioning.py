"""Reproduce the Splitwise paper's provisioning experiments with splitwise-plan.

    python examples/paper_provisioning.py fig12          # Splitwise-HH, coding, 70 req/s (paper: 27 + 3)
    python examples/paper_provisioning.py reference      # cheapest passing HH / H100 / A100 on rr_code_70_2min.csv
    python examples/paper_provisioning.py iso-power      # max throughput within the power of 40 DGX-H100
    python examples/paper_provisioning.py iso-cost       # max throughput within the cost of 40 DGX-H100

Options: --workload coding|conversation (iso-power, iso-cost; fig12 and reference are the
paper's coding runs), --designs LIST, --duration S, --jobs N, --confirm-method events|fluid. Each prints the planner's table and the paper's or the
reference simulator's numbers beside it; README.md in this folder discusses them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402

from splitwise_plan import PlanRequest, plan, render_plan  # noqa: E402

SHARED = Path(os.environ.get("SPLITWISE_SHARED", Path(__file__).resolve().parents[2] / "shared"))
REF_TRACE = SHARED / "data/splitwise-sim/rr_code_70_2min.csv"

PAPER = {
    "fig12": {"splitwise-hh": "27 + 3 (cost-optimal, Figure 12)"},
    "reference": {"splitwise-hh": "29 machines (24+5, 25+4, 26+3, 27+2, 28+1 all pass at cost 138.04)",
                  "baseline-h100": "53 machines", "baseline-a100": "120 machines"},
    "iso-power": {"splitwise-aa": "55 + 15 (coding)", "splitwise-hh": "35 + 5 (coding)",
                  "_": "Splitwise-AA: 2.15x Baseline-A100's throughput at the same power"},
    "iso-cost": {"_": "Splitwise-AA: 1.4x Baseline-H100's throughput at 20% lower cost"},
}


def main() -> None:
    ap = argparse.ArgumentParser(description="Reproduce the paper's provisioning experiments.")
    ap.add_argument("experiment", choices=sorted(PAPER))
    ap.add_argument("--workload", default="coding")
    ap.add_argument("--duration", type=float, default=120.0)
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--confirm-method", default="events")
    ap.add_argument("--designs", default=None)
    args = ap.parse_args()
    if args.workload != "coding" and args.experiment in ("fig12", "reference"):
        ap.error(f"{args.experiment} is the paper's coding run; --workload serves iso-power and iso-cost")
    # the paper's method and numbers: one stream, and its catalog in the reference's relative units
    common = dict(duration=args.duration, jobs=args.jobs, confirm_method=args.confirm_method, seeds=1,
                  machines_file=str(Path(__file__).resolve().parent / "machines-paper.toml"))
    if args.experiment == "fig12":
        req = PlanRequest(goal="min-cost", rps=70, designs=args.designs or "HH", **common)
    elif args.experiment == "reference":
        if not REF_TRACE.exists():
            sys.exit(f"reference trace not found at {REF_TRACE} (set SPLITWISE_SHARED)")
        req = PlanRequest(goal="min-cost", trace=str(REF_TRACE), designs=args.designs or "HH,H100,A100", **common)
    elif args.experiment == "iso-power":
        req = PlanRequest(goal="max-throughput", budget_power="40xH100", workload=args.workload,
                          designs=args.designs or "AA,HH,HA,HHcap,A100,H100", **common)
    else:
        req = PlanRequest(goal="max-throughput", budget_cost="40xH100", workload=args.workload,
                          designs=args.designs or "AA,HH,HA,HHcap,A100,H100", **common)
    res = plan(req)
    con = Console(width=170)
    render_plan(res, con)
    con.print("\nPaper / reference simulator:")
    for design, text in PAPER[args.experiment].items():
        ours = ""
        if design != "_":
            try:
                d = res.get(design)
                ours = f"  | ours: {d.prompt} + {d.token} ({d.machines} machines, {d.status})" + (
                    f" at {d.rate:g} req/s" if req.goal == "max-throughput" else "")
            except Exception:  # design not planned in this run
                ours = ""
        con.print(f"  {design if design != '_' else 'headline'}: {text}{ours}")


if __name__ == "__main__":
    main()
