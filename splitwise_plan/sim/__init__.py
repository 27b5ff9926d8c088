"""The simulators: a design with machine counts run on a request stream, giving the nine SLO percentiles.

- :mod:`.cluster`: a design resolved to pools of machines and their latency models;
- :mod:`.metrics`: per-request TTFT, TBT and E2E, their percentiles and the early verdict;
- :mod:`.simulator`: the facade, :class:`~.simulator.Simulator` and :class:`~.simulator.SimulationResult`;
- :mod:`.events`: the discrete-event simulator (method ``events``), the reference's rules one event at a time;
- :mod:`.fluid`: the fluid-queue model (method ``fluid``), many designs in one pass.

Imports only :mod:`splitwise_plan.perf`, :mod:`splitwise_plan.inputs` and :mod:`splitwise_plan.errors`.
"""
