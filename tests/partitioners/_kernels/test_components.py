"""meshshard.partitioners._kernels.components: connected pieces of parts and their repair."""
import numpy as np

from meshshard.partitioners import partition
from meshshard.partitioners._kernels.components import (join_across, label_components, label_components_edges,
                                                        repair_components, union_in_range)
from meshshard.partitioners._kernels.csr import cut_weight
from meshshard.partitioners.multilevel import _csr, _pieces_of_parts, part_components
from tests.partitioners._meshes import grid_graph, mesh_arrays


def test_repair_kernel_respects_bound_and_leaves_separate_graph_components():
    from meshshard.partitioners.multilevel import _csr

    ei, xy = grid_graph(6)
    n = 36
    a = (xy[:, 1] >= 3).astype(np.int64)
    a[[16, 22]] = 0  # nodes (2, 4) and (3, 4): a 2-node piece of part 0 inside part 1
    indptr, indices, data = _csr(ei, n, None)
    before = cut_weight(indptr, indices, data, a)
    tight = a.copy()
    assert repair_components(indptr, indices, data, np.ones(n), tight, 2, 17.0) == 1  # part 1 (16 nodes) has no room
    assert np.array_equal(tight, a)
    loose = a.copy()
    assert repair_components(indptr, indices, data, np.ones(n), loose, 2, 40.0) == 0
    assert np.array_equal(loose[[16, 22]], [1, 1]) and cut_weight(indptr, indices, data, loose) < before
    # two separate paths both in part 0 and a third path in part 1: part 0's second piece has no
    # edge to another part, so it stays (the graph itself is disconnected there)
    paths = np.array([[0, 1, 3, 4, 6, 7], [1, 2, 4, 5, 7, 8]])
    b = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1])
    indptr, indices, data = _csr(paths, 9, None)
    assert repair_components(indptr, indices, data, np.ones(9), b, 2, 100.0) == 1
    assert np.array_equal(b, [0, 0, 0, 0, 0, 0, 1, 1, 1])


def test_component_labels_match_scipy_per_part(data_dir):
    """Union-find labels: the components of each part's induced subgraph, numbered by smallest node id."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    pts, ei = mesh_arrays(data_dir, "rae2822_turb.su2")
    n = pts.shape[0]
    indptr, indices, _ = _csr(ei, n, None)
    rng = np.random.default_rng(5)
    one_way = ei[:, ei[0] > ei[1]]  # the edge-list kernel takes either direction alone, in any order
    one_way = one_way[:, rng.permutation(one_way.shape[1])]
    for assign in (partition(pts, 5, "morton", refine=False).assignment.numpy(), rng.integers(0, 3, n)):
        keep = assign[ei[0]] == assign[ei[1]]
        inside = sp.coo_matrix((np.ones(keep.sum()), (ei[0][keep], ei[1][keep])), shape=(n, n))
        want_count, want = connected_components(inside, directed=False)
        _, first = np.unique(want, return_index=True)  # renumber scipy's labels by smallest node id
        order = np.empty(want_count, dtype=np.int64)
        order[np.argsort(first)] = np.arange(want_count)
        for label, count in (label_components(indptr, indices, assign),
                             label_components_edges(one_way[0], one_way[1], assign),
                             label_components_edges(ei[1], ei[0], assign)):
            assert count == want_count and np.array_equal(label, order[want])
        assert count > assign.max() + 1  # both starts split some part: the check sees more than one piece per part
        # two ranges of node ids joined apart, then the edges between them: the same count, wherever the ranges meet
        for mid in (0, 1, n // 3, n - 1, n):
            parent = np.arange(n, dtype=np.int64)
            cross = np.empty(2 * int(indptr[mid]), dtype=np.int64)
            k = union_in_range(indptr, indices, assign, parent, 0, mid, cross)
            assert union_in_range(indptr, indices, assign, parent, mid, n, np.empty(0, dtype=np.int64)) == 0
            assert (parent[mid:] >= mid).all()  # the upper range's joins stayed in it
            assert join_across(parent, cross, k) == want_count, mid
        assert _pieces_of_parts(indptr, indices, assign.astype(np.int32)) == want_count
        pieces = part_components(assign, one_way, int(assign.max()) + 1)
        assert np.array_equal(pieces, np.bincount(assign[first], minlength=int(assign.max()) + 1))
