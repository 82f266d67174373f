"""meshshard.partitioners._csr: symmetric CSR of an edge list, and the view of a mesh's edge_index as one."""
import numpy as np

from tests.partitioners._meshes import load_mesh


def test_csr_view_is_the_symmetric_csr_without_copies_and_refuses_other_edge_lists(data_dir):
    from meshshard.partitioners._csr import csr_view, graph_csr, symmetric_csr, undirected_pairs

    pts, ei = load_mesh(data_dir, "naca0012_inviscid.su2")
    ei, n = ei.numpy(), pts.shape[0]
    indptr, indices = csr_view(ei, n)
    ref = symmetric_csr(*undirected_pairs(ei, n), n)
    assert np.array_equal(indptr, ref[0]) and np.array_equal(indices, ref[1])
    assert np.shares_memory(indices, ei)
    assert np.shares_memory(graph_csr(ei, n)[1], ei)
    # each is one defect away from a symmetric CSR; graph_csr still gives the graph's CSR
    not_csr = {
        "unsorted rows": ei[:, ::-1],
        "one direction": ei[:, ei[0] < ei[1]],
        "a repeated entry": np.insert(ei, 1, ei[:, 0], axis=1),
        "a self loop": np.insert(ei, 0, [0, 0], axis=1),
        "id out of range": np.where(ei == ei.max(), n, ei),
        # as many u < v entries as u > v ones, yet (0, 1) has no (1, 0)
        "a missing reverse": np.array([[0, 2], [1, 1]]),
    }
    for what, e in not_csr.items():
        assert csr_view(e, n) is None, what
    assert csr_view(np.array([[0, 0, 1, 2], [1, 2, 0, 1]]), 3) is None  # (0, 2) lacks (2, 0)
    for what in ("unsorted rows", "one direction", "a repeated entry", "a self loop"):
        got = graph_csr(not_csr[what], n)
        assert np.array_equal(got[0], ref[0]) and np.array_equal(got[1], ref[1]), what
