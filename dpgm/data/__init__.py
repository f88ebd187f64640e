"""Datasets: the Zarr/xarray format, conversion, validation and synthetic sampling."""

from dpgm.data.io import (
    add_variables,
    from_pandas,
    from_table,
    open_dataset,
    to_pandas,
    write_dataset,
)
from dpgm.data.kinds import ColumnKind, ConversionReport
from dpgm.data.schema import Schema, Variable

__all__ = [
    "ColumnKind",
    "ConversionReport",
    "Schema",
    "add_variables",
    "Variable",
    "from_pandas",
    "from_table",
    "open_dataset",
    "to_pandas",
    "write_dataset",
]
