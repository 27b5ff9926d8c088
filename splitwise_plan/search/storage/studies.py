"""Optuna studies of splitwise-plan: opened or created with their question checked, and listed.

A study's user attribute ``splitwise_plan`` holds the question it answers; opening a study that
holds another question is an error, so a name cannot be reused for other inputs.
"""

from __future__ import annotations

from splitwise_plan.errors import SplitwisePlanError, input_name
from splitwise_plan.search.storage.trials import ATTR
from splitwise_plan.search.storage.urls import first_line, open_storage, redact


def _sampler(seed: int | None, n_trials: int):
    import optuna

    new_api = hasattr(optuna.trial.Trial, "set_constraint")   # Optuna >= 5
    kw = {} if new_api else {"constraints_func": lambda tr: tr.user_attrs.get("constraint", (1.0,))}
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(8, max(1, n_trials)),
                                      constant_liar=True, **kw)


def _identity(attrs: dict) -> dict:
    """The part of a question that decides what a stored simulation means."""
    req = {k: v for k, v in attrs.get("request", {}).items() if k not in ("margin", "limits")}
    sp = attrs.get("space", {})
    return {"request": req, "files": attrs.get("files", {}), "design": attrs.get("design"),
            "p_range": sp.get("p_range"), "t_range": sp.get("t_range"), "objective": sp.get("objective")}


def _diff(old: dict, new: dict, where: str = "") -> str | None:
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            d = _diff(a, b, f"{where}{k}.")
            if d:
                return d
        elif a != b:
            return f"{where}{k}: {a!r} there, {b!r} here"
    return None


def open_study(storage, name: str | None, *, seed: int | None = 0, n_trials: int = 24,
               attrs: dict | None = None, must_exist: bool = False):
    """(study, RDBStorage or None): a new or existing study, its question checked against ``attrs``."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if storage is None or isinstance(storage, str):
        rdb = store = open_storage(storage)    # None: in memory
    else:                                      # an Optuna storage object given by the caller
        store = storage
        rdb = storage if isinstance(storage, optuna.storages.RDBStorage) else None
    sampler = _sampler(seed, n_trials)
    try:
        if must_exist:
            study = optuna.load_study(study_name=name, storage=store, sampler=sampler)
        else:
            study = optuna.create_study(direction="minimize", sampler=sampler, storage=store,
                                        study_name=name, load_if_exists=name is not None)
    except KeyError:
        raise SplitwisePlanError(f"no study {name!r} in {redact(getattr(store, 'url', None))}") from None
    except SplitwisePlanError:
        raise
    except Exception as exc:  # noqa: BLE001 - database errors: one line
        raise SplitwisePlanError(f"study {name!r} in {redact(getattr(store, 'url', None))}: {first_line(exc)}") from None
    if attrs is not None:
        have = study.user_attrs.get(ATTR)
        if have is None:
            if rdb is not None and study.get_trials(deepcopy=False):
                raise SplitwisePlanError(f"study {name!r} in {redact(rdb.url)} was not made by splitwise-plan; "
                                         f"give another --study")
            study.set_user_attr(ATTR, {**attrs, "n_trials": int(n_trials)})
        else:
            d = _diff(_identity(have), _identity(attrs))
            if d:
                raise SplitwisePlanError(f"study {name!r} in {redact(getattr(rdb, 'url', None))} holds another "
                                         f"question ({d}); give another --study")
    return study, rdb


def study_names(url: str | None, name: str | None = None) -> list[str]:
    """splitwise-plan studies in the storage named ``name`` or under ``name/`` (all when None)."""
    import optuna

    rdb = open_storage(url)
    if rdb is None:
        raise SplitwisePlanError(f"a worker needs a persistent {input_name('storage')} (sqlite:///FILE or postgresql://...)")
    try:
        summaries = optuna.get_all_study_summaries(rdb, include_best_trial=False)
    except Exception as exc:  # noqa: BLE001
        raise SplitwisePlanError(f"{input_name('storage')} {redact(url)}: {first_line(exc)}") from None
    out = []
    for s in summaries:
        if ATTR not in s.user_attrs:
            continue
        if name is None or s.study_name == name or s.study_name.startswith(name.rstrip("/") + "/"):
            out.append(s.study_name)
    return sorted(out)
