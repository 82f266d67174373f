"""GraphGuard follows which rows of a graph model's tensors are exact and refuses what a rank cannot compute.

Single process, on a small path graph's tensors tagged as DomainParallel tags them; the
multi-rank consequences (every PyG layer exact or refused) are in test_domain_parallel_pyg_sweep.py.
"""
import pytest
import torch

from meshshard.ops.graph_guard import GraphGuard, GraphGuardError

N, E = 6, 8


def _inputs(guard, rings):
    gen = torch.Generator().manual_seed(0)
    x = guard.tag_node(torch.randn(N, 3, generator=gen, dtype=torch.float64), rings)
    ei = guard.tag_index(torch.tensor([[1, 2, 3, 4, 0, 1, 2, 3], [0, 1, 2, 3, 1, 2, 3, 4]]))
    return x, ei


def _hop(x, ei):
    src, dst = ei
    return torch.zeros_like(x).index_add_(0, dst, x[src])


@pytest.mark.parametrize("rings", [1, 2, 3])
def test_each_hop_costs_one_ring(rings):
    guard = GraphGuard(rings, "Model", per_layer=False)
    x, ei = _inputs(guard, rings)
    with guard:
        for hop in range(1, 4):
            x = torch.tanh(_hop(x, ei))
            assert guard.node_exactness(x) == rings - hop


@pytest.mark.parametrize("rings, exact", [(1, -1), (2, 0)])
def test_gcn_norm_on_local_edges_needs_one_more_ring(rings, exact):
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    guard = GraphGuard(rings, "Model", per_layer=False)
    x, ei = _inputs(guard, rings)
    with guard:
        ei2, w = gcn_norm(ei, None, N, add_self_loops=True, dtype=x.dtype)
        src, dst = ei2
        out = torch.zeros_like(x).index_add_(0, dst, x[src] * w[:, None])
    assert guard.node_exactness(out) == exact


def test_sum_of_weights_complete_with_adapted_edges():
    """An edge_index whose weights make every local degree complete (global_gcn_inputs) keeps gcn_norm exact."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm

    guard = GraphGuard(1, "Model", per_layer=False)
    x, _ = _inputs(guard, 1)
    ei = guard.tag_index(torch.tensor([[1, 2, 3, 4, 0, 1, 2, 3], [0, 1, 2, 3, 1, 2, 3, 4]]), complete_weights=2)
    with guard:
        ei2, w = gcn_norm(ei, torch.ones(E, dtype=x.dtype), N, add_self_loops=True)
        out = torch.zeros_like(x).index_add_(0, ei2[1], x[ei2[0]] * w[:, None])
    assert guard.node_exactness(out) == 0


@pytest.mark.parametrize("op", [
    lambda x, ei: x.sum(0),
    lambda x, ei: x.mean(),
    lambda x, ei: torch.softmax(x, 0),
    lambda x, ei: x.max(dim=0),
    lambda x, ei: x.t() @ x,
    lambda x, ei: torch.einsum("nf,ng->fg", x, x),
    lambda x, ei: torch.nn.functional.scaled_dot_product_attention(x[None], x[None], x[None]),
    lambda x, ei: x.argsort(0),
    lambda x, ei: x.tolist(),
    lambda x, ei: torch.zeros(1, 3, dtype=x.dtype).index_add_(0, torch.zeros(N, dtype=torch.long), x),
    lambda x, ei: x[torch.randperm(N)],
    lambda x, ei: x[:3],
    lambda x, ei: torch.sparse_coo_tensor(ei, torch.ones(E), (N, N)),
    lambda x, ei: torch.nn.Parameter(torch.randn(N, 3, dtype=x.dtype))[ei[0]],
])
def test_whole_graph_ops_refused(op):
    guard = GraphGuard(2, "Model", per_layer=False)
    x, ei = _inputs(guard, 2)
    with guard, pytest.raises(GraphGuardError, match="cannot make Model exact"):
        op(x, ei)


@pytest.mark.parametrize("op", [
    lambda x, ei: x.sum(-1),
    lambda x, ei: torch.softmax(x, -1),
    lambda x, ei: x @ torch.ones(3, 2, dtype=x.dtype),
    lambda x, ei: torch.nn.functional.layer_norm(x, (3,)),
    lambda x, ei: x[:, :2],
    lambda x, ei: x[x[:, 0] > 0],
    lambda x, ei: x.index_select(0, (x[:, 0] > 0).nonzero().view(-1)),
])
def test_per_node_ops_pass(op):
    guard = GraphGuard(2, "Model", per_layer=False)
    x, ei = _inputs(guard, 2)
    with guard:
        op(x, ei)


def test_per_layer_mode_refuses_gathers_outside_layers():
    guard = GraphGuard(1, "Model", per_layer=True)
    x, ei = _inputs(guard, 0)
    with guard, pytest.raises(GraphGuardError, match="outside its MessagePassing layers"):
        x[ei[0]]


def test_paused_and_foreign_tags_untracked():
    guard = GraphGuard(1, "Model", per_layer=False)
    x, _ = _inputs(guard, 1)
    with guard:
        with guard.paused():
            x.sum(0)
    other = GraphGuard(1, "Other", per_layer=False)
    with other:
        x.sum(0)  # tagged by another guard: not this one's
