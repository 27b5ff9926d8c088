"""The fluid-queue model (method ``fluid``): many designs advanced together, one arrival at a time."""

from splitwise_plan.sim.fluid.model import PASS_MEMORY, pass_size, simulate_fluid

__all__ = ["PASS_MEMORY", "pass_size", "simulate_fluid"]
