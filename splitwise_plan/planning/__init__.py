"""The planner: per design, the cheapest (or least-power) machine counts that hold every SLO under a
goal, confirmed by the event simulator and ranked; or, within a budget, the highest rate.

Imports only the layers below it: search, sim, perf, inputs and errors.
"""
