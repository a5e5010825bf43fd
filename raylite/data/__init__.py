"""raylite.data: streaming dataset pipelines on Arrow blocks (Ray Data's API).

``import raylite as ray; ray.data.read_parquet(...).map_batches(...).iter_batches()``.
This module is a facade: the implementation lives in ``dataset.py``,
``read_api.py``, ``block.py``, ``iterator.py`` and ``_internal/``.
"""

from raylite.data._connectors.api import (
    from_blocks,
    from_daft,
    from_dask,
    from_modin,
    from_tf,
    read_iceberg,
    read_lance,
    read_sql,
    read_tfrecords,
    read_webdataset,
)
from raylite.data._connectors.audio import read_audio
from raylite.data._connectors.delta import read_delta
from raylite.data._internal.logical import ActorPoolStrategy, TaskPoolStrategy
from raylite.data.aggregate import AbsMax, AggregateFn, Count, Max, Mean, Min, Std, Sum, Unique
from raylite.data.block import Block, BlockAccessor, BlockMetadata
from raylite.data.context import DataContext, ExecutionOptions, ExecutionResources
from raylite.data.dataset import Dataset, MaterializedDataset, Schema
from raylite.data.datasink import Datasink, WriteResult
from raylite.data.datasource import Datasource, ReadTask
from raylite.data.grouped_data import GroupedData
from raylite.data.iterator import DataIterator
from raylite.data.read_api import (
    from_arrow,
    from_arrow_refs,
    from_huggingface,
    from_items,
    from_numpy,
    from_numpy_refs,
    from_pandas,
    from_pandas_refs,
    from_torch,
    range,
    range_tensor,
    read_avro,
    read_binary_files,
    read_csv,
    read_datasource,
    read_images,
    read_json,
    read_numpy,
    read_orc,
    read_parquet,
    read_text,
)

__all__ = [
    "AbsMax",
    "ActorPoolStrategy",
    "AggregateFn",
    "Block",
    "BlockAccessor",
    "BlockMetadata",
    "Count",
    "DataContext",
    "DataIterator",
    "Dataset",
    "Datasink",
    "Datasource",
    "ExecutionOptions",
    "ExecutionResources",
    "GroupedData",
    "MaterializedDataset",
    "Max",
    "Mean",
    "Min",
    "ReadTask",
    "Schema",
    "Std",
    "Sum",
    "TaskPoolStrategy",
    "Unique",
    "WriteResult",
    "from_arrow",
    "from_arrow_refs",
    "from_huggingface",
    "from_items",
    "from_numpy",
    "from_numpy_refs",
    "from_pandas",
    "from_pandas_refs",
    "from_torch",
    "range",
    "range_tensor",
    "read_avro",
    "read_binary_files",
    "read_csv",
    "read_datasource",
    "read_images",
    "read_json",
    "read_numpy",
    "read_orc",
    "read_parquet",
    "read_text",
    "from_blocks",
    "from_daft",
    "from_dask",
    "from_modin",
    "from_tf",
    "read_audio",
    "read_delta",
    "read_iceberg",
    "read_lance",
    "read_sql",
    "read_tfrecords",
    "read_webdataset",
]


def __getattr__(name: str) -> object:
    """``raylite.data.expressions`` / ``preprocessors`` / ``llm`` load on first use."""
    if name in ("expressions", "preprocessors", "llm"):
        import importlib

        return importlib.import_module(f"raylite.data.{name}")
    raise AttributeError(f"module 'raylite.data' has no attribute {name!r}")
