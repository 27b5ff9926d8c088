"""The discrete-event simulator (method ``events``): the reference simulator's rules, one event at a time."""

from splitwise_plan.sim.events.engine import simulate_events

__all__ = ["simulate_events"]
