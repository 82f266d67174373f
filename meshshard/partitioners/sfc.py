"""Space-filling-curve keys (Morton / Z-order and Hilbert), vectorised over uint64 arrays.

Coordinates are scaled into one cube (same scale on every axis, so curve cells are cubes) and
quantised to ``bits`` per axis: 21 in 3D (63-bit keys), 32 in 2D (64-bit keys), i.e. 2^63 cells,
so 10M points share a key only where they are closer than ~1e-6 of the domain size.

Hilbert keys are computed from Morton keys by a table-driven state machine (Hamilton's
"Compact Hilbert Indices" entry/direction states), several levels per table look-up.
"""
from __future__ import annotations

import functools
from typing import Tuple

import numpy as np

__all__ = ["default_bits", "quantize", "morton_keys", "hilbert_keys", "morton_from_grid", "hilbert_from_grid"]

_U = np.uint64


def default_bits(dim: int) -> int:
    """Bits per axis: 21 for 3D, 32 for 2D (all 64 key bits but one in 3D)."""
    if dim not in (2, 3):
        raise ValueError(f"space-filling curves need 2 or 3 dimensions, got {dim}")
    return 32 if dim == 2 else 21


def quantize(points: np.ndarray, bits: int) -> list:
    """Integer grid coordinates ``[0, 2**bits)`` per axis (list of uint64 ``[N]``), isotropic scale."""
    dim = points.shape[1]
    if points.shape[0] == 0:
        return [np.zeros(0, dtype=_U) for _ in range(dim)]
    # per column: numpy reduces a strided column ~10x faster than points.min(axis=0)
    lo = np.array([points[:, j].min() for j in range(dim)], dtype=np.float64)
    hi = np.array([points[:, j].max() for j in range(dim)], dtype=np.float64)
    extent = float((hi - lo).max())
    top = float(2**bits - 1)
    scale = top / extent if extent > 0 else 0.0
    out = []
    for j in range(dim):
        # one float64 column at a time keeps memory low; x >= lo and (x - lo) * scale <= top up to
        # rounding below 1 cell, so the cast needs no clip
        col = np.subtract(points[:, j], lo[j], dtype=np.float64)
        col *= scale
        out.append(col.astype(np.int64).view(_U))  # values < 2**63: the int64 cast is exact
        del col
    return out


def _spread(x: np.ndarray, dim: int) -> np.ndarray:
    """Insert ``dim - 1`` zero bits between the bits of ``x`` (in place, uint64)."""
    tmp = np.empty_like(x)
    if dim == 3:
        steps = ((32, 0x1F00000000FFFF), (16, 0x1F0000FF0000FF), (8, 0x100F00F00F00F00F),
                 (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249))
        np.bitwise_and(x, _U(0x1FFFFF), out=x)
    else:
        steps = ((16, 0x0000FFFF0000FFFF), (8, 0x00FF00FF00FF00FF), (4, 0x0F0F0F0F0F0F0F0F),
                 (2, 0x3333333333333333), (1, 0x5555555555555555))
        np.bitwise_and(x, _U(0xFFFFFFFF), out=x)
    for shift, mask in steps:
        np.left_shift(x, _U(shift), out=tmp)
        np.bitwise_or(x, tmp, out=x)
        np.bitwise_and(x, _U(mask), out=x)
    return x


def morton_from_grid(grid: list) -> np.ndarray:
    """Morton key of integer grid coordinates: bit ``level*d + j`` of the key is bit ``level`` of axis ``j``.

    Args:
        grid: list of ``d`` uint64 arrays ``[N]`` (consumed: modified in place).

    Returns:
        uint64 ``[N]``.
    """
    dim = len(grid)
    key = _spread(grid[0], dim)
    for j in range(1, dim):
        s = _spread(grid[j], dim)
        np.left_shift(s, _U(j), out=s)
        np.bitwise_or(key, s, out=key)
    return key


def morton_keys(points: np.ndarray, bits: int = None) -> np.ndarray:
    """Morton (Z-order) keys of ``[N, d]`` points (d = 2 or 3): uint64 ``[N]``."""
    dim = points.shape[1]
    bits = default_bits(dim) if bits is None else bits
    return morton_from_grid(quantize(points, bits))


# ---- Hilbert: Hamilton's (entry e, direction d) state machine ------------------------------------

def _rotr(x, r, n):
    mask = (1 << n) - 1
    return ((x >> r) | (x << (n - r))) & mask


def _rotl(x, r, n):
    mask = (1 << n) - 1
    return ((x << r) | (x >> (n - r))) & mask


@functools.lru_cache(maxsize=None)
def _hilbert_tables(dim: int, levels: int) -> Tuple[np.ndarray, np.ndarray]:
    """Tables for ``levels`` curve levels at once, indexed by ``state << (dim*levels) | morton_chunk``.

    State id = ``e * dim + d``.  Returns ``(digits uint32, next_state uint8)``.
    """
    n = dim
    nstates = (1 << n) * n
    chunk_bits = n * levels
    # single-level helper tables over w in [0, 2^n)
    w_all = np.arange(1 << n)
    gc = lambda i: i ^ (i >> 1)  # noqa: E731
    entry = np.array([0 if i == 0 else gc(2 * ((i - 1) // 2)) for i in w_all], dtype=np.int64)

    def trailing_ones(i):
        c = 0
        while i & 1:
            i >>= 1
            c += 1
        return c

    direc = np.array([0 if i == 0 else (trailing_ones(i - 1) % n if i % 2 == 0 else trailing_ones(i) % n)
                      for i in w_all], dtype=np.int64)
    state, chunk = np.meshgrid(np.arange(nstates), np.arange(1 << chunk_bits), indexing="ij")
    state, chunk = state.ravel().astype(np.int64), chunk.ravel().astype(np.int64)
    e, d = state // n, state % n
    digits = np.zeros_like(chunk)
    for lev in range(levels - 1, -1, -1):
        l = (chunk >> (lev * n)) & ((1 << n) - 1)
        # T_(e,d)(l) = rotr(l ^ e, d + 1)
        r = (d + 1) % n
        t = np.where(r == 0, l ^ e, _rotr(l ^ e, r, n))
        w = t.copy()  # inverse Gray code (n <= 3 bits)
        w ^= w >> 1
        w ^= w >> 2
        en = entry[w]
        e = e ^ np.where(r == 0, en, _rotl(en, r, n))
        d = (d + direc[w] + 1) % n
        digits = (digits << n) | w
    nxt = e * n + d
    return digits.astype(np.uint32), nxt.astype(np.uint8)


@functools.lru_cache(maxsize=None)
def _packed_table(dim: int, levels: int) -> np.ndarray:
    """One int64 table per ``levels``: ``(next_state << chunk_bits) << 32 | digits``.

    The high word is the next look-up's row offset, ready to OR with the next chunk: one
    ``take`` per step instead of two.
    """
    digits, nxt = _hilbert_tables(dim, levels)
    chunk_bits = dim * levels
    return (nxt.astype(np.int64) << (32 + chunk_bits)) | digits.astype(np.int64)


def _level_chunks(bits: int, dim: int) -> list:
    """Levels consumed per table look-up, most significant first (e.g. 3D 21 bits: 7 * 3, 2D 32 bits: 4 * 8)."""
    per = 3 if dim == 3 else 8  # 9- or 16-bit chunks: the packed tables stay in cache
    first = bits % per
    return ([first] if first else []) + [per] * (bits // per)


_BLOCK = 1 << 15  # points per block of the Hilbert walk: its ~10 work arrays stay in L2 cache


def hilbert_from_grid(grid: list, bits: int) -> np.ndarray:
    """Hilbert key of integer grid coordinates (list of ``d`` uint64 arrays, consumed): uint64 ``[N]``.

    The state-machine walk runs over blocks of ``_BLOCK`` points: a dozen passes over arrays that
    fit in cache instead of over main-memory arrays (the walk is memory-bound).
    """
    dim = len(grid)
    m = morton_from_grid(grid)
    n = m.shape[0]
    key = np.empty(n, dtype=_U)
    steps = []
    for levels in _level_chunks(bits, dim):
        steps.append((dim * levels, _packed_table(dim, levels)))
    size = min(n, _BLOCK)
    row_b = np.empty(size, dtype=np.int64)
    tmp_b = np.empty(size, dtype=_U)
    val_b = np.empty(size, dtype=np.int64)
    for start in range(0, n, _BLOCK):
        stop = min(start + _BLOCK, n)
        k = key[start:stop]
        mb = m[start:stop]
        row, tmp, val = row_b[: stop - start], tmp_b[: stop - start], val_b[: stop - start]
        row.fill(0)  # start state e = 0, d = 0
        k.fill(0)
        shift = bits * dim
        prev_bits = None
        for chunk_bits, table in steps:
            if prev_bits is not None and prev_bits != chunk_bits:
                # row offsets were packed for the previous table's row length: rescale them
                np.right_shift(row, prev_bits, out=row)
                np.left_shift(row, chunk_bits, out=row)
            shift -= chunk_bits
            np.right_shift(mb, _U(shift), out=tmp)
            np.bitwise_and(tmp, _U((1 << chunk_bits) - 1), out=tmp)
            np.bitwise_or(row, tmp.view(np.int64), out=row)
            table.take(row, out=val)
            np.right_shift(val, 32, out=row)
            np.bitwise_and(val, 0xFFFFFFFF, out=val)
            np.left_shift(k, _U(chunk_bits), out=k)
            np.bitwise_or(k, val.view(_U), out=k)
            prev_bits = chunk_bits
    return key


def hilbert_keys(points: np.ndarray, bits: int = None) -> np.ndarray:
    """Hilbert keys of ``[N, d]`` points (d = 2 or 3): uint64 ``[N]``."""
    dim = points.shape[1]
    bits = default_bits(dim) if bits is None else bits
    return hilbert_from_grid(quantize(points, bits), bits)
