"""The planner: per design, the cheapest (or least-power) machine counts that hold every SLO under a
goal, confirmed by the event simulator and ranked; or, within a budget, the highest rate.

Its modules, each importing only those listed before it:

- :mod:`.request`: what a plan asks (:class:`PlanRequest`, checked) and reads (:class:`Inputs`);
- :mod:`.result`: what it answers (:class:`DesignPlan` per design, :class:`PlanResult`);
- :mod:`.objectives`: the search's key, the grid, the ranking and the gains over the baselines;
- :mod:`.streams`: the seeds' streams, the worst result over them, the points simulated;
- :mod:`.confirm`: the confirm simulator's re-check of an answer (:class:`~.confirm.Confirmer`);
- :mod:`.stored`: a search kept in a storage, the question a worker rebuilds;
- :mod:`.iso`: the min-cost and min-power goals; :mod:`.budget`: the max-throughput goal;
- :mod:`.tp`: ``--tp auto``, each design at each tensor parallelism the model fits;
- :mod:`.planner`: :func:`plan`, which runs every design and ranks them;
- :mod:`.calibrate`: :func:`calibrate`, the simulator beside a serving benchmark of one server.

This package's public API is below. Imports only the layers below it: search, sim, perf, inputs and
errors.
"""

from splitwise_plan.planning.calibrate import Calibration, calibrate
from splitwise_plan.planning.objectives import REFERENCE_GRID, gain_text
from splitwise_plan.planning.planner import inputs_block, plan, planned_designs
from splitwise_plan.planning.request import (
    ALL_DESIGNS,
    GOALS,
    Inputs,
    PlanRequest,
    input_label,
    parse_designs,
    stream_of,
)
from splitwise_plan.planning.result import DesignPlan, PlanResult, json_number

__all__ = ["ALL_DESIGNS", "GOALS", "REFERENCE_GRID", "Calibration", "DesignPlan", "Inputs", "PlanRequest", "PlanResult",
           "calibrate", "gain_text", "input_label", "inputs_block", "json_number", "parse_designs", "plan",
           "planned_designs", "stream_of"]
