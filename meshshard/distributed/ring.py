"""Ring exchange: every rank sends a block to the next rank of the group and receives one from the
previous rank (point-to-point ``isend`` / ``irecv``, so gloo and NCCL share the path).

Ring attention passes K/V blocks around with it, so that no rank ever holds all of K/V: a rank
holds its own block and the one in flight. Blocks may differ in size from rank to rank and may be
empty (nothing is sent for an empty block; every rank knows every block's shape).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch.distributed import get_global_rank as _dist_global_rank
from torch.distributed import irecv as irecv_op
from torch.distributed import isend as isend_op

from meshshard.distributed.comm import P2POp, batch_isend_irecv
from meshshard.distributed.process_group import comm_device, get_rank, get_world_size, is_initialized

__all__ = ["ring_shift", "RingShiftAutograd", "ring_bytes_sent"]

_BYTES_SENT = [0]  # by this process, for benchmarks


def ring_bytes_sent(reset: bool = False) -> int:
    """Bytes this process has sent through :func:`ring_shift` (benchmarks compare it with the minimum).

    Args:
        reset: set the counter back to 0 after reading it.

    Returns:
        The byte count.
    """
    out = _BYTES_SENT[0]
    if reset:
        _BYTES_SENT[0] = 0
    return out


def _shift(tensor: torch.Tensor, recv_shape: Sequence[int], step: int, group) -> torch.Tensor:
    world = get_world_size(group) if is_initialized() else 1
    if world == 1 or step % world == 0:
        if tuple(recv_shape) != tuple(tensor.shape):
            raise ValueError(f"ring_shift: recv_shape {tuple(recv_shape)} differs from the own block "
                             f"{tuple(tensor.shape)} although the block comes back to this rank")
        return tensor.clone()
    rank = get_rank(group)
    dev = comm_device(group)
    src = tensor.contiguous() if tensor.device == dev else tensor.contiguous().to(dev)
    out = torch.empty(tuple(recv_shape), dtype=tensor.dtype, device=dev)
    to = (rank + step) % world
    frm = (rank - step) % world
    ops = []
    if src.numel() > 0:
        ops.append(P2POp(isend_op, src, _global(group, to), group))
        _BYTES_SENT[0] += src.numel() * src.element_size()
    if out.numel() > 0:
        ops.append(P2POp(irecv_op, out, _global(group, frm), group))
    for work in batch_isend_irecv(ops):
        work.wait()
    return out if out.device == tensor.device else out.to(tensor.device)


def _global(group, rank: int) -> int:
    return rank if group is None else _dist_global_rank(group, rank)


class RingShiftAutograd(torch.autograd.Function):
    """:func:`ring_shift` with autograd: the gradient travels the ring the other way."""

    @staticmethod
    def forward(ctx, tensor, recv_shape, step, group):
        ctx.send_shape, ctx.step, ctx.group = tuple(tensor.shape), step, group
        return _shift(tensor, recv_shape, step, group)

    @staticmethod
    def backward(ctx, grad):
        return _shift(grad, ctx.send_shape, -ctx.step, ctx.group), None, None, None


def ring_shift(tensor: torch.Tensor, recv_shape: Sequence[int], step: int = 1, group=None) -> torch.Tensor:
    """Send ``tensor`` to rank ``rank + step`` of ``group`` and receive the block of rank
    ``rank - step`` (differentiable; ranks counted modulo the group size).

    Every rank of the group must call it together. Shapes are not exchanged: each rank must know
    the shape of the block it receives (ShardTensor knows every rank's shard size), and the
    sender's block must have that shape (a mismatch is an error of the caller, reported by the
    backend). Works without a process group (world size 1: a copy).

    Args:
        tensor: this rank's block, any shape (may be empty); same dtype on every rank.
        recv_shape: shape of the block arriving from rank ``rank - step``.
        step: how many ranks along the ring the block moves (negative: the other way).
        group: process group (``None``: the default group).

    Returns:
        The received block, ``recv_shape``, on ``tensor``'s device.
    """
    return RingShiftAutograd.apply(tensor, tuple(int(s) for s in recv_shape), int(step), group)
