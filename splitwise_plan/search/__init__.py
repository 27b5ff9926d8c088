"""The search over machine counts: for one design, the cheapest (prompt, token) point that holds the SLOs.

- :mod:`.space`: the grid of machine counts and its key; :mod:`.evaluator`: cached, counted simulations
  and the lockstep rounds that let designs share them;
- :mod:`.strategies`: the frontier walk (exact under monotonicity), Optuna TPE, the exhaustive grid;
- :mod:`.bound`: the analytic capacity bound that prunes what cannot carry the stream, and the PuLP ILP
  lower bound on the cost or power;
- :mod:`.storage`: the Optuna storages that keep a search's trials (resumable, shared by workers).

Imports only from the layers below: :mod:`splitwise_plan.sim`, :mod:`splitwise_plan.perf`,
:mod:`splitwise_plan.inputs` and :mod:`splitwise_plan.errors`.
"""

from splitwise_plan.search.bound import CapacityModel, capacity_model
from splitwise_plan.search.evaluator import WAKE_S, Evaluator, Lockstep, passes
from splitwise_plan.search.space import Point, SearchResult, Space
from splitwise_plan.search.strategies import STRATEGIES, exhaustive_search, frontier_search, optuna_search, search

__all__ = [
    "STRATEGIES", "WAKE_S", "CapacityModel", "Evaluator", "Lockstep", "Point", "SearchResult", "Space",
    "capacity_model", "exhaustive_search", "frontier_search", "optuna_search", "passes", "search",
]
