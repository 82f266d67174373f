r"""Sharded message passing: run any PyG ``MessagePassing`` layer on a :class:`ShardedGraph`.

Each rank computes its owned nodes' outputs from its owned + ghost rows and the local edges
(every edge into an owned node is local), so the result equals the layer on the whole graph.

Two modes, both exact:

* **exchange per layer** (default): ``ShardedConv(conv)(x_owned, g)`` exchanges ghost rows, runs
  the layer on the local edges into owned nodes, returns ``[num_owned, *]``.
* **k-hop halo**: build the graph with ``halo_hops=k``, exchange once, then run ``k`` layers on
  all local rows with ``exchange=False`` and no communication in between; after layer ``l`` the
  rows with ``g.node_hop <= k - l`` are exact (owned rows after all ``k``)::

      x = g.exchange(x_owned)                              # once
      for l, conv in enumerate(convs):
          x = act(ShardedConv(conv)(x, g, exchange=False, layers_left=k - l))
      out = x[: g.num_owned]

  ``layers_left`` (optional) skips the edges into rings whose rows would not be exact anyway.

Parameters stay plain replicated tensors; with a loss that sums over owned nodes of all ranks,
each rank's parameter gradients are partial sums: call :func:`all_reduce_gradients` before the
optimizer step.
"""
from __future__ import annotations

from typing import Iterable, Optional, Union

import torch
from torch import nn
from torch_geometric.nn import GCNConv, MessagePassing

from meshshard import distributed as msd

__all__ = ["ShardedConv", "MeshGraphNetBlock", "all_reduce_gradients"]


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
    if t.shape[0] < n_used or t.shape[0] not in allowed:
        raise ValueError(
            f"ShardedConv: {what} has {t.shape[0]} rows; expected one row per local edge "
            f"({g.edge_index.shape[1]}, aligned with g.edge_index, e.g. edge_attr_global[g.edge_ids]) "
            f"or per edge into owned nodes ({int(g.edge_hop_ptr[1])})"
        )
    return t[:n_used]


class ShardedConv(nn.Module):
    r"""Wrap a ``torch_geometric.nn.MessagePassing`` layer to run on a :class:`ShardedGraph`.

    ``ShardedConv(conv)(x_owned, g)`` equals ``conv(x, edge_index)[g.owned_ids]`` on the whole
    graph, forward and backward. ``GCNConv``'s symmetric normalisation needs the degree of ghost
    (source) nodes too: it is computed from owned nodes' in-edges and exchanged once per graph
    (cached in ``g.cache`` when there are no edge weights), then passed as normalised edge
    weights. Layers that propagate several times per call (``SGConv``, ``APPNP``, ...) need the
    halo mode with ``halo_hops`` >= their hop count; layers must run deterministically (no
    dropout) for the results to be equal.

    Args:
        conv: the layer; its parameters are used as they are (replicated on every rank).

    Shapes (forward):
        exchange mode: ``x`` ``[num_owned, F]`` (Tensor or ShardTensor) -> ``[num_owned, F']``.
        halo mode (``exchange=False``): ``x`` ``[num_nodes, F]`` -> ``[num_nodes, F']``.
        ``edge_attr`` / ``edge_weight``: one row per local edge (``edge_attr_global[g.edge_ids]``).
        A layer returning a tuple (e.g. ``(x, edge_attr)``) has its first element sliced to owned
        rows in exchange mode; edge outputs cover the edges used (``g.owned_edge_index()`` in
        exchange mode).
    """

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        flow = getattr(conv, "flow", "source_to_target")
        if flow != "source_to_target":
            raise ValueError(f"ShardedConv supports flow='source_to_target' (PyG's default), got {flow!r}")
        self.conv = conv

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
        """Run the wrapped layer on this rank's part.

        Args:
            x: owned rows (``exchange=True``) or all local rows (``exchange=False``).
            g: the :class:`ShardedGraph`.
            edge_attr: optional edge features, passed as ``edge_attr=``.
            edge_weight: optional scalar edge weights, passed as ``edge_weight=`` (GCNConv, ...).
            exchange: exchange ghost rows first (``True``) or use ``x`` as all local rows.
            layers_left: halo mode only: layers still to run including this one; edges into rings
                ``>= layers_left`` are skipped (their targets would not be exact).
            **kwargs: passed to the layer.
        """
        if exchange:
            x_ext = g.exchange(x)
            n_used = int(g.edge_hop_ptr[1])
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
        ei = g.edge_index[:, :n_used]
        edge_attr = _slice_edges(edge_attr, g, n_used, "edge_attr")
        edge_weight = _slice_edges(edge_weight, g, n_used, "edge_weight")
        if edge_attr is not None:
            kwargs["edge_attr"] = edge_attr
        out = self._call(x_ext, ei, g, edge_weight, kwargs)
        if not exchange:
            return out
        if isinstance(out, tuple):
            return (out[0][: g.num_owned],) + tuple(out[1:])
        return out[: g.num_owned]

    def _call(self, x, ei, g, edge_weight, kwargs):
        conv = self.conv
        if isinstance(conv, GCNConv) and conv.normalize:
            ei, norm = _gcn_norm_global(conv, x, ei, g, edge_weight)
            conv.normalize = False  # we pass the globally normalised weights instead
            try:
                return conv(x, ei, norm, **kwargs)
            finally:
                conv.normalize = True
        if edge_weight is not None:
            kwargs["edge_weight"] = edge_weight
        return conv(x, ei, **kwargs)


def _gcn_norm_global(conv, x: torch.Tensor, ei: torch.Tensor, g, edge_weight: Optional[torch.Tensor]):
    """``gcn_norm`` with the *global* degree of every local node (ghosts' from their owners)."""
    from torch_geometric.utils import add_remaining_self_loops, scatter

    n = x.shape[0]
    fill = 2.0 if conv.improved else 1.0
    if conv.add_self_loops:
        ei, edge_weight = add_remaining_self_loops(ei, edge_weight, fill, n)
    w = edge_weight if edge_weight is not None else torch.ones(ei.shape[1], dtype=x.dtype, device=ei.device)
    key = ("gcn_deg_inv_sqrt", conv.improved, conv.add_self_loops, x.dtype, x.device)
    dis = g.cache.get(key) if edge_weight is None else None
    if dis is None:
        # Owned nodes have all their in-edges here; ghosts get their degree from the owner.
        deg = scatter(w, ei[1], dim=0, dim_size=n, reduce="sum")[: g.num_owned]
        deg = g.exchange(deg)
        dis = deg.pow(-0.5)
        dis = dis.masked_fill(dis == float("inf"), 0.0)
        if edge_weight is None:
            g.cache[key] = dis
    return ei, dis[ei[0]] * w * dis[ei[1]]


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
