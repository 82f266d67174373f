"""The gradient rule for tensors that meet ShardTensors but are not ShardTensors themselves.

The rule users rely on: after ``loss.backward()`` of a loss computed from ShardTensors, every
parameter's gradient SUMMED over the ranks of the mesh equals the single-process gradient of that
loss, whatever the parameter touched. ``DomainParallel`` (or ``all_reduce_gradients``) does that
one sum; nobody needs to know which parameter acted on which data.

Why it holds. A plain tensor that requires grad (an ``nn.Parameter`` of an unmodified model, or
anything computed from one) enters a ShardTensor op as a replicated value. Its gradient from that
op, on one rank, is that rank's contribution:

* along a mesh dim on which some ShardTensor argument is ``Shard``, each rank computes the rows
  it owns, so the contributions are the terms of a sum over the rows (a ``Partial`` gradient):
  summing over the ranks gives the whole;
* along a mesh dim on which every ShardTensor argument is ``Replicate`` (a Transolver's slice
  tokens, a global mean, any value reduced over all points), every rank computes the same,
  whole contribution: summing would count it once per rank. So the rule keeps it on coordinate 0
  of every such mesh dim and backpropagates zeros on the other coordinates (a ``Replicate``
  gradient turned ``Partial`` exactly: ``R + 0 + ... + 0 = R``, bit for bit).

Gradients are linear, so an op that mixes both kinds, and a parameter used by many ops, add up
their contributions the same way; accumulation over several backward passes (``no_sync``) too.
ShardTensors themselves follow their own placements (a replicated ShardTensor consumed by sharded
rows declares its gradient ``Partial`` and sums it once in backward; see ``_common.local_of``).

``DTensor`` parameters (``torch.distributed.tensor.distribute_module``'s default: ``Replicate``
on every mesh dim) get the same rule, and since no reducer follows them, their backward sums the
contribution over the mesh itself: ``param.grad`` is a ``Replicate`` DTensor holding the whole
gradient on every rank, as on one device.
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch.utils import _pytree as pytree

from meshshard.distributed import DTensor, ReduceOp, Replicate, all_reduce

__all__ = ["apply_gradient_rule"]


class _ZeroGradOnDuplicate(torch.autograd.Function):
    """Identity forward; backward zeros, on a rank whose contribution duplicates coordinate 0's."""

    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        # zeros rather than None: post-accumulate hooks (the gradient reducer) fire alike on all ranks
        return torch.zeros_like(grad)


class _ReplicatedDTensorToLocal(torch.autograd.Function):
    """A ``Replicate`` DTensor's local value; backward applies the rule, then sums over its mesh."""

    @staticmethod
    def forward(ctx, dt, duplicate: bool):
        ctx.mesh, ctx.placements, ctx.duplicate = dt.device_mesh, dt.placements, duplicate
        local = dt._local_tensor
        return local.view_as(local)

    @staticmethod
    def backward(ctx, grad):
        grad = torch.zeros_like(grad) if ctx.duplicate else grad.clone()
        for m in range(ctx.mesh.ndim):
            if ctx.mesh.size(m) > 1:
                all_reduce(grad, op=ReduceOp.SUM, group=ctx.mesh.get_group(m))
        return DTensor.from_local(grad, ctx.mesh, ctx.placements, run_check=False), None


def _duplicate_here(sts: List) -> Optional[bool]:
    """True on a rank whose coordinate is not 0 along some mesh dim where every ShardTensor
    argument is Replicate; None when the arguments do not share one mesh (the op refuses)."""
    mesh = sts[0].device_mesh
    if any(st.device_mesh != mesh for st in sts[1:]):
        return None
    return any(mesh.get_local_rank(m) != 0 for m in range(mesh.ndim)
               if all(isinstance(st.placements[m], Replicate) for st in sts))


def apply_gradient_rule(func_name: str, args, kwargs, shard_tensor_type):
    """The op's arguments with plain tensors that require grad and DTensor parameters routed
    through the gradient rule (see the module docstring); unchanged when nothing needs it.

    Args:
        func_name: the op's name, for messages.
        args, kwargs: the op's arguments (any nesting).
        shard_tensor_type: the ShardTensor class (ShardTensors are left alone).

    Returns:
        ``(args, kwargs)``.

    Raises:
        NotImplementedError: a DTensor argument that is not replicated on every mesh dim.
        ValueError: a DTensor argument on another mesh than the ShardTensors.
    """
    leaves, spec = pytree.tree_flatten((args, kwargs))
    grad_on = torch.is_grad_enabled()
    needs = [isinstance(x, torch.Tensor) and not isinstance(x, shard_tensor_type)
             and (isinstance(x, DTensor) or (grad_on and x.requires_grad)) for x in leaves]
    if not any(needs):
        return args, kwargs
    sts = [x for x in leaves if isinstance(x, shard_tensor_type)]
    duplicate = _duplicate_here(sts) if sts else None
    out = []
    for x, need in zip(leaves, needs):
        if need and isinstance(x, DTensor):
            if not all(isinstance(p, Replicate) for p in x.placements):
                raise NotImplementedError(
                    f"ShardTensor: {func_name} got a DTensor argument with placements {tuple(x.placements)}; only "
                    "DTensors replicated on every mesh dim (distribute_module's parameters) can meet ShardTensors. "
                    "Make it a ShardTensor (ShardTensor.from_local) or call .full_tensor() on it first")
            if duplicate is None or x.device_mesh != sts[0].device_mesh:
                raise ValueError(f"ShardTensor: {func_name} got a DTensor parameter on {x.device_mesh}, but the "
                                 f"ShardTensors live on {sts[0].device_mesh if sts else 'no mesh'}; distribute the "
                                 "module on the inputs' mesh")
            x = _ReplicatedDTensorToLocal.apply(x, duplicate) if grad_on and x.requires_grad else x._local_tensor
        elif need and duplicate:
            x = _ZeroGradOnDuplicate.apply(x)
        out.append(x)
    return pytree.tree_unflatten(out, spec)
