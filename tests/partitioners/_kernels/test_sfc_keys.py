"""The compiled curve keys against plain per-point references (bit loops, one curve level per look-up)."""
import numpy as np
import pytest

from meshshard.partitioners._kernels import sfc_keys as K
from meshshard.partitioners import sfc


def _morton_ref(coords, bits):
    key = 0
    for level in range(bits):
        for j, c in enumerate(coords):
            key |= ((int(c) >> level) & 1) << (level * len(coords) + j)
    return key


def _hilbert_ref(coords, bits):
    """Hamilton's state machine one level at a time, from the single-level tables."""
    dim = len(coords)
    digits, nxt = sfc._hilbert_tables(dim, 1)
    m = _morton_ref(coords, bits)
    state, key = 0, 0
    for level in range(bits - 1, -1, -1):
        chunk = (m >> (level * dim)) & ((1 << dim) - 1)
        row = (state << dim) | chunk
        key = (key << dim) | int(digits[row])
        state = int(nxt[row])
    return key


def _axes(grid):
    return grid[0], grid[1], grid[2] if len(grid) == 3 else np.zeros(0, dtype=np.uint64)


@pytest.mark.parametrize("dim,bits", [(2, 32), (2, 10), (3, 21), (3, 10), (3, 1)])
def test_kernels_match_per_point_references(dim, bits):
    rng = np.random.default_rng(bits * dim)
    n = 2 * K._BLOCK + 37  # several blocks of the Hilbert walk, the last one partial
    grid = [rng.integers(0, 2**bits, n, dtype=np.uint64) for _ in range(dim)]
    grid[0][:4] = [0, 2**bits - 1, 0, 2**bits - 1]  # the corners of the range
    want_m = [_morton_ref([g[i] for g in grid], bits) for i in range(n)]
    want_h = [_hilbert_ref([g[i] for g in grid], bits) for i in range(n)]
    assert K.morton_kernel(*_axes(grid)).tolist() == want_m
    # the public wrapper: tables several levels per look-up, split by sfc._level_chunks (e.g. 10 bits in 3D: 1+3+3+3)
    assert sfc.hilbert_from_grid(grid, bits).tolist() == want_h
    assert sfc.morton_from_grid(grid).tolist() == want_m


def test_kernels_take_no_points():
    empty = [np.zeros(0, dtype=np.uint64)] * 3
    assert K.morton_kernel(*_axes(empty)).shape == (0,)
    assert sfc.hilbert_from_grid(empty, 21).shape == (0,)
    assert sfc.hilbert_keys(np.zeros((0, 2))).shape == (0,)


def test_grid_of_wrong_dimension_is_refused():
    with pytest.raises(ValueError, match="2 or 3 dimensions"):
        sfc.morton_from_grid([np.zeros(3, dtype=np.uint64)] * 4)
