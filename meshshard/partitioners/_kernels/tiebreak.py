"""The deterministic tie-break of every kernel: a splitmix64 hash of a node id and a salt.

Kernels that choose between equal candidates take the one of smaller hash, so the same input and salt give
the same result without a random generator.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit

__all__ = ["mix"]

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


@njit(cache=True, inline="always")
def mix(x, salt):
    """splitmix64 of ``x`` and ``salt`` (uint64): the deterministic tie-break."""
    z = np.uint64(x) * _M1 + np.uint64(salt) * _M3 + _M1
    z = (z ^ (z >> np.uint64(30))) * _M2
    z = (z ^ (z >> np.uint64(27))) * _M3
    return z ^ (z >> np.uint64(31))
