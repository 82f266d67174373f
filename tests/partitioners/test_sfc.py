import numpy as np
import pytest

from meshshard.partitioners import HilbertPartitioner, MortonPartitioner, partition, partition_quality
from meshshard.partitioners.sfc import hilbert_from_grid, hilbert_keys, morton_from_grid, morton_keys
from tests.partitioners._meshes import MESH_FILES, load_drivaer, load_mesh


def _grid(coords):
    c = np.asarray(coords, dtype=np.uint64)
    return [c[:, j].copy() for j in range(c.shape[1])]


def test_morton_bit_interleaving_hand_examples():
    # 3D: bit l of axis j goes to key bit 3l + j
    got = morton_from_grid(_grid([[1, 0, 0], [0, 1, 0], [0, 0, 1], [3, 0, 0], [1, 1, 1], [2, 3, 1], [0, 0, 2**20]]))
    assert got.tolist() == [1, 2, 4, 0b1001, 7, 0b011110, 1 << 62]
    # 2D: bit l of axis j goes to key bit 2l + j
    got = morton_from_grid(_grid([[1, 0], [0, 1], [2, 0], [3, 3], [5, 2], [2**31, 0]]))
    assert got.tolist() == [1, 2, 4, 15, 0b011001, 1 << 62]


@pytest.mark.parametrize("dim,bits,side", [
    (2, 32, 32), (3, 21, 16), (2, 3, 8), (3, 2, 4),
    # bit counts that are not a multiple of the table width: a short first chunk, then rescaling
    (3, 4, 16), (3, 5, 8), (2, 10, 32), (2, 4, 16),
])
def test_hilbert_consecutive_keys_are_grid_neighbours(dim, bits, side):
    # the first side**dim cells of the curve fill the corner cube [0, side)^dim
    g = np.stack(np.meshgrid(*[np.arange(side)] * dim, indexing="ij"), -1).reshape(-1, dim)
    keys = hilbert_from_grid(_grid(g), bits)
    order = np.argsort(keys)
    assert np.array_equal(np.sort(keys), np.arange(side**dim, dtype=np.uint64))
    steps = np.abs(np.diff(g[order].astype(np.int64), axis=0)).sum(1)
    assert (steps == 1).all()  # every step moves one cell along one axis
    # Morton, by contrast, jumps
    mk = morton_from_grid(_grid(g))
    assert np.abs(np.diff(g[np.argsort(mk)].astype(np.int64), axis=0)).sum(1).max() > 1


def test_keys_distinct_for_close_points():
    rng = np.random.default_rng(0)
    pts = rng.random((200_000, 3))
    assert np.unique(hilbert_keys(pts)).size == pts.shape[0]
    assert np.unique(morton_keys(pts)).size == pts.shape[0]
    pts2 = rng.random((200_000, 2))
    assert np.unique(hilbert_keys(pts2)).size == pts2.shape[0]


@pytest.mark.parametrize("cls", [MortonPartitioner, HilbertPartitioner])
def test_curve_parts_are_contiguous_key_runs(data_dir, cls):
    pts, _ = load_drivaer(data_dir)
    part = cls().partition(pts, 7)
    keys = (morton_keys if cls is MortonPartitioner else hilbert_keys)(np.asarray(pts))
    a = part.assignment.numpy()
    lo = np.array([keys[a == r].min() for r in range(7)])
    hi = np.array([keys[a == r].max() for r in range(7)])
    assert (hi[:-1] <= lo[1:]).all()
    assert max(part.sizes) - min(part.sizes) <= 1


@pytest.mark.parametrize("name", MESH_FILES)
@pytest.mark.parametrize("method", ["morton", "hilbert"])
def test_curve_real_mesh(data_dir, name, method):
    pts, ei = load_mesh(data_dir, name)
    part = partition(pts, 7, method, refine=False, edge_index=ei)
    assert part.method == method and max(part.sizes) - min(part.sizes) <= 1
    w = np.random.default_rng(3).random(pts.shape[0])
    wp = partition(pts, 7, method, weights=w)
    pw = wp.part_weights().numpy()
    assert pw.max() / pw.mean() <= 1 + 7 * w.max() / w.sum() and min(wp.sizes) > 0


def test_hilbert_cuts_fewer_edges_than_morton(data_dir):
    total = {"morton": 0, "hilbert": 0}
    for name in MESH_FILES:
        pts, ei = load_mesh(data_dir, name)
        for m in total:
            total[m] += partition_quality(partition(pts, 7, m), ei)["edge_cut"]
    assert total["hilbert"] < total["morton"]


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("keys", [morton_keys, hilbert_keys])
def test_enough_bits_per_axis_for_ten_million_points(dim, keys):
    # 21 bits per axis in 3D (63-bit keys), 32 in 2D: points one grid cell apart along any axis
    # get distinct keys. With 2**63 cells, 1e7 uniform points share a key with probability ~5e-6.
    bits = 32 if dim == 2 else 21
    cells = 2**bits - 1
    for axis in range(dim):
        pts = np.zeros((4, dim))
        pts[1:, axis] = [1.0 / cells, 2.0 / cells, 1.0]  # 0, 1 cell, 2 cells, far corner
        pts[3] = 1.0
        k = keys(pts)
        assert np.unique(k).size == 4, axis
    assert keys(np.random.default_rng(0).random((1000, dim))).max() >= np.uint64(2**(dim * bits - 2))


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("keys", [morton_keys, hilbert_keys])
def test_keys_do_not_depend_on_scale_even_at_float_extremes(dim, keys):
    # multiplying by a power of two is exact, and the curve grid is scale-free: same keys, also
    # where hi - lo overflows (1024) or top / extent does (-1040, subnormal coordinates)
    pts = np.random.default_rng(1).integers(0, 2**20, (500, dim)) / 2.0**19 - 1.0  # in [-1, 1)
    pts[:2] = [[-1.0] * dim, [1.0] * dim]  # the full range: scaled by 2**1023, hi - lo overflows
    ref = keys(pts)
    assert np.unique(ref).size > 450
    for e in (-1040, -1000, -300, 300, 1000, 1023):
        with np.errstate(all="raise"):
            assert np.array_equal(keys(np.ldexp(pts, e)), ref), e
    same = keys(np.full((7, dim), 3.0))
    assert (same == same[0]).all()


@pytest.mark.parametrize("dims", [(32, 8), (40, 8, 8), (8, 8, 48), (8, 8)])
def test_hilbert_walk_stays_continuous_on_elongated_boxes(dims):
    # an elongated box is covered by a row of cubes, each entered at the corner where the last
    # one was left: sorted by Hilbert key, the lattice points form a walk of unit steps, and the
    # keys of every box shape use the full key width
    import itertools

    g = np.array(list(itertools.product(*[range(d) for d in dims])), dtype=float)
    keys = hilbert_keys(g)
    assert np.unique(keys).size == len(g)
    steps = np.abs(np.diff(g[np.argsort(keys)], axis=0)).sum(1)
    assert (steps == 1).all()
    top_bits = 64 if len(dims) == 2 else 63
    assert int(keys.max()) >= 2 ** (top_bits - 2)
    # Morton jumps; both give each point a distinct key
    mk = morton_keys(g)
    assert np.unique(mk).size == len(g) and np.abs(np.diff(g[np.argsort(mk)], axis=0)).sum(1).max() > 1


def test_curve_parts_of_a_channel_are_slabs():
    # a 10:1 channel: hilbert's 5 parts are slabs across the channel (cut ~ 4 * height), not
    # strips along it
    rng = np.random.default_rng(0)
    pts = rng.random((20000, 2)) * [10.0, 1.0]
    for method in ("hilbert", "morton"):
        a = partition(pts, 5, method).assignment.numpy()
        spans = [np.ptp(pts[a == r, 0]) for r in range(5)]
        assert max(spans) < 4.0, (method, spans)
    a = partition(pts, 5, "hilbert").assignment.numpy()
    assert max(np.ptp(pts[a == r, 0]) for r in range(5)) < 2.5


@pytest.mark.parametrize("dim", [2, 3])
def test_keys_of_a_slice_with_the_whole_sets_bounds(dim):
    # partition_distributed computes each rank's keys against the all-reduced bounding box
    pts = np.random.default_rng(4).random((3000, dim)) * ([6.0, 1.0, 0.5][:dim])  # elongated: cubes
    bounds = (pts.min(axis=0), pts.max(axis=0))
    for fn in (morton_keys, hilbert_keys):
        whole = fn(pts)
        assert np.array_equal(fn(pts[1000:1400], bounds=bounds), whole[1000:1400])
        assert not np.array_equal(fn(pts[1000:1400]), whole[1000:1400])  # own box: other keys
