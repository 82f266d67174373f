"""Compiled (numba) space-filling-curve keys: one loop over the points instead of a dozen numpy passes.

The keys are bit for bit those of the numpy passes these loops replaced (:mod:`meshshard.partitioners.sfc`
builds the Hilbert tables and calls them): on small inputs those passes cost mostly per-call overhead, on
large ones they were memory-bound, a pass per bit-twiddling step.
All arithmetic is uint64 (numba turns uint64-with-int64 into float64, so every constant is typed).
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit

__all__ = ["morton_kernel", "hilbert_kernel"]

_U = np.uint64
_MASK32 = _U(0xFFFFFFFF)
_BLOCK = 1024  # points per block of the Hilbert walk


@njit(cache=True, nogil=True)
def _spread3(x):
    """Two zero bits between the low 21 bits of ``x`` (magic-number bit spreading, five shift-or-mask steps)."""
    x &= _U(0x1FFFFF)
    x = (x | (x << _U(32))) & _U(0x1F00000000FFFF)
    x = (x | (x << _U(16))) & _U(0x1F0000FF0000FF)
    x = (x | (x << _U(8))) & _U(0x100F00F00F00F00F)
    x = (x | (x << _U(4))) & _U(0x10C30C30C30C30C3)
    x = (x | (x << _U(2))) & _U(0x1249249249249249)
    return x


@njit(cache=True, nogil=True)
def _spread2(x):
    """One zero bit between the low 32 bits of ``x`` (as :func:`_spread3`)."""
    x &= _MASK32
    x = (x | (x << _U(16))) & _U(0x0000FFFF0000FFFF)
    x = (x | (x << _U(8))) & _U(0x00FF00FF00FF00FF)
    x = (x | (x << _U(4))) & _U(0x0F0F0F0F0F0F0F0F)
    x = (x | (x << _U(2))) & _U(0x3333333333333333)
    x = (x | (x << _U(1))) & _U(0x5555555555555555)
    return x


@njit(cache=True, nogil=True)
def _morton_range(x, y, z, b0, b1, out):
    """Morton keys of points ``b0 .. b1 - 1`` into ``out[:b1 - b0]`` (``z`` empty in 2D). The dimension test
    stays outside the loop: a per-point helper taking the arrays is slower."""
    if z.shape[0]:
        for i in range(b0, b1):
            out[i - b0] = _spread3(x[i]) | (_spread3(y[i]) << _U(1)) | (_spread3(z[i]) << _U(2))
    else:
        for i in range(b0, b1):
            out[i - b0] = _spread2(x[i]) | (_spread2(y[i]) << _U(1))


@njit(cache=True, nogil=True)  # the start runs beside multilevel_refine's coarsening thread
def morton_kernel(x, y, z):
    """Morton keys of grid coordinates.

    Args:
        x, y, z: uint64 ``[N]`` grid coordinates per axis, below ``2**21`` (3D) or ``2**32`` (2D);
            in 2D ``z`` is empty (``[0]``).

    Returns:
        uint64 ``[N]``: bit ``level * d + j`` is bit ``level`` of axis ``j``.
    """
    out = np.empty(x.shape[0], dtype=np.uint64)
    _morton_range(x, y, z, 0, x.shape[0], out)
    return out


@njit(cache=True, nogil=True)  # the start runs beside multilevel_refine's coarsening thread
def hilbert_kernel(x, y, z, total_bits, step_bits, step_start, tables):
    """Hilbert keys of grid coordinates by the packed state tables of :mod:`~meshshard.partitioners.sfc`.

    Args:
        x, y, z: grid coordinates as :func:`morton_kernel`'s.
        total_bits: ``d * bits``, the key width.
        step_bits: int64 ``[S]`` Morton bits read per table look-up, most significant first.
        step_start: int64 ``[S]`` offset of each step's table in ``tables``.
        tables: int64, the packed tables one after another: entry ``row | chunk`` holds
            ``(next_state << chunk_bits) << 32 | digits``.

    Returns:
        uint64 ``[N]``.
    """
    n = x.shape[0]
    out = np.empty(n, dtype=np.uint64)
    # step-major over blocks of points: the look-ups of different points are independent, so the CPU
    # overlaps their cache misses (point by point, each look-up waits for the one before)
    morton = np.empty(_BLOCK, dtype=np.uint64)
    row = np.empty(_BLOCK, dtype=np.int64)
    for b0 in range(0, n, _BLOCK):
        b1 = min(n, b0 + _BLOCK)
        _morton_range(x, y, z, b0, b1, morton)
        for i in range(b0, b1):
            row[i - b0] = 0
            out[i] = 0
        shift = total_bits
        prev = -1
        for s in range(step_bits.shape[0]):
            cb = step_bits[s]
            shift -= cb
            mask = _U((1 << cb) - 1)
            start = step_start[s]
            rescale = prev >= 0 and prev != cb  # row offsets were packed for the previous table's row length
            for i in range(b0, b1):
                r = row[i - b0]
                if rescale:
                    r = (r >> prev) << cb
                val = tables[start + (r | np.int64((morton[i - b0] >> _U(shift)) & mask))]
                row[i - b0] = val >> 32
                out[i] = (out[i] << _U(cb)) | (_U(val) & _MASK32)
            prev = cb
    return out
