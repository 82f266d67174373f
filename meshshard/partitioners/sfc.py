"""Space-filling-curve keys (Morton / Z-order and Hilbert) of uint64 grid coordinates.

Coordinates are quantised with the same scale on every axis (curve cells are cubes) to ``bits``
per axis: 21 in 3D (63-bit keys), 32 in 2D (64-bit keys), i.e. 2^63 cells, so 10M points share a
key only where they are closer than ~1e-6 of the domain size.

Elongated domains (a channel, a pipe, a wing: longest extent at least twice every other one) are
covered by a row of ``C`` cubes along the longest axis instead of one big cube, most of which
would be empty: the key is the cube's index followed by the curve key inside the cube. A Hilbert
curve enters each cube at its low corner and leaves it at the corner next to the following cube,
so the curve stays continuous and its parts are compact slabs rather than long strips; the
resolution along the longest axis is unchanged (``log2 C`` bits move from the inner grid to the
cube index). Compact domains (``C = 1``) get the plain one-cube keys.

Hilbert keys are computed from Morton keys by a table-driven state machine (Hamilton's
"Compact Hilbert Indices" entry/direction states), several levels per table look-up; both loops
are compiled (:mod:`meshshard.partitioners._kernels.sfc_keys`).
"""
from __future__ import annotations

import functools
from typing import Tuple

import numpy as np

from meshshard.partitioners._kernels.sfc_keys import hilbert_kernel, morton_kernel

__all__ = ["default_bits", "quantize", "curve_grid", "morton_keys", "hilbert_keys", "morton_from_grid",
           "hilbert_from_grid"]

_U = np.uint64


def default_bits(dim: int) -> int:
    """Bits per axis: 21 for 3D, 32 for 2D (all 64 key bits but one in 3D).

    Args:
        dim: 2 or 3.
    """
    if dim not in (2, 3):
        raise ValueError(f"space-filling curves need 2 or 3 dimensions, got {dim}")
    return 32 if dim == 2 else 21


def _column_bounds(points: np.ndarray):
    # per column: numpy reduces a strided column faster than points.min(axis=0)
    dim = points.shape[1]
    lo = np.array([points[:, j].min() for j in range(dim)], dtype=np.float64)
    hi = np.array([points[:, j].max() for j in range(dim)], dtype=np.float64)
    return lo, hi


def _grid(points: np.ndarray, top: float, lo: np.ndarray, hi: np.ndarray) -> list:
    """Isotropic integer grid: the longest extent maps onto ``[0, top]`` (list of uint64 ``[N]``)."""
    dim = points.shape[1]
    # Extreme coordinates: when hi - lo overflows, the coordinates are quartered (exact) before
    # the subtraction; when the extent is so small that top / extent overflows, the differences
    # are scaled up by a power of two (exact) first. The grid does not change with either.
    pre, post = 1.0, ()
    with np.errstate(over="ignore"):
        extent = float((hi - lo).max())
    if not np.isfinite(extent):
        pre = 0.25
        lo = lo * pre
        extent = float((hi * pre - lo).max())
    scale = top / extent if extent > 0 else 0.0
    if not np.isfinite(scale):
        e = -int(np.frexp(extent)[1])  # extent * 2**e in [0.5, 1); 2**e alone may overflow
        post = (float(np.ldexp(1.0, e // 2)), float(np.ldexp(1.0, e - e // 2)))
        scale = top / (extent * post[0] * post[1])
    out = []
    for j in range(dim):
        # one float64 column at a time keeps memory low; x >= lo and (x - lo) * scale <= top up to
        # rounding below 1 cell, so the cast needs no clip
        if pre == 1.0:
            col = np.subtract(points[:, j], lo[j], dtype=np.float64)
        else:
            col = np.multiply(points[:, j], pre, dtype=np.float64)
            col -= lo[j]
        for f in post:
            col *= f
        col *= scale
        out.append(col.astype(np.int64).view(_U))  # values < 2**63: the int64 cast is exact
        del col
    return out


def quantize(points: np.ndarray, bits: int) -> list:
    """Integer grid coordinates of points in one cube, the same scale on every axis.

    Args:
        points: ``[N, d]`` finite floats.
        bits: grid bits per axis.

    Returns:
        list of ``d`` uint64 arrays ``[N]`` with values in ``[0, 2**bits)``; the longest extent
        spans the whole range.
    """
    dim = points.shape[1]
    if points.shape[0] == 0:
        return [np.zeros(0, dtype=_U) for _ in range(dim)]
    lo, hi = _column_bounds(points)
    return _grid(points, float(2**bits - 1), lo, hi)


def _num_cubes(lo: np.ndarray, hi: np.ndarray, bits: int) -> Tuple[int, int]:
    """``(C, long axis)``: cubes in a row along the longest axis that cover the bounding box."""
    with np.errstate(over="ignore"):
        ext = hi - lo
    if not np.isfinite(ext).all():
        ext = hi * 0.25 - lo * 0.25  # same ratios, no overflow
    long = int(np.argmax(ext))
    if ext.shape[0] < 2 or not ext[long] > 0:
        return 1, long
    side = float(np.delete(ext, long).max())
    cap = 2 ** (bits // 2)  # a line or a needle: at most 2**(bits/2) cubes, the rest stays inside
    ratio = float(ext[long]) / side if side > 0 else float(cap)
    return int(min(max(ratio, 1.0), cap)), long


def curve_grid(points: np.ndarray, bits: int, bounds=None):
    """Grid coordinates for a curve key, tiling an elongated bounding box by a row of cubes.

    With ``C = floor(longest extent / next longest)`` (at least 1, at most ``2**(bits // 2)``)
    cubes of side ``longest / C`` along the longest axis: the cube index takes
    ``t = ceil(log2 C)`` bits and the grid inside a cube ``bits - t`` bits per axis, so the cell
    size along the longest axis is that of the one-cube grid.

    Args:
        points: ``[N, d]`` finite floats.
        bits: bits per axis of the one-cube grid.
        bounds: optional ``(lo, hi)`` float64 ``[d]`` bounding box to use instead of the points'
            own (a slice of a larger point set gets the keys of the whole set).

    Returns:
        ``(grid, cube, tile_bits)``: ``grid`` a list of ``d`` uint64 arrays ``[N]`` in
        ``[0, 2**(bits - tile_bits))``, the longest axis first when ``C > 1`` (a Hilbert curve
        leaves its cube along the first axis); ``cube`` uint64 ``[N]`` cube index, or None when
        ``C == 1`` (then ``grid`` is :func:`quantize`'s and ``tile_bits == 0``).
    """
    dim = points.shape[1]
    if points.shape[0] == 0:
        return [np.zeros(0, dtype=_U) for _ in range(dim)], None, 0
    lo, hi = _column_bounds(points) if bounds is None else bounds
    cubes, long = _num_cubes(lo, hi, bits)
    if cubes == 1:
        return _grid(points, float(2**bits - 1), lo, hi), None, 0
    tile_bits = (cubes - 1).bit_length()
    inner = bits - tile_bits
    # the long axis spans [0, C * 2**inner); the others are at most 1 / C of it: < 2**inner
    grid = _grid(points, float(cubes * 2**inner - 1), lo, hi)
    u = grid[long]
    cube = np.right_shift(u, _U(inner))
    np.bitwise_and(u, _U(2**inner - 1), out=u)
    return [u] + [g for j, g in enumerate(grid) if j != long], cube, tile_bits


def _with_cube(key: np.ndarray, cube, tile_bits: int, dim: int, bits: int) -> np.ndarray:
    """Prefix the inner key with the cube index; left-align to ``dim * bits`` bits (in place)."""
    if cube is None:
        return key
    inner = bits - tile_bits
    np.left_shift(cube, _U(dim * inner), out=cube)
    np.bitwise_or(key, cube, out=key)
    np.left_shift(key, _U((dim - 1) * tile_bits), out=key)  # same key width as one cube's
    return key


def _axes(grid: list):
    """``(x, y, z)`` uint64 arrays for the kernels of :mod:`~meshshard.partitioners._kernels.sfc_keys` (``z`` empty in 2D)."""
    dim = len(grid)
    if dim not in (2, 3):
        raise ValueError(f"space-filling curves need 2 or 3 dimensions, got {dim}")
    g = [np.ascontiguousarray(a, dtype=_U) for a in grid]
    return g[0], g[1], g[2] if dim == 3 else np.zeros(0, dtype=_U)


def morton_from_grid(grid: list) -> np.ndarray:
    """Morton key of integer grid coordinates: bit ``level*d + j`` of the key is bit ``level`` of axis ``j``.

    Args:
        grid: list of ``d`` uint64 arrays ``[N]`` (d = 2 or 3).

    Returns:
        uint64 ``[N]``.
    """
    return morton_kernel(*_axes(grid))


def morton_keys(points: np.ndarray, bits: int = None, bounds=None) -> np.ndarray:
    """Morton (Z-order) keys.

    Args:
        points: ``[N, d]`` finite floats, d = 2 or 3.
        bits: bits per axis (default :func:`default_bits`).
        bounds: optional ``(lo, hi)`` bounding box of the whole point set (see :func:`curve_grid`).

    Returns:
        uint64 ``[N]``.
    """
    dim = points.shape[1]
    bits = default_bits(dim) if bits is None else bits
    grid, cube, tile_bits = curve_grid(points, bits, bounds)
    return _with_cube(morton_from_grid(grid), cube, tile_bits, dim, bits)


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
    """Levels consumed per table look-up, most significant first (e.g. 3D 21 bits: 7 * 3, 2D 32 bits: 8 * 4)."""
    per = 3 if dim == 3 else 4  # 9- or 8-bit chunks: the packed tables (96 KiB, 16 KiB) stay in cache
    first = bits % per
    return ([first] if first else []) + [per] * (bits // per)


@functools.lru_cache(maxsize=None)
def _walk_steps(dim: int, bits: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(step_bits, step_start, tables)`` of :func:`~meshshard.partitioners._kernels.sfc_keys.hilbert_kernel`."""
    chunks = _level_chunks(bits, dim)
    tables = [_packed_table(dim, levels) for levels in chunks]
    step_bits = np.array([dim * levels for levels in chunks], dtype=np.int64)
    step_start = np.concatenate([[0], np.cumsum([t.shape[0] for t in tables])[:-1]]).astype(np.int64)
    table = np.concatenate(tables) if tables else np.zeros(0, dtype=np.int64)
    for a in (step_bits, step_start, table):
        a.flags.writeable = False  # cached: shared by every call
    return step_bits, step_start, table


def hilbert_from_grid(grid: list, bits: int) -> np.ndarray:
    """Hilbert key of integer grid coordinates.

    Args:
        grid: list of ``d`` uint64 arrays ``[N]`` (d = 2 or 3).
        bits: bits per axis used by the grid.

    Returns:
        uint64 ``[N]``.

    One compiled pass: each point's Morton key, then the state-machine walk, several levels per
    table look-up (:func:`~meshshard.partitioners._kernels.sfc_keys.hilbert_kernel`).
    """
    x, y, z = _axes(grid)
    return hilbert_kernel(x, y, z, len(grid) * bits, *_walk_steps(len(grid), bits))


def hilbert_keys(points: np.ndarray, bits: int = None, bounds=None) -> np.ndarray:
    """Hilbert keys.

    Args:
        points: ``[N, d]`` finite floats, d = 2 or 3.
        bits: bits per axis (default :func:`default_bits`).
        bounds: optional ``(lo, hi)`` bounding box of the whole point set (see :func:`curve_grid`).

    Returns:
        uint64 ``[N]``.
    """
    dim = points.shape[1]
    bits = default_bits(dim) if bits is None else bits
    grid, cube, tile_bits = curve_grid(points, bits, bounds)
    return _with_cube(hilbert_from_grid(grid, bits - tile_bits), cube, tile_bits, dim, bits)
