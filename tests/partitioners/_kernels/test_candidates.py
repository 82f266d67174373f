"""meshshard.partitioners._kernels.candidates: boundary candidate lists."""
import numpy as np

from meshshard.partitioners._kernels.candidates import boundary_candidates, project_candidates
from meshshard.partitioners._kernels.coarsen import contract, match_in_parts
from meshshard.partitioners._kernels.csr import cut_weight
from meshshard.partitioners._kernels.fm import fm_refine
from tests.partitioners._meshes import grid_graph


def test_projected_candidates_cover_the_finer_levels_boundary():
    from meshshard.partitioners.multilevel import _csr

    ei, xy = grid_graph(30)
    indptr, indices, data = _csr(ei, 900, None)
    vw = np.ones(900)
    cmap, nc, mate = match_in_parts(indptr, indices, data, vw, np.zeros(900, dtype=np.int64), 4.0, 3)
    coarse = contract(indptr, indices, data, vw, cmap, mate, nc)
    rep = np.empty(nc, dtype=np.int64)
    rep[cmap] = np.arange(900)  # a fine node of each cluster
    # four quadrants, cut along the clusters (random parts would put every cluster on the boundary)
    coarse_parts = (xy[rep, 0] >= 15).astype(np.int64) + 2 * (xy[rep, 1] >= 15)
    listed_coarse, _, count = boundary_candidates(coarse[0], coarse[1], coarse_parts)
    assert 0 < count[0] < nc
    listed, cand, count = project_candidates(cmap, listed_coarse)
    fine = coarse_parts[cmap]
    boundary = np.zeros(900, dtype=bool)
    boundary[ei[0][fine[ei[0]] != fine[ei[1]]]] = True
    assert listed[boundary].all() and np.array_equal(np.sort(cand[:count[0]]), np.flatnonzero(listed))
    assert count[0] < 900  # interior clusters stay out
    # FM keeps the list a superset of the boundary as it moves nodes, and returns the cut it leaves
    cut = fm_refine(indptr, indices, data, vw, fine, 4, 1.1 * 225, 4, 32, 1e-3, 0, listed, cand, count)
    assert cut == cut_weight(indptr, indices, data, fine)
    boundary = np.zeros(900, dtype=bool)
    boundary[ei[0][fine[ei[0]] != fine[ei[1]]]] = True
    assert listed[boundary].all()
