"""meshshard.partitioners._kernels.grow: greedy graph growing."""
import numpy as np

from meshshard.partitioners._kernels.csr import cut_weight
from meshshard.partitioners._kernels.grow import grow_parts
from tests.partitioners._meshes import grid_graph


def test_grow_parts_regrows_compact_balanced_parts_from_a_scattered_start():
    from meshshard.partitioners.multilevel import _csr

    ei, _ = grid_graph(20)
    start = np.random.default_rng(0).integers(0, 4, 400)  # every part scattered over the grid
    indptr, indices, data = _csr(ei, 400, None)
    out = grow_parts(indptr, indices, data, np.ones(400), start, 4, 100.0, 0)
    loads = np.bincount(out, minlength=4)  # the lightest part grows first, so none is enclosed while small
    # (here one part is hemmed in at 81 nodes by the corner its seed lies in; nodes the full parts left over join a neighbour)
    assert loads.min() >= 75 and loads.max() <= 125
    assert cut_weight(indptr, indices, data, out) < 0.25 * cut_weight(indptr, indices, data, start)
    assert (grow_parts(indptr, indices, data, np.ones(400), start, 4, 100.0, 0) == out).all()
