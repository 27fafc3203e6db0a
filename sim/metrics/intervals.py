"""Intervals of a mean from repeated runs: Student's t, with numpy only.

`t_975(df)` is the 97.5 % quantile of Student's t distribution with `df` degrees of freedom, the
multiplier of a two-sided 95 % interval. Degrees of freedom 1 to 30 come from the standard
table (the NIST/SEMATECH e-Handbook of Statistical Methods, section 1.3.6.7.2, here to six
decimals); above 30, the Cornish-Fisher expansion of the quantile in powers of 1/df
around the normal quantile (Abramowitz and Stegun 26.7.5), whose error there is below 1e-6.

`mean_interval(values)` is the mean of the finite values, its 95 % interval
`mean ± t_975(n - 1) * s / sqrt(n)` (s the sample standard deviation), their minimum and
maximum, and n. One value has no interval (NaN ends); none has nothing (NaN throughout).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

Z_975 = 1.959963984540054  # the normal distribution's 97.5 % quantile
# t quantiles at 97.5 %, degrees of freedom 1..30
T_975_TABLE: tuple[float, ...] = (
    12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
    2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
    2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
    2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272,
)  # fmt: skip


def t_975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` >= 1 degrees of freedom."""
    if df < 1:
        raise ValueError(f"degrees of freedom {df}: must be at least 1")
    if df <= len(T_975_TABLE):
        return T_975_TABLE[df - 1]
    z, v = Z_975, float(df)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float  # the 95 % interval of the mean
    high: float
    min: float
    max: float
    n: int  # finite values it was computed from

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def mean_interval(values: Iterable[float | None]) -> Interval:
    """Mean, 95 % t interval of the mean, min, max and count of the finite `values`."""
    data = np.array([math.nan if v is None else float(v) for v in values], dtype=float)
    data = data[np.isfinite(data)]
    n = len(data)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    mean = float(np.mean(data))
    lo, hi = float(np.min(data)), float(np.max(data))
    if n == 1:
        return Interval(mean, math.nan, math.nan, lo, hi, 1)
    half = t_975(n - 1) * float(np.std(data, ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, lo, hi, n)
