"""Repartition on load: a graph saved in K = 2 or 4 parts (uneven, halo depth 1 and 2) loaded on
W = 1, 2, 3 ranks: the layout, local edges, stored node and edge fields, exchange and gather equal
the global graph's; each rank reads only the part files its range touches; split_ranges' ranges."""
from pathlib import Path

import pytest
import torch

from meshshard.graph import ShardedGraph, save_parts
from meshshard.graph.repartition import split_ranges
from meshshard.partitioners import partition
from meshshard.testing import run_distributed
from tests.datasets.test_datasets import _record_opened_files


@pytest.mark.parametrize("sizes, world", [([5, 7], 1), ([5, 7], 2), ([5, 7], 3), ([4, 6, 5, 9], 3), ([4, 6, 5, 9], 2),
                                          ([4, 6, 5, 9], 7), ([0, 8, 3], 6), ([3], 4), ([2, 2], 5)])
def test_split_ranges_cover_the_partition_order(sizes, world):
    ranges = split_ranges(sizes, world)
    offsets = torch.cumsum(torch.tensor([0] + sizes), 0).tolist()
    assert len(ranges) == world and ranges[0][0] == 0 and ranges[-1][1] == sum(sizes)
    assert all(a <= b for a, b in ranges) and all(ranges[r][1] == ranges[r + 1][0] for r in range(world - 1))
    if world <= len(sizes):  # whole parts merged, every rank at least one
        assert all(a in offsets and b in offsets for a, b in ranges)
        assert all(sum(a <= o < b for o in offsets[:-1]) >= 1 for a, b in ranges)
    else:  # parts split: every range inside one part, every part split at least once over
        assert all(any(offsets[k] <= a and b <= offsets[k + 1] for k in range(len(sizes))) for a, b in ranges)
        pieces = [sum(offsets[k] <= a < offsets[k + 1] or (a == b == offsets[k]) for a, b in ranges)
                  for k in range(len(sizes))]
        assert all(p >= 1 for p in pieces) and max(b - a for a, b in ranges) <= max(sizes)
    with pytest.raises(ValueError, match="at least one part and one rank"):
        split_ranges(sizes, 0)


def _graph():
    """A planar Delaunay-like graph of 300 random points (kNN, made undirected) with fields."""
    torch.manual_seed(0)
    pos = torch.rand(300, 2, dtype=torch.float64)
    d = torch.cdist(pos, pos)
    nbr = d.topk(6, largest=False).indices[:, 1:]
    ei = torch.stack([nbr.reshape(-1), torch.arange(300).repeat_interleave(5)])
    ei = torch.unique(torch.cat([ei, ei.flip(0)], 1), dim=1)
    return pos, ei, pos[ei[0]] - pos[ei[1]]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("repartition")
    pos, ei, ea = _graph()
    out = {}
    for k, hops in ((2, 1), (4, 2)):
        part = partition(pos, k, method="kdtree", edge_index=ei, refine=False)
        # uneven: move a block of nodes of part 0 into the last part
        assign = part.assignment.clone()
        assign[torch.nonzero(assign == 0).view(-1)[:20]] = k - 1
        from meshshard.partitioners import Partition

        part = Partition(assign, k, method="kdtree")
        root = tmp / f"k{k}"
        save_parts(root, ei, part, node_data={"pos": pos, "tag": torch.arange(300)}, edge_data={"ea": ea},
                   halo_hops=hops, progress=False)
        out[k] = (root, hops, part.sizes)
    return out


def _check(g, pos, ei, ea, hops):
    """g against the global graph: rings, edges into rings 0..hops-1, fields, exchange, gather."""
    n = pos.shape[0]
    assert g.num_owned == g.sizes[g.rank] and g.global_ids.unique().numel() == g.num_nodes
    assert torch.equal(g.global_ids[g.edge_index], ei[:, g.edge_ids])  # local edges are global edges
    owned = torch.zeros(n, dtype=torch.bool)
    owned[g.owned_ids] = True
    # the edges into owned nodes: every global edge into them, once
    into = torch.nonzero(owned[ei[1]]).view(-1)
    assert torch.equal(g.edge_ids[: int(g.edge_hop_ptr[1])].sort().values, into)
    # ring h + 1 holds the sources of edges into rings 0..h that are not nearer
    for h in range(hops):
        targets = g.global_ids[g.node_hop <= h]
        src = ei[0, torch.isin(ei[1], targets)]
        assert set(src.tolist()) <= set(g.global_ids[g.node_hop <= h + 1].tolist())
    assert torch.equal(g.node_data["pos"], pos[g.global_ids]) and torch.equal(g.node_data["tag"], g.global_ids)
    assert torch.equal(g.edge_data["ea"], ea[g.edge_ids])
    assert torch.equal(g.exchange(pos[g.owned_ids]), pos[g.global_ids])
    assert torch.equal(g.all_gather(pos[g.owned_ids]), pos)


def _rank(rank, world, saved):
    pos, ei, ea = _graph()
    opened = _record_opened_files()
    owned = {}
    for k, (root, hops, sizes) in saved.items():
        g = ShardedGraph.load(root)
        lo, hi = split_ranges(sizes, world)[rank]
        starts = torch.cumsum(torch.tensor([0] + sizes), 0).tolist()
        need = sorted(f"part_{p:04d}.pt" for p in range(k) if starts[p] < hi and starts[p + 1] > lo)
        assert sorted({Path(f).name for f in opened}) == need, (opened, need)
        opened.clear()
        assert g.world_size == world and g.sizes == [b - a for a, b in split_ranges(sizes, world)]
        _check(g, pos, ei, ea, hops)
        owned[k] = g.owned_ids.tolist()
    return owned


@pytest.mark.timeout(200)
def test_parts_merged_or_split_on_load_equal_the_global_graph(saved):
    pos, ei, ea = _graph()
    for k, (root, hops, _) in saved.items():  # W = 1 in this process: every part merged
        _check(ShardedGraph.load(root), pos, ei, ea, hops)
    for world in (2, 3):
        res = run_distributed(_rank, world, args=(saved,), timeout=180)
        for k in saved:
            ids = sorted(i for r in res for i in r[k])
            assert ids == list(range(300))  # each node owned by one rank
