"""Partitioners (layer 1): pure single-process code, never torch.distributed."""
from meshshard.partitioners.partition import Partition

__all__ = ["Partition"]
