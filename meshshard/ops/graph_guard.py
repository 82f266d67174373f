r"""Watch a graph model's ops on one rank's part and refuse what that part cannot compute exactly.

Inside :class:`meshshard.DomainParallel` a graph model runs on plain local tensors: the owned and
ghost rows of its node tensors and the local edges. An op that needs more of the graph than the
rank holds (the degree of a ghost node, an attention or a pooling over all nodes, a second hop
without an exchange) would compute on part of it without anyone noticing. :class:`GraphGuard` is a
``TorchFunctionMode`` that follows, for every tensor derived from the model's inputs, which of its
rows are exact, and raises :class:`GraphGuardError` (a ``ValueError``) at the first op whose result
could not be the single-process one. Nothing in PyG or in the model is patched; the rules apply to
torch ops, so layers that are not PyG's (``x[edge_index]`` gathers and ``index_add_`` sums) are
followed the same way.

The bookkeeping. Local node rows are in rings: 0 the owned rows, ``r`` the nodes ``r`` hops out;
the rank holds rings ``0..K`` and every edge into rings ``0..K-1`` (``K = 1`` with one exchange per
layer, ``K = halo_hops`` with one exchange per call). Each tracked tensor carries a tag:

* a **node** tensor (rows are local nodes) is exact on rings ``<= v``: after the exchange ``v = K``;
* an **edge** tensor (rows are local edges) is exact on the edges into rings ``<= v``;
* an **index** tensor is ``edge_index`` or a part of it (``src`` = row 0, ``dst`` = row 1, ``ei``
  both, ``any`` anything computed from them).

Rules: gathering a node tensor along edges (``x[edge_index[0]]``, ``index_select``) gives an edge
tensor exact on the edges into rings ``<= v - 1`` (``v`` for a gather by targets); summing edge rows
into their targets (``scatter_add_``, ``index_add_``, ``scatter_reduce``, ...) gives a node tensor
exact on rings ``<= min(v, K - 1)`` (every in-edge of those rings is local); summing into sources
(out-degrees) on rings ``<= K - 2``; any other op takes the smallest ``v`` of its inputs. The owned
output needs ``v >= 0``: a layer normalising by ``gcn_norm`` on local edges (the degree of a ghost
source is incomplete), or two hops with one exchange, ends at ``v = -1`` and is refused, naming the
layer. Refused at once, whatever ``v``: a reduction, sort, softmax, matrix product or attention over
the node (or edge) axis, a pooling of node rows by an index that is not ``edge_index`` (``batch``),
rows picked by position (a permutation, a slice), node values read into Python (``tolist``), a
sparse adjacency built from ``edge_index``, and a per-node table that is not one of the graph's node
tensors indexed by local node ids (an embedding of all nodes). The guard needs no communication: it
decides from the ops alone, the same on every rank, so every rank raises at the same op.
"""
from __future__ import annotations

import contextlib
import itertools
import re
from typing import Optional

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["GraphGuard", "GraphGuardError", "current_guard"]

INF = 1 << 30
_ATTR = "_meshshard_graph_tag"
_ACTIVE: list = []
_IDS = itertools.count()

_GATHERS = {"index_select", "__getitem__", "gather", "take_along_dim"}
_SCATTERS = {"scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_add", "index_add_",
             "index_reduce", "index_reduce_", "scatter", "scatter_", "index_copy", "index_copy_", "index_put",
             "index_put_", "__setitem__"}
_FACTORIES = {"new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "zeros_like", "ones_like",
              "empty_like", "full_like", "rand_like", "randn_like", "randint_like"}
# name -> (positional index of the dim argument, default dim; None = every dim)
_REDUCTIONS = {
    "sum": (1, None), "nansum": (1, None), "mean": (1, None), "nanmean": (1, None), "prod": (1, None),
    "max": (1, None), "min": (1, None), "amax": (1, None), "amin": (1, None), "aminmax": (None, None),
    "argmax": (1, None), "argmin": (1, None), "std": (1, None), "var": (1, None), "std_mean": (1, None),
    "var_mean": (1, None), "norm": (2, None), "logsumexp": (1, None), "median": (1, None),
    "nanmedian": (1, None), "count_nonzero": (1, None), "any": (1, None), "all": (1, None),
    "softmax": (1, -1), "log_softmax": (1, -1), "sort": (1, -1), "argsort": (1, -1), "msort": (None, 0),
    "topk": (2, -1), "kthvalue": (2, -1), "mode": (1, -1), "quantile": (2, None), "nanquantile": (2, None),
    "cumsum": (1, None), "cumprod": (1, None), "cummax": (1, None), "cummin": (1, None),
    "logcumsumexp": (1, None), "unique": (None, None), "unique_consecutive": (None, None),
    "tolist": (None, None), "numpy": (None, None), "histc": (None, None), "bincount": (None, None),
    "normalize": (2, 1), "vector_norm": (2, None),
}
_MATMULS = {"mm", "matmul", "__matmul__", "__rmatmul__", "bmm", "addmm", "baddbmm", "addbmm", "linear",
            "bilinear", "tensordot", "dot", "inner", "outer", "einsum"}
_SPARSE = {"sparse_coo_tensor", "sparse_csr_tensor", "sparse_csc_tensor", "sparse_compressed_tensor", "to_sparse",
           "to_sparse_csr", "to_sparse_csc", "to_sparse_coo", "_convert_indices_from_coo_to_csr"}
_ATTENTION = {"scaled_dot_product_attention", "multi_head_attention_forward"}
_RANDOM_PERMS = {"randperm"}
# ops that keep what an index tensor means (edge_index, its rows)
_SHAPE_OPS = {"cat", "stack", "view", "reshape", "contiguous", "to", "clone", "long", "int", "expand", "expand_as",
              "view_as", "unsqueeze", "squeeze", "flatten", "detach", "type", "type_as", "repeat", "broadcast_to"}


class GraphGuardError(ValueError):
    """An op of a wrapped graph model that this rank's part of the graph cannot compute exactly."""


class _Tag:
    __slots__ = ("guard", "kind", "v", "n", "role", "cu", "ct")

    def __init__(self, guard, kind, v=INF, n=-1, role=None, cu=0, ct=0):
        self.guard, self.kind, self.v, self.n, self.role, self.cu, self.ct = guard, kind, v, n, role, cu, ct


def current_guard() -> Optional["GraphGuard"]:
    """The innermost active guard, or ``None``."""
    return _ACTIVE[-1] if _ACTIVE else None


def _flat(obj, depth=0):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)) and depth < 2:
        for o in obj:
            yield from _flat(o, depth + 1)
    elif isinstance(obj, dict) and depth < 2:
        for o in obj.values():
            yield from _flat(o, depth + 1)


class GraphGuard(TorchFunctionMode):
    """Follow a graph model's ops on this rank's part and refuse any it cannot compute exactly.

    Args:
        rings: ``K``, the rings of ghost rows the local tensors hold (see the module docstring).
        model: the model's name, for messages.
        per_layer: one exchange per ``MessagePassing`` layer: outside those layers the node
            tensors are owned rows only, so gathers and sums along ``edge_index`` there are refused.
        owned: ``(num_owned, sizes, mesh_fn)``: with ``per_layer``, an op over the node axis of
            owned rows outside the layers (a mean over all nodes, a softmax, an attention or a
            contraction over them: a global token, a Transolver block) runs on ShardTensors of those
            rows instead of being refused: exact, gradients included.

    Use :meth:`tag_node` / :meth:`tag_index` / :meth:`tag_edge` on the inputs, run the model inside
    ``with guard:``, and :meth:`paused` around the wrapper's own ops (exchanges, cuts).
    """

    def __init__(self, rings: int, model: str, per_layer: bool, owned=None) -> None:
        super().__init__()
        self.rings, self.model, self.per_layer = int(rings), model, per_layer
        self.owned = owned  # (num_owned, every rank's owned count, a callable giving the graph's 1-D DeviceMesh)
        self.id = next(_IDS)
        self.layers: list = []  # outermost MessagePassing calls running (per-layer mode)
        self._paused = 0

    # ------------------------------------------------------------------ tags
    def _tag(self, t) -> Optional[_Tag]:
        tag = getattr(t, _ATTR, None) if isinstance(t, torch.Tensor) else None
        return tag if tag is not None and tag.guard == self.id else None

    def _set(self, t, tag: _Tag) -> None:
        try:
            setattr(t, _ATTR, tag)
        except (AttributeError, RuntimeError):  # a tensor that takes no attributes: left untracked
            pass

    def tag_node(self, t: torch.Tensor, v: int) -> torch.Tensor:
        """Mark ``t`` as node rows exact on rings ``<= v``; returns ``t``."""
        self._set(t, _Tag(self.id, "node", v, t.shape[0] if t.dim() else -1))
        return t

    def tag_edge(self, t: torch.Tensor, v: int = INF) -> torch.Tensor:
        """Mark ``t`` as edge rows exact on the edges into rings ``<= v``; returns ``t``."""
        self._set(t, _Tag(self.id, "edge", v, t.shape[0] if t.dim() else -1))
        return t

    def tag_index(self, t: torch.Tensor, complete_weights: Optional[int] = None) -> torch.Tensor:
        """Mark ``t`` as ``edge_index`` (local ids), whose edges into rings ``0..K-1`` are all local;
        ``complete_weights``: rings whose sum of (untracked) edge weights is complete (an
        ``edge_index`` built by :func:`meshshard.ops.conv.global_gcn_inputs`)."""
        cu = self.rings if complete_weights is None else int(complete_weights)
        self._set(t, _Tag(self.id, "index", role="ei", cu=cu, ct=self.rings))
        return t

    def node_exactness(self, t) -> Optional[int]:
        """``v`` of a tracked node tensor (``None``: untracked)."""
        tag = self._tag(t)
        return tag.v if tag is not None and tag.kind == "node" else None

    @contextlib.contextmanager
    def paused(self):
        """The wrapper's own ops inside: not followed."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def __enter__(self):
        _ACTIVE.append(self)
        return super().__enter__()

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        return super().__exit__(*exc)

    # ------------------------------------------------------------------ refusal
    def where(self) -> str:
        """The name of the layer running now (the innermost one entered), else the model's."""
        return type(self.layers[-1]).__name__ if self.layers else self.model

    def refuse(self, what: str, fix: str):
        """Raise :class:`GraphGuardError` naming the layer (:meth:`where`), what it did and the fix."""
        raise GraphGuardError(f"DomainParallel cannot make {self.where()} exact: {what}. {fix}")

    def _global(self, func_name: str, what: str):
        once = "" if self.per_layer else "Pass exchange='per_layer' (such ops then run exactly on the owned rows " \
            "between the layers), or wrap"
        self.refuse(f"{what} ({func_name}) runs over the nodes (or edges) of the whole graph, and a rank holds "
                    "only its part", (once or "Wrap") + " the graph layers and the whole-graph part separately: "
                    "h = DomainParallel(gnn)(x, g) is a ShardTensor of the owned rows, and DomainParallel(rest)(h) "
                    "runs means, softmaxes and attention over all nodes exactly (every gradient summed once); or "
                    "keep such ops outside the model, on the gathered output (ShardedGraph.all_gather)")

    # ------------------------------------------------------------------ the mode
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if self._paused or name == "__get__":
            return func(*args, **kwargs)
        tensors = list(_flat(args)) + list(_flat(kwargs))
        tags = [(t, self._tag(t)) for t in tensors]
        tags = [(t, g) for t, g in tags if g is not None]
        if name in _SPARSE and any(g.kind == "index" for _, g in tags):
            self.refuse(f"it builds a sparse adjacency matrix from edge_index ({name})",
                        "DomainParallel follows message passing through gathers and sums along edge_index only; "
                        "write the layer with propagate / index_select + scatter")
        if name in _RANDOM_PERMS:
            return func(*args, **kwargs)  # a random permutation is checked where it indexes node rows
        if not tags:
            if name in _GATHERS or name in _SCATTERS:
                return func(*args, **kwargs)
            return func(*args, **kwargs)
        if name in _FACTORIES:
            return func(*args, **kwargs)
        if name in _GATHERS:
            return self._gather(func, name, args, kwargs)
        if name in _SCATTERS:
            return self._scatter(func, name, args, kwargs)
        values = [(t, g) for t, g in tags if g.kind != "index"]
        if values:
            try:
                self._check_global(name, args, kwargs, values)
            except GraphGuardError:
                if not self._can_shard(tags):
                    raise
                return self._on_shards(func, args, kwargs, values)
        out = func(*args, **kwargs)
        self._propagate(name, args, out, tags)
        return out

    # ------------------------------------------------------------------ whole-graph ops on ShardTensors
    def _can_shard(self, tags) -> bool:
        """An op over the node axis that :meth:`_on_shards` computes exactly: outside the layers in
        per-layer mode, every tracked input a node tensor of exactly the owned rows."""
        if self.owned is None or not self.per_layer or self.layers:
            return False
        n = self.owned[0]
        return all(g.kind == "node" and g.n == n and g.v >= 0 for _, g in tags) and n > 0

    def _on_shards(self, func, args, kwargs, values):
        """Run ``func`` with the node tensors as ShardTensors of the owned rows (sharded along their
        node axis): the ShardTensor op is the whole-graph op. A sharded result comes back as owned
        rows; a replicated one (a token, a statistic) as a plain tensor whose gradient is summed
        over the ranks in backward (each rank's uses give a share)."""
        from torch.utils import _pytree as pytree

        from meshshard.distributed import Partial, Replicate, Shard, validation
        from meshshard.tensor import ShardTensor

        n, sizes, mesh_fn = self.owned
        mesh = mesh_fn()
        node = {id(t) for t, _ in values}

        def to_shards(t):
            if not (isinstance(t, torch.Tensor) and id(t) in node):
                return t
            axes = [d for d in range(t.dim()) if t.shape[d] == n]
            if len(axes) != 1:
                self._global(getattr(func, "__name__", "op"), f"an op over a tensor of shape {tuple(t.shape)} whose "
                             "node axis is ambiguous")
            with validation(False):  # the graph's sizes: the same on every rank
                return ShardTensor.from_local(t, mesh, (Shard(axes[0]),), sharding_shapes=list(sizes))

        def back(o):
            if not isinstance(o, ShardTensor):
                return o
            if all(isinstance(p, Replicate) for p in o.placements):
                return o.to_local(grad_placements=(Partial(),))
            local = o.to_local()
            self._set(local, _Tag(self.id, "node", 0, n))
            return local

        args2, kwargs2 = pytree.tree_map(to_shards, (args, kwargs))
        try:
            out = func(*args2, **kwargs2)
        except NotImplementedError as e:  # no exact ShardTensor op for it: refused, as before
            self._global(getattr(func, "__name__", "op"), f"an op over the node axis that ShardTensor does not "
                         f"compute ({e})")
        return pytree.tree_map(back, out)

    # ------------------------------------------------------------------ rules
    def _check_global(self, name, args, kwargs, values):
        for t, g in values:
            if g.n <= 1 or g.kind == "partial":
                continue
            if name in _REDUCTIONS and t is (args[0] if args else None):
                pos, default = _REDUCTIONS[name]
                dim = kwargs.get("dim", args[pos] if pos is not None and len(args) > pos else default)
                if isinstance(dim, torch.Tensor) or (name in ("max", "min") and len(args) > 1
                                                     and isinstance(args[1], torch.Tensor)):
                    continue  # elementwise max/min of two tensors
                dims = range(t.dim()) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
                if t.numel() > 1 and any(t.shape[d] == g.n for d in dims):
                    self._global(name, "a reduction, sort or softmax over the node axis")
        if name in _MATMULS:
            self._check_matmul(name, args, values)
        if name in _ATTENTION:
            key = args[1] if len(args) > 1 else None
            for t, g in values:
                if t is key and g.n > 1 and key.dim() >= 1 and (key.shape[0] == g.n or
                                                                  (key.dim() >= 2 and key.shape[-2] == g.n)):
                    self._global(name, "attention over all nodes")
        if name == "batch_norm" and (len(args) < 6 or args[5]) and any(t is args[0] for t, _ in values):
            self._global(name, "batch statistics over the node axis")

    def _check_matmul(self, name, args, values):
        tagged = {id(t): g for t, g in values}
        if name == "einsum":
            eq = args[0].replace(" ", "")
            ops = args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:]
            if "->" not in eq or "." in eq:
                if any(id(o) in tagged for o in ops):
                    self._global(name, "an einsum over tracked node rows")
                return
            ins, out = eq.split("->")
            for spec, o in zip(ins.split(","), ops):
                g = tagged.get(id(o))
                if g is not None and any(c not in out and o.shape[i] == g.n for i, c in enumerate(spec)):
                    self._global(name, "a contraction over the node axis")
            return
        a_b = {"addmm": (1, 2), "baddbmm": (1, 2), "addbmm": (1, 2), "__rmatmul__": (1, 0)}.get(name, (0, 1))
        a = args[a_b[0]] if len(args) > a_b[0] else None
        b = args[a_b[1]] if len(args) > a_b[1] else None
        ga, gb = tagged.get(id(a)), tagged.get(id(b))
        if name == "linear":  # x @ W.T: contracts x's last dim and W's last dim
            if (ga is not None and a.shape[-1] == ga.n) or (gb is not None and b.shape[-1] == gb.n):
                self._global(name, "a product over the node axis")
            return
        if ga is not None and isinstance(a, torch.Tensor) and a.dim() >= 1 and a.shape[-1] == ga.n:
            self._global(name, "a product over the node axis")
        if gb is not None and isinstance(b, torch.Tensor) and b.dim() >= 1 and \
                b.shape[-2 if b.dim() >= 2 else 0] == gb.n:
            self._global(name, "a product over the node axis")

    def _index_of(self, name, args, kwargs):
        """(source tensor, dim, index) of a gather."""
        src = args[0]
        if name == "__getitem__":
            key = args[1]
            key = key if isinstance(key, tuple) else (key,)
            dim = 0
            for k in key:
                if k is Ellipsis:
                    return src, None, key
                if isinstance(k, torch.Tensor) or isinstance(k, (list, slice)) and k != slice(None) or \
                        isinstance(k, int) and not isinstance(k, bool):
                    return src, dim, k
                dim += 0 if k is None else 1
            return src, None, None
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        index = kwargs.get("index", args[2] if len(args) > 2 else None)
        return src, dim, index

    def _gather(self, func, name, args, kwargs):
        src, dim, index = self._index_of(name, args, kwargs)
        gs, gi = self._tag(src), self._tag(index) if isinstance(index, torch.Tensor) else None
        if gs is not None and gs.kind == "index":  # a part of edge_index
            out = func(*args, **kwargs)
            role = gs.role
            if role == "ei" and dim == 0 and isinstance(index, int):
                role = ("src", "dst")[index]
            elif role == "ei" and isinstance(out, torch.Tensor) and out.dim() == 1:
                role = "any"
            self._set(out, _Tag(self.id, "index", role=role, cu=gs.cu, ct=gs.ct))
            return out
        if gi is not None and gi.kind == "index":  # a gather along edges
            if gs is None:
                if gi.role != "any" and (isinstance(src, nn.Parameter) or src.requires_grad):
                    self.refuse(f"it indexes a tensor of shape {tuple(src.shape)} that is not one of the graph's node "
                                "tensors by local node ids (a table over every node of the whole graph, such as an "
                                "embedding or a weight per node id)", "Compute per-node values from the sharded "
                                "inputs instead, or pass the table's owned rows as an input")
                return func(*args, **kwargs)
            if gs.kind == "node":
                if self.per_layer and not self.layers:
                    self._outside_layer(name)
                out = func(*args, **kwargs)
                v = gs.v if gi.role == "dst" else gs.v - 1
                self._set(out, _Tag(self.id, "edge", v, index.shape[-1] if index.dim() else -1))
                return out
            out = func(*args, **kwargs)
            self._set(out, _Tag(self.id, gs.kind, gs.v, gs.n))
            return out
        if gs is None:
            out = func(*args, **kwargs)
            if gi is not None:  # a table indexed by per-node values (an embedding of node types)
                self._set(out, _Tag(self.id, gi.kind, gi.v, gi.n))
            return out
        # a tracked value tensor indexed by something that is not edge_index
        node_axis = dim is not None and dim < src.dim() and src.shape[dim] == gs.n and gs.n > 1
        if node_axis and gi is None and not (isinstance(index, torch.Tensor) and index.dtype == torch.bool):
            partial = isinstance(index, slice) and len(range(*index.indices(src.shape[dim]))) != src.shape[dim]
            single = isinstance(index, int) and not isinstance(index, bool)
            if isinstance(index, (torch.Tensor, list)) or partial or single:
                self.refuse(f"it picks {gs.kind} rows by position ({name} with an index not derived from edge_index "
                            "or from per-node values: a permutation, a slice, a top-k), and rows are numbered per "
                            "rank", "Use per-node ops")
        out = func(*args, **kwargs)
        v = min(gs.v, gi.v) if gi is not None else gs.v
        n = out.shape[dim] if node_axis and out.dim() > dim and out.shape[dim] != src.shape[dim] else gs.n
        if isinstance(out, torch.Tensor):
            self._set(out, _Tag(self.id, gs.kind, v, n))
        return out

    def _outside_layer(self, name):
        self.refuse(f"it gathers or sums along edge_index outside its MessagePassing layers ({name}), where "
                    "exchange='per_layer' gives it only the owned rows", "Build the graph with halo_hops >= the "
                    "model's hops and pass exchange='once' (or 'auto'), so that the whole call is followed")

    def _scatter(self, func, name, args, kwargs):
        base = args[0]
        if name in ("index_put", "index_put_", "__setitem__"):
            key = args[1]
            key = key if isinstance(key, tuple) else (key,)
            index = next((k for k in key if isinstance(k, torch.Tensor)), None)
            values = args[2] if len(args) > 2 else kwargs.get("values")
            sums = bool(kwargs.get("accumulate", args[3] if len(args) > 3 else False))
        else:
            index = kwargs.get("index", args[2] if len(args) > 2 else None)
            values = kwargs.get("src", kwargs.get("source", kwargs.get("value", args[3] if len(args) > 3 else None)))
            sums = not (name in ("index_copy", "index_copy_") or (name in ("scatter", "scatter_")
                                                                  and kwargs.get("reduce") is None))
        gb, gi, gv = self._tag(base), self._tag(index), self._tag(values)
        tracked = [g for g in (gb, gv) if g is not None and g.kind != "index"]
        if gi is not None and gi.kind == "index":  # a sum along edges into their targets (or sources)
            if self.per_layer and not self.layers and tracked:
                self._outside_layer(name)
            out = func(*args, **kwargs)
            target = out if isinstance(out, torch.Tensor) else base
            if not sums and gv is None:  # edge constants written to their nodes (self-loop weights): constants
                if gb is not None:
                    self._set(target, _Tag(self.id, gb.kind, gb.v, gb.n))
                return out
            if gi.role == "dst":  # every in-edge of rings 0..K-1 is local
                complete = (gi.ct if gv is not None else gi.cu) - 1
            elif not sums:  # each row takes the value of one of its edges (self loops): no sum over neighbours
                complete = self.rings - 1
            else:  # a sum over out-edges: complete on rings 0..K-2
                complete = self.rings - 2
            v = min([complete] + [g.v for g in tracked])
            self._set(target, _Tag(self.id, "node", v, target.shape[self._dim(name, args, kwargs, target)]
                                   if target.dim() else -1))
            return out
        if index is None or (gi is None and index.dtype == torch.bool) or (gi is not None and gi.role == "rows") or \
                (gi is not None and gb is not None and gb.kind != "index" and base.shape[0] == gb.n):
            # slices, masks, rows chosen by per-node values: written in place, row by row
            out = func(*args, **kwargs)
            target = out if isinstance(out, torch.Tensor) else base
            tags = tracked + ([gi] if gi is not None else [])
            if tags:
                ref = gb if gb is not None and gb.kind != "index" else tags[0]
                self._set(target, _Tag(self.id, ref.kind, min(g.v for g in tags), ref.n))
            return out
        dim = self._dim(name, args, kwargs, base)
        if (tracked or gi is not None) and dim % max(base.dim(), 1) != 0:
            # written along a feature dim, row by row (one_hot): a per-row op
            out = func(*args, **kwargs)
            tags = tracked + ([gi] if gi is not None else [])
            self._set(out if isinstance(out, torch.Tensor) else base,
                      _Tag(self.id, tags[0].kind, min(g.v for g in tags), tags[0].n))
            return out
        if any(g.kind == "node" for g in tracked):
            self._global(name, "a pooling of rows by an index that is not edge_index (a readout, a graph-level "
                               "pooling, a 'batch' vector)")
        if tracked or gi is not None:
            # edge rows summed by another index (edges per type): the sum of this rank's edges only. Fine
            # for a decision that does not change the result; refused if it reaches an output.
            out = func(*args, **kwargs)
            self._set(out if isinstance(out, torch.Tensor) else base, _Tag(self.id, "partial", -INF, -1))
            return out
        return func(*args, **kwargs)

    @staticmethod
    def _dim(name, args, kwargs, target) -> int:
        """The row dim a scatter writes along."""
        if name in ("index_put", "index_put_", "__setitem__"):
            return 0
        dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
        return dim if isinstance(dim, int) and -target.dim() <= dim < target.dim() else 0

    def _propagate(self, name, args, out, tags):
        lead = next(iter(_flat(args[0])), None) if args else None
        first = self._tag(lead)
        values = [g for _, g in tags if g.kind != "index"]
        outs = [o for o in _flat(out)]
        if not outs:
            return
        if first is not None and first.kind == "index":
            index_tags = [g for _, g in tags if g.kind == "index"]
            roles = {g.role for g in index_tags}
            cu, ct = min(g.cu for g in index_tags), min(g.ct for g in index_tags)
            if name == "unbind" and first.role == "ei" and len(outs) == 2:
                for o, r in zip(outs, ("src", "dst")):
                    self._set(o, _Tag(self.id, "index", role=r, cu=cu, ct=ct))
                return
            if name in ("cat", "stack") and roles == {"src", "dst"}:
                role = "ei"
            elif len(roles) == 1 and name in _SHAPE_OPS:
                role = roles.pop()
            else:
                role = "any"
            for o in outs:
                self._set(o, _Tag(self.id, "index", role=role, cu=cu, ct=ct))
            return
        if not values:
            return
        v = min(g.v for g in values)
        kinds = [g for g in values if g.kind == "node"] or values
        ref = kinds[0]
        # positions of local rows chosen by per-node values (nonzero of a node mask) stay row positions
        role = "rows" if name in ("nonzero", "argwhere") and ref.kind == "node" else \
            (ref.role if name in _SHAPE_OPS and len(values) == 1 else None)
        for o in outs:
            if o.dtype == torch.bool and o.dim() == 0:
                continue
            self._set(o, _Tag(self.id, ref.kind, v, ref.n if (o.dim() and ref.n in o.shape) else
                              (o.shape[0] if o.dim() else -1), role=role))
