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
``LEConv``, ``MFConv``, :class:`meshshard.models.MeshGraphNetBlock`; custom layers written the same way work too.
Layers that normalise by the symmetric degree through PyG's ``gcn_norm`` (tested: ``GCNConv``,
``LGConv``, ``SGConv``, ``APPNP``, ``TAGConv``, ``ARMAConv``, ``SSGConv``, ``MixHopConv``) also
need the degree of ghost (source) nodes. An adapter keyed by layer class (:data:`_GCN_FAMILY`) gets
every local node's *global* degree (owned nodes' from their local in-edges, ghosts' from their owners
by one exchange of the degree vector, cached per graph in ``g.cache`` when there are no edge weights)
and hands the layer, through a per-call forward pre-hook on that layer instance, an ``edge_index``
plus ``edge_weight`` for which the layer's own ``gcn_norm`` computes the whole-graph weights: every
node whose in-edges are not local (the outermost rings) gets a self loop weighted by its global
degree. Only those nodes' outputs change, and they are not exact anyway. PyG itself is not patched.
Layers that propagate ``K`` times per call (``SGConv``, ``APPNP``, ``TAGConv``, ...: ``K`` hops) need the
halo mode with ``K`` hops left; ``ShardedConv`` counts the ``propagate`` calls of each call and raises
when they exceed the hops available (1 in exchange mode). Layers that need what no rank sees are
refused when wrapped: ``ChebConv`` (normalises by out-degree), ``DynamicEdgeConv`` and
``GravNetConv`` (build their own kNN graph: use :func:`meshshard.ops.sharded_knn` and ``EdgeConv``),
``DirGNNConv`` (aggregates along reversed edges too) and any ``flow="target_to_source"`` layer.
Random layers (dropout in training mode) give equal results only when their randomness is off.

Parameters stay plain replicated tensors; with a loss that sums over owned nodes of all ranks,
each rank's parameter gradients are partial sums: call :func:`all_reduce_gradients` before the
optimizer step, or wrap the whole model in :class:`meshshard.DomainParallel`, which sums them
during backward.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import Iterable, Optional, Union

import torch
from torch import nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn import conv as pyg_conv

from meshshard import distributed as msd
from meshshard.ops.graph_guard import current_guard

__all__ = ["ShardedConv", "all_reduce_gradients"]

# moved to meshshard.models (layer 4); the old names keep working with a DeprecationWarning
_MOVED = {"MLP": "meshshard.models.mlp", "MeshGraphNetBlock": "meshshard.models.meshgraphnet"}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(f"meshshard.ops.conv.{name} moved to meshshard.models.{name}; import it from there",
                      DeprecationWarning, stacklevel=2)
        # by name, at first use: ops (layer 3) imports nothing of models (layer 4) on its own
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
# Layers that normalise with PyG's gcn_norm: class -> (improved, add_self_loops) of their call, or
# None when the instance does not normalise (normalize=False).
_GCN_FAMILY = {
    pyg_conv.GCNConv: lambda m: (m.improved, m.add_self_loops) if m.normalize else None,
    pyg_conv.LGConv: lambda m: (False, False) if m.normalize else None,
    pyg_conv.SGConv: lambda m: (False, m.add_self_loops),
    pyg_conv.APPNP: lambda m: (False, m.add_self_loops) if m.normalize else None,
    pyg_conv.TAGConv: lambda m: (False, False) if m.normalize else None,
    pyg_conv.ARMAConv: lambda m: (False, False),
    pyg_conv.SSGConv: lambda m: (False, m.add_self_loops),
    pyg_conv.MixHopConv: lambda m: (False, m.add_self_loops),
}


def refuse_non_local(module: nn.Module, who: str) -> None:
    """Raise if ``module`` holds a layer no rank can compute exactly (see the module docstring).

    Args:
        module: the module to inspect (all submodules).
        who: the wrapper's name, for the message.

    Raises:
        ValueError: naming the layer and the reason.
    """
    for m in module.modules():
        for cls in type(m).__mro__:
            reason = _NON_LOCAL.get(cls.__name__) if cls.__module__.startswith("torch_geometric") else None
            if reason is not None:
                raise ValueError(f"{who} cannot make {type(m).__name__} ({cls.__name__}) exact: {reason}")
    for m in _message_passing_modules(module):
        flow = getattr(m, "flow", "source_to_target")
        if flow != "source_to_target":
            raise ValueError(f"{who} supports flow='source_to_target' (PyG's default), got {flow!r} "
                             f"in {type(m).__name__}")


def all_reduce_gradients(module_or_params: Union[nn.Module, Iterable[torch.Tensor]], group=None) -> None:
    """Sum the gradients of replicated parameters over ranks, in place (collective; low-level).

    For a loop on plain tensors (``ShardedConv`` layers, ``MeshGraphNet(x, e, graph=g)``):
    :class:`meshshard.DomainParallel` sums the gradients in backward instead, so a wrapped model
    must not call it too.

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
        refuse_non_local(conv, "ShardedConv")
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
        with _count_propagations(self.conv) as count, _gcn_adapters(self.conv, g, 1 if exchange else hops):
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


def gcn_flags(module: nn.Module):
    """``(improved, add_self_loops)`` of a ``gcn_norm``-normalised layer, or ``None`` for other layers."""
    for cls in type(module).__mro__:
        if cls in _GCN_FAMILY:
            return _GCN_FAMILY[cls](module)
    return None


def global_gcn_inputs(g, edge_index, edge_weight, rings: int, improved: bool, add_self_loops: bool, dtype):
    """``(edge_index, edge_weight)`` for which PyG's ``gcn_norm`` on this rank gives whole-graph weights.

    ``edge_index`` holds the local edges into rings ``0..rings-1`` (every in-edge of those nodes),
    so their local degree is global; nodes of rings ``>= rings`` have no local in-edge, and each
    gets a self loop weighted by its global degree (owned degrees exchanged once: cached in
    ``g.cache`` without edge weights). ``gcn_norm`` keeps an existing self loop, so its degree of
    every local node is then the global one. Only the outer nodes' own outputs change (they are
    not exact anyway).

    Args:
        g: the :class:`ShardedGraph`.
        edge_index: ``[2, E]`` local ids, a prefix of ``g.edge_index``.
        edge_weight: ``[E]`` or ``None`` (ones).
        rings: rings whose in-edges ``edge_index`` holds (``>= 1``).
        improved, add_self_loops: the layer's ``gcn_norm`` arguments.
        dtype: dtype of the weights when ``edge_weight`` is ``None``.

    Returns:
        ``edge_index [2, E + n_outer]``, ``edge_weight [E + n_outer]``.
    """
    from torch_geometric.utils import add_remaining_self_loops, scatter

    if not isinstance(edge_index, torch.Tensor) or edge_index.is_sparse:
        raise TypeError("sharded gcn_norm layers take a [2, E] edge_index tensor")
    weighted = edge_weight is not None
    w = edge_weight if weighted else torch.ones(edge_index.shape[1], dtype=dtype, device=edge_index.device)
    key = ("gcn_global_degree", bool(improved), bool(add_self_loops), w.dtype, w.device)
    deg = None if weighted else g.cache.get(key)
    if deg is None:
        ei, wl = edge_index, w
        if add_self_loops:
            ei, wl = add_remaining_self_loops(ei, wl, 2.0 if improved else 1.0, g.num_nodes)
        deg = g.exchange(scatter(wl, ei[1], dim=0, dim_size=g.num_nodes, reduce="sum")[: g.num_owned])
        if not weighted:
            g.cache[key] = deg
    outer_key = ("gcn_outer_nodes", int(rings), edge_index.device)
    outer = g.cache.get(outer_key)
    if outer is None:
        outer = torch.nonzero(g.node_hop >= rings).view(-1).to(edge_index.device)
        g.cache[outer_key] = outer
    loops = torch.stack([outer, outer])
    return torch.cat([edge_index, loops], 1), torch.cat([w, deg[outer]])


@contextlib.contextmanager
def _gcn_adapters(conv: nn.Module, g, rings: int):
    """While the block runs, feed every normalising ``gcn_norm`` layer in ``conv`` global-degree
    inputs (:func:`global_gcn_inputs`) through a forward pre-hook on that instance."""

    def hook(module, args, kwargs):
        flags = gcn_flags(module)
        if flags is None:
            return None
        bound = inspect.signature(module.forward).bind(*args, **kwargs)
        a = bound.arguments
        x = a["x"][0] if isinstance(a["x"], tuple) else a["x"]
        guard = current_guard()
        with guard.paused() if guard is not None else contextlib.nullcontext():
            a["edge_index"], a["edge_weight"] = global_gcn_inputs(
                g, a["edge_index"], a.get("edge_weight"), rings, flags[0], flags[1], x.dtype)
        if guard is not None:  # every local node's weighted degree is complete with these edges
            guard.tag_index(a["edge_index"], complete_weights=rings + 1)
        return bound.args, bound.kwargs

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True)
               for m in _message_passing_modules(conv) if gcn_flags(m) is not None]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
