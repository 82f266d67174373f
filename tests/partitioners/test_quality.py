import numpy as np
import pytest
import torch

from meshshard.partitioners import Partition, partition, partition_quality
from tests.partitioners._meshes import load_mesh


def _brute(assign, edges, n, num_parts, weights=None):
    und = {(min(u, v), max(u, v)) for u, v in edges if u != v}
    cut = sum(1 for u, v in und if assign[u] != assign[v])
    adj = {i: set() for i in range(n)}
    for u, v in und:
        adj[u].add(v)
        adj[v].add(u)
    ghosts = 0
    nbr_parts = []
    for p in range(num_parts):
        members = [i for i in range(n) if assign[i] == p]
        g = {v for u in members for v in adj[u] if assign[v] != p}
        ghosts += len(g)
        nbr_parts.append(len({assign[v] for v in g}))
    pieces = 0  # per part: connected components of its induced subgraph, minus one
    for p in range(num_parts):
        members = {i for i in range(n) if assign[i] == p}
        seen, comps = set(), 0
        for s in sorted(members):
            if s in seen:
                continue
            comps += 1
            stack = [s]
            seen.add(s)
            while stack:
                u = stack.pop()
                for v in adj[u] & members - seen:
                    seen.add(v)
                    stack.append(v)
        pieces += max(comps - 1, 0)
    w = [1.0] * n if weights is None else list(weights)
    pw = [sum(w[i] for i in range(n) if assign[i] == p) for p in range(num_parts)]
    return {
        "edge_cut": cut,
        "imbalance": max(pw) / (sum(pw) / num_parts),
        "ghost_nodes": ghosts,
        "ghost_fraction": ghosts / n,
        "comm_volume": ghosts,
        "max_neighbor_ranks": max(nbr_parts),
        "disconnected_parts": pieces,
    }


@pytest.mark.parametrize("seed", range(6))
def test_quality_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    num_parts = int(rng.integers(1, min(n, 6) + 1))
    e = rng.integers(0, n, size=(2, int(rng.integers(0, 3 * n))))
    assign = rng.integers(0, num_parts, n)
    w = rng.random(n) if seed % 2 else None
    part = Partition(assign, num_parts)
    expect = _brute(assign.tolist(), e.T.tolist(), n, num_parts, w)
    for ei in (e, np.concatenate([e, e[::-1]], 1), torch.from_numpy(e[::-1].copy())):
        got = partition_quality(part, ei, weights=w)
        assert got.keys() == expect.keys()
        for k in expect:
            assert got[k] == pytest.approx(expect[k], rel=1e-12), k


def test_quality_real_mesh_brute_force(data_dir):
    pts, ei = load_mesh(data_dir, "naca0012_inviscid.su2")
    part = partition(pts, 5, "hilbert", edge_index=ei)
    expect = _brute(part.assignment.tolist(), ei.T.tolist(), pts.shape[0], 5)
    got = partition_quality(part, ei)
    for k in expect:
        assert got[k] == pytest.approx(expect[k], rel=1e-12), k


def test_quality_uses_partition_weights_and_checks_input():
    part = Partition([0, 0, 1], 2, node_weights=[1.0, 1.0, 4.0])
    assert partition_quality(part, [[0, 1], [1, 2]])["imbalance"] == pytest.approx(4 / 3)
    with pytest.raises(ValueError, match="out of range"):
        partition_quality(part, [[0, 1], [1, 3]])
    with pytest.raises(TypeError, match="Partition"):
        partition_quality([0, 0, 1], [[0], [1]])


def test_disconnected_parts_on_hand_made_graphs():
    path = [[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]  # 0-1-2-3-4-5
    assert partition_quality(Partition([0, 0, 0, 1, 1, 1], 2), path)["disconnected_parts"] == 0
    # part 0 = {0, 1, 4, 5}: two pieces; part 1 = {2, 3}: one
    assert partition_quality(Partition([0, 0, 1, 1, 0, 0], 2), path)["disconnected_parts"] == 1
    # alternating: part 0 = {0, 2, 4} three pieces, part 1 = {1, 3, 5} three pieces
    assert partition_quality(Partition([0, 1, 0, 1, 0, 1], 2), path)["disconnected_parts"] == 4
    # an empty part counts 0, an isolated node is a piece of its own
    assert partition_quality(Partition([0, 0, 0, 0, 0, 0], 2), [[0, 1], [1, 2]])["disconnected_parts"] == 3
