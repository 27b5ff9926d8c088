"""Measured performance profiles and the latency model built from them.

The shipped profile is the reference simulator's ``perf_model.csv``: per-batch
prompt (prefill) and token (decode iteration) times in milliseconds for each
(model, hardware, tensor parallelism). A user CSV in the same schema works too.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np  # (pandas is imported where it is used: processes that only simulate need none)

if TYPE_CHECKING:   # for the annotations only
    import pandas as pd

from splitwise_plan.errors import SplitwisePlanError, choices, seed_value, whole_number
from splitwise_plan.inputs.paths import data_file, user_file
from splitwise_plan.inputs.tables import MAX_TOKENS, bad_row, numeric_column, read_user_csv
from splitwise_plan.perf.latency_model import LatencyModel

SHIPPED_PROFILE = "perf_model.csv"
NAME_COLUMNS = ("model", "hardware")
INT_COLUMNS = ("prompt_size", "batch_size", "token_size", "tensor_parallel")
TIME_COLUMNS = ("prompt_time", "token_time")  # milliseconds
REQUIRED_COLUMNS = NAME_COLUMNS + INT_COLUMNS[:3] + TIME_COLUMNS + INT_COLUMNS[3:]
#: The most each integer column may hold: tokens as a trace's, a batch of as many requests, TP of at most a
#: machine's 4,096 GPUs; so prompt_size * batch_size (at most 1e12) stays far inside int64.
INT_MOST = {"prompt_size": MAX_TOKENS, "batch_size": MAX_TOKENS, "token_size": MAX_TOKENS, "tensor_parallel": 4096}


class ProfileEntry(NamedTuple):
    """One (model, hardware, tensor parallelism) in a profile set and its number of rows."""

    model: str
    hardware: str
    tensor_parallel: int
    n_points: int


@dataclass(frozen=True)
class ProfileAccuracy:
    """Held-out error of the latency model for one (model, hardware, TP), in percent."""

    model: str
    hardware: str
    tensor_parallel: int
    n_train: int
    n_test: int
    prompt_mape_pct: float
    token_mape_pct: float


@dataclass(frozen=True, eq=False)
class ProfileSet:
    """Validated profile rows (times in ms) that latency models are built from: a table in the
    schema of ``perf_model.csv`` (checked here, names made lower case, as from a file)."""

    table: pd.DataFrame = field(repr=False)
    source: str = "<DataFrame>"   # where the rows came from, for messages
    #: (model, hardware, tensor parallelism) -> how its rows were estimated, for those not measured
    estimates: dict = field(default_factory=dict, repr=False, compare=False)
    #: (model, hardware, tensor parallelism) -> (kv_s_per_token, context_tokens) of an estimate whose decode step
    #: grows with the context (see :class:`~.latency_model.LatencyModel`)
    context_rates: dict = field(default_factory=dict, repr=False, compare=False)
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        import pandas as pd
        if not isinstance(self.table, pd.DataFrame):
            raise SplitwisePlanError(f"a ProfileSet is built from a pandas DataFrame in the schema of "
                                     f"{SHIPPED_PROFILE}, got {type(self.table).__name__}")
        object.__setattr__(self, "table", _validate(self.table, self.source))

    @classmethod
    def load(cls, path: str | Path | None = None) -> "ProfileSet":
        """Load the shipped profile (``path=None``) or a user CSV of the same schema."""
        if path is None:
            p = data_file("profiles", SHIPPED_PROFILE)
        elif isinstance(path, (str, os.PathLike)) and os.fspath(path) == "-":   # not standard input: read twice
            raise SplitwisePlanError("the profile '-' would be standard input, which is not supported; give a file "
                                     "(./- for a file named -)")
        else:
            p = user_file(path, "profile")
        return cls(read_user_csv(p, "profile"), source=str(p))

    def entries(self) -> list[ProfileEntry]:
        """Every (model, hardware, tensor_parallel) present, with its number of rows."""
        counts = self.table.groupby(["model", "hardware", "tensor_parallel"], sort=True).size()
        return [ProfileEntry(m, h, int(tp), int(n)) for (m, h, tp), n in counts.items()]

    def rows(self, model: str, hardware: str, tensor_parallel: int = 8) -> pd.DataFrame:
        """Profile rows of one (model, hardware, TP), names in any case; unknown names raise with what exists."""
        t = self.table
        model, hardware = _name(model), _name(hardware)
        if model not in set(t["model"]):
            raise SplitwisePlanError(
                f"unknown model {model!r} in profile {self.source}; available: {choices(set(t['model']))}")
        tm = t[t["model"] == model]
        if hardware not in set(tm["hardware"]):
            raise SplitwisePlanError(
                f"no profile for model {model!r} on hardware {hardware!r} in {self.source}; "
                f"available hardware for it: {choices(set(tm['hardware']))}")
        th = tm[tm["hardware"] == hardware]
        tps = sorted(int(x) for x in set(th["tensor_parallel"]))
        if int(tensor_parallel) not in tps:
            raise SplitwisePlanError(
                f"no profile for {model!r} on {hardware!r} at tensor_parallel={tensor_parallel} in "
                f"{self.source}; available: {', '.join(map(str, tps))}")
        return th[th["tensor_parallel"] == int(tensor_parallel)]

    def medians(self, model: str, hardware: str, tensor_parallel: int = 8) -> pd.DataFrame:
        """Per batch_tokens (= prompt_size * batch_size) medians of prompt_time and token_time, ms."""
        return _medians(self.rows(model, hardware, tensor_parallel), self.source)

    def latency_model(self, model: str, hardware: str, tensor_parallel: int = 8) -> LatencyModel:
        """The reference's piecewise-linear latency model of one (model, hardware, TP), cached."""
        key = (_name(model), _name(hardware), whole_number(tensor_parallel, "tensor_parallel", 1))
        if key not in self._cache:
            med = self.medians(*key)
            lm = LatencyModel.from_medians(*key, med["batch_tokens"].to_numpy(),
                                           med["prompt_time"].to_numpy(), med["token_time"].to_numpy())
            if key in self.context_rates:
                lm = dataclasses.replace(lm, kv_s_per_token=self.context_rates[key][0],
                                         context_tokens=self.context_rates[key][1])
            self._cache[key] = lm
        return self._cache[key]


def _name(name) -> str:
    """A model or hardware name as the profiles keep it: names match in any case."""
    return str(name).strip().lower()


def _medians(rows: pd.DataFrame, source: str) -> pd.DataFrame:
    """Group rows by batch_tokens and take medians, as the reference simulator does."""
    bt = rows["prompt_size"].to_numpy(np.int64) * rows["batch_size"].to_numpy(np.int64)
    med = (rows.assign(batch_tokens=bt)
           .groupby("batch_tokens", sort=True)[list(TIME_COLUMNS)]
           .median()
           .reset_index())
    if len(med) < 2:
        group = ", ".join(f"{c} {rows[c].iloc[0]}" for c in ("model", "hardware", "tensor_parallel")) if len(rows) else ""
        raise SplitwisePlanError(
            f"profile {source} needs at least two distinct prompt_size*batch_size values "
            f"per (model, hardware, tensor_parallel) to interpolate; {group} has {len(med)}")
    return med


def _validate(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Check columns and values of a profile table and return it with clean dtypes."""
    import pandas as pd
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise SplitwisePlanError(
            f"profile file {path} lacks column(s) {', '.join(missing)}; "
            f"required: {', '.join(REQUIRED_COLUMNS)}")
    if len(df) == 0:
        raise SplitwisePlanError(f"profile file {path} has no data rows")
    out = {}
    for col in NAME_COLUMNS:
        s = df[col]
        bad = s.isna().to_numpy() | (s.astype(str).str.strip() == "").to_numpy()
        if bad.any():
            line, _ = bad_row(df, bad)
            raise SplitwisePlanError(f"profile file {path}, line {line}, column {col}: empty value")
        out[col] = s.astype(str).str.strip().str.lower().to_numpy()   # matched in any case
    for col in INT_COLUMNS:
        out[col] = numeric_column(df, col, path, "profile", integer=True, most=INT_MOST[col])
    for col in TIME_COLUMNS:
        out[col] = numeric_column(df, col, path, "profile", integer=False)
    return pd.DataFrame({c: out[c] for c in REQUIRED_COLUMNS})


def shipped(profiles) -> bool:
    """Whether ``profiles`` are the shipped ones (the paper's measurements), estimates added or not."""
    return str(getattr(profiles, "source", "")) == str(data_file("profiles", SHIPPED_PROFILE))


def load_profiles(path: str | Path | None = None) -> ProfileSet:
    """Load the shipped profiles (``None``) or a user profile CSV; same as ``ProfileSet.load``."""
    return ProfileSet.load(path)


def _mape(pred: np.ndarray, actual: np.ndarray) -> float:
    """Mean absolute percentage error, in percent."""
    return float(np.mean(np.abs(pred - actual) / actual) * 100.0)


def profile_accuracy(profileset: ProfileSet, seed: int = 0,
                     test_fraction: float = 0.2) -> list[ProfileAccuracy]:
    """MAPE of the latency model on a seeded 80:20 train:test split of the profile rows.

    Per (model, hardware, TP), the rows are shuffled with ``numpy.random.default_rng(seed)``;
    the model is fit on the train rows' per-batch_tokens medians and predicts each test
    row's prompt_time and token_time at its batch_tokens (the paper's check, §V).
    """
    if not isinstance(profileset, ProfileSet):
        raise SplitwisePlanError(f"profile_accuracy takes a ProfileSet (load_profiles()), got {profileset!r:.80}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, (int, float)) or not 0.0 < test_fraction < 1.0:
        raise SplitwisePlanError(f"test_fraction must be between 0 and 1, got {test_fraction}")
    rng = np.random.default_rng(seed_value(seed))
    results = []
    for entry in profileset.entries():
        rows = profileset.rows(entry.model, entry.hardware, entry.tensor_parallel)
        n = len(rows)
        n_test = int(round(test_fraction * n))
        if n_test < 1 or n - n_test < 2:
            results.append(ProfileAccuracy(entry.model, entry.hardware, entry.tensor_parallel,
                                           n - n_test, n_test, math.nan, math.nan))
            continue
        order = rng.permutation(n)
        test, train = rows.iloc[order[:n_test]], rows.iloc[order[n_test:]]
        med = _medians(train, profileset.source)
        lm = LatencyModel.from_medians(entry.model, entry.hardware, entry.tensor_parallel,
                                       med["batch_tokens"].to_numpy(), med["prompt_time"].to_numpy(),
                                       med["token_time"].to_numpy())
        bt = test["prompt_size"].to_numpy(np.float64) * test["batch_size"].to_numpy(np.float64)
        results.append(ProfileAccuracy(
            entry.model, entry.hardware, entry.tensor_parallel, n - n_test, n_test,
            _mape(np.asarray(lm.prompt_time(bt)) * 1000.0, test["prompt_time"].to_numpy()),
            _mape(np.asarray(lm.token_time(bt)) * 1000.0, test["token_time"].to_numpy())))
    return results
