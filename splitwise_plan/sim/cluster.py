"""A cluster to simulate: a design with machine counts, resolved to machines and latency models."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from splitwise_plan.errors import SplitwisePlanError, input_name, positive_number, real_number, whole_number
from splitwise_plan.inputs.machines import Machine
from splitwise_plan.inputs.models import ModelSpec, check_fits
from splitwise_plan.perf.latency_model import LatencyModel

GIB = 1024**3
TRANSFERS = ("serialized", "layerwise")   # KV-cache transfer after the prompt, or overlapped with it
LAYERWISE_SPEEDUP = 10.0   # the reference's overlap schedulers: ~90% of the transfer hidden = 10x bandwidth


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling constants; defaults are the reference simulator's."""

    max_batch_tokens: int = 2048          # prompt tokens (+1 per decoding request) in one batch
    max_batch_size: int = 512             # requests in one batch
    max_preemptions: int = 4              # mixed batching: a task preempted this often runs first
    prompt_max_pending_tokens: int = 8192  # a prompt queue longer than this borrows a token machine
    transfer_bandwidth_bytes_s: float = 200 * GIB  # KV-cache transfer
    layerwise_transfer: bool = False      # overlap the transfer with the prompt compute (10x bandwidth)
    flow_retry_s: float = 1.0             # a transfer waits this long when the token machine is full
    mixed_pool: bool = True               # borrow machines across pools when one is overloaded

    def __post_init__(self) -> None:
        """Whole numbers and positive rates, as plain Python values, or a user error naming the field."""
        for name, least in (("max_batch_tokens", 1), ("max_batch_size", 1), ("max_preemptions", 0),
                            ("prompt_max_pending_tokens", 1)):
            object.__setattr__(self, name, whole_number(getattr(self, name), f"SchedulerConfig.{name}", least))
        for name in ("transfer_bandwidth_bytes_s", "flow_retry_s"):
            object.__setattr__(self, name, positive_number(getattr(self, name), f"SchedulerConfig.{name}"))
        for name in ("layerwise_transfer", "mixed_pool"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise SplitwisePlanError(f"SchedulerConfig.{name} must be True or False, got {getattr(self, name)!r}")
            object.__setattr__(self, name, bool(getattr(self, name)))

    @classmethod
    def with_transfer(cls, transfer: str = "serialized", bandwidth_gib_s: float = 200.0) -> "SchedulerConfig":
        """The reference's scheduler with this KV-cache transfer (``TRANSFERS``) over a link of
        ``bandwidth_gib_s`` GiB/s a machine; a bad value is a one-line error naming the field (``transfer``,
        ``bandwidth``: the command line's ``--transfer`` and ``--bandwidth``)."""
        mode = str(transfer).strip().lower()
        if mode not in TRANSFERS:
            raise SplitwisePlanError(f"{input_name('transfer')} {transfer!r} is unknown; valid: {', '.join(TRANSFERS)}")
        bandwidth = real_number(bandwidth_gib_s, input_name("bandwidth"))
        if not 0.001 <= bandwidth <= 1e6:
            raise SplitwisePlanError(f"{input_name('bandwidth')} must be between 0.001 and 1e6 GiB/s, got {bandwidth_gib_s!r}")
        return cls(transfer_bandwidth_bytes_s=bandwidth * GIB, layerwise_transfer=mode == "layerwise")

    @property
    def transfer(self) -> str:
        return TRANSFERS[self.layerwise_transfer]

    @property
    def bandwidth_gib_s(self) -> float:
        return self.transfer_bandwidth_bytes_s / GIB

    @property
    def effective_bandwidth(self) -> float:
        """Bytes a second the KV cache appears to move at: layer-wise transfer hides most of it behind the prompt."""
        return self.transfer_bandwidth_bytes_s * (LAYERWISE_SPEEDUP if self.layerwise_transfer else 1.0)

    @property
    def is_reference(self) -> bool:
        """The reference simulator's constants (its 200 GiB/s serialized transfer among them)?"""
        return self == SchedulerConfig()

    def describe(self) -> str:
        return f"KV transfer {self.transfer} at {self.bandwidth_gib_s:g} GiB/s"

    def kv_transfer(self) -> dict:
        """The KV-cache transfer as reports give it."""
        return {"mode": self.transfer, "bandwidth_gib_s": self.bandwidth_gib_s}


def instance_layout(machine: Machine, tensor_parallel: int, baseline: bool,
                    model: ModelSpec | None = None) -> tuple[int, int]:
    """(model instances one machine of a pool runs, GPUs each), as the reference lays them out: a
    machine is split into as many instances of ``tensor_parallel`` GPUs as it holds (each with
    those GPUs' HBM and the whole weights; GPUs left over stay idle). A baseline machine at the
    tensor parallelism of all its GPUs runs one instance on them, as the reference's. A user error if
    the machine has fewer GPUs than that, or if an instance cannot hold ``model``'s weights (when given)."""
    del baseline   # (a baseline's machines are laid out as a Splitwise pool's)
    if machine.gpus < tensor_parallel:
        raise SplitwisePlanError(f"{machine.name} has {machine.gpus} GPU{'s' if machine.gpus > 1 else ''}, fewer than "
                                 f"the tensor parallelism {tensor_parallel}: no instance of the model fits on it")
    layout = (machine.gpus // tensor_parallel, tensor_parallel)
    if model is not None:
        check_fits(model, machine, layout[1])
    return layout


@dataclass(frozen=True)
class Pool:
    """The machines of one pool: type, count, the latency model of that hardware and the model
    instances each machine runs (the simulators' unit: an instance batches and queues on its own)."""

    machine: Machine
    count: int
    latency: LatencyModel = field(repr=False)
    per_machine: int = 1                # model instances a machine runs (see instance_layout)
    instance_gpus: int = 0              # GPUs of each (0: all the machine's)

    @property
    def instances(self) -> int:
        return self.count * self.per_machine

    @property
    def instance_hbm_bytes(self) -> int:
        """HBM of one instance: its GPUs'."""
        return self.machine.hbm_of(self.instance_gpus)


@dataclass(frozen=True)
class Cluster:
    """A fully resolved cluster design.

    ``token`` is None for a baseline: every machine of ``prompt`` runs both phases.
    """

    design: str
    model: ModelSpec
    prompt: Pool
    token: Pool | None
    scheduler: SchedulerConfig = SchedulerConfig()

    @property
    def is_baseline(self) -> bool:
        return self.token is None

    @property
    def n_machines(self) -> int:
        return self.prompt.count + (self.token.count if self.token else 0)

    @property
    def n_instances(self) -> int:
        return self.prompt.instances + (self.token.instances if self.token else 0)

    def kv_room_of(self, pool: Pool) -> float:
        """KV-cache bytes one instance of ``pool`` holds beside the weights."""
        return float(pool.instance_hbm_bytes) - float(self.model.weights_bytes)

    @property
    def kv_room(self) -> float:
        """The most KV-cache bytes any instance holds beside the weights: a request needing more never runs."""
        return max(self.kv_room_of(p) for p in (self.prompt, self.token) if p is not None)

    @property
    def cost(self) -> float:
        return self.prompt.count * self.prompt.machine.cost + (
            self.token.count * self.token.machine.cost if self.token else 0.0)

    @property
    def power(self) -> float:
        return self.prompt.count * self.prompt.machine.power + (
            self.token.count * self.token.machine.power if self.token else 0.0)

    def kv_bytes(self, tokens):
        return tokens * self.model.kv_bytes_per_token
