r"""Space-filling-curve keys (Morton / Z-order and Hilbert) for 2D and 3D points, vectorised numpy.

Coordinates are quantised on a cubic grid over the bounding box (one scale for every axis, so grid
cells are squares / cubes): 32 bits per axis in 2D, 21 bits per axis in 3D, i.e. 64 / 63-bit
``uint64`` keys; about 4e9 (2D) or 2e6 (3D) cells per axis, so 1e7 points rarely share a key.

- Morton: bit ``d * level + a`` of the key is bit ``level`` of axis ``a`` (x least significant).
- Hilbert: Skilling's transform ("Programming the Hilbert curve", AIP Conf. Proc. 707, 2004),
  compiled into a table-driven state machine that consumes several levels at once from the
  Morton key, so a key costs a handful of passes over ``uint64`` arrays.
  :func:`hilbert_key_reference` is the plain per-point transcription used by the tests.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["BITS_PER_AXIS", "quantize", "morton_key", "hilbert_key", "morton_encode", "hilbert_encode", "hilbert_key_reference"]

BITS_PER_AXIS = {2: 32, 3: 21}
_LEVELS_PER_LOOKUP = {2: 8, 3: 3}  # table rows: states * 2 ** (d * levels)

_SPREAD = {
    2: [(16, 0x0000FFFF0000FFFF), (8, 0x00FF00FF00FF00FF), (4, 0x0F0F0F0F0F0F0F0F), (2, 0x3333333333333333), (1, 0x5555555555555555)],
    3: [(32, 0x001F00000000FFFF), (16, 0x001F0000FF0000FF), (8, 0x100F00F00F00F00F), (4, 0x10C30C30C30C30C3), (2, 0x1249249249249249)],
}


def quantize(points: np.ndarray) -> List[np.ndarray]:
    """Integer grid coordinates ``uint64 [N]`` per axis on a cubic grid over the bounding box."""
    d = points.shape[1]
    bits = BITS_PER_AXIS[d]
    if points.shape[0] == 0:
        return [np.zeros(0, dtype=np.uint64) for _ in range(d)]
    # per column: numpy reduces a strided column ~10x faster than points.min(axis=0)
    lo = np.array([points[:, a].min() for a in range(d)], dtype=np.float64)
    hi = np.array([points[:, a].max() for a in range(d)], dtype=np.float64)
    extent = float((hi - lo).max())
    top = float(2**bits - 1)
    scale = top / extent if extent > 0 else 0.0
    out = []
    q = np.empty(points.shape[0], dtype=np.float64)
    for a in range(d):
        np.subtract(points[:, a], lo[a], out=q)  # >= 0: lo is the minimum
        np.multiply(q, scale, out=q)
        np.minimum(q, top, out=q)  # rounding can overshoot the top cell by an ulp
        # truncation = floor for q >= 0; via int64 (SIMD) rather than the slow float -> uint64 cast
        out.append(q.astype(np.int64).view(np.uint64))
    return out


def _spread(x: np.ndarray, d: int) -> np.ndarray:
    """Insert ``d - 1`` zero bits between the bits of ``x`` (in place)."""
    tmp = np.empty_like(x)
    for shift, mask in _SPREAD[d]:
        np.left_shift(x, np.uint64(shift), out=tmp)
        np.bitwise_or(x, tmp, out=x)
        np.bitwise_and(x, np.uint64(mask), out=x)
    return x


def morton_encode(grid: Sequence[np.ndarray]) -> np.ndarray:
    """Morton key of integer grid coordinates (one ``uint64 [N]`` per axis, ``BITS_PER_AXIS`` bits)."""
    d = len(grid)
    key = _spread(np.array(grid[0], dtype=np.uint64), d)
    for a in range(1, d):
        s = _spread(np.array(grid[a], dtype=np.uint64), d)
        np.left_shift(s, np.uint64(a), out=s)
        np.bitwise_or(key, s, out=key)
        del s
    return key


def morton_key(points: np.ndarray) -> np.ndarray:
    """Morton (Z-order) keys ``uint64 [N]`` of ``[N, 2]`` / ``[N, 3]`` points."""
    return morton_encode(quantize(points))


# ---------------------------------------------------------------------------------------------
# Hilbert: Skilling's transform as a state machine.  The state is the signed axis permutation
# Skilling's "inverse undo" has applied to the lower bits so far, plus the running parity that
# his final "t" correction applies; one level maps (state, d input bits) -> (d key bits, state).

_State = Tuple[Tuple[int, ...], Tuple[int, ...], int]


def _level_step(state: _State, bits: Sequence[int]) -> Tuple[int, _State]:
    perm, flip, parity = list(state[0]), list(state[1]), state[2]
    d = len(perm)
    c = [bits[perm[a]] ^ flip[a] for a in range(d)]  # this level's bits after the transform so far
    for i in range(d):
        if c[i]:
            flip[0] ^= 1  # Skilling: X[0] ^= P  (invert the lower bits of axis 0)
        elif i:
            perm[0], perm[i] = perm[i], perm[0]  # Skilling: swap lower bits of X[0] and X[i]
            flip[0], flip[i] = flip[i], flip[0]
    g, digit = 0, 0
    for i in range(d):  # Gray encode (prefix xor), then the parity correction
        g ^= c[i]
        digit |= (g ^ parity) << (d - 1 - i)
    return digit, (tuple(perm), tuple(flip), parity ^ g)


@lru_cache(maxsize=None)
def _hilbert_table(d: int, levels: int) -> Tuple[np.ndarray, int]:
    """``table[state * 2**(d*levels) + morton_chunk] = (next_state_row << 32) | key_chunk``."""
    width = d * levels
    start: _State = (tuple(range(d)), (0,) * d, 0)
    one_level: Dict[_State, List[Tuple[int, _State]]] = {}
    todo = [start]
    while todo:  # every state reachable one level at a time
        s = todo.pop()
        if s in one_level:
            continue
        one_level[s] = [_level_step(s, [(m >> a) & 1 for a in range(d)]) for m in range(2**d)]
        todo.extend(t for _, t in one_level[s] if t not in one_level)
    states = sorted(one_level)
    states.remove(start)
    states.insert(0, start)  # row 0 = the start state
    index = {s: i for i, s in enumerate(states)}
    table = np.empty(len(states) * 2**width, dtype=np.uint64)
    for si, s in enumerate(states):
        for m in range(2**width):
            cur, key = s, 0
            for j in range(levels - 1, -1, -1):  # most significant level of the chunk first
                digit, cur = one_level[cur][(m >> (d * j)) & (2**d - 1)]
                key = (key << d) | digit
            table[si * 2**width + m] = (index[cur] * 2**width << 32) | key
    return table, width


def hilbert_encode(grid: Sequence[np.ndarray]) -> np.ndarray:
    """Hilbert key of integer grid coordinates (one ``uint64 [N]`` per axis, ``BITS_PER_AXIS`` bits)."""
    d = len(grid)
    levels = _LEVELS_PER_LOOKUP[d]
    table, width = _hilbert_table(d, levels)
    morton = morton_encode(grid)
    n = morton.shape[0]
    key = np.zeros(n, dtype=np.uint64)
    row = np.zeros(n, dtype=np.uint64)  # table row offset of each point's state
    chunk = np.empty(n, dtype=np.uint64)
    entry = np.empty(n, dtype=np.uint64)
    mask, low32 = np.uint64(2**width - 1), np.uint64(2**32 - 1)
    for c in range(BITS_PER_AXIS[d] // levels - 1, -1, -1):
        np.right_shift(morton, np.uint64(width * c), out=chunk)
        np.bitwise_and(chunk, mask, out=chunk)
        np.add(chunk, row, out=chunk)
        np.take(table, chunk.view(np.int64), out=entry)  # row offsets < 2**31: the view is exact
        np.right_shift(entry, np.uint64(32), out=row)
        np.bitwise_and(entry, low32, out=entry)
        np.left_shift(entry, np.uint64(width * c), out=entry)
        np.bitwise_or(key, entry, out=key)
    return key


def hilbert_key(points: np.ndarray) -> np.ndarray:
    """Hilbert keys ``uint64 [N]`` of ``[N, 2]`` / ``[N, 3]`` points."""
    return hilbert_encode(quantize(points))


def hilbert_key_reference(coords: Sequence[int], bits: int) -> int:
    """Skilling's AxestoTranspose + bit interleave for one point: the slow, obvious reference."""
    x = [int(v) for v in coords]
    n = len(x)
    m = 1 << (bits - 1)
    q = m
    while q > 1:  # inverse undo
        p = q - 1
        for i in range(n):
            if x[i] & q:
                x[0] ^= p
            else:
                t = (x[0] ^ x[i]) & p
                x[0] ^= t
                x[i] ^= t
        q >>= 1
    for i in range(1, n):  # Gray encode
        x[i] ^= x[i - 1]
    t, q = 0, m
    while q > 1:
        if x[n - 1] & q:
            t ^= q - 1
        q >>= 1
    for i in range(n):
        x[i] ^= t
    key = 0
    for b in range(bits - 1, -1, -1):  # transpose -> index: X[0] is the high bit of each level
        for i in range(n):
            key = (key << 1) | ((x[i] >> b) & 1)
    return key
