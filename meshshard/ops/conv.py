r"""Sharded message passing: run PyG ``MessagePassing`` layers on a :class:`ShardedGraph`.

Each rank computes its owned nodes' outputs from its owned + ghost rows and the local edges
(every edge into an owned node is local), so the result equals the layer on the whole graph.

Two modes, both exact:

* **exchange per layer** (default): ``ShardedConv(conv)(x_owned, g)`` exchanges ghost rows, runs
  the layer on the local edges into owned nodes, returns ``[num_owned, *]``.
* **k-hop halo**: build the graph with ``halo_hops=k``, exchange once, then run layers worth ``k``
  hops on all local rows with ``exchange=False`` and no exchange of features in between; after
  ``l`` hops the rows with ``g.node_hop <= k - l`` are exact (owned rows after all ``k``)::

      x = g.exchange(x_owned)                              # once
      for l, conv in enumerate(convs):
          x = act(ShardedConv(conv)(x, g, exchange=False, layers_left=k - l))
      out = x[: g.num_owned]

  ``layers_left`` (optional) skips the edges into rings whose rows would not be exact anyway.

Which layers are exact. The wrapped layer is called as ``conv(x, edge_index, **kwargs)``. It is exact
when the output of node ``i`` depends only on ``x_i``, the in-edges ``j -> i`` (and their
features) and the rows ``x_j`` of their sources, one hop per ``propagate`` call. Tested equal to
the whole-graph layer: ``SAGEConv``, ``GraphConv``, ``GINConv``/``GINEConv``,
``GATConv``/``GATv2Conv`` (softmax over all in-edges of ``i``, all local), ``TransformerConv``,
``EdgeConv``, ``NNConv``, ``GENConv``, ``PNAConv``, ``ResGatedGraphConv``, ``ClusterGCNConv``,
``LEConv``, ``MFConv``, the MeshGraphNet block below; custom layers written the same way work too.
Layers that normalise by the symmetric degree through PyG's ``gcn_norm`` (tested: ``GCNConv``,
``LGConv``, ``SGConv``, ``APPNP``, ``TAGConv``, ``ARMAConv``, ``SSGConv``, ``MixHopConv``) also
need the degree of ghost (source) nodes: while the layer runs, ``gcn_norm`` is
replaced by a version that takes every local node's *global* degree (owned nodes' degrees from their
local in-edges, ghosts' from their owners by one exchange of the degree vector, cached per graph
in ``g.cache`` when there are no edge weights), so the normalised weights equal the whole-graph ones.
Layers that propagate ``K`` times per call (``SGConv``, ``APPNP``, ``TAGConv``, ...: ``K`` hops) need the
halo mode with ``K`` hops left; ``ShardedConv`` counts the ``propagate`` calls of each call and raises
when they exceed the hops available (1 in exchange mode). Layers that need what no rank sees are
refused when wrapped: ``ChebConv`` (normalises by out-degree), ``DynamicEdgeConv`` and
``GravNetConv`` (build their own kNN graph: use :func:`meshshard.ops.sharded_knn` and ``EdgeConv``),
``DirGNNConv`` (aggregates along reversed edges too) and any ``flow="target_to_source"`` layer.
Random layers (dropout in training mode) give equal results only when their randomness is off.

The ``gcn_norm`` substitution patches the module-level name in the layer's module for the duration
of the call (restored afterwards); do not run a wrapped and an unwrapped GCN-type layer of the same
module concurrently in two threads.

Parameters stay plain replicated tensors; with a loss that sums over owned nodes of all ranks,
each rank's parameter gradients are partial sums: call :func:`all_reduce_gradients` before the
optimizer step.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Iterable, Optional, Union

import torch
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv import gcn_conv as _gcn_conv_module

from meshshard import distributed as msd

__all__ = ["ShardedConv", "MeshGraphNetBlock", "all_reduce_gradients"]

# Layers whose output needs information no rank holds; wrapping them raises with the reason.
_NON_LOCAL = {
    "ChebConv": "it normalises by every node's out-degree (get_laplacian over edge sources), and a rank "
                "does not hold the out-edges of its owned nodes",
    "DynamicEdgeConv": "it builds its own kNN graph from all nodes' features; build the graph with "
                       "meshshard.ops.sharded_knn(return_graph=True) and wrap EdgeConv instead",
    "DirGNNConv": "it also aggregates along reversed edges (out-edges of every node), and a rank does not "
                  "hold the out-edges of its owned nodes; add the reversed edges to the graph instead",
    "GravNetConv": "it builds its own kNN graph from all nodes' features; build the graph with "
                   "meshshard.ops.sharded_knn(return_graph=True) and wrap a local layer instead",
}
_GCN_NORM = _gcn_conv_module.gcn_norm


def all_reduce_gradients(module_or_params: Union[nn.Module, Iterable[torch.Tensor]], group=None) -> None:
    """Sum the gradients of replicated parameters over ranks, in place (collective).

    Parameters that require grad but have none on this rank count as zeros, so every rank joins
    with the same buffer size. One all-reduce per dtype (gradients are packed into a flat buffer).

    Args:
        module_or_params: a module, or an iterable of parameters (same order on every rank).
        group: process group.
    """
    params = list(module_or_params.parameters()) if isinstance(module_or_params, nn.Module) else list(module_or_params)
    params = [p for p in params if p.requires_grad]
    if msd.get_world_size(group) == 1 or not msd.is_initialized():
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_dtype: dict = {}
    for p in params:
        by_dtype.setdefault((p.grad.dtype, p.grad.device), []).append(p)
    msd.check_same_across_ranks([len(params)] + [p.numel() for p in params], "all_reduce_gradients", None, group)
    for ps in by_dtype.values():
        flat = torch.cat([p.grad.reshape(-1) for p in ps])
        msd.all_reduce(flat, group=group)
        off = 0
        for p in ps:
            n = p.numel()
            p.grad.copy_(flat[off : off + n].view_as(p.grad))
            off += n


def _slice_edges(t: Optional[torch.Tensor], g, n_used: int, what: str) -> Optional[torch.Tensor]:
    """Cut an edge tensor aligned with ``g.edge_index`` (or a ring prefix of it) to ``n_used`` rows."""
    if t is None:
        return None
    if isinstance(t, msd.DTensor):
        t = t.to_local()
    allowed = set(int(v) for v in g.edge_hop_ptr[1:].tolist())
    if t.dim() == 0 or t.shape[0] < n_used or t.shape[0] not in allowed:
        raise ValueError(
            f"ShardedConv: {what} has {t.shape[0] if t.dim() else 'no'} rows; expected one row per local edge "
            f"({g.edge_index.shape[1]}, aligned with g.edge_index, e.g. edge_attr_global[g.edge_ids]) "
            f"or per edge into owned nodes ({int(g.edge_hop_ptr[1])})"
        )
    return t[:n_used]


def _message_passing_modules(conv: nn.Module):
    return [m for m in conv.modules() if isinstance(m, MessagePassing)]


class ShardedConv(nn.Module):
    r"""Wrap a ``torch_geometric.nn.MessagePassing`` layer to run on a :class:`ShardedGraph`.

    ``ShardedConv(conv)(x_owned, g)`` equals ``conv(x, edge_index)[g.owned_ids]`` on the whole
    graph, forward and backward (see the module docstring for which layers and why).
    ``gcn_norm``-normalised layers (``GCNConv``, ``LGConv``, ``SGConv``, ...) use the *global*
    degree of every local node, ghosts included (exchanged once per graph and cached in
    ``g.cache``; with edge weights once per call, as the weights may change).

    Args:
        conv: the layer (a ``MessagePassing``, or any module built from them); its parameters are
            used as they are (replicated on every rank).
        hops: hops of graph distance one call of the layer reaches (its chained ``propagate``
            calls). ``None`` (default): counted at run time as the number of ``propagate`` calls;
            pass it for layers whose ``propagate`` calls are not chained (e.g. one per relation
            type: ``hops=1``).

    Raises:
        ValueError: a ``flow="target_to_source"`` layer, or a layer listed as non-local
            (``ChebConv``, ``DynamicEdgeConv``, ``GravNetConv``, ``DirGNNConv``), or ``hops < 1``.

    Shapes (forward):
        exchange mode: ``x`` ``[num_owned, F]`` (Tensor or ShardTensor) -> ``[num_owned, F']``.
        halo mode (``exchange=False``): ``x`` ``[num_nodes, F]`` -> ``[num_nodes, F']``.
        ``edge_attr`` / ``edge_weight``: one row per local edge (``edge_attr_global[g.edge_ids]``)
        or per edge into owned nodes (``g.edge_hop_ptr[1]`` rows).
        A layer returning a tuple (e.g. ``(x, edge_attr)``) has its first element sliced to owned
        rows in exchange mode; edge outputs cover the edges used (``g.owned_edge_index()`` in
        exchange mode, ``g.edge_index[:, :g.edge_hop_ptr[layers_left]]`` in halo mode).
    """

    def __init__(self, conv: nn.Module, hops: Optional[int] = None) -> None:
        super().__init__()
        if not isinstance(conv, nn.Module):
            raise TypeError(f"ShardedConv wraps a torch.nn.Module (a PyG MessagePassing layer), got {type(conv).__name__}")
        for m in conv.modules():
            for cls in type(m).__mro__:
                reason = _NON_LOCAL.get(cls.__name__) if cls.__module__.startswith("torch_geometric") else None
                if reason is not None:
                    raise ValueError(f"ShardedConv cannot make {type(m).__name__} ({cls.__name__}) exact: {reason}")
        for m in _message_passing_modules(conv):
            flow = getattr(m, "flow", "source_to_target")
            if flow != "source_to_target":
                raise ValueError(f"ShardedConv supports flow='source_to_target' (PyG's default), got {flow!r} "
                                 f"in {type(m).__name__}")
        if hops is not None and (isinstance(hops, bool) or not isinstance(hops, int) or hops < 1):
            raise ValueError(f"hops must be None or an int >= 1, got {hops!r}")
        self.conv = conv
        self.hops = hops

    def forward(
        self,
        x,
        g,
        edge_attr: Optional[torch.Tensor] = None,
        edge_weight: Optional[torch.Tensor] = None,
        *,
        exchange: bool = True,
        layers_left: Optional[int] = None,
        **kwargs,
    ):
        """Run the wrapped layer on this rank's part (collective in exchange mode).

        Args:
            x: owned rows ``[num_owned, F]`` (``exchange=True``) or all local rows
                ``[num_nodes, F]`` (``exchange=False``); a Tensor or a ShardTensor.
            g: the :class:`ShardedGraph`.
            edge_attr: optional edge features ``[E_local or E_owned, D]``, passed as ``edge_attr=``.
            edge_weight: optional scalar edge weights ``[E_local or E_owned]``, passed as
                ``edge_weight=`` (GCNConv, ...).
            exchange: exchange ghost rows first (``True``) or use ``x`` as all local rows.
            layers_left: halo mode only: hops still to run including this layer's; edges into
                rings ``>= layers_left`` are skipped (their targets would not be exact). ``None``:
                all local edges (``g.halo_hops``).
            **kwargs: passed to the layer.

        Returns:
            The layer's output: ``[num_owned, F']`` in exchange mode, ``[num_nodes, F']`` in halo
            mode (a tuple's first element is the node output).

        Raises:
            ValueError: wrong row counts, or the layer propagated more hops than available.
        """
        if exchange:
            x_ext = g.exchange(x)
            n_used = int(g.edge_hop_ptr[1])
            budget = 1
        else:
            if isinstance(x, msd.DTensor):
                x = x.to_local()
            if x.shape[0] != g.num_nodes:
                raise ValueError(
                    f"ShardedConv(exchange=False) expects all {g.num_nodes} local rows (owned + ghost; "
                    f"from g.exchange), got shape {tuple(x.shape)}"
                )
            x_ext = x
            hops = g.halo_hops if layers_left is None else int(layers_left)
            if not 1 <= hops <= g.halo_hops:
                raise ValueError(f"layers_left must be in [1, {g.halo_hops}] (g.halo_hops), got {layers_left}")
            n_used = int(g.edge_hop_ptr[hops])
            budget = hops
        ei = g.edge_index[:, :n_used]
        edge_attr = _slice_edges(edge_attr, g, n_used, "edge_attr")
        edge_weight = _slice_edges(edge_weight, g, n_used, "edge_weight")
        if edge_attr is not None:
            kwargs["edge_attr"] = edge_attr
        if edge_weight is not None:
            kwargs["edge_weight"] = edge_weight
        with _count_propagations(self.conv) as count, _global_gcn_norm(self.conv, g):
            out = self.conv(x_ext, ei, **kwargs)
        used = self.hops if self.hops is not None else count[0]
        if used > budget:
            where = ("exchange mode gives 1 hop: build the graph with halo_hops >= "
                     f"{used} and call with exchange=False" if exchange else
                     f"only {budget} hop(s) left (layers_left / g.halo_hops)")
            raise ValueError(
                f"ShardedConv: {type(self.conv).__name__} propagated {used} times in one call (a {used}-hop "
                f"layer), so its owned outputs need {used} hops of halo; {where}. If its propagate calls are "
                f"not chained, pass ShardedConv(conv, hops=1)"
            )
        if not exchange:
            return out
        if isinstance(out, tuple):
            return (out[0][: g.num_owned],) + tuple(out[1:])
        return out[: g.num_owned]


@contextlib.contextmanager
def _count_propagations(conv: nn.Module):
    """Count ``propagate`` calls of every ``MessagePassing`` inside ``conv`` while the block runs."""
    count = [0]

    def hook(module, inputs):
        count[0] += 1

    handles = [m.register_propagate_forward_pre_hook(hook) for m in _message_passing_modules(conv)]
    try:
        yield count
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def _global_gcn_norm(conv: nn.Module, g):
    """Swap PyG's ``gcn_norm`` for :func:`_gcn_norm_global` in the modules of ``conv``'s layers."""
    patched = []
    for m in _message_passing_modules(conv):
        mod = sys.modules.get(type(m).__module__)
        current = getattr(mod, "gcn_norm", None) if mod is not None else None
        if current is _GCN_NORM and all(mod is not p for p, _ in patched):
            patched.append((mod, current))

    def gcn_norm(edge_index, edge_weight=None, num_nodes=None, improved=False, add_self_loops=True,
                 flow="source_to_target", dtype=None):
        return _gcn_norm_global(g, edge_index, edge_weight, num_nodes, improved, add_self_loops, flow, dtype)

    for mod, _ in patched:
        mod.gcn_norm = gcn_norm
    try:
        yield
    finally:
        for mod, previous in reversed(patched):
            mod.gcn_norm = previous


def _gcn_norm_global(g, edge_index, edge_weight, num_nodes, improved, add_self_loops, flow, dtype):
    """PyG's ``gcn_norm`` with the *global* degree of every local node (ghosts' from their owners).

    Owned nodes have all their in-edges on this rank, so their degree is local; ghost rows get
    theirs from their owners by one :meth:`ShardedGraph.exchange` of the owned degrees (cached in
    ``g.cache`` when there are no edge weights: the degree then depends on the graph only).

    Returns:
        ``(edge_index with self loops, normalised edge weights)``, as ``gcn_norm``.
    """
    from torch_geometric.utils import add_remaining_self_loops, scatter

    if not isinstance(edge_index, torch.Tensor) or edge_index.is_sparse:
        raise TypeError("ShardedConv: gcn_norm on a sharded graph takes a [2, E] edge_index tensor")
    if flow != "source_to_target":
        raise ValueError(f"ShardedConv supports flow='source_to_target', got {flow!r}")
    n = g.num_nodes if num_nodes is None else int(num_nodes)
    if n != g.num_nodes:
        raise ValueError(f"ShardedConv: gcn_norm over {n} nodes, but the graph has {g.num_nodes} local rows")
    weighted = edge_weight is not None
    if add_self_loops:
        edge_index, edge_weight = add_remaining_self_loops(edge_index, edge_weight, 2.0 if improved else 1.0, n)
    w = edge_weight if edge_weight is not None else torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
    key = ("gcn_deg_inv_sqrt", bool(improved), bool(add_self_loops), w.dtype, w.device)
    dis = None if weighted else g.cache.get(key)
    if dis is None:
        deg = scatter(w, edge_index[1], dim=0, dim_size=n, reduce="sum")[: g.num_owned]
        deg = g.exchange(deg)
        dis = deg.pow(-0.5)
        dis = dis.masked_fill(dis == float("inf"), 0.0)
        if not weighted:
            g.cache[key] = dis
    return edge_index, dis[edge_index[0]] * w * dis[edge_index[1]]


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.SiLU(), nn.Linear(h, o))


class MeshGraphNetBlock(MessagePassing):
    r"""A MeshGraphNet processor block as a PyG layer (edge update, then node update).

    .. math::
        e'_{ij} = e_{ij} + \mathrm{MLP}_e([x_i, x_j, e_{ij}]), \qquad
        x'_i = x_i + \mathrm{MLP}_n([x_i, \textstyle\sum_{j} e'_{ij}])

    with ``j`` the sources of edges into ``i``. Works unchanged under :class:`ShardedConv`.

    Args:
        node_dim: node feature size ``F``.
        edge_dim: edge feature size ``D``.
        hidden: hidden width of both MLPs.

    Shapes:
        ``forward(x [N, F], edge_index [2, E], edge_attr [E, D]) -> (x' [N, F], e' [E, D])``.
    """

    def __init__(self, node_dim: int, edge_dim: int, hidden: int = 64) -> None:
        super().__init__(aggr="sum")
        self.edge_mlp = _mlp(2 * node_dim + edge_dim, hidden, edge_dim)
        self.node_mlp = _mlp(node_dim + edge_dim, hidden, node_dim)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor):
        e = self.edge_updater(edge_index, x=x, edge_attr=edge_attr)
        agg = self.propagate(edge_index, e=e, size=(x.shape[0], x.shape[0]))
        return x + self.node_mlp(torch.cat([x, agg], -1)), e

    def edge_update(self, x_i: torch.Tensor, x_j: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        return edge_attr + self.edge_mlp(torch.cat([x_i, x_j, edge_attr], -1))

    def message(self, e: torch.Tensor) -> torch.Tensor:
        return e
