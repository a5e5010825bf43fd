"""raylite.data.aggregate: Ray's aggregations, for `Dataset.aggregate()` and
`GroupedData.aggregate()`.

    from raylite.data.aggregate import Count, Mean, Quantile
    ds.groupby("key").aggregate(Count(), Mean("x"), Quantile("x", q=0.9))

`core` holds the two-phase engine and the vectorized built-ins, `custom` Ray's AggregateFnV2
for user-defined aggregations, and `statistics` the aggregations built on it (Quantile, the
approximate sketches, value counts and percentages).
"""

from raylite.data.aggregate.core import (
    AbsMax,
    AggregateFn,
    Count,
    Max,
    Mean,
    Min,
    Std,
    Sum,
    Unique,
    combine_and_finalize,
    partial_aggregate,
)
from raylite.data.aggregate.custom import AccumulatorType, AggOutputType, AggregateFnV2, is_null
from raylite.data.aggregate.statistics import (
    ApproximateQuantile,
    ApproximateTopK,
    AsList,
    CountDistinct,
    MissingValuePercentage,
    Quantile,
    ValueCounter,
    ZeroPercentage,
)

__all__ = [
    "AbsMax", "AccumulatorType", "AggOutputType", "AggregateFn", "AggregateFnV2", "ApproximateQuantile",
    "ApproximateTopK", "AsList", "Count", "CountDistinct", "Max", "Mean", "Min", "MissingValuePercentage",
    "Quantile", "Std", "Sum", "Unique", "ValueCounter", "ZeroPercentage", "combine_and_finalize",
    "is_null", "partial_aggregate",
]
