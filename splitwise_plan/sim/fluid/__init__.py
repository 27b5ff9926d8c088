"""The fluid model (method ``fluid``): the reference's cluster rules, each machine's batches as a fluid, compiled."""

from splitwise_plan.sim.fluid.flow import FluidOutcome, simulate_fluid

__all__ = ["FluidOutcome", "simulate_fluid"]
