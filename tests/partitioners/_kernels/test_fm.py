"""meshshard.partitioners._kernels.fm: k-way Fiduccia-Mattheyses passes."""
import numpy as np

from meshshard.partitioners._kernels.candidates import boundary_candidates
from meshshard.partitioners._kernels.csr import cut_weight
from meshshard.partitioners._kernels.fm import _fm_passes, _other_parts, _room_in, fm_refine
from tests.partitioners._meshes import grid_graph


def test_fm_skips_only_nodes_no_part_has_room_for():
    """FM re-rates a node that had no feasible move only once a neighbouring part has room (a bit mask of
    its neighbours' parts, up to 64 parts). The same problem posed with 65 parts (58 of them empty,
    never a target) takes the path that re-rates such nodes every pass: the results must agree."""
    from meshshard.partitioners.multilevel import _csr

    ei, _ = grid_graph(24)
    n = 24 * 24
    indptr, indices, data = _csr(ei, n, None)
    rng = np.random.default_rng(0)
    moved = 0
    for trial in range(12):
        start = rng.integers(0, 7, n)
        vw = rng.integers(1, 3, n).astype(float)
        # a tight bound: parts at it leave their neighbours' nodes without a feasible move
        bound = float(np.bincount(start, weights=vw, minlength=7).max()) * (1.0 + 0.02 * (trial % 3))
        out = []
        for parts in (7, 65):
            a = start.copy()
            cut = fm_refine(indptr, indices, data, vw, a, parts, bound, 8, 16, 0.0, trial,
                              *boundary_candidates(indptr, indices, a))
            out.append((a, cut))
        assert np.array_equal(out[0][0], out[1][0]) and out[0][1] == out[1][1]
        assert out[0][1] == cut_weight(indptr, indices, data, out[0][0])
        moved += int(not np.array_equal(out[0][0], start))
    assert moved == 12  # every trial moved nodes


def test_room_mask_helpers():

    # path 0-1-2-3 with parts 0, 1, 2, 1: node 1 touches parts 0 and 2, node 3 part 2
    indptr = np.array([0, 1, 3, 5, 6])
    indices = np.array([1, 0, 2, 1, 3, 2])
    assign = np.array([0, 1, 2, 1])
    masks = np.array([_other_parts(u, indptr, indices, assign) for u in range(4)], dtype=np.uint64)
    assert masks.tolist() == [0b10, 0b101, 0b10, 0b100]
    # _room_in(k, masks, node weight, part weights, bound): k indexes the masks (a node id, or its rows' slot)
    assert not _room_in(1, masks, 1.0, np.array([2.0, 1.0, 2.0]), 2.0)  # parts 0 and 2 full
    assert _room_in(1, masks, 1.0, np.array([2.0, 1.0, 1.0]), 2.0)  # part 2 has room
    assert not _room_in(1, masks, 1.5, np.array([2.0, 1.0, 1.0]), 2.0)  # ... but not for a node of weight 1.5
    assert not _room_in(3, masks, 1.0, np.array([0.0, 1.0, 2.0]), 2.0)  # only part 0 has room: not a neighbour
    assert _room_in(3, np.zeros(0, dtype=np.uint64), 1.0, np.array([2.0, 2.0, 2.0]), 2.0)  # no masks: always


def test_fm_rows_and_tallies_give_the_same_partition():
    """fm_refine rates nodes from per-node rows of edge weight to every part (kept up to date as neighbours
    move and moves roll back) when n * P is small, else by tallying edges per rating: two compilations of
    _fm_passes that must give the same partition and cut for integer weights (zero-weight edges included)."""
    from meshshard.partitioners.multilevel import _csr

    rng = np.random.default_rng(4)
    ei, _ = grid_graph(20)
    n = 400
    extra = rng.integers(0, n, (2, 300))  # irregular degrees on top of the grid
    extra = extra[:, extra[0] != extra[1]]
    ei = np.concatenate([ei, extra, extra[::-1]], axis=1)
    key = np.unique(ei[0] * n + ei[1])
    ei = np.stack([key // n, key % n])
    ew = rng.integers(0, 4, ei.shape[1]).astype(float)  # zero-weight edges too
    ew = np.maximum(ew, ew[np.searchsorted(key, ei[1] * n + ei[0])])  # symmetric weights
    indptr, indices, data = _csr(ei, n, ew)
    moved = 0
    for parts in (2, 7, 16):
        for trial in range(4):
            start = rng.integers(0, parts, n)
            vw = rng.integers(1, 4, n).astype(float)
            bound = float(np.bincount(start, weights=vw, minlength=parts).max()) * 1.02
            out = []
            for rows in (np.empty((0, 0)), np.empty(0)):
                a = start.copy()
                cands = boundary_candidates(indptr, indices, a)
                cut = _fm_passes(indptr, indices, data, vw, a, parts, bound, 8, 16, 0.0, trial, *cands, rows)
                out.append((a, cut, cands[1][: cands[2][0]].copy()))
            assert np.array_equal(out[0][0], out[1][0]) and out[0][1] == out[1][1], (parts, trial)
            assert np.array_equal(out[0][2], out[1][2])  # the same candidate lists
            assert out[0][1] == cut_weight(indptr, indices, data, out[0][0])
            moved += int(not np.array_equal(out[0][0], start))
    assert moved == 12
