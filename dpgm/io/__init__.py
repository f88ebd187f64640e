"""Readers and writers of model file formats, and of EM checkpoints (:mod:`dpgm.io.checkpoint`)."""

from dpgm.io.bif import read_bif, write_bif
from dpgm.io.uai import read_uai, write_uai

__all__ = ["read_bif", "read_uai", "write_bif", "write_uai"]
