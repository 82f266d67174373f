"""ShardTensor: a DTensor whose shards may have a different size on every rank.

How operations work: ``__torch_function__`` looks a function up in the handler tables (user
handlers first, then meshshard's built-in ones in :mod:`meshshard.tensor._ops`, one file per op family). A handler
unwraps its ShardTensor arguments to local tensors with a differentiable ``to_local``, runs the
ordinary torch function on them (plus any collective the op needs) and wraps the results with a
differentiable ``from_local``. Autograd therefore runs on plain local tensors; the only gradients
that are ShardTensors are the ones crossing those boundaries, and the few ops the autograd engine
issues on them itself (grad accumulation, ``ones_like`` for ``backward()``, ``detach`` ...) run
locally in a minimal ``__torch_dispatch__``. Any other op raises NotImplementedError naming it:
never a silently wrong answer.

Gradient conventions: the gradient of a ShardTensor has its placements, except that Partial
becomes Replicate (:func:`~meshshard.tensor.spec.gradient_placements`). For a sharded tensor each
rank holds the gradient of its own rows (exact). For a replicated ShardTensor (e.g. a ``sum``)
every rank holds the full, identical gradient; so does a Partial one, whose value is the sum of
the local tensors (each local tensor's gradient is the whole gradient). Plain-tensor parameters
used in ShardTensor ops (``nn.Linear`` weights ...) get per-rank shares whose SUM over the ranks
is the whole gradient, whatever data they met (:mod:`meshshard.tensor._gradient_rule`): one
all-reduce of every gradient (``DomainParallel`` does it in backward) makes them exact.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable, Dict, List, Optional

import torch
from torch.utils import _pytree as pytree

from meshshard.distributed import DeviceMesh, DTensor, Replicate, Shard, default_device_mesh
from meshshard.distributed.agree import get_validation, validation
from meshshard.tensor import _registry as reg
from meshshard.tensor._compile import install, refuse_before_registration, register_with_dynamo
from meshshard.tensor._gradient_rule import apply_gradient_rule
from meshshard.tensor.redistribute import redistribute_local
from meshshard.tensor.spec import (chunk_sizes, gradient_placements, infer_shard_sizes, layout_signature, make_spec,
                                   normalize_placements, pack_sizes, resolve_sharding_shapes, shard_dim_of,
                                   shard_dims_of, sizes_by_mesh_dim)

__all__ = ["ShardTensor"]


def _make(local: torch.Tensor, mesh: DeviceMesh, placements, shard_sizes, requires_grad: bool = False) -> "ShardTensor":
    """Wrap ``local`` (no autograd link) in a ShardTensor."""
    if local.requires_grad:  # autograd links wrapper and local through _FromLocal/_ToLocal instead
        local = local.detach()
    spec = make_spec(mesh, placements, local, shard_sizes)
    out = torch.Tensor._dtensor__new__(ShardTensor, local, spec, requires_grad=requires_grad)
    out._spec = spec
    out._local_tensor = local
    out._shard_sizes = None if shard_sizes is None else pack_sizes(placements, sizes_by_mesh_dim(placements,
                                                                                                shard_sizes))
    return out


class _FromLocal(torch.autograd.Function):
    """local tensor -> ShardTensor; backward takes the gradient's local tensor."""

    @staticmethod
    def forward(ctx, local, mesh, placements, shard_sizes):
        ctx.layout = (mesh, tuple(placements), shard_sizes)
        return _make(local.view_as(local), mesh, placements, shard_sizes)

    @staticmethod
    def backward(ctx, grad):
        return _grad_local(grad, *ctx.layout), None, None, None


class _ToLocal(torch.autograd.Function):
    """ShardTensor -> local tensor; backward wraps the local gradient with the same layout."""

    @staticmethod
    def forward(ctx, st, grad_placements):
        ctx.layout = (st.device_mesh, tuple(st.placements), st._shard_sizes)
        ctx.grad_placements = grad_placements
        local = st._local_tensor
        return local.view_as(local)

    @staticmethod
    def backward(ctx, grad):
        mesh, placements, sizes = ctx.layout
        target = gradient_placements(placements)
        if ctx.grad_placements is not None and tuple(ctx.grad_placements) != target:
            with torch.no_grad():
                grad = redistribute_local(grad, mesh, tuple(ctx.grad_placements), sizes, target, sizes)
        return _make(grad.contiguous(), mesh, target, sizes), None


def _grad_local(grad, mesh, placements, sizes) -> torch.Tensor:
    """The local tensor of a gradient flowing back into a ShardTensor with this layout."""
    if not isinstance(grad, ShardTensor):
        if isinstance(grad, DTensor):
            raise TypeError("ShardTensor backward received a plain DTensor gradient; mix ShardTensor only "
                            "with plain tensors and other ShardTensors")
        return grad  # a plain tensor from the engine: already local
    target = gradient_placements(placements)
    if tuple(grad.placements) != target or grad._shard_sizes != sizes:
        with torch.no_grad():
            return redistribute_local(grad._local_tensor, mesh, grad.placements, grad._shard_sizes, target, sizes)
    return grad._local_tensor


_PASSTHROUGH = {
    torch.Tensor.size, torch.Tensor.dim, torch.Tensor.numel, torch.Tensor.stride, torch.Tensor.__len__,
    torch.Tensor.backward, torch.Tensor.register_hook, torch.Tensor.retain_grad, torch.Tensor.requires_grad_,
    torch.Tensor.is_contiguous, torch.Tensor.element_size, torch.Tensor.nelement, torch.Tensor.ndimension,
    torch.Tensor.is_floating_point, torch.Tensor.is_complex, torch.Tensor.get_device, torch.Tensor.detach,
    torch.Tensor.detach_, torch.Tensor.__hash__, torch.Tensor.__reduce_ex__, torch.Tensor.__deepcopy__,
    torch.Tensor.__format__, torch.autograd.backward, torch.autograd.grad,
}


def _is_passthrough(func) -> bool:
    """Metadata functions that need no handler (properties, size queries, autograd plumbing)."""
    if getattr(func, "__name__", "") in ("__get__", "__set__", "__delete__"):
        return True
    return func in _PASSTHROUGH


class ShardTensor(DTensor):
    """A :class:`DTensor` whose shards may differ in size from rank to rank.

    Create one with :meth:`from_local` (each rank passes its own rows) or
    :func:`meshshard.tensor.scatter_tensor` (one rank splits a full tensor). Several mesh dims may
    Shard it, each a different tensor dim (``(Shard(2), Shard(3))`` on a 2-D mesh splits an image
    in height and width, unevenly on each); others Replicate (e.g. data-parallel x domain-parallel
    meshes) or hold Partial sums.
    :meth:`sharding_shapes` gives every rank's local shape, :meth:`offsets` where this rank's
    rows start.

    Supported operations keep the uneven layout: element-wise ops between ShardTensors of the
    same layout and with plain tensors / scalars (treated as replicated), row-wise ops that do not
    mix the sharded dim (``nn.Linear``, activations, ``LayerNorm`` / ``softmax`` over features,
    ``torch.cat`` along features), ``sum`` / ``mean`` over all dims or over the sharded dim
    (results are replicated ShardTensors; ``mean`` divides by the global count), dim permutations
    (``.T``, ``transpose``, ``permute``: the Shard dim moves along), ``matmul`` when the sharded dim
    is not contracted (``X @ W``) or is contracted on both sides (``X.T @ Y``: summed over ranks),
    and ``item()`` / ``tolist()`` of replicated values. Anything else raises NotImplementedError
    naming the op; add support with :meth:`register_function_handler`.
    """

    _shard_sizes: Optional[tuple]

    # ------------------------------------------------------------------ construction
    @staticmethod
    def from_local(local_tensor: torch.Tensor, device_mesh: Optional[DeviceMesh] = None, placements=None,
                   sharding_shapes="infer") -> "ShardTensor":
        """Build a ShardTensor from every rank's local shard (differentiable: gradients flow back to
        ``local_tensor``).

        Args:
            local_tensor: this rank's shard, ``[n_rank, ...]`` for ``Shard(0)``; ``n_rank`` may differ
                per rank and may be 0. Every other dim, the dtype and the number of dims must match.
            device_mesh: the mesh (``None``: :func:`meshshard.distributed.default_device_mesh`).
            placements: one per mesh dim (``None``: ``(Shard(0),)``, Replicate on further dims).
            sharding_shapes: ``"infer"`` (one small all-gather of the local shapes per mesh dim,
                which also checks dtype / feature sizes and raises the same ValueError on every
                rank), ``"chunk"`` (no communication: every rank is assumed to hold as many rows as
                this one, the even ``torch.chunk`` layout; use only when that is true), or a dict
                ``{mesh_dim: [local shape of every rank along mesh_dim]}`` (a list of sizes along
                the sharded dim is accepted, as the dict value or on its own). A dict is checked
                to be the same on every rank, with the dtype and feature sizes, as "infer" checks
                them (one tiny all-gather per mesh dim, skipped inside
                ``with meshshard.distributed.validation(False):``).

        Returns:
            ShardTensor whose global shape is the local shape with the sharded dim summed over ranks.
        """
        if not isinstance(local_tensor, torch.Tensor) or isinstance(local_tensor, DTensor):
            raise TypeError(f"ShardTensor.from_local expects a plain torch.Tensor, got {type(local_tensor).__name__}")
        mesh = default_device_mesh() if device_mesh is None else device_mesh
        placements = normalize_placements(placements, mesh)
        placements = tuple(Shard(p.dim % max(local_tensor.dim(), 1)) if isinstance(p, Shard) and p.dim < 0 else p
                           for p in placements)
        sds = shard_dims_of(placements)
        if isinstance(sharding_shapes, str) and sharding_shapes == "infer":
            sizes = infer_shard_sizes(local_tensor, mesh, placements)  # raises on every rank if bad
            return _FromLocal.apply(local_tensor, mesh, placements, sizes)
        for _, d in sds:
            if d >= local_tensor.dim():
                raise ValueError(f"ShardTensor.from_local: Shard({d}) of a {local_tensor.dim()}-d tensor")
        if isinstance(sharding_shapes, str) and sharding_shapes == "chunk":
            per_dim = [None] * mesh.ndim
            for m, d in sds:
                per_dim[m] = [int(local_tensor.shape[d])] * mesh.size(m)
            sizes = pack_sizes(placements, per_dim)
        elif isinstance(sharding_shapes, (dict, list, tuple, torch.Tensor)):
            coord = mesh.get_local_rank(sds[0][0]) if len(sds) == 1 else None
            sizes = resolve_sharding_shapes("ShardTensor.from_local", sharding_shapes, mesh, placements,
                                            tuple(local_tensor.shape), coord,
                                            signature=layout_signature(local_tensor, mesh, placements))
        else:
            raise ValueError(f"sharding_shapes must be 'infer', 'chunk' or a dict, got {sharding_shapes!r}")
        return _FromLocal.apply(local_tensor, mesh, placements, None if sizes is None else tuple(sizes))

    # ------------------------------------------------------------------ layout queries
    def sharding_shapes(self) -> Dict[int, List[torch.Size]]:
        """``{mesh_dim: [local shape of each rank along that mesh dim]}`` for the sharding mesh dim
        (empty when nothing is sharded). Accepted back by ``from_local`` / ``redistribute``.

        Returns:
            e.g. ``{0: [torch.Size([n0, F]), torch.Size([n1, F]), ...]}`` for ``Shard(0)`` of ``[N, F]``.
        """
        per_dim = sizes_by_mesh_dim(self.placements, self._shard_sizes)
        out = {}
        for m, d in shard_dims_of(self.placements):
            shapes = []
            for s in per_dim[m]:
                shape = list(self._local_tensor.shape)
                shape[d] = s
                shapes.append(torch.Size(shape))
            out[m] = shapes
        return out

    def shard_sizes(self, mesh_dim: Optional[int] = None) -> Optional[List[int]]:
        """Sizes of every rank's shard along a sharded tensor dim (``None`` when not sharded).

        Args:
            mesh_dim: the sharding mesh dim whose sizes to return; ``None``: the one that shards
                (required when several do).

        Returns:
            One size per rank of that mesh dim, e.g. ``[n0, n1, ...]`` for ``Shard(0)`` of ``[N, F]``.
        """
        per_dim = sizes_by_mesh_dim(self.placements, self._shard_sizes)
        if mesh_dim is None:
            sd = shard_dim_of(self.placements)
            if sd is None:
                return None
            mesh_dim = sd[0]
        return None if per_dim[mesh_dim] is None else list(per_dim[mesh_dim])

    def offsets(self, mesh_dim: Optional[int] = None) -> int:
        """Start of this rank's shard along the sharded tensor dim.

        The sum of the shard sizes of the ranks before this one along the sharding mesh dim (the
        order of ``full_tensor()``), so local row ``i`` is global row ``offsets() + i``.

        Args:
            mesh_dim: ``None`` (default): the mesh dim that shards the tensor, whichever it is
                (0 when nothing is sharded). A mesh dim that does not Shard the tensor gives 0.

        Returns:
            The offset as an int; for ``mesh_dim=None`` with several sharding mesh dims, a tuple
            with one offset per mesh dim (as PhysicsNeMo returns).
        """
        if mesh_dim is None:
            sds = shard_dims_of(self.placements)
            if len(sds) > 1:
                return tuple(self.offsets(m) for m in range(self.device_mesh.ndim))
            if not sds:
                return 0
            mesh_dim = sds[0][0]
        if not 0 <= mesh_dim < self.device_mesh.ndim:
            raise ValueError(f"offsets: mesh_dim={mesh_dim} is not a dim of a {self.device_mesh.ndim}-D mesh")
        if not isinstance(self.placements[mesh_dim], Shard):
            return 0
        coord = self.device_mesh.get_local_rank(mesh_dim)
        return int(sum(sizes_by_mesh_dim(self.placements, self._shard_sizes)[mesh_dim][:coord]))

    # ------------------------------------------------------------------ conversions
    def to_local(self, *, grad_placements=None) -> torch.Tensor:
        """This rank's shard as a plain tensor (differentiable).

        Args:
            grad_placements: placements the gradient of the returned tensor will have when they
                differ from this tensor's (e.g. ``(Partial(),)`` for a replicated tensor whose
                local copy feeds per-rank computations: backward then sums the gradients).

        Returns:
            The local shard, e.g. ``[n_rank, F]`` for ``Shard(0)`` of ``[N, F]``; with grad enabled a
            view linked to this ShardTensor by autograd.
        """
        if not torch.is_grad_enabled():
            return self._local_tensor
        return _ToLocal.apply(self, None if grad_placements is None else tuple(grad_placements))

    def redistribute(self, device_mesh: Optional[DeviceMesh] = None, placements=None, sharding_shapes=None,
                     *, async_op: bool = False) -> "ShardTensor":
        """Change placements or shard sizes (differentiable).

        Supported per mesh dim: Shard(i) -> Replicate (all-gather-v), Replicate -> Shard(j) (local
        slice), Shard(i) -> Shard(j) (all-to-all-v), Shard(i) -> Shard(i) with new sizes
        (rebalance: each row moves to its new owner with all-to-all-v), Partial -> Replicate
        (all-reduce), Partial -> Shard(j) (reduce-scatter-v), Replicate -> Partial (coordinate 0
        keeps the value, the others zeros) and Shard -> Partial (through Replicate). With several
        sharding mesh dims every mesh dim changes in turn; a Shard(j) target whose dim another mesh
        dim still shards goes through Replicate.

        Args:
            device_mesh: must be this tensor's mesh (or ``None``).
            placements: target placements (``None``: keep).
            sharding_shapes: target layout for a Shard target, same forms as in
                :meth:`from_local` (a dict with every sharding mesh dim when several shard;
                ``None``: keep the sizes for the same Shard dim, else the ``torch.chunk`` layout).
                Every rank passes the same value.
            async_op: accepted for DTensor compatibility; the exchange is always synchronous.

        Returns:
            A new ShardTensor (same global shape) with the target placements and shard sizes.

        Example (rebalance rows of ``[N, F]`` onto ``new_sizes``, which sum to ``N``)::

            st2 = st.redistribute(placements=(Shard(0),), sharding_shapes={0: [(n, F) for n in new_sizes]})
        """
        if device_mesh is not None and device_mesh != self.device_mesh:
            raise NotImplementedError("ShardTensor.redistribute to another device mesh is not supported")

        mesh = self.device_mesh
        target = normalize_placements(self.placements if placements is None else placements, mesh)
        target = tuple(Shard(p.dim % self.dim()) if isinstance(p, Shard) and p.dim < 0 else p for p in target)
        dst_sds = shard_dims_of(target)
        for _, d in dst_sds:
            if d >= self.dim():
                raise ValueError(f"redistribute: Shard({d}) of a {self.dim()}-d tensor")
        src = sizes_by_mesh_dim(self.placements, self._shard_sizes)
        new_sizes = None
        checked = False
        if dst_sds and sharding_shapes is not None:
            # One exchange checks on every rank alike the new layout (sum, agreement) and the tensor
            # (dtype, features, placements, current sizes), so a bad layout on one rank cannot hang
            # the others, and the collectives below need no check of their own.
            checked = get_validation() and mesh.size() > 1
            totals = [self.shape[d] for _, d in dst_sds]
            new_sizes = resolve_sharding_shapes("redistribute", sharding_shapes, mesh, target,
                                                total=totals[0] if len(totals) == 1 else totals,
                                                signature=layout_signature(self._local_tensor, mesh, self.placements,
                                                                           self._shard_sizes))
        elif dst_sds:
            per_dim = [None] * mesh.ndim
            for m, d in dst_sds:
                same = self.placements[m] == target[m]
                per_dim[m] = list(src[m]) if same else chunk_sizes(self.shape[d], mesh.size(m))
            new_sizes = pack_sizes(target, per_dim)
        local = self.to_local()
        with validation(not checked and get_validation()):  # checked above already: no second check
            local = redistribute_local(local, mesh, self.placements, self._shard_sizes, target, new_sizes)
        return _FromLocal.apply(local, mesh, target, None if new_sizes is None else tuple(new_sizes))

    def full_tensor(self, *, grad_placements=None) -> torch.Tensor:
        """The whole tensor on every rank, rows in rank order (differentiable; each rank's gradient
        is its shard's slice of the replicated gradient).

        Args:
            grad_placements: as in :meth:`to_local`, for the replicated result.

        Returns:
            Plain tensor of the global shape, e.g. ``[N, F]`` with ``N = sum(shard_sizes())``.
        """
        rep = self.redistribute(placements=(Replicate(),) * self.device_mesh.ndim)
        return rep.to_local(grad_placements=grad_placements)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Backward from this (usually replicated scalar) ShardTensor, like :meth:`torch.Tensor.backward`.

        Args:
            gradient: ShardTensor (or plain tensor) of this tensor's layout; ``None`` for a scalar
                (ones). Every rank calls backward; a replicated loss's gradient is the same on each.
            retain_graph, create_graph, inputs: as in :func:`torch.autograd.backward`.
        """
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            gradient = _make(torch.ones_like(self._local_tensor), self.device_mesh,
                             gradient_placements(self.placements), self._shard_sizes)
        torch.autograd.backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    def __repr__(self):
        return (f"ShardTensor(local_tensor={self._local_tensor}, device_mesh={self.device_mesh}, "
                f"placements={self.placements}, shard_sizes={self._shard_sizes})")

    # ------------------------------------------------------------------ handler registry
    @classmethod
    def register_function_handler(cls, func: Callable, handler: Callable) -> None:
        """Run ``handler(func, types, args, kwargs)`` whenever ``func`` (a torch function or Tensor
        method, e.g. ``torch.dot``) is called with a ShardTensor argument. Overrides built-ins.

        The gradient rule holds for a handler that computes, on each rank, its own rows of a
        sharded result (a plain tensor among the arguments then gets this rank's share of its
        gradient): one that gathers the whole input and computes the whole result on every rank
        must return it as a replicated ShardTensor computed from replicated ShardTensors (e.g.
        ``x.full_tensor()`` wrapped back with ``ShardTensor.from_local(..., (Replicate(),))``), so
        the rule sees that every rank computed the same.

        Args:
            func: the torch function / Tensor method (``torch.dot``, ``torch.Tensor.__getitem__``...).
            handler: callable with PhysicsNeMo's signature ``(func, types, args, kwargs)``.
        """
        reg.FUNCTION_HANDLERS[func] = handler

    @classmethod
    def register_named_function_handler(cls, name: str, handler: Callable) -> None:
        """Like :meth:`register_function_handler`, keyed by a name: ``str(func)``, ``func.__name__``
        or a qualified name such as ``"torch.Tensor.__getitem__"`` or ``"torch.nn.functional.linear"``.

        Args:
            name: the function's name, as above.
            handler: callable ``(func, types, args, kwargs)``.
        """
        reg.NAMED_FUNCTION_HANDLERS[name] = handler

    @classmethod
    def register_dispatch_handler(cls, op, handler: Callable) -> None:
        """Run ``handler(op, types, args, kwargs)`` for an aten op (overload or packet) reaching
        ``__torch_dispatch__`` with ShardTensor arguments (below autograd).

        Args:
            op: e.g. ``torch.ops.aten.detach.default`` or the packet ``torch.ops.aten.detach``.
            handler: callable ``(op, types, args, kwargs)``.
        """
        reg.DISPATCH_HANDLERS[op] = handler

    # ------------------------------------------------------------------ interception
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = reg.FUNCTION_HANDLERS.get(func)
        if handler is None and reg.NAMED_FUNCTION_HANDLERS:
            for name in reg.function_names(func):
                handler = reg.NAMED_FUNCTION_HANDLERS.get(name)
                if handler is not None:
                    break
        if handler is None:
            handler = reg.BUILTIN_FUNCTION_HANDLERS.get(func)
        if handler is None and _is_passthrough(func):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        # Plain tensors that require grad (parameters) and DTensor parameters meet ShardTensors
        # here, before any handler: their gradients follow one rule (see _gradient_rule).
        args, kwargs = apply_gradient_rule(_func_name(func), args, kwargs, ShardTensor)
        if handler is not None:
            return handler(func, types, args, kwargs)
        replicated = _replicated_mesh(args, kwargs)
        if replicated is not None:
            return _run_replicated(func, args, kwargs, replicated)
        if func is torch.Tensor._is_view and "torch._dynamo" in sys.modules:  # dynamo wrapping an unregistered one
            register_with_dynamo(ShardTensor)
            refuse_before_registration(_func_name(func))
        raise NotImplementedError(
            f"ShardTensor does not support {_func_name(func)} (it could silently mix rows of different "
            "ranks). Register a handler with ShardTensor.register_function_handler(func, handler), or "
            "call it on .to_local() / .full_tensor() yourself.")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = reg.DISPATCH_HANDLERS.get(func) or reg.DISPATCH_HANDLERS.get(getattr(func, "overloadpacket", None))
        if handler is not None:
            return handler(func, types, args, kwargs)
        if func in _LOCAL_DISPATCH:
            return _dispatch_locally(func, args, kwargs)
        raise NotImplementedError(
            f"ShardTensor: aten op {func} reached __torch_dispatch__ and is not supported. Use "
            "ShardTensor.register_dispatch_handler(op, handler), or register_function_handler for the "
            "torch function that issued it.")


def _replicated_mesh(args, kwargs) -> Optional[DeviceMesh]:
    """The mesh of the ShardTensor arguments when all of them are fully Replicate on one mesh."""
    sts = [x for x in pytree.tree_leaves((args, kwargs)) if isinstance(x, ShardTensor)]
    if not sts or any(st.device_mesh != sts[0].device_mesh for st in sts):
        return None
    if all(isinstance(p, Replicate) for st in sts for p in st.placements):
        return sts[0].device_mesh
    return None


def _run_replicated(func, args, kwargs, mesh: DeviceMesh):
    """Any op on replicated data runs locally: every rank holds the whole value (plain tensors
    among the arguments are replicated values too), so the local result is the whole result,
    rewrapped as Replicate. Differentiable through ``to_local`` / ``from_local``; in-place ops are
    refused (they would modify the local tensor behind autograd's back)."""
    name = _func_name(func)
    if name.endswith("_") and not name.endswith("__"):
        raise NotImplementedError(f"ShardTensor: in-place {name} on a replicated ShardTensor; use the "
                                  "out-of-place op")
    placements = (Replicate(),) * mesh.ndim
    largs, lkwargs = pytree.tree_map(lambda x: x.to_local() if isinstance(x, ShardTensor) else x, (args, kwargs))
    out = func(*largs, **lkwargs)
    return pytree.tree_map(
        lambda t: _FromLocal.apply(t, mesh, placements, None) if isinstance(t, torch.Tensor) else t, out)


def _func_name(func) -> str:
    return reg.function_names(func)[-1]


aten = torch.ops.aten
# Ops the autograd engine issues on ShardTensor gradients itself; run locally, layout kept.
_LOCAL_DISPATCH = {
    aten.add.Tensor, aten.add_.Tensor, aten.ones_like.default, aten.zeros_like.default, aten.empty_like.default,
    aten.detach.default, aten.alias.default, aten.clone.default, aten.copy_.default, aten.zero_.default,
    aten._to_copy.default, aten.fill_.Scalar, aten.is_same_size.default, aten._local_scalar_dense.default,
    aten.view.default, aten._unsafe_view.default,
}
_INPLACE = {aten.copy_.default, aten.zero_.default, aten.fill_.Scalar, aten.add_.Tensor}


class _Rebind(threading.local):
    """While set (per thread), ``aten.copy_`` into a ShardTensor rebinds its local tensor to the
    source's instead of writing into it (see :func:`assign_inplace`)."""
    on = False


_REBIND = _Rebind()


def assign_inplace(x: "ShardTensor", out: "ShardTensor") -> "ShardTensor":
    """Make ``x`` hold ``out``'s value the way an in-place op does: autograd records one
    ``copy_`` on ``x`` (its history continues from ``out``), while ``x``'s old local tensor is left
    untouched (it may be saved for the backward of the op that read it; writing into it below
    autograd would change that silently) and ``x`` takes ``out``'s local tensor instead."""
    _REBIND.on = True
    try:
        with torch._C.DisableTorchFunctionSubclass():
            torch.Tensor.copy_(x, out)
    finally:
        _REBIND.on = False
    return x


def _dispatch_locally(func, args, kwargs):
    if _REBIND.on and func is aten.copy_.default:
        x, src = args[0], args[1]
        x._local_tensor = src._local_tensor
        return x
    layouts = []

    def unwrap(x):
        if isinstance(x, ShardTensor):
            layouts.append((x.device_mesh, tuple(x.placements), x._shard_sizes))
            return x._local_tensor
        return x

    local_args, local_kwargs = pytree.tree_map(unwrap, (args, kwargs))
    if any(lay != layouts[0] for lay in layouts[1:]):
        raise ValueError(f"ShardTensor: {func} on ShardTensors of different layouts: "
                         + "; ".join(f"{p} sizes {s}" for _, p, s in layouts))
    mesh, placements, sizes = layouts[0]
    if func in (aten.view.default, aten._unsafe_view.default):
        # Only the identity view (the engine reshaping a gradient to its own shape) is local.
        if tuple(local_args[1]) != tuple(args[0].shape):
            raise NotImplementedError(f"ShardTensor: {func} to another shape is not supported")
        return _make(local_args[0].view(local_args[0].shape), mesh, placements, sizes)
    if func is aten._local_scalar_dense.default and shard_dims_of(placements):
        raise NotImplementedError("ShardTensor: item() of a sharded tensor; call full_tensor() first")
    out = func(*local_args, **local_kwargs)
    if func in _INPLACE:
        return args[0]
    if func in (aten.is_same_size.default, aten._local_scalar_dense.default):
        return out
    return pytree.tree_map(lambda t: _make(t, mesh, placements, sizes) if isinstance(t, torch.Tensor) else t, out)


install(ShardTensor)  # opaque to torch.compile (meshshard.tensor._compile)
