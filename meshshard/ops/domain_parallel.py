r"""``DomainParallel``: run an unmodified model on sharded data, like DDP for domains.

Every rank holds the same parameters and one part of the data. Any model takes ShardTensor
inputs, ``DomainParallel(model)(*inputs)``, and runs on them as it is: each op is a ShardTensor op
that equals the single-process op on the whole tensors. A graph model takes a
:class:`ShardedGraph`, ``DomainParallel(model)(x, g, *args)``, and is called as
``model(x_local, edge_index_local, *args_local)`` on this rank's rows and edges; the owned rows of
the whole-graph result come back as a ShardTensor (``Shard(0)``, shard sizes = owned counts).
Nothing in PyG or in the model is patched: for the duration of the call, forward hooks on the
model's own ``MessagePassing`` instances swap in the rows the layer needs, and are removed
afterwards.

Graph models run in one of two modes, chosen per call (``exchange="auto"``):

* ``"per_layer"``: the model sees the owned rows and the edges into them; before every outermost
  ``MessagePassing`` layer a hook appends the ghost rows (one :meth:`ShardedGraph.exchange`), and
  after it cuts the output back to the owned rows. Each such layer may propagate once.
* ``"once"``: the input is exchanged once and the model runs on all local rows and edges of a
  graph built with ``halo_hops = k``; after ``k`` propagations the owned rows are still exact
  (see :mod:`meshshard.ops.conv`). ``"auto"`` takes it when the model's count of ``propagate``
  calls (learnt on the first call) fits in ``g.halo_hops``.

``gcn_norm`` layers get whole-graph degrees through :func:`meshshard.ops.conv.global_gcn_inputs`.
Every call runs under a :class:`meshshard.ops.graph_guard.GraphGuard`, which follows which rows of
each tensor are exact and refuses, naming the layer, any op this rank's part cannot compute
(another layer's ``gcn_norm``, a second hop, a reduction or attention over all nodes, a readout,
...): the model is exact or refused, never silently wrong.

Backward: every parameter's gradient is the SUM over ranks of each rank's share (for graph
models, the loss is a sum over ranks' rows; for ShardTensor ops, the shares follow
:mod:`meshshard.tensor._gradient_rule`, which keeps a contribution computed alike on every rank
on one rank only). On a 2-D ``("data", "domain")`` mesh the
sum runs over every rank: the domain ranks' sum rebuilds each sample's gradient, the data groups'
sum adds the samples (scale each loss by ``1 / samples in the step`` for their mean). Hooks that run when a parameter's
gradient has been accumulated pack the gradients into buckets (~25 MB, in reverse parameter order,
roughly the order backward produces them) and start an asynchronous all-reduce of each bucket as
soon as it is full, in the same bucket order on every rank; the end of backward waits for them. So
``loss.backward(); opt.step()`` keeps the replicas equal with no extra call.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import weakref

import torch
from torch import nn
from torch_geometric.nn import MessagePassing

from meshshard import distributed as msd
from meshshard._compile import eager_under_compile
from meshshard.distributed.fsdp import (fsdp_managed_parameters, fsdp_mesh, set_fsdp_gradient_sync,
                                        sum_fsdp_gradients)
from meshshard.ops.conv import _count_propagations, _gcn_adapters, refuse_non_local
from meshshard.ops.graph_guard import INF, GraphGuard

__all__ = ["DomainParallel", "sharded_forward"]

_MODES = ("auto", "per_layer", "once")
# PyG norms whose statistics run over all nodes of the graph: no rank sees them.
_NODE_STATISTICS = {"GraphNorm", "PairNorm", "MeanSubtractionNorm", "DiffGroupNorm", "GraphSizeNorm", "InstanceNorm"}
# Propagations per call of each module seen (structural: the same on every rank).
_PROPAGATIONS: "weakref.WeakKeyDictionary[nn.Module, int]" = weakref.WeakKeyDictionary()


def _refuse_global_statistics(module: nn.Module) -> None:
    for m in module.modules():
        name, pyg = type(m).__name__, type(m).__module__.startswith("torch_geometric")
        if pyg and (name in _NODE_STATISTICS or (name == "LayerNorm" and getattr(m, "mode", "node") == "graph")):
            raise ValueError(f"DomainParallel cannot make {name} exact: it normalises with statistics over all "
                             "nodes of the graph, which no rank holds; use a per-node norm (LayerNorm mode='node')")
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and (m.training or not m.track_running_stats):
            raise ValueError(f"DomainParallel cannot make {type(m).__name__} in training mode exact: it normalises "
                             "with the mean and variance of this rank's rows, not of the whole graph; call .eval() "
                             "on it (running statistics are per node) or use LayerNorm")


def _outer_message_passing(module: nn.Module):
    """``MessagePassing`` modules not nested inside another one (each is one exchange), each once
    (a layer shared by two submodules, as ARGVA's encoder, is hooked once)."""
    if isinstance(module, MessagePassing):
        return [module]
    found = [m for c in module.children() for m in _outer_message_passing(c)]
    return list({id(m): m for m in found}.values())


def _num_global_edges(g) -> int:
    """Edges of the whole graph: every edge is stored once as an edge into an owned node (collective)."""
    n = g.cache.get("num_global_edges")
    if n is None:
        owned = int(g.edge_hop_ptr[1])
        n = owned if g.world_size == 1 else int(msd.all_gather_sizes([owned], g.group).sum())
        g.cache["num_global_edges"] = n
    return n


def _local(t):
    return t.to_local() if isinstance(t, msd.DTensor) else t


def _localize(t, g, e_used: int, n_global_edges: int, exchange_nodes: bool, what: str, guard):
    """A model argument as this rank needs it: edge rows cut to the edges used, node rows extended
    (tagged for the guard: node rows, edge rows)."""
    t = _local(t)
    if not isinstance(t, torch.Tensor) or t.dim() == 0:
        return t
    rows, e_local, e_owned = t.shape[0], g.edge_index.shape[1], int(g.edge_hop_ptr[1])
    if rows == e_local or (rows == e_owned and e_used == e_owned):
        return guard.tag_edge(t[:e_used])
    if rows == n_global_edges:  # in the order of the global edge_index the graph was built from
        return guard.tag_edge(t.index_select(0, g.edge_ids[:e_used].to(t.device)))
    if rows == e_owned:
        raise ValueError(f"DomainParallel: {what} has one row per edge into owned nodes ({e_owned}), but "
                         f"exchange='once' runs on all {e_local} local edges; pass global or local-edge rows")
    if rows == g.num_owned:
        if exchange_nodes:
            return guard.tag_node(g.exchange(t), g.halo_hops)
        return guard.tag_node(t.view_as(t), 0)
    return t


def _check_inputs(module, x, g, args, kwargs) -> None:
    """The call's input contract, on this rank (raised on every rank together by the caller)."""
    name = type(module).__name__
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[0] != g.num_owned:
        raise ValueError(f"DomainParallel ({name}): rank {g.rank} expected x with {g.num_owned} owned rows, got "
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    for key, a in list(enumerate(args, 2)) + list(kwargs.items()):
        a = _local(a)
        if isinstance(a, torch.Tensor) and not a.is_floating_point() and a.dim() == 2 and a.shape[0] == 2 \
                and a.shape[1] not in (g.num_owned, 2):
            what = f"argument {key}" if isinstance(key, int) else repr(key)
            raise ValueError(
                f"DomainParallel cannot make {name} exact: {what} is a second edge_index ([2, {a.shape[1]}], "
                "global node ids); only the graph's own edges are localised. Build the ShardedGraph from all "
                "edges and tell them apart with an edge feature (e.g. an edge type) instead")


def sharded_forward(module: nn.Module, x, g, args=(), kwargs=None, *, exchange: str = "auto"):
    """Run ``module(x, edge_index, *args, **kwargs)`` on this rank's part of ``g`` (collective).

    What :class:`DomainParallel` runs on each rank, without its gradient hooks and ShardTensor
    output (``MeshGraphNet(..., graph=g)`` calls it); see the module docstring for the modes. The
    call runs under a :class:`meshshard.ops.graph_guard.GraphGuard`, which refuses any op this
    rank's part cannot compute exactly.

    Args:
        module: the model; called as ``module(x_local, edge_index_local, *args, **kwargs)``.
        x: owned rows ``[g.num_owned, F]`` (Tensor or ShardTensor).
        g: the :class:`ShardedGraph`.
        args, kwargs: further arguments; edge tensors (``[num_global_edges, *]`` in the order of the
            global edge list, ``[E_local, *]`` aligned with ``g.edge_index``, or ShardTensors of
            those) are cut to the local edges used; node tensors (owned rows: positions, normals,
            node types) get their ghost rows with the features (once, or before every layer).
        exchange: ``"auto"``, ``"per_layer"`` or ``"once"``.

    Returns:
        The output's owned rows ``[g.num_owned, *]`` (plain tensor; of a tuple output, every node
        tensor cut to owned rows, every edge tensor to the edges into owned nodes, the rest as
        they are).

    Raises:
        ValueError: (on every rank together) bad rows or a second ``edge_index`` argument; a
            refused layer (:class:`~meshshard.ops.graph_guard.GraphGuardError` names it), or more
            propagations than the halo covers.
    """
    if exchange not in _MODES:
        raise ValueError(f"exchange must be one of {_MODES}, got {exchange!r}")
    kwargs = dict(kwargs or {})
    x = _local(x)
    msd.run_together(lambda: _check_inputs(module, x, g, args, kwargs), "DomainParallel", g.group)
    refuse_non_local(module, "DomainParallel")
    _refuse_global_statistics(module)
    mode = exchange
    layers = _outer_message_passing(module)
    if mode == "auto":
        known = _PROPAGATIONS.get(module)  # None: try "once", learn the count, fall back if it does not fit
        fits = g.halo_hops > 1 and (known is None or known <= g.halo_hops)
        mode = "once" if fits or not layers else "per_layer"
    n_global_edges = _num_global_edges(g)
    once = mode == "once"
    guard = GraphGuard(g.halo_hops if once else 1, type(module).__name__, per_layer=not once,
                       owned=(g.num_owned, list(g.sizes), lambda: _graph_mesh(g)))
    e_used = g.edge_index.shape[1] if once else int(g.edge_hop_ptr[1])
    x_in = guard.tag_node(g.exchange(x), g.halo_hops) if once else guard.tag_node(x.view_as(x), 0)
    ei = guard.tag_index(g.edge_index[:, :e_used])
    given = (args, dict(kwargs))
    args = tuple(_localize(a, g, e_used, n_global_edges, once, f"argument {i + 2}", guard) for i, a in enumerate(args))
    kwargs = {k: _localize(v, g, e_used, n_global_edges, once, k, guard) for k, v in kwargs.items()}
    with _count_propagations(module) as count, _gcn_adapters(module, g, g.halo_hops if once else 1), \
            _exchange_per_layer(module, g, guard, once, torch.is_grad_enabled()), guard:
        out = module(x_in, ei, *args, **kwargs)
    _PROPAGATIONS[module] = count[0]
    if once and count[0] > g.halo_hops:
        if exchange == "auto" and layers:  # learnt now, the same on every rank: run again one exchange per layer
            return sharded_forward(module, x, g, *given, exchange="per_layer")
        first = out[0] if isinstance(out, tuple) else out
        if not (isinstance(first, torch.Tensor) and guard.node_exactness(first) is not None):
            raise ValueError(f"DomainParallel: the model propagated {count[0]} times in one call, but the graph has "
                             f"halo_hops={g.halo_hops}; build it with halo_hops >= {count[0]} or use "
                             "exchange='per_layer'")
    return _owned_outputs(out, g, guard, once, type(module).__name__)


def _owned_outputs(out, g, guard, once: bool, name: str):
    """Cut the model's outputs to owned rows (node tensors) and edges into owned nodes (edge tensors),
    refusing outputs that are not exact there."""
    rows = g.num_nodes if once else g.num_owned
    e_owned = int(g.edge_hop_ptr[1])

    def cut(t, first):
        if not isinstance(t, torch.Tensor):
            return t
        tag = guard._tag(t)
        kind = None if tag is None else tag.kind
        if kind == "edge" and t.dim() and not first:
            if tag.v < 0:
                guard.refuse("its edge output is not exact on the edges into owned nodes (it needs more hops "
                             "than the halo holds)", "Build the graph with a deeper halo_hops")
            return t[:e_owned]
        if kind == "partial" or (tag is not None and tag.v <= -INF // 2):
            guard.refuse("its output depends on a sum over the edges (or nodes) of the whole graph by an index that "
                         "is not edge_index, and a rank holds only its part", "Keep such sums outside the wrapped "
                         "model")
        if kind == "node" and tag.v < 0:
            guard.refuse(f"its owned outputs depend on nodes {(g.halo_hops if once else 1) - tag.v} hops "
                         "away, beyond the halo (a layer that propagates more than once, or normalises with "
                         "the degrees of its neighbours, e.g. PyG's gcn_norm on local edges)",
                         f"Build the graph with halo_hops >= the model's hops (more than {g.halo_hops if once else 1}) "
                         "and pass exchange='once' (or 'auto')")
        if t.dim() and t.shape[0] == rows and kind in (None, "node"):
            return t[: g.num_owned]
        if first:
            what = "edge" if kind == "edge" else f"{t.shape[0] if t.dim() else 'no'}-row"
            guard.refuse(f"its output is a {what} tensor of shape {tuple(t.shape)}, not one row per node",
                         "DomainParallel returns the owned rows of a per-node output; return node rows, or keep "
                         "the readout outside the wrapped model")
        return t

    with guard.paused():
        if isinstance(out, tuple):
            return tuple(cut(t, i == 0) for i, t in enumerate(out))
        return cut(out, True)


@contextlib.contextmanager
def _exchange_per_layer(module: nn.Module, g, guard, once: bool, grad_enabled: bool):
    """While the block runs, every outermost ``MessagePassing`` call gets owned + ghost rows of its
    node arguments (one exchange each) and returns owned rows; each may propagate once. In
    ``once`` mode only the recomputation check runs: a layer called with grad disabled while the
    model runs with grad enabled is being checkpointed (or is reversible) and would be run again
    in backward, after these hooks are gone."""
    calls, counts = {}, {}

    def exchange(v):
        if isinstance(v, torch.Tensor):
            ok = guard.node_exactness(v)
            if ok is not None and v.dim() and v.shape[0] == g.num_owned:
                return guard.tag_node(g.exchange(v), 1)
            return v
        if isinstance(v, tuple) and v:  # (x_source, x_target): only sources need ghosts
            return (exchange(v[0]),) + tuple(v[1:])
        if isinstance(v, dict):
            return {k: exchange(t) for k, t in v.items()}
        return v

    def check_recompute(m):
        if grad_enabled and not torch.is_grad_enabled():
            guard.layers.append(m)
            try:
                guard.refuse("it is run with gradients off inside a call with gradients on, so it will be run "
                             "again in backward (activation checkpointing such as DeepGCNLayer(ckpt_grad=True), "
                             "or a reversible block such as GroupAddRev), outside DomainParallel's call",
                             "Turn checkpointing / reversibility off for the wrapped model")
            finally:
                guard.layers.pop()

    def before(m, args, kwargs):
        check_recompute(m)
        if once:
            guard.layers.append(m)  # for the messages
            return None
        bound = inspect.signature(m.forward).bind(*args, **kwargs)
        a = bound.arguments
        with guard.paused():
            for key, v in list(a.items()):
                if isinstance(v, torch.Tensor) and v.dim() and guard.node_exactness(v) is not None and \
                        guard.node_exactness(v) < 0:
                    guard.layers.append(m)
                    guard.refuse(f"its input {key!r} is not exact on the owned rows", "Use exchange='once' with a "
                                 "deeper halo")
                a[key] = exchange(v)
        guard.layers.append(m)
        calls[m] = counts[m]
        return bound.args, bound.kwargs

    def after(m, args, kwargs, out):
        if once:
            guard.layers.pop()
            return None
        used = counts[m] - calls.pop(m)
        try:
            first = out[0] if isinstance(out, tuple) else out
            followed = isinstance(first, torch.Tensor) and guard.node_exactness(first) is not None
            if used > 1 and not followed:  # the guard follows hops exactly; else count propagate calls
                raise ValueError(
                    f"DomainParallel: {type(m).__name__} propagated {used} times in one call (a {used}-hop layer), "
                    "but exchange='per_layer' gives each layer 1 hop; build the graph with halo_hops >= the model's "
                    "total propagations and use exchange='once' (or 'auto')")

            def cut(t):
                if isinstance(t, dict):
                    return {k: cut(v) for k, v in t.items()}
                if not isinstance(t, torch.Tensor) or not t.dim() or t.shape[0] != g.num_nodes:
                    return t
                v = guard.node_exactness(t)
                if v is not None and v < 0:
                    guard.refuse("its owned outputs need more than the one hop of halo that exchange='per_layer' "
                                 "gives each layer (it propagates more than once, or normalises with the degrees of "
                                 "its neighbours, e.g. PyG's gcn_norm on local edges)",
                                 "Build the graph with halo_hops >= the model's hops and pass exchange='once' "
                                 "(or 'auto')")
                with guard.paused():
                    return guard.tag_node(t[: g.num_owned], 0)

            return (cut(out[0]),) + tuple(out[1:]) if isinstance(out, tuple) else cut(out)
        finally:
            guard.layers.pop()

    def counter(outer):
        def hook(_m, _inputs):
            counts[outer] += 1
        return hook

    handles = []
    for m in _outer_message_passing(module):
        counts[m] = 0
        handles.append(m.register_forward_pre_hook(before, with_kwargs=True))
        handles.append(m.register_forward_hook(after, with_kwargs=True))
        handles += [inner.register_propagate_forward_pre_hook(counter(m))
                    for inner in m.modules() if isinstance(inner, MessagePassing)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _is_compiled(module: nn.Module) -> bool:
    """Whether ``module`` is (or holds) a ``torch.compile``'d module (its ``_orig_mod``)."""
    return any(hasattr(m, "_orig_mod") and type(m).__name__ == "OptimizedModule" for m in module.modules())


def _digest(t: torch.Tensor) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{tuple(t.shape)}{t.dtype}".encode())
    h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


def _check_replicas_equal(module: nn.Module, group, skip=()) -> None:
    """Raise on every rank unless every parameter and buffer (but those whose ``id`` is in ``skip``:
    FSDP2's shards, different on each rank by design) is bitwise equal across ranks."""
    named = [(n, t) for n, t in list(module.named_parameters()) + list(module.named_buffers()) if id(t) not in skip]
    msd.check_same_across_ranks([len(named)], "DomainParallel", ["number of parameters and buffers"], group)
    table = msd.all_gather_sizes([_digest(t) for _, t in named], group)
    differs = (table != table[0]).any(0)
    if bool(differs.any()):
        i = int(torch.nonzero(differs)[0])
        ranks = [r for r in range(table.shape[0]) if table[r, i] != table[0, i]]
        raise msd.CollectiveMismatchError(
            f"DomainParallel: {named[i][0]!r} differs across ranks (ranks {ranks} differ from rank 0; "
            f"{int(differs.sum())} of {len(named)} parameters and buffers differ). Start every rank from the same "
            "values, e.g. meshshard.models.broadcast_parameters(module) before wrapping")


def _fsdp_reduction(module: nn.Module, mesh, group) -> list:
    """Set FSDP2's gradient reduction in ``module`` to the gradient rule's sum over the ranks
    DomainParallel sums over; return the parameters FSDP2 manages (empty without FSDP2).

    ``mesh``: DomainParallel's mesh (several dims: the sum runs over every rank) or ``None`` / 1-D
    (the sum runs over ``group``).
    """
    managed = fsdp_managed_parameters(module)
    if not managed:
        return []
    fmesh = fsdp_mesh(module)
    if mesh is not None and mesh.ndim > 1:
        names, fnames = tuple(mesh.mesh_dim_names or ()), tuple(fmesh.mesh_dim_names or ())
        sub = None
        if fnames and set(fnames) <= set(names) and [n for n in names if n in fnames] == list(fnames):
            sub = mesh[fnames[0] if len(fnames) == 1 else fnames]
        if sub is None or sub.mesh.tolist() != fmesh.mesh.tolist():
            raise ValueError(
                f"DomainParallel: FSDP2 (fully_shard) shards the parameters over a mesh with dims {fnames or None}, "
                f"which is not a sub-mesh of DomainParallel's mesh {names}. Shard over one of its dims, e.g. "
                "fully_shard(model, mesh=mesh['data']) and DomainParallel(model, mesh=mesh)")
        sum_fsdp_gradients(module, [mesh[n].get_group() for n in names if n not in fnames])
    else:
        ranks = msd.get_world_size(group) if msd.is_initialized() else 1
        if fmesh.size() != ranks:
            raise ValueError(
                f"DomainParallel: FSDP2 (fully_shard) shards the parameters over {fmesh.size()} ranks but the "
                f"gradient shares are summed over {ranks} domain ranks. For data x domain training pass the 2-D "
                "mesh: fully_shard(model, mesh=mesh['data']); DomainParallel(model, mesh=mesh) with "
                "mesh = init_device_mesh(device, (D, P), mesh_dim_names=('data', 'domain'))")
        sum_fsdp_gradients(module, [])
    return managed


class _GradReducer:
    """Sums parameters' gradient shares over the group during backward, in buckets.

    A hook on each parameter sees this backward's contribution before it is accumulated into
    ``.grad``; once a bucket's parameters are all accumulated, the contributions (plus any left
    unreduced by ``no_sync`` backwards) are all-reduced asynchronously, in the same bucket order on
    every rank, and the end of backward writes the sums into ``.grad``. Only contributions are
    reduced, so gradients zeroed, kept or accumulated between backwards (in any order relative
    to the forward) stay right.
    """

    def __init__(self, params, group, bucket_bytes: int) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.group = group
        self.buckets, filling, size = [], {}, []
        for p in reversed(self.params):  # backward reaches the last layers first
            key = (p.dtype, p.device)
            b = filling.get(key)
            if b is None or size[b] >= bucket_bytes:
                b = filling[key] = len(self.buckets)
                self.buckets.append([])
                size.append(0)
            self.buckets[b].append(p)
            size[b] += p.numel() * p.element_size()
        self.bucket_of = {p: b for b, ps in enumerate(self.buckets) for p in ps}
        self.handles = [p.register_hook(self._pre_hook(p)) for p in self.params]
        self.handles += [p.register_post_accumulate_grad_hook(self._on_grad) for p in self.params]
        self.mode = None          # None: not armed; "sync": reduce this backward; "local": no_sync
        self.pending = {}         # parameter -> contributions of no_sync backwards, not yet reduced
        self.contrib, self.had_grad = {}, {}

    def prepare(self, sync: bool) -> None:
        """Arm the hooks for the backward of a forward run with grad enabled: reduce (``sync``) or
        let it accumulate locally."""
        if not torch.is_grad_enabled():
            return
        if not (msd.is_initialized() and msd.get_world_size(self.group) > 1):
            self.mode = None
            return
        self.mode = "sync" if sync else "local"
        self.contrib, self.had_grad = {}, {}
        self.ready, self.next, self.works, self.queued = [0] * len(self.buckets), 0, [], False

    def _pre_hook(self, p):
        def hook(grad):
            if self.mode == "local":
                self.pending[p] = grad.detach().clone() if p not in self.pending else self.pending[p] + grad.detach()
            elif self.mode == "sync":
                self.contrib[p] = grad.detach()
                self.had_grad[p] = p.grad is not None
            return None
        return hook

    def remove(self) -> None:
        """Take the hooks off the parameters (the reducer does nothing afterwards)."""
        for h in self.handles:
            h.remove()
        self.handles, self.mode = [], None

    def reduce_now(self) -> None:
        """Reduce every bucket at once, in the order a backward launches them (so the call pairs
        with other ranks' backward reductions)."""
        if not (msd.is_initialized() and msd.get_world_size(self.group) > 1):
            return
        self.prepare(True)
        self._finish()

    def _on_grad(self, p) -> None:
        if self.mode != "sync":
            return
        if not self.queued:
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
            self.queued = True
        self.ready[self.bucket_of[p]] += 1
        # Launch in bucket order on every rank, so the ranks' collectives pair up.
        while self.next < len(self.buckets) and self.ready[self.next] == len(self.buckets[self.next]):
            self._launch(self.next)

    def _share(self, p) -> torch.Tensor:
        """What this rank adds to the sum for ``p``: this backward's contribution and the pending ones."""
        share = self.contrib.get(p)
        pending = self.pending.get(p)
        if share is None:
            share = pending if pending is not None else torch.zeros_like(p)
        elif pending is not None:
            share = share + pending
        return share

    def _launch(self, b: int) -> None:
        flat = torch.cat([self._share(p).reshape(-1) for p in self.buckets[b]])
        self.works.append((b, flat, msd.all_reduce_async(flat.clone(), group=self.group)))
        self.next = b + 1

    def _finish(self) -> None:
        while self.next < len(self.buckets):  # parameters this backward did not reach
            self._launch(self.next)
        for b, flat, work in self.works:
            total = work.wait()
            offset = 0
            for p in self.buckets[b]:
                n = p.numel()
                share, summed = flat[offset:offset + n].view_as(p), total[offset:offset + n].view_as(p)
                offset += n
                fresh = p in self.contrib and not self.had_grad[p] and p not in self.pending
                if p.grad is None or fresh:  # .grad holds exactly this backward's share: replace it
                    p.grad = summed.clone()
                else:
                    p.grad.add_(summed - share)
        self.mode, self.works, self.pending, self.contrib, self.had_grad = None, [], {}, {}, {}


def _graph_mesh(g):
    """The 1-D ``DeviceMesh`` over the ranks of ``g.group`` (made once per graph; the default mesh
    when the graph is on the default group)."""
    if getattr(g, "group", None) is None:
        return msd.default_device_mesh()
    mesh = g.cache.get("device_mesh")
    if mesh is None:
        mesh = g.cache["device_mesh"] = msd.DeviceMesh.from_group(g.group, msd.comm_device(g.group).type)
    return mesh


@contextlib.contextmanager
def _wrapped_for_call(module: nn.Module, graph, exchange: str = "auto"):
    """``DomainParallel(module, graph, exchange=exchange)`` for the duration of the ``with``
    block, its gradient hooks taken off the parameters afterwards (so a bare model stays bare).

    Args:
        module: the model (parameters equal on every rank: checked, collective).
        graph: the :class:`ShardedGraph` it runs on.
        exchange: ``"auto"``, ``"per_layer"`` or ``"once"``.

    Yields:
        The :class:`DomainParallel` wrapper.
    """
    dp = DomainParallel(module, graph, exchange=exchange)
    try:
        yield dp
    finally:
        dp._reducer.remove()


class DomainParallel(nn.Module):
    r"""Run an unmodified model on sharded data, with replicated parameters kept equal: the one door.

    Any model: ``DomainParallel(model)(*inputs)`` with ShardTensor inputs (an image sharded in
    height and width, a point cloud sharded by a k-d tree partition, several inputs with different
    layouts) calls ``model(*inputs)``; every op inside runs on ShardTensors and equals the
    single-process op on the whole tensors. Graph models: ``DomainParallel(model)(x, g, *args)``
    equals ``model(x_all, edge_index, *args_all)`` on the whole graph, restricted to this rank's
    owned rows (see the module docstring). ``model`` is used unchanged in both.

    Gradients: after ``loss.backward()`` of a loss computed on ShardTensors (the global loss),
    every parameter's ``.grad`` equals the single-process gradient, whatever the parameter touched
    (sharded rows, replicated values such as a Transolver's slice tokens, or both): each rank's
    share follows :mod:`meshshard.tensor._gradient_rule`, and the reducer sums the shares over the
    ranks once, in buckets that overlap backward. ``no_sync()`` accumulates shares and the next
    synchronised backward sums them.

    FSDP2: a model given to ``fully_shard`` (over ``mesh["data"]`` of a ``("data", "domain")``
    mesh passed as ``mesh``, or over the domain ranks themselves) keeps its parameters sharded;
    DomainParallel sets FSDP2's reduction to the same sum (divide factor 1, and an all-reduce of
    each reduce-scatter output over the other mesh dims), so each ``.grad`` shard is the
    single-process gradient's shard and ``no_sync()`` also stops FSDP2's reductions.

    Args:
        module: the model (``torch_geometric.nn.models.GCN``, a stack of ``MessagePassing``
            layers, :class:`meshshard.models.MeshGraphNet`, ...), called as
            ``module(x, edge_index, *args, **kwargs)``. Its parameters must be equal on every rank.
        graph: a default :class:`ShardedGraph`, used when the call passes none.
        mesh: the 1-D ``DeviceMesh`` of the domain ranks (default: the graph's group, or every
            rank); gradients are summed over its ranks and graph outputs live on it. Or a mesh of
            several dims over every rank: gradients are summed over ALL ranks; with a dim named
            ``"domain"`` (e.g. ``init_device_mesh("cpu", (2, 2), mesh_dim_names=("data",
            "domain"))``, data x domain parallel) graph outputs live on ``mesh["domain"]`` (each
            group of domain ranks shares one graph); any-model inputs may live on the whole mesh
            (an image split in height and width on a 2x2 mesh) or on a sub-mesh.
        exchange: ``"auto"`` (default), ``"per_layer"`` or ``"once"``.
        bucket_cap_mb: gradient bucket size in MB.

    Raises:
        ValueError: a layer no rank can compute exactly (``ChebConv``, ``DynamicEdgeConv``,
            ``GravNetConv``, ``DirGNNConv``, ``flow="target_to_source"``; at call time also
            BatchNorm in training mode and graph-wide norms such as ``GraphNorm``; at call time any
            op the guard refuses, as :class:`~meshshard.ops.graph_guard.GraphGuardError`); a mesh
            of several dims not holding every rank.
        TypeError: a DTensor parameter (``distribute_module`` already reduces those).
        ValueError: a model sharded by FSDP2 over a mesh that is neither a sub-mesh of ``mesh``
            nor the domain ranks themselves.
        CollectiveMismatchError: (every rank) parameters or buffers differ across ranks, naming
            the first one.

    Shapes:
        ``x``: ``[num_owned, F]`` Tensor or ShardTensor (``Shard(0)``). Edge arguments:
        ``[num_global_edges, *]`` in the order of the global edge list the graph was built from,
        or ``[E_local, *]`` aligned with ``g.edge_index`` (Tensor or ShardTensor). Output: a
        ShardTensor ``[N, F']`` with ``Shard(0)`` and shard sizes ``g.sizes`` (of a tuple output,
        the first element).
    """

    def __init__(self, module: nn.Module, graph=None, *, mesh=None, exchange: str = "auto",
                 bucket_cap_mb: float = 25.0) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"DomainParallel wraps a torch.nn.Module, got {type(module).__name__}")
        if exchange not in _MODES:
            raise ValueError(f"exchange must be one of {_MODES}, got {exchange!r}")
        refuse_non_local(module, "DomainParallel")
        self.module = module
        self.graph = graph
        self.exchange = exchange
        if mesh is None or mesh.ndim == 1:
            self.mesh = mesh
            self.group = mesh.get_group() if mesh is not None else getattr(graph, "group", None)
        else:
            if mesh.size() != msd.get_world_size():
                raise ValueError(f"DomainParallel: a {mesh.ndim}-D DeviceMesh must hold every rank "
                                 f"({msd.get_world_size()}), got {mesh.size()}")
            names = mesh.mesh_dim_names or ()
            # graph models live on the "domain" dim; ShardTensor models on the whole mesh
            self.mesh = mesh["domain"] if "domain" in names else mesh
            self.group = None  # the world: gradients summed over samples (data) and parts (domain)
        self._fsdp = _fsdp_reduction(module, self.mesh if mesh is None or mesh.ndim == 1 else mesh, self.group)
        managed = {id(p) for p in self._fsdp}
        for name, p in module.named_parameters():
            if isinstance(p, msd.DTensor) and id(p) not in managed:
                raise TypeError(f"DomainParallel: parameter {name!r} is a DTensor (distribute_module); its gradient "
                                "is already summed over the mesh in backward. Call the distributed module directly, "
                                "or wrap the plain module in DomainParallel instead")
        self._sync = True
        if msd.is_initialized() and msd.get_world_size(self.group) > 1:
            _check_replicas_equal(module, self.group, skip=managed)
        plain = [p for p in module.parameters() if id(p) not in managed]
        self._reducer = _GradReducer(plain, self.group, int(bucket_cap_mb * 2 ** 20))

    @contextlib.contextmanager
    def no_sync(self):
        """Within this context, backward accumulates local gradients without reducing them; the
        first backward after it sums everything accumulated since the gradients were zeroed."""
        previous, self._sync = self._sync, False
        if self._fsdp:
            set_fsdp_gradient_sync(self.module, False)
        try:
            yield
        finally:
            self._sync = previous
            if self._fsdp:
                set_fsdp_gradient_sync(self.module, previous)

    def reduce_gradients(self) -> None:
        """Sum the gradients accumulated locally (under :meth:`no_sync`, or none: zeros) over the
        group now (collective).

        For a rank with nothing to backpropagate in a step while others do: in data x domain
        training, the ranks of a data group with no sample in a short last step call this, and
        it pairs with the reductions the other ranks' backward starts, so nobody waits forever.
        Gradients already reduced are not summed again.

        Raises:
            RuntimeError: the model is sharded by FSDP2, whose reductions run inside its own backward
                hooks and cannot be paired from a rank that runs no backward.
        """
        if self._fsdp:
            raise RuntimeError("DomainParallel.reduce_gradients: the model is sharded by FSDP2 (fully_shard), whose "
                               "gradient reductions run only inside a backward; give every data rank a sample in "
                               "every step (e.g. drop the short last batch) instead")
        self._reducer.reduce_now()

    def forward(self, *inputs, **kwargs):
        """Run the model on this rank's part (collective).

        Two ways to call it, told apart by whether a :class:`ShardedGraph` is given:

        * ``dp(x, g, *args, **kwargs)`` (or ``dp(x, *args)`` with ``DomainParallel(model,
          graph=g)``): a graph model called as ``model(x, edge_index, *args, **kwargs)``.
          ``x``: owned rows ``[g.num_owned, F]``, a Tensor or a ShardTensor; further arguments are
          edge features as global or local edge rows (see the class docstring).
        * ``dp(*inputs, **kwargs)`` with no graph: any model, called as ``model(*inputs,
          **kwargs)`` on ShardTensors (grids, point clouds, several inputs with different
          layouts). At least one input must be a ShardTensor.

        Returns:
            Graph models: a ShardTensor of the owned rows (``Shard(0)``, sizes ``g.sizes``; of a
            tuple output, the first element as a ShardTensor and the rest local). Other models:
            what the model returns.

        Raises:
            TypeError: no ShardedGraph and no ShardTensor input (a plain local tensor would be
                computed on this rank's part only, silently).
        """
        graph_call = self._route(inputs, kwargs)
        if graph_call is None:  # any model on ShardTensors: under torch.compile, each ShardTensor op breaks the graph
            return self.module(*inputs, **kwargs)
        return self._graph_forward(*graph_call, kwargs)

    @eager_under_compile
    def _route(self, inputs, kwargs):
        """Tell the two calls apart, check them and arm the gradient hooks; ``None`` for any model,
        else ``(x, g, args)`` for a graph model (runs eagerly under torch.compile)."""
        from meshshard.graph import ShardedGraph
        from meshshard.tensor import ShardTensor

        if not inputs:
            raise TypeError("DomainParallel: call it with the model's inputs")
        if len(inputs) > 1 and isinstance(inputs[1], ShardedGraph):
            x, g, args = inputs[0], inputs[1], inputs[2:]
        elif self.graph is not None:
            x, g, args = inputs[0], self.graph, inputs[1:]
        else:
            leaves = [t for t in list(inputs) + list(kwargs.values())]
            flat = [t for v in leaves for t in (v if isinstance(v, (list, tuple)) else (v,))]
            if not any(isinstance(t, ShardTensor) for t in flat):
                raise TypeError(
                    "DomainParallel: no ShardedGraph and no ShardTensor input. Pass a graph model's graph as "
                    "dp(x, g, ...) (or DomainParallel(model, graph=g)), or give any other model its inputs as "
                    "ShardTensors (ShardTensor.from_local / scatter_tensor): plain tensors would be computed on "
                    "this rank's part alone")
            self._reducer.prepare(self._sync)
            return None
        if _is_compiled(self.module):
            raise TypeError(
                "DomainParallel: a graph model given as torch.compile(model) is refused: its per-layer ghost-row "
                "exchanges are forward hooks added for each call, which a compiled module would trace (and "
                "recompile) on every call. Wrap the plain model; torch.compile(DomainParallel(model)) runs a graph "
                "model eagerly and gives the eager results")
        return x, g, args

    @eager_under_compile
    def _graph_forward(self, x, g, args, kwargs):
        """A graph model's call (see :meth:`forward`); eager under torch.compile: its exchanges, hooks
        and ShardTensor output are not traceable."""
        from meshshard.tensor import ShardTensor

        mesh = x.device_mesh if isinstance(x, ShardTensor) else self.mesh
        if mesh is None and getattr(g, "group", None) is not None:  # the graph's ranks, not the world
            mesh = _graph_mesh(g)
        if mesh is not None and mesh.ndim != 1:
            raise ValueError("DomainParallel: a graph model on a multi-dim DeviceMesh needs a dim named 'domain' "
                             f"(the ranks sharing one graph); got {mesh.mesh_dim_names}")
        self._reducer.prepare(self._sync)
        out = sharded_forward(self.module, x, g, args, kwargs, exchange=self.exchange)
        first = out[0] if isinstance(out, tuple) else out
        st = ShardTensor.from_local(first, mesh, [msd.Shard(0)], sharding_shapes=list(g.sizes))
        return (st,) + tuple(out[1:]) if isinstance(out, tuple) else st
