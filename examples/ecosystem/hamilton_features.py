"""The dataflow hamilton_on_ray.py runs: each function is a node, its parameters name its inputs.

A module of its own (not the program's `__main__`), as Hamilton expects: the Ray workers import
it by name, from the driver's script directory on their path.
"""

from __future__ import annotations

import pandas as pd


def spend(raw: pd.DataFrame) -> pd.Series:
    return raw["spend"]


def signups(raw: pd.DataFrame) -> pd.Series:
    return raw["signups"]


def avg_3wk_spend(spend: pd.Series) -> pd.Series:
    return spend.rolling(3).mean()


def spend_per_signup(spend: pd.Series, signups: pd.Series) -> pd.Series:
    return spend / signups


def spend_zero_mean_unit_variance(spend: pd.Series) -> pd.Series:
    return (spend - spend.mean()) / spend.std()


def signups_cumulative(signups: pd.Series) -> pd.Series:
    return signups.cumsum()
