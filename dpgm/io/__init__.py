"""Readers and writers of model file formats."""

from dpgm.io.bif import read_bif, write_bif

__all__ = ["read_bif", "write_bif"]
