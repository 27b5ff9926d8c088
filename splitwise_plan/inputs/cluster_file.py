"""A deployed cluster described in a small TOML (or YAML) file, for ``check`` and ``capacity``.

A Splitwise cluster::

    name = "prod-east"                 # optional, shown in reports
    design = "splitwise-hh"            # or HH, HA, AA, HHcap (any case)
    prompt_machines = 27
    token_machines = 3
    model = "bloom-176b"               # optional, default bloom-176b
    tensor_parallel = 8                # optional (alias: tp), default 8; "4:2": the prompt pool's, the token pool's
    prompt_machine_type = "dgx-h100"   # optional: override the design's machine types
    token_machine_type = "dgx-a100"    #   (names from the machine catalog)

A baseline (every machine runs both phases)::

    design = "baseline-h100"           # or H100, A100
    machines = 40
    machine_type = "dgx-h100"          # optional override

The plan that chose it may add, as ``splitwise-plan --cluster-out FILE`` writes them, what ``check`` and
``capacity`` then take as their defaults so that they reproduce the plan's streams::

    dtype = "bf16"                     # the weights' precision
    stack = "vllm"                     # the latencies' stack (--stack)
    rps = 100.0                        # the planned rate (check's --rps)
    workload = "conversation"          # the request sizes, the stream's length, its seed and seeds
    duration = 120.0
    seed = 0
    seeds = 3

YAML files (``.yaml``/``.yml``) take the same keys when PyYAML is installed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from splitwise_plan.errors import SplitwisePlanError, by_name, choices, seed_value
from splitwise_plan.inputs.designs import Design, display_name, get_design, parse_tp, pool_size
from splitwise_plan.inputs.machines import BUILTIN_MACHINES, Machine
from splitwise_plan.inputs.models import BUILTIN_MODELS
from splitwise_plan.inputs.paths import read_toml, user_file

KEYS = ("name", "description", "design", "prompt_machines", "token_machines", "machines", "model",
        "tensor_parallel", "tp", "prompt_machine_type", "token_machine_type", "machine_type",
        "dtype", "stack", "rps", "workload", "duration", "seed", "seeds")
#: The keys of the plan's streams and latencies, which check and capacity take as their defaults.
PLAN_KEYS = ("dtype", "stack", "rps", "workload", "duration", "seed", "seeds")


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster as deployed: a design (machine types resolved), machine counts, model and TP."""

    design: Design
    prompt_machines: int
    token_machines: int = 0
    model: str = "bloom-176b"
    tensor_parallel: int | str = 8   # or "4:2"
    name: str = ""
    source: str = ""
    #: {key of PLAN_KEYS: value} the file gives (a plan's --cluster-out writes them all)
    plan: dict = field(default_factory=dict)

    @property
    def is_baseline(self) -> bool:
        return self.design.is_baseline

    @property
    def machines(self) -> int:
        return self.prompt_machines + self.token_machines

    @property
    def label(self) -> str:
        """Short description like ``Splitwise-HH (H100:H100) 27P+3T``, ``Baseline-H100 x40``."""
        d = self.design
        if d.is_baseline:
            return f"{display_name(d)} x{self.prompt_machines}"
        return f"{display_name(d)} {self.prompt_machines}P+{self.token_machines}T"

    def to_dict(self) -> dict:
        d = self.design
        return {"name": self.name or None, "source": self.source or None, "design": d.name,
                "prompt_machine_type": d.prompt_machine, "token_machine_type": d.token_machine,
                "prompt_machines": self.prompt_machines, "token_machines": self.token_machines,
                "machines": self.machines, "model": self.model, "tensor_parallel": self.tensor_parallel,
                **self.plan}


def _read_yaml(p: Path) -> dict:
    try:
        import yaml  # optional
    except ImportError:
        raise SplitwisePlanError(f"cluster file {p}: YAML needs PyYAML (pip install pyyaml); "
                                 "or write the file as TOML") from None
    class Loader(yaml.SafeLoader):
        """PyYAML keeps the last of a repeated key; TOML refuses it, and so does a cluster file in YAML."""

    def mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise SplitwisePlanError(f"cluster file {p}, line {key_node.start_mark.line + 1}: "
                                             f"key {key!r} is given twice")
                seen.add(key)
            except TypeError:   # an unhashable key: PyYAML's own error says so
                pass
        return loader.construct_mapping(node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    try:
        doc = yaml.load(p.read_text(encoding="utf-8-sig"), Loader=Loader)
    except yaml.YAMLError as exc:
        raise SplitwisePlanError(f"cluster file {p} is not valid YAML: {exc}") from None
    except UnicodeDecodeError:
        raise SplitwisePlanError(f"cluster file {p} is not UTF-8 text") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise SplitwisePlanError(f"cluster file {p}: the top level must be a mapping of keys to values")
    return doc


def _count(where: str, key: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SplitwisePlanError(f"{where}: {key} must be a whole number, got {value!r}")
    if value < 1:
        raise SplitwisePlanError(f"{where}: {key} must be at least 1, got {value}")
    return int(value)


def _machines(where: str, key: str, value) -> int:
    return pool_size(_count(where, key, value), f"{where}: {key}")


def _string(where: str, key: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SplitwisePlanError(f"{where}: {key} must be a non-empty string, got {value!r}")
    return value.strip()


def parse_cluster(doc: Mapping, where: str = "cluster file",
                  machines: Mapping[str, Machine] | None = None) -> ClusterSpec:
    """Validate a parsed cluster document (see the module docstring)."""
    if not isinstance(doc, Mapping):
        raise SplitwisePlanError(f"{where}: expected a table of keys")
    unknown = sorted(str(k) for k in set(doc) - set(KEYS))
    if unknown:
        raise SplitwisePlanError(f"{where}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(KEYS)}")
    if "design" not in doc:
        raise SplitwisePlanError(f"{where}: missing key design (e.g. design = \"splitwise-hh\")")
    name = _string(where, "design", doc["design"])
    try:
        design = get_design(name)
    except SplitwisePlanError as exc:
        raise SplitwisePlanError(f"{where}: {exc}") from None
    catalog = machines if machines is not None else BUILTIN_MACHINES

    def machine_type(key: str) -> str:
        name = _string(where, key, doc[key])
        try:
            return by_name(catalog, name).name
        except KeyError:
            raise SplitwisePlanError(f"{where}: {key} {name!r} is not a known machine; "
                                     f"valid: {choices(catalog)}") from None

    if design.is_baseline:
        bad = [k for k in ("prompt_machines", "token_machines", "prompt_machine_type", "token_machine_type")
               if k in doc]
        if bad:
            raise SplitwisePlanError(f"{where}: {design.name} is a baseline: give machines = N "
                                     f"(and optionally machine_type), not {', '.join(bad)}")
        if "machines" not in doc:
            raise SplitwisePlanError(f"{where}: {design.name} needs machines = N (the number of machines)")
        n_prompt, n_token = _machines(where, "machines", doc["machines"]), 0
        if "machine_type" in doc:
            design = replace(design, prompt_machine=machine_type("machine_type"))
    else:
        bad = [k for k in ("machines", "machine_type") if k in doc]
        if bad:
            raise SplitwisePlanError(f"{where}: {design.name} has a prompt and a token pool: give "
                                     f"prompt_machines and token_machines, not {', '.join(bad)}")
        missing = [k for k in ("prompt_machines", "token_machines") if k not in doc]
        if missing:
            raise SplitwisePlanError(f"{where}: {design.name} needs {' and '.join(missing)}")
        n_prompt = _machines(where, "prompt_machines", doc["prompt_machines"])
        n_token = _machines(where, "token_machines", doc["token_machines"])
        if "prompt_machine_type" in doc:
            design = replace(design, prompt_machine=machine_type("prompt_machine_type"))
        if "token_machine_type" in doc:
            design = replace(design, token_machine=machine_type("token_machine_type"))
    # machine types of its own make it the design of those pools (named PROMPT:TOKEN or baseline:MACHINE)
    design = get_design(f"baseline:{design.prompt_machine}" if design.is_baseline
                        else f"{design.prompt_machine}:{design.token_machine}")
    model = _model(where, _string(where, "model", doc.get("model", "bloom-176b")))
    if "tp" in doc and "tensor_parallel" in doc:
        raise SplitwisePlanError(f"{where}: give tensor_parallel or tp, not both")
    tp = doc.get("tensor_parallel", doc.get("tp", 8))
    if isinstance(tp, str):   # "4:2": the prompt pool's and the token pool's
        pair = parse_tp(tp, f"{where}: tensor_parallel")
        tp = pair[0] if pair[0] == pair[1] else f"{pair[0]}:{pair[1]}"
    else:
        tp = _count(where, "tensor_parallel", tp)
    name = _string(where, "name", doc["name"]) if "name" in doc else ""
    return ClusterSpec(design, n_prompt, n_token, model=model, tensor_parallel=tp, name=name,
                       plan=_plan_keys(where, doc))


def _model(where: str, model: str) -> str:
    """A built-in model's name, or a config.json (or its folder) that reads as a model; else one line."""
    import os

    from splitwise_plan.inputs.models import get_model
    try:
        return by_name(BUILTIN_MODELS, model).name
    except KeyError:
        if not os.path.exists(model):
            raise SplitwisePlanError(f"{where}: model {model!r} is unknown; valid: {choices(BUILTIN_MODELS)}, "
                                     "or a config.json's path") from None
    get_model(model)   # (a bad config.json fails here, in one line)
    return model


def _plan_keys(where: str, doc: Mapping) -> dict:
    """The plan's keys the file gives, checked (see PLAN_KEYS)."""
    out = {}
    for key in ("dtype", "stack", "workload"):
        if key in doc:
            out[key] = _string(where, key, doc[key])
    for key in ("rps", "duration"):
        if key in doc:
            value = doc[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
                raise SplitwisePlanError(f"{where}: {key} must be a positive number, got {value!r}")
            out[key] = float(value)
    if "seed" in doc:
        out["seed"] = seed_value(doc["seed"], f"{where}: seed")
    if "seeds" in doc:
        out["seeds"] = _count(where, "seeds", doc["seeds"])
    return out


def cluster_toml(spec: ClusterSpec, comment: str = "") -> str:
    """A cluster file's text for ``spec`` (its plan's keys too), that :func:`load_cluster` reads back."""
    import json

    d = spec.design
    lines = [f"# {line}" for line in comment.splitlines()] if comment else []
    if spec.name:
        lines.append(f"name = {json.dumps(spec.name)}")
    if d.is_baseline:
        lines += [f"design = {json.dumps('baseline:' + d.prompt_machine)}", f"machines = {spec.prompt_machines}"]
    else:
        lines += [f"design = {json.dumps(d.prompt_machine + ':' + d.token_machine)}",
                  f"prompt_machines = {spec.prompt_machines}", f"token_machines = {spec.token_machines}"]
    lines.append(f"model = {json.dumps(spec.model)}")
    tp = spec.tensor_parallel
    lines.append(f"tensor_parallel = {json.dumps(tp) if isinstance(tp, str) else int(tp)}")
    for key in PLAN_KEYS:
        if key in spec.plan:
            lines.append(f"{key} = {json.dumps(spec.plan[key])}")
    return "\n".join(lines) + "\n"


def load_cluster(path: str | Path, machines: Mapping[str, Machine] | None = None) -> ClusterSpec:
    """Read and validate a cluster file (TOML, or YAML by extension); errors name the file."""
    p = user_file(path, "cluster")
    where = f"cluster file {p}"
    if p.suffix.lower() in (".yaml", ".yml"):
        doc = _read_yaml(p)
    else:
        doc = read_toml(p, "cluster")
    spec = parse_cluster(doc, where, machines)
    return replace(spec, source=str(p))
