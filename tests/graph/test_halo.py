"""Halo layouts: the vectorised all-parts builder against a slow per-part reference on real meshes."""
from collections import defaultdict

import numpy as np
import pytest
import torch

from meshshard.graph.halo import build_halo, build_halos
from tests.graph.graph_data import knn_edges, load_graph, make_partition


def reference_layout(edge_index, partition, rank, num_hops):
    """The layout as halo.py's docstring defines it, with Python sets and dicts (independent of build_halos)."""
    src, dst = edge_index[0].tolist(), edge_index[1].tolist()
    assign = partition.assignment.tolist()
    owned = sorted(i for i, p in enumerate(assign) if p == rank)
    row_in_owner = {}
    for p in range(partition.num_parts):
        for row, g in enumerate(sorted(i for i, q in enumerate(assign) if q == p)):
            row_in_owner[g] = row
    in_nbrs = defaultdict(list)
    for s, d in zip(src, dst):
        in_nbrs[d].append(s)
    hop = {g: 0 for g in owned}
    frontier = set(owned)
    for h in range(1, num_hops + 1):
        frontier = {s for d in frontier for s in in_nbrs[d] if s not in hop}
        hop.update((g, h) for g in frontier)
    ghosts = sorted((g for g in hop if hop[g] > 0), key=lambda g: (assign[g], row_in_owner[g]))
    local = {g: i for i, g in enumerate(owned + ghosts)}
    kept = sorted((hop[d], e) for e, d in enumerate(dst) if hop.get(d, num_hops) < num_hops)
    eids = [e for _, e in kept]
    ptr = [0] * (num_hops + 1)
    for h, _ in kept:
        ptr[h + 1] += 1
    for h in range(num_hops):
        ptr[h + 1] += ptr[h]
    long = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
    return {
        "owned_ids": long(owned), "ghost_ids": long(ghosts), "ghost_owner": long([assign[g] for g in ghosts]),
        "ghost_owner_index": long([row_in_owner[g] for g in ghosts]),
        "node_hop": long([0] * len(owned) + [hop[g] for g in ghosts]),
        "edge_index": long([[local[src[e]] for e in eids], [local[dst[e]] for e in eids]]).view(2, -1),
        "edge_ids": long(eids), "edge_hop_ptr": long(ptr),
    }


@pytest.fixture(scope="module")
def naca(data_dir):
    return load_graph(data_dir, "naca0012_inviscid.su2")


@pytest.mark.parametrize("graph", ["mesh", "knn"])
@pytest.mark.parametrize("num_parts,method", [(1, "kdtree"), (3, "graph"), (7, "hilbert")])
def test_build_halos_matches_reference(naca, graph, num_parts, method):
    pts, ei = naca
    if graph == "knn":  # directed: in- and out-neighbours differ, so rings follow in-edges only
        ei = knn_edges(pts, 6)
    part = make_partition(pts, ei, num_parts, method)
    for hops in (1, 3):
        layouts = build_halos(ei, part, hops)
        assert len(layouts) == num_parts
        for r in range(num_parts):
            want = reference_layout(ei, part, r, hops)
            for key, value in want.items():
                got = getattr(layouts[r], key)
                assert got.dtype == torch.long and got.is_contiguous(), key
                assert torch.equal(got, value), (graph, num_parts, hops, r, key)
                # compact storage: torch.save writes a view's whole base array
                assert got.untyped_storage().nbytes() == got.numel() * 8, key
        one = build_halo(ei, part, num_parts - 1, hops)
        assert torch.equal(one.edge_ids, layouts[-1].edge_ids) and torch.equal(one.ghost_ids, layouts[-1].ghost_ids)


def test_edges_grouped_by_the_compiled_counting_sort_give_the_same_layouts(naca, monkeypatch):
    import meshshard.graph.halo as halo

    pts, ei = naca
    part = make_partition(pts, ei, 7, "hilbert")
    key = np.random.default_rng(0).integers(0, 5, 3000).astype(np.uint16)
    ptr = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=5))])
    monkeypatch.setattr(halo, "_COMPILED_FROM", 0)  # the path of meshes with >= 1M edges
    for dtype in (np.int32, np.int64):
        got = halo._group_stable(key, ptr, dtype)
        assert got.dtype == dtype and np.array_equal(got, np.argsort(key, kind="stable"))
    for r, lay in enumerate(build_halos(ei, part, 2)):
        for key, value in reference_layout(ei, part, r, 2).items():
            assert torch.equal(getattr(lay, key), value), (r, key)


def test_build_halos_empty_part_and_isolated_nodes():
    from meshshard.partitioners import Partition

    # a path 0-1-2-3 plus isolated node 4; part 2 owns nothing
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    part = Partition(torch.tensor([0, 0, 1, 1, 0]), 3)
    for hops in (1, 2):
        layouts = build_halos(ei, part, hops)
        for r in range(3):
            want = reference_layout(ei, part, r, hops)
            for key, value in want.items():
                assert torch.equal(getattr(layouts[r], key), value), (hops, r, key)
    assert layouts[2].owned_ids.numel() == 0 and layouts[2].edge_index.shape == (2, 0)


def test_build_all_parts_layouts_and_plans_fit_together(naca):
    """build_all_parts (moved here from sharded_graph) gives the build_halos layouts, and plans in
    which rank r sends to rank s exactly the rows s lists as ghosts owned by r."""
    from meshshard.graph.halo import build_all_parts

    pts, ei = naca
    part = make_partition(pts, ei, 3, "kdtree")
    layouts, plans = build_all_parts(ei, part, 2)
    for got, want in zip(layouts, build_halos(ei, part, 2)):
        assert torch.equal(got.ghost_ids, want.ghost_ids) and torch.equal(got.edge_ids, want.edge_ids)
    for r in range(3):
        for s in range(3):
            asked = layouts[s].ghost_owner_index[layouts[s].ghost_owner == r]
            assert torch.equal(plans[r].send_index[s], asked), (r, s)
