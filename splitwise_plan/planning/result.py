"""What a plan answers: per design a :class:`DesignPlan` (its machine counts, cost, power and rate,
the worst confirmed result, every point simulated), and for the whole plan a :class:`PlanResult` (the
designs ranked, the winner, its gains over the baselines), with their JSON forms (:func:`json_number`:
a number, or None for NaN and infinities).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from splitwise_plan.errors import SplitwisePlanError
from splitwise_plan.inputs.designs import display_name, get_design
from splitwise_plan.planning.request import PlanRequest, input_label, stream_of


@dataclass(frozen=True)
class DesignPlan:
    """The planner's answer for one design."""

    design: str
    short: str
    status: str                     # ok | infeasible | unconfirmed | pruned (a --tp auto variant not simulated)
    prompt: int = 0
    token: int = 0
    cost: float = float("nan")
    power: float = float("nan")
    rate: float = float("nan")      # req/s the design holds (the asked rate for iso-throughput)
    result: object | None = field(default=None, repr=False)   # worst confirmed SimulationResult
    bound: float = float("nan")     # ILP lower bound of the objective (upper bound of the rate multiplier)
    evaluations: int = 0            # simulations by the search method
    confirmations: int = 0          # simulations by the confirm method
    grid_size: int = 0
    candidates: int = 0
    seconds: float = field(default=0.0, compare=False)
    note: str = ""
    #: ((rate, SimulationResult), ...): every point the search method simulated (the CSV report's rows)
    evaluated: tuple = field(default=(), repr=False, compare=False)
    #: ((rate, SimulationResult), ...): every point the confirm method checked, held or rejected, in order
    confirmed: tuple = field(default=(), repr=False, compare=False)
    #: ((design, status, cost, power, evaluations, confirmations, grid size), ...): under ``--tp auto``, the
    #: design's other TP variants planned
    tp_tried: tuple = ()
    #: (model instances a prompt machine runs, a token machine), where the design fixes each pool's TP
    instances: tuple = ()

    def __eq__(self, other) -> bool:
        """Equal answers (NaN equals NaN here, and the time taken does not count)."""
        if not isinstance(other, DesignPlan):
            return NotImplemented
        mine, theirs = self.to_dict(), other.to_dict()
        mine.pop("seconds"), theirs.pop("seconds")
        return mine == theirs

    __hash__ = None   # a result holds dicts

    @property
    def machines(self) -> int:
        return self.prompt + self.token

    @property
    def headroom(self) -> float:
        """1 - the tightest SLO's value/limit ratio on the worst confirmation stream."""
        if self.result is None or not self.result.tightest:
            return float("nan")
        return 1.0 - float(self.result.tightest["ratio"])

    def to_record(self) -> dict:
        """The whole answer as JSON-able data (its results and evaluated points too): what a stopped
        plan keeps of each finished design (see :func:`from_record`)."""
        from splitwise_plan.search.storage import encode_result
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("result", "evaluated", "confirmed")}
        out["result"] = None if self.result is None else encode_result(self.result)
        for name in ("evaluated", "confirmed"):
            out[name] = [[float(rate), encode_result(r)] for rate, r in getattr(self, name)]
        return out

    @classmethod
    def from_record(cls, d: dict) -> "DesignPlan":
        """The inverse of :meth:`to_record` (an error of the ``ValueError``, ``KeyError`` or ``TypeError`` kind
        for data that is not one)."""
        from splitwise_plan.search.storage import decode_result
        from splitwise_plan.sim.simulator import SimulationResult

        def result(x):
            r = decode_result(x)
            if not isinstance(r, SimulationResult):
                raise TypeError("not a simulation result")
            return r
        try:
            vals = dict(d)
            vals["result"] = None if d["result"] is None else result(d["result"])
            vals["evaluated"] = tuple((float(rate), result(r)) for rate, r in d["evaluated"])
            vals["confirmed"] = tuple((float(rate), result(r)) for rate, r in d.get("confirmed", ()))   # (since 2026-12)
            return cls(**vals)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:   # (SplitwisePlanError is a ValueError)
            raise SplitwisePlanError(f"not a record made by DesignPlan.to_record (a report's entry is not one): "
                                     f"{type(exc).__name__}: {exc}") from None

    def to_dict(self, rate_bound: bool = False) -> dict:
        """The answer as the JSON report has it; ``rate_bound``: ``bound`` is a rate (max-throughput: the
        capacity model's upper bound, ``bound_rps``), else the ILP's lower bound on the cost or power."""
        r = self.result
        none = self.machines == 0   # no answer (infeasible, or nothing held): no count, as no cost
        return {"design": self.design, "short": self.short, "status": self.status,
                "prompt_machines": None if none else self.prompt, "token_machines": None if none else self.token,
                "machines": None if none else self.machines, "cost": json_number(round(self.cost, 6)),
                "power": json_number(round(self.power, 6)), "rate_rps": json_number(self.rate), "slo_headroom": json_number(self.headroom),
                "slo_met": None if r is None else bool(r.slo_met),
                "tightest": None if r is None or not r.tightest else {
                    k: (json_number(v) if isinstance(v, float) else v) for k, v in r.tightest.items()},
                "evaluations": self.evaluations, "confirmations": self.confirmations,
                "grid_size": self.grid_size, "candidates": self.candidates,
                "bound": None if rate_bound else json_number(round(self.bound, 6)),
                "bound_rps": json_number(round(self.bound, 6)) if rate_bound else None,
                "seconds": round(self.seconds, 3), "note": self.note,
                "seed": None if r is None else r.seed,   # the stream of ``result`` (the worst of --seeds)
                **self._tp_dict(),
                "result": self.result.to_dict() if self.result is not None else None}

    def _tp_dict(self) -> dict:
        """Each pool's TP, where the design fixes it (``--tp auto`` or ``P:T``), and the variants tried."""
        d = get_design(self.design)
        if d.tp is None:
            return {}
        out = {"prompt_tp": d.tp[0]} if d.is_baseline else {"prompt_tp": d.tp[0], "token_tp": d.tp[1]}
        for role, n in zip(("prompt", "token"), self.instances[:len(d.machines)]):
            out[f"{role}_instances_per_machine"] = n
        if self.tp_tried:
            out["tp_tried"] = [{"design": n, "status": s, "cost": json_number(round(c, 6)),
                                "power": json_number(round(w, 6))} for n, s, c, w, *_ in self.tp_tried]
        return out


def json_number(v):
    v = float(v)
    return v if math.isfinite(v) else None


#: Hours a month of a machine's price: 730 (365 days x 24 / 12), as cloud price lists count them.
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class PlanResult:
    """All designs ranked by the goal, the winner and its gains over the baselines."""

    request: PlanRequest
    designs: tuple[DesignPlan, ...]
    winner: str | None
    gains: tuple[str, ...]
    search_method: str
    seconds: float = field(compare=False)
    #: the report's ``inputs`` block, made as the plan ran (its files then, not as they are later)
    inputs: dict | None = field(default=None, compare=False, repr=False)
    #: the winner's verdict at a higher rate (the planner's ``STRESS_FACTOR``): factor, rate_rps, slo_met,
    #: headroom and the worst ``result`` over the streams; None without a winner, or for max-throughput
    stress: dict | None = field(default=None, compare=False, repr=False)
    #: how sure the answer is (planning/sureness.py): each error band, whether the winner holds and still wins
    sureness: dict | None = field(default=None, compare=False, repr=False)
    #: a rival at most 5% dearer that is markedly safer (planning/alternative.py), or None
    alternative: dict | None = field(default=None, compare=False, repr=False)
    #: the mean output tokens of a request of the plan's workload or trace (for the cost per million tokens)
    output_tokens: float | None = field(default=None, compare=False, repr=False)
    #: {machine type: GPUs it has} of the designs' machines (for the GPUs in all)
    gpus: dict = field(default_factory=dict, compare=False, repr=False)

    def priced_rate(self, p: DesignPlan) -> float:
        """The rate a design's cost per token is at: the plan's ``rps`` (not its load headroom's), else the design's
        own (max-throughput, or a trace's)."""
        req = self.request
        return p.rate if req.goal == "max-throughput" or req.rps is None else req.rps

    def figures(self, p: DesignPlan) -> dict:
        """What a buyer compares of an answer: the GPUs in all, the cost per month (``HOURS_PER_MONTH``) and per
        million output tokens at the plan's rate (max-throughput: the design's), in the catalog's cost unit."""
        if p.status != "ok" or p.machines == 0:
            return {"gpus": None, "cost_per_month": None, "cost_per_million_output_tokens": None}
        d = get_design(p.design)
        counts = (p.prompt,) if d.is_baseline else (p.prompt, p.token)
        gpus = sum(n * self.gpus.get(m, 0) for n, m in zip(counts, d.machines)) if self.gpus else None
        tokens_per_hour = (self.output_tokens or math.nan) * self.priced_rate(p) * 3600.0
        return {"gpus": gpus, "cost_per_month": json_number(round(p.cost * HOURS_PER_MONTH, 2)),
                "cost_per_million_output_tokens": json_number(round(p.cost / tokens_per_hour * 1e6, 4))
                if tokens_per_hour > 0 else None}

    @property
    def trace_s(self) -> float | None:
        """The replayed trace's duration (None: a generated stream, or a result built by hand)."""
        return self.inputs["duration_s"] if self.request.trace is not None and self.inputs is not None else None

    @property
    def budget(self) -> float | None:
        """A max-throughput plan's budget as its machine catalog prices it (None: another goal, or unknown)."""
        return (self.inputs or {}).get("budget", {}).get("amount")

    @property
    def evaluations(self) -> int:   # (under --tp auto, each design's other TP variants' too)
        return sum(d.evaluations + sum(t[4] for t in d.tp_tried) for d in self.designs)

    @property
    def confirmations(self) -> int:
        return sum(d.confirmations + sum(t[5] for t in d.tp_tried) for d in self.designs)

    @property
    def grid_size(self) -> int:
        return sum(d.grid_size + sum(t[6] for t in d.tp_tried) for d in self.designs)

    def get(self, design: str) -> DesignPlan:
        name = get_design(design).name
        for d in self.designs:
            if d.design == name:
                return d
        raise SplitwisePlanError(f"design {name} was not planned")

    def to_dict(self) -> dict:
        r = self.request
        workload, duration, seed = stream_of(r, self.trace_s)
        rate = r.rps if r.rps is not None or r.goal == "max-throughput" else (self.inputs or {}).get("rate_rps")
        return {"goal": r.goal, "rate_rps": None if rate is None else float(rate), "budget_power": r.budget_power,
                "budget_cost": r.budget_cost, "model": r.model, "workload": input_label(workload),
                "trace": input_label(r.trace),
                "duration": float(duration),   # floats however given (20 from Python, 20.0 from the CLI)
                "seed": seed, "seeds": r.seeds if r.trace is None else 1, "tp": r.tp, "strategy": r.strategy,
                "margin": r.margin,
                "search_method": self.search_method,
                "confirm_method": r.confirm_method, "winner": self.winner, "gains": list(self.gains),
                "evaluations": self.evaluations, "confirmations": self.confirmations,
                "grid_size": self.grid_size, "seconds": round(self.seconds, 3),
                "at_higher_rate": self._stress_dict(), "load_headroom": r.headroom,
                "planned_rps": None if r.planned_rps is None else float(r.planned_rps),
                "output_tokens_per_request": None if self.output_tokens is None else round(float(self.output_tokens), 3),
                "winner_figures": self.figures(self.get(self.winner)) if self.winner else None,
                "sureness": self.sureness, "robust_alternative": self.alternative,
                "designs": [{**d.to_dict(rate_bound=r.goal == "max-throughput"), "display_name": display_name(d.design),
                             **self.figures(d)} for d in self.designs]}

    def _stress_dict(self) -> dict | None:
        """:attr:`stress` as the JSON report has it."""
        st = self.stress
        if st is None:
            return None
        r = st["result"]
        return {"factor": st["factor"], "rate_rps": json_number(st["rate_rps"]), "slo_met": bool(st["slo_met"]),
                "slo_headroom": json_number(st["headroom"]), "seed": r.seed,
                "tightest": None if not r.tightest else {
                    k: (json_number(v) if isinstance(v, float) else v) for k, v in r.tightest.items()}}
