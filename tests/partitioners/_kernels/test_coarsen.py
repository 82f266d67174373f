"""meshshard.partitioners._kernels.coarsen: matching, contraction, majority parts."""
import numpy as np
import torch

from meshshard.partitioners import Partition, partition, partition_quality
from meshshard.partitioners._kernels.coarsen import (_coprime_stride, coarse_ids, contract, contract_range, majority_parts,
                                                     match_across, match_in_parts, match_range, visit_order)
from meshshard.partitioners._kernels.csr import cut_weight
from meshshard.partitioners.multilevel import _csr
from tests.partitioners._meshes import load_mesh, mesh_arrays


def _cut(assign, ei):
    return partition_quality(Partition(torch.from_numpy(assign), int(assign.max()) + 1), ei)


def test_coarsening_keeps_parts_and_cut(data_dir):
    pts, ei = mesh_arrays(data_dir, "rae2822_turb.su2")
    n = pts.shape[0]
    assign = partition(pts, 7, "hilbert", refine=False).assignment.numpy()
    indptr, indices, data = _csr(ei, n, None)
    cmap, nc, mate = match_in_parts(indptr, indices, data, np.ones(n), assign, 2.0, 0)
    assert nc < 0.75 * n  # it really coarsens
    assert np.array_equal(mate[mate], np.arange(n)) and np.array_equal(cmap[mate], cmap)  # a matching
    ca = np.empty(nc, dtype=np.int64)
    ca[cmap] = assign
    assert np.array_equal(ca[cmap], assign)  # every cluster inside one part
    cp, ci, cd, cw = contract(indptr, indices, data, np.ones(n), cmap, mate, nc)
    assert cw.sum() == n and cw.max() <= 2.0 and cd.sum() == data.sum() - 2 * (n - nc)
    # the coarse adjacency is P^T A P without its diagonal (P: the [n, nc] one-hot of cmap)
    import scipy.sparse as sp
    fine = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    proj = sp.csr_matrix((np.ones(n), (np.arange(n), cmap)), shape=(n, nc))
    want = (proj.T @ fine @ proj).tolil()
    want.setdiag(0)
    got = sp.csr_matrix((cd, ci, cp), shape=(nc, nc))
    assert abs(got - want.tocsr()).max() == 0 and got.nnz == want.tocsr().count_nonzero()
    # the cut weight of the coarse graph equals the fine edge cut
    assert cut_weight(cp, ci, cd, ca) == _cut(assign, ei)["edge_cut"]
    # unit: every edge weighs 1 whatever data holds (the finest level of an unweighted graph), whole or in ranges
    unit = contract(indptr, indices, 7.0 * data, np.ones(n), cmap, mate, nc, True)
    assert all(np.array_equal(x, y) for x, y in zip(unit, (cp, ci, cd, cw)))
    halves = [contract_range(indptr, indices, 7.0 * data, np.ones(n), cmap, mate, nc, lo, hi, True)
              for lo, hi in ((0, n // 2), (n // 2, n))]
    assert np.array_equal(np.concatenate([halves[0][2], halves[1][2]]), cd)


def test_majority_parts_is_the_heaviest_part_of_each_cluster():
    # a dense table of the coarse nodes' tallies, and (above 2^22 entries) tallies of the fine nodes grouped by coarse
    # node: the same rule either way
    rng = np.random.default_rng(1)
    for n, nc, p in ((3000, 200, 9), (700_000, 300_000, 16)):
        to_coarse, fine = rng.integers(0, nc, n), rng.integers(0, p, n)
        w = rng.integers(0, 3, n).astype(float)  # zero weights and many ties
        table = np.zeros((nc, p))
        np.add.at(table, (to_coarse, fine), w)
        present = np.zeros((nc, p), dtype=bool)
        present[to_coarse, fine] = True
        table[~present] = -1.0  # a part with no member never wins, even at weight 0
        assert np.array_equal(majority_parts(to_coarse, fine, w, nc, p), table.argmax(1))  # argmax: lowest id on ties


def test_matching_visits_every_node_once_with_a_spread_stride():
    from math import gcd

    for n in list(range(1, 60)) + [97, 1000, 1024, 65536, 999_983]:
        stride = _coprime_stride(n)
        assert 1 <= stride <= max(n, 1) and gcd(stride, max(n, 1)) == 1, n
        if n <= 1000:
            assert sorted((5 + i * stride) % n for i in range(n)) == list(range(n))
        if n >= 1000:
            assert 0.6 * n <= stride <= 0.62 * n  # far from 1: consecutive visits are not consecutive ids


def test_matching_without_parts_or_weights_is_the_same_matching(data_dir):
    # the first hierarchy matches across parts (an empty part array) and, on an unweighted graph's finest level,
    # reads no weights (unit=True): the same pairs as reading all-zero parts and unit weights
    from meshshard.partitioners.multilevel import _csr

    pts, ei = load_mesh(data_dir, "cylinder_crossflow_re35.vtu")
    n = pts.shape[0]
    indptr, indices, data = _csr(ei.numpy(), n, None)
    vw = np.ones(n)
    for max_vw, pairs in ((2.0, True), (1.5, False)):  # 1.5: no pair fits, every node stays alone
        plain = match_in_parts(indptr, indices, data, vw, np.zeros(n, dtype=np.int32), max_vw, 7)
        lean = match_in_parts(indptr, indices, data, vw, np.empty(0, dtype=np.int32), max_vw, 7, True)
        assert plain[1] == lean[1] and np.array_equal(plain[0], lean[0]) and np.array_equal(plain[2], lean[2])
        assert (lean[1] < 0.6 * n) if pairs else (lean[1] == n)


def test_visit_order_visits_every_id_once_and_blocks_stay_together():
    for n in (1, 2, 7, 100, 1000, 4099):
        for block in (0, 1, 16, 64, n, n + 5):
            order = visit_order(n, 3, block)
            assert order.dtype == np.int64 and np.array_equal(np.sort(order), np.arange(n)), (n, block)
            if 0 < block < n:  # consecutive visits run through one block, then the next
                blocks = order // block
                assert np.count_nonzero(np.diff(blocks)) == -(-n // block) - 1
    strided = visit_order(1000, 3, 0)
    assert np.abs(np.diff(strided)).min() > 1  # never two consecutive ids in a row
    assert not np.array_equal(visit_order(1000, 3, 0), visit_order(1000, 4, 0))  # the salt moves the start
    inside = visit_order(4096, 3, 256)
    assert np.abs(np.diff(inside[:256])).min() > 1  # strided inside a block too


def test_matching_in_ranges_then_across_is_a_matching_inside_parts(data_dir):
    # ranges matched among themselves (as two threads do, in any order) then across their borders: a matching
    # inside the parts, no pair across ranges but those match_across made, and the same as one thread's
    pts, ei = mesh_arrays(data_dir, "rae2822_turb.su2")
    n = pts.shape[0]
    assign = partition(pts, 5, "hilbert", refine=False).assignment.numpy().astype(np.int32)
    indptr, indices, data = _csr(ei, n, None)
    vw = np.ones(n)
    chunk = -(-n // 3)
    results = []
    for order in ((0, 1, 2), (2, 0, 1)):
        mate = np.full(n, -1, dtype=indices.dtype)
        for k in order:
            match_range(indptr, indices, data, vw, assign, 2.0, 5, False, 64, k * chunk, min(n, (k + 1) * chunk), mate)
        assert (mate >= 0).all() and (mate // chunk == np.arange(n) // chunk).all()  # pairs inside ranges only
        before = mate.copy()
        match_across(indptr, indices, data, vw, assign, 2.0, 5, False, chunk, mate)
        changed = np.flatnonzero(mate != before)
        assert (before[changed] == changed).all() and (mate[changed] // chunk != changed // chunk).all()
        results.append(coarse_ids(mate))
    (cmap, nc, mate), other = results
    assert np.array_equal(cmap, other[0]) and nc == other[1]
    assert np.array_equal(mate[mate], np.arange(n)) and np.array_equal(cmap[mate], cmap)
    assert (assign[mate] == assign).all() and nc < 0.75 * n
    # one range is match_in_parts itself
    whole = np.full(n, -1, dtype=indices.dtype)
    match_range(indptr, indices, data, vw, assign, 2.0, 5, False, 0, 0, n, whole)
    assert np.array_equal(coarse_ids(whole)[0], match_in_parts(indptr, indices, data, vw, assign, 2.0, 5)[0])
