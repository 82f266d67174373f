"""meshshard.partitioners.sfc_keys: Morton bit interleaving, Hilbert keys vs Skilling's transform."""
import numpy as np
import pytest

from meshshard.partitioners.sfc_keys import (
    BITS_PER_AXIS,
    hilbert_encode,
    hilbert_key,
    hilbert_key_reference,
    morton_encode,
    morton_key,
    quantize,
)


def _grid(*axes):
    return [np.asarray(a, dtype=np.uint64) for a in axes]


@pytest.mark.parametrize(
    "coords, expected",
    [
        ((1, 0), 0b01), ((0, 1), 0b10), ((1, 1), 0b11), ((2, 0), 0b0100), ((3, 3), 0b1111),
        ((5, 2), 0b011001),  # x=101, y=010 -> y2x2 y1x1 y0x0 = 01 10 01
        ((1, 0, 0), 0b001), ((0, 1, 0), 0b010), ((0, 0, 1), 0b100), ((1, 1, 1), 0b111),
        ((2, 0, 0), 0b001000), ((3, 1, 2), 0b101011),  # x=11,y=01,z=10 -> z1y1x1 z0y0x0 = 101 011
    ],
)
def test_morton_hand_examples(coords, expected):
    key = morton_encode(_grid(*[[c] for c in coords]))
    assert key.dtype == np.uint64 and int(key[0]) == expected


@pytest.mark.parametrize("dim", [2, 3])
def test_morton_matches_bitwise_interleave_at_full_width(dim):
    bits = BITS_PER_AXIS[dim]
    rng = np.random.default_rng(dim)
    grid = [rng.integers(0, 2**bits, size=300, dtype=np.uint64) for _ in range(dim)]
    grid[0][:2] = [0, 2**bits - 1]
    key = morton_encode(grid)
    for i in range(300):
        want = sum(((int(grid[a][i]) >> lv) & 1) << (dim * lv + a) for lv in range(bits) for a in range(dim))
        assert int(key[i]) == want


@pytest.mark.parametrize("dim", [2, 3])
def test_hilbert_matches_skilling_reference(dim):
    bits = BITS_PER_AXIS[dim]
    rng = np.random.default_rng(10 + dim)
    grid = [rng.integers(0, 2**bits, size=400, dtype=np.uint64) for _ in range(dim)]
    for a in range(dim):  # corners of the domain
        grid[a][: 2**dim] = [(2**bits - 1) * ((c >> a) & 1) for c in range(2**dim)]
    key = hilbert_encode(grid)
    ref = [hilbert_key_reference([int(g[i]) for g in grid], bits) for i in range(400)]
    assert key.tolist() == ref


@pytest.mark.parametrize("dim, level", [(2, 4), (3, 3)])
def test_hilbert_consecutive_keys_are_grid_neighbours(dim, level):
    bits = BITS_PER_AXIS[dim]
    side = 2**level
    cells = np.stack(np.meshgrid(*[np.arange(side)] * dim, indexing="ij"), -1).reshape(-1, dim)
    grid = [(cells[:, a].astype(np.uint64) << np.uint64(bits - level)) for a in range(dim)]
    key = hilbert_encode(grid)
    assert np.unique(key).size == side**dim
    walk = cells[np.argsort(key)]
    steps = np.abs(np.diff(walk, axis=0)).sum(axis=1)
    assert (steps == 1).all()  # a Hilbert curve moves to a face neighbour every step
    # Morton, for contrast, jumps (so the test above can fail)
    zwalk = cells[np.argsort(morton_encode(grid))]
    assert (np.abs(np.diff(zwalk, axis=0)).sum(axis=1) > 1).any()


def test_quantize_is_cubic_and_in_range(data_dir):
    pts = np.load(data_dir / "drivaer_body_points.npz")["points"]
    grid = quantize(pts)
    top = 2 ** BITS_PER_AXIS[3] - 1
    assert all(g.dtype == np.uint64 and int(g.max()) <= top for g in grid)
    ext = pts.max(0).astype(np.float64) - pts.min(0)
    longest = int(np.argmax(ext))
    assert int(grid[longest].max()) == top and all(int(g.min()) == 0 for g in grid)
    # one scale for every axis: the shorter axes span proportionally fewer cells
    for a in range(3):
        assert abs(int(grid[a].max()) / top - ext[a] / ext[longest]) < 1e-5


@pytest.mark.parametrize("fn", [morton_key, hilbert_key])
def test_keys_on_real_cloud_separate_distinct_points(data_dir, fn):
    pts = np.load(data_dir / "drivaer_body_points.npz")["points"]
    key = fn(pts)
    assert key.shape == (pts.shape[0],) and key.dtype == np.uint64
    assert int(key.max()) < 2**63
    distinct_points = np.unique(pts, axis=0).shape[0]
    assert np.unique(key).size >= distinct_points - 5  # 21 bits/axis: almost no collisions
    assert np.array_equal(key, fn(pts.copy()))  # deterministic


def test_keys_2d_and_float32_agree_with_float64(data_dir):
    import meshio

    pts = meshio.read(data_dir / "naca0012_inviscid.su2").points[:, :2].astype(np.float64)
    assert np.array_equal(hilbert_key(pts), hilbert_encode(quantize(pts)))
    k64 = hilbert_key(pts)
    k32 = hilbert_key(pts.astype(np.float32))
    # float32 rounding moves points by at most a few of the 2**32 cells: same order at coarse level
    coarse = np.uint64(64 - 20)
    assert np.mean((k64 >> coarse) == (k32 >> coarse)) > 0.99
