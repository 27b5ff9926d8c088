"""Search trials kept in an Optuna storage: resumable, shared by many workers, read back by the planner.

The storage is Optuna's own (no home-made queue):

- none (the default): an in-memory study that lives as long as the search;
- ``sqlite:///plan.db``: an embedded SQLite file, for resuming on one machine;
- ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DB``: a PostgreSQL server (the ``psycopg``
  driver, ``pip install 'splitwise-plan[postgres]'``), for workers on several machines.

One study per (question, design). The planner names it ``PREFIX/SHORT`` (``SHORT`` is the
design's short name, ``HH``), ``PREFIX`` being ``--study NAME`` or a name derived from the
inputs (goal, model, workload, rate, duration, seed and a hash of everything that changes
a simulation), and stores the question as the study's user attribute ``splitwise_plan``:
the plan inputs (paths made absolute, with the files' SHA-256), the design, the search
method and the (prompt, token) space. A ``splitwise-plan worker`` rebuilds the simulator
and the space from that attribute alone, so it needs only the storage URL and the name.

Each trial is one design point. Its user attribute ``sim`` holds the point, the simulator's
whole result (``result``: the nine percentiles, the SLO verdict, cost, power), the tightest
SLO ratio, pass/fail, the objective, whether this trial ran the simulator (``simulated``)
or reused a stored result, and the worker; ``worker`` (set when the trial is asked) names
the process that owns it. Rules that keep every point simulated once and every trial
counted once:

- before asking and before every simulation, the search's ``Evaluator`` is filled
  from the study's COMPLETE trials; a trial whose point is already known is told the
  stored result without a simulation;
- a trial whose point a lower-numbered RUNNING trial of another worker already holds
  waits for that trial's result instead of simulating it (Optuna numbers trials in the
  order it creates them, under a lock on the study);
- a study holds ``n_trials`` TPE trials (those of the frontier walk come on top): each
  worker asks only what the COMPLETE and RUNNING ones leave (several workers may overshoot by up to a batch each, as Optuna's own
  ``MaxTrialsCallback`` does);
- in-flight trials carry an Optuna heartbeat; Ctrl-C (or any exception) fails them before
  the process stops, and a worker fails the RUNNING trials of a dead process: at once when
  that process ran on the same machine, after :data:`GRACE_PERIOD` seconds without a
  heartbeat otherwise (Optuna's ``fail_stale_trials``). Failed trials never count;
- the frontier walk that certifies the optimum stores its simulations as trials too.

So the same command run again goes on where it stopped, and the answer, certified by
the frontier walk, is the same as an uninterrupted run's for the same seed.
"""

from splitwise_plan.search.storage.explore import ExploreStats, attach, explore
from splitwise_plan.search.storage.heartbeat import GRACE_PERIOD, HEARTBEAT_INTERVAL, fail_stale, worker_id
from splitwise_plan.search.storage.studies import open_study, study_names
from splitwise_plan.search.storage.trials import (
    ATTR,
    SCHEMA,
    TRIAL_ATTR,
    WORKER_ATTR,
    best_trial,
    decode_result,
    encode_result,
    trial_record,
    trial_table,
)
from splitwise_plan.search.storage.urls import (
    check_sqlite_file,
    check_storage,
    is_optuna_schema,
    normalize_storage,
    open_storage,
    redact,
    sqlite_file,
)

__all__ = [
    "ATTR", "GRACE_PERIOD", "HEARTBEAT_INTERVAL", "SCHEMA", "TRIAL_ATTR", "WORKER_ATTR", "ExploreStats", "attach",
    "best_trial", "check_sqlite_file", "check_storage", "decode_result", "encode_result", "explore", "fail_stale",
    "is_optuna_schema", "normalize_storage", "open_storage", "open_study", "redact", "sqlite_file", "study_names",
    "trial_record", "trial_table", "worker_id",
]
