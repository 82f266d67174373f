"""Low-level helpers for a model whose parameters are replicated on every rank of a sharded mesh.

Every rank holds the same parameters and a different piece of the mesh. The loss of the whole mesh
is a sum over ranks, so the gradient of the whole-mesh loss is the SUM over ranks of each rank's
gradient (the halo exchange's backward already routes ghost contributions to their owners). After
:func:`all_reduce_gradients`, one optimizer step keeps the replicas equal.

The training path does not need them: :class:`meshshard.DomainParallel` returns ShardTensors, whose
``F.mse_loss`` is the global loss, and sums the gradients in backward
(:func:`meshshard.models.train_step`). :func:`global_mse_loss` and :func:`all_reduce_gradients` are
for a loop on plain owned rows (``MeshGraphNet(x_owned, edge_attr, graph=g)``, a hand-written
sharded layer); :func:`broadcast_parameters` makes the replicas start equal for either.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from meshshard.distributed import ReduceOp, all_reduce, broadcast, get_world_size
# one implementation for layers and whole models (per-dtype flat all-reduce, checked across ranks)
from meshshard.ops.conv import all_reduce_gradients

__all__ = ["global_mse_loss", "global_sum_and_count", "all_reduce_gradients", "broadcast_parameters"]


class _GlobalMean(torch.autograd.Function):
    """Value ``global_sum / count`` (identical on every rank); gradient of ``local_sum / count``."""

    @staticmethod
    def forward(ctx, local_sum, global_sum, count):
        ctx.save_for_backward(count)
        return (global_sum / count).to(local_sum.dtype)

    @staticmethod
    def backward(ctx, grad):
        (count,) = ctx.saved_tensors
        return grad / count.to(grad.dtype), None, None


def global_sum_and_count(local_sum: torch.Tensor, local_count: int, group=None):
    """All-reduce a scalar sum and an element count in float64.

    Args:
        local_sum: scalar tensor, this rank's sum.
        local_count: this rank's number of elements.
        group: process group (default: the world).

    Returns:
        ``(global_sum, global_count)`` as float64 CPU/device scalars (no gradient).
    """
    buf = torch.stack([local_sum.detach().to(torch.float64).reshape(()),
                       torch.tensor(float(local_count), dtype=torch.float64, device=local_sum.device)])
    all_reduce(buf, ReduceOp.SUM, group=group)
    return buf[0], buf[1]


def global_mse_loss(pred: torch.Tensor, target: torch.Tensor, group=None, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""Mean squared error over the rows of EVERY rank: the loss of the whole mesh (low-level).

    Each rank passes its owned rows as plain tensors (for ShardTensors, ``F.mse_loss(pred, target)``
    is the same loss, and :class:`meshshard.DomainParallel` sums its gradients). The value returned on every rank is
    ``sum_r sum_i ||pred_i - target_i||^2 / (N_global * C)``; its gradient on a rank is the
    gradient of that rank's own share (``local_sum / (N_global * C)``), so that summing parameter
    gradients over ranks (:func:`all_reduce_gradients`) gives the gradient of the global loss.
    Without a process group this is ``torch.nn.functional.mse_loss``.

    Args:
        pred: ``[n_owned, C]`` predictions for this rank's owned nodes.
        target: same shape.
        group: process group (default: the world).
        mask: optional bool ``[n_owned]``: only these rows count (e.g. interior nodes).

    Returns:
        scalar tensor (``pred``'s dtype).
    """
    if pred.shape != target.shape:
        raise ValueError(f"global_mse_loss: pred has shape {tuple(pred.shape)} but target has {tuple(target.shape)}")
    sq = (pred - target.to(pred.dtype)).pow(2)
    if mask is not None:
        if mask.dtype != torch.bool or mask.shape != pred.shape[:1]:
            raise ValueError(f"mask must be a bool tensor of shape [{pred.shape[0]}], got {mask.dtype} {tuple(mask.shape)}")
        sq = sq[mask]
    local_sum = sq.sum()
    g_sum, g_count = global_sum_and_count(local_sum, sq.numel(), group)
    if float(g_count) == 0:
        raise ValueError("global_mse_loss: no rows on any rank (empty prediction everywhere)")
    # Value: the global mean, bit-identical on every rank; gradient: this rank's share only
    # (the other ranks' shares reach their own parameters there).
    return _GlobalMean.apply(local_sum, g_sum.to(local_sum.device), g_count.to(local_sum.device))


@torch.no_grad()
def broadcast_parameters(module: nn.Module, src: int = 0, group=None) -> None:
    """Copy ``src``'s parameters and buffers to every rank (so replicas start equal).

    Args:
        module: the replicated model.
        src: the rank to copy from.
        group: process group (default: the world).
    """
    if get_world_size(group) == 1:
        return
    tensors = list(module.parameters()) + list(module.buffers())
    by_dtype: dict = {}
    for t in tensors:
        by_dtype.setdefault((t.dtype, t.device), []).append(t)
    for same in by_dtype.values():  # one broadcast per dtype: no lossy casts of integer buffers
        flat = torch.cat([t.detach().reshape(-1) for t in same])
        broadcast(flat, src=src, group=group)
        offset = 0
        for t in same:
            n = t.numel()
            t.copy_(flat[offset:offset + n].view_as(t))
            offset += n
