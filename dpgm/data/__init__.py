"""Datasets: the Zarr/xarray format, conversion, validation and synthetic sampling."""

from dpgm.data.io import from_pandas, from_table, open_dataset, to_pandas, write_dataset
from dpgm.data.schema import Schema, Variable

__all__ = [
    "Schema",
    "Variable",
    "from_pandas",
    "from_table",
    "open_dataset",
    "to_pandas",
    "write_dataset",
]
