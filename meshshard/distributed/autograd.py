"""Variable-size collectives with autograd: every forward has its adjoint collective as backward.

The call signatures follow PhysicsNeMo's ``physicsnemo.distributed`` (``tensor, sizes, dim=0, ...,
group=None``), so code written against it ports by changing an import. All data movement goes
through :func:`meshshard.distributed.all_to_all_single` with split sizes, the one uneven
collective that gloo and NCCL both run, so CPU and GPU share this code; large all-gathers use
point-to-point ``isend`` / ``irecv`` instead, which saves the ``W``-fold send copy that an
all-to-all needs. Every function also works
without a process group (world size 1).

Conventions:

* ``dim`` may be any dimension (negative allowed). Internally the tensor is moved so that ``dim``
  comes first, made contiguous, exchanged, and moved back; results are contiguous and live on the
  input's device. Zero-size shards are allowed everywhere.
* ``sizes`` is known on every rank (identical everywhere), so the shape of every exchange follows
  from it without further communication.
* Gradients follow the *sum* convention of ``torch.distributed`` autograd: the loss is the sum of
  what every rank computes, so a replicated output (``all_gather_v``) is treated as ``W``
  independent copies whose gradients add up in the backward pass (reduce-scatter).
  :func:`all_reduce_sum` is the one exception and documents its own convention.

Validation: before moving data, each collective reports a short integer vector per rank (dtype,
ndim, shape without ``dim``, sizes, local input errors) to :func:`meshshard.distributed.agree`,
which raises :class:`~meshshard.distributed.CollectiveMismatchError` (a ``ValueError``) on *every*
rank when ranks disagree or one rank's input is invalid, instead of hanging or corrupting memory.
For hot loops whose inputs are known to be consistent, ``with meshshard.distributed.validation(False):``
skips that exchange (and the index range checks of :func:`indexed_all_to_all_v`) in the calling
thread; it must then be used identically on every rank, and a bad input on one rank raises only
there (the others may wait until the process group's timeout).

Example::

    import torch
    import meshshard.distributed as msd
    from meshshard.distributed.autograd import all_gather_v

    msd.init_distributed()                      # under torchrun; a no-op in a single process
    rank, world = msd.get_rank(), msd.get_world_size()
    sizes = [3 + r for r in range(world)]       # uneven rows per rank, known everywhere
    x = torch.randn(sizes[rank], 4, requires_grad=True)
    full = all_gather_v(x, sizes)               # [sum(sizes), 4] on every rank
    full.sum().backward()                       # x.grad == world * ones (sum convention)
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple, Union

import torch

from meshshard.distributed.agree import Field, agree, dtype_code, dtype_name, get_validation, set_validation
from meshshard.distributed.comm import P2POp, batch_isend_irecv, all_reduce, all_to_all_single
from meshshard.distributed.process_group import comm_device, get_rank, get_world_size

# P2POp wants the torch.distributed functions themselves (this is layer 0, which may import them).
from torch.distributed import get_global_rank as _dist_global_rank
from torch.distributed import irecv as irecv_op
from torch.distributed import isend as isend_op

__all__ = [
    "all_gather_v",
    "gather_v",
    "scatter_v",
    "all_to_all_v",
    "indexed_all_to_all_v",
    "reduce_scatter_v",
    "all_reduce_v",
    "all_reduce_sum",
    "set_validation",
    "get_validation",
    "AllGatherVAutograd",
    "GatherVAutograd",
    "ScatterVAutograd",
    "AllToAllVAutograd",
    "IndexedAllToAllVAutograd",
    "ReduceScatterVAutograd",
    "AllReduceSumAutograd",
]

SizesLike = Union[Sequence[int], torch.Tensor]
SizesMatrixLike = Union[Sequence[Sequence[int]], torch.Tensor]

# all_gather_v of large outputs by isend/irecv (no W-fold send copy); small ones by one
# all_to_all_single, whose single call has less latency than W - 1 point-to-point pairs.
_ALL_GATHER_P2P = True
_P2P_MIN_BYTES = 1 << 20


# ---------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------

_SHAPE_SLOTS = 8  # dims compared one by one; any further dims are folded into the last slot


def _norm_dim(dim: int, ndim: int) -> Tuple[int, Optional[str]]:
    if not isinstance(dim, int) or isinstance(dim, bool):
        return 0, f"dim must be an int, got {type(dim).__name__}"
    if ndim == 0:
        return 0, "tensor must have at least one dimension"
    if not -ndim <= dim < ndim:
        return 0, f"dim={dim} is out of range for a {ndim}-d tensor"
    return dim % ndim, None


def _shape_without(shape: Sequence[int], dim: int) -> List[int]:
    rest = [int(s) for i, s in enumerate(shape) if i != dim]
    if len(rest) > _SHAPE_SLOTS:
        rest = rest[: _SHAPE_SLOTS - 1] + [math.prod(rest[_SHAPE_SLOTS - 1 :])]
    return rest + [-1] * (_SHAPE_SLOTS - len(rest))


def _as_sizes(sizes: SizesLike, world: int, errors: List[str]) -> List[int]:
    """``sizes`` as a list of ``world`` non-negative ints; problems go to ``errors``."""
    try:
        if isinstance(sizes, torch.Tensor):
            if sizes.is_floating_point() or sizes.is_complex():
                raise TypeError("sizes must hold integers")
            values = [int(v) for v in sizes.reshape(-1).tolist()]
            if sizes.dim() != 1:
                errors.append(f"sizes must be 1-d, got shape {tuple(sizes.shape)}")
        else:
            values = [int(v) for v in sizes]
            if any(isinstance(v, float) for v in sizes):
                raise TypeError("sizes must hold integers")
    except (TypeError, ValueError) as exc:
        errors.append(f"sizes must be a sequence of ints ({exc})")
        return [0] * world
    if len(values) != world:
        errors.append(f"len(sizes)={len(values)} does not equal the world size {world}")
        values = (values + [0] * world)[:world]
    if any(v < 0 for v in values):
        errors.append(f"sizes must be non-negative, got {values}")
        values = [max(v, 0) for v in values]
    return values


def _as_size_matrix(sizes: SizesMatrixLike, world: int, errors: List[str]) -> List[List[int]]:
    """``sizes`` as a ``world x world`` list of non-negative ints; problems go to ``errors``."""
    try:
        if isinstance(sizes, torch.Tensor):
            if sizes.is_floating_point() or sizes.is_complex():
                raise TypeError("sizes must hold integers")
            rows = sizes.tolist()
        else:
            rows = [list(r) for r in sizes]
        rows = [[int(v) for v in r] for r in rows]
    except (TypeError, ValueError) as exc:
        errors.append(f"sizes must be a {world} x {world} nested list or LongTensor of ints ({exc})")
        return [[0] * world for _ in range(world)]
    if len(rows) != world or any(len(r) != world for r in rows):
        shape = f"{len(rows)} x " + "/".join(sorted({str(len(r)) for r in rows}) or ["0"])
        errors.append(f"sizes must be {world} x {world} (world size), got {shape}")
        rows = [(r + [0] * world)[:world] for r in rows] + [[0] * world] * world
        rows = rows[:world]
    if any(v < 0 for r in rows for v in r):
        errors.append("sizes must be non-negative")
        rows = [[max(v, 0) for v in r] for r in rows]
    return rows


def _global_rank(group, rank: int) -> int:
    return rank if group is None else _dist_global_rank(group, rank)


def _is_low_precision_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize < 4


def _to_front(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    """``tensor`` with ``dim`` moved first, contiguous (a no-op for contiguous dim-0 input)."""
    return (tensor if dim == 0 else tensor.movedim(dim, 0)).contiguous()


def _from_front(tensor: torch.Tensor, dim: int) -> torch.Tensor:
    return tensor if dim == 0 else tensor.movedim(0, dim).contiguous()


def _exchange(front: torch.Tensor, send: Sequence[int], recv: Sequence[int], group) -> torch.Tensor:
    """All-to-all of a dim-0-first contiguous tensor: ``send[j]`` rows to rank ``j``."""
    if len(send) == 1:
        # World size 1: nothing crosses a wire (validation made send == recv); return a fresh tensor.
        return front.clone()
    return all_to_all_single(front, output_split_sizes=list(recv), input_split_sizes=list(send), group=group)


# ---------------------------------------------------------------------------------------------
# cross-rank validation
# ---------------------------------------------------------------------------------------------

def _tensor_fields(tensor: torch.Tensor, dim: int) -> List[Field]:
    return [
        Field("dtype", [dtype_code(tensor.dtype)], lambda v: dtype_name(v[0])),
        Field("ndim", [tensor.dim()]),
        Field("dim", [dim]),
        Field("shape without dim", _shape_without(tensor.shape, dim), lambda v: str(tuple(x for x in v if x != -1))),
    ]


def _check_tensor(tensor, what: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")


# ---------------------------------------------------------------------------------------------
# raw (non-differentiable) kernels, dim-0-first contiguous tensors
# ---------------------------------------------------------------------------------------------

def _all_gather_front(front: torch.Tensor, sizes: List[int], rank: int, group) -> torch.Tensor:
    world = len(sizes)
    if world == 1:
        return front.clone()
    # Row size from the trailing shape, not from a row of this shard: an empty shard must take the same path.
    row_bytes = math.prod(front.shape[1:]) * front.element_size()
    if _ALL_GATHER_P2P and row_bytes * sum(sizes) >= _P2P_MIN_BYTES:
        return _all_gather_p2p(front, sizes, rank, group)
    n = front.shape[0]
    # all_to_all_single needs one contiguous send buffer holding a copy for every rank.
    send = front.unsqueeze(0).expand(world, *front.shape).reshape(world * n, *front.shape[1:])
    return _exchange(send, [n] * world, sizes, group)


def _all_gather_p2p(front: torch.Tensor, sizes: List[int], rank: int, group) -> torch.Tensor:
    """All-gather by point-to-point: the shard is sent as is to every peer and each peer's shard
    is received straight into its rows of the output, so no W-fold send buffer is built."""
    dev = comm_device(group)
    src = front if front.device == dev else front.to(dev)
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    out = torch.empty((offsets[-1],) + tuple(front.shape[1:]), dtype=front.dtype, device=dev)
    out[offsets[rank] : offsets[rank + 1]].copy_(src)
    ops = []
    for j in range(len(sizes)):
        if j == rank:
            continue
        peer = _global_rank(group, j)
        # Zero-size blocks are skipped on both sides alike, since every rank knows all sizes.
        if sizes[rank] > 0:
            ops.append(P2POp(isend_op, src, peer, group))
        if sizes[j] > 0:
            ops.append(P2POp(irecv_op, out[offsets[j] : offsets[j + 1]], peer, group))
    for work in batch_isend_irecv(ops):
        work.wait()
    return out if out.device == front.device else out.to(front.device)


def _reduce_scatter_front(front: torch.Tensor, sizes: List[int], rank: int, use_fp32: bool, group) -> torch.Tensor:
    world = len(sizes)
    n = sizes[rank]
    if world == 1:
        return front.clone()
    recv = _exchange(front, sizes, [n] * world, group).view(world, n, *front.shape[1:])
    if use_fp32 and _is_low_precision_float(front.dtype):
        return recv.sum(0, dtype=torch.float32).to(front.dtype)
    return recv.sum(0)


def _gather_front(front: torch.Tensor, sizes: List[int], rank: int, dst: int, group) -> torch.Tensor:
    world = len(sizes)
    send = [front.shape[0] if j == dst else 0 for j in range(world)]
    recv = list(sizes) if rank == dst else [0] * world
    return _exchange(front, send, recv, group)


def _scatter_front(front: torch.Tensor, sizes: List[int], rank: int, src: int, group) -> torch.Tensor:
    world = len(sizes)
    if rank == src:
        send = list(sizes)
    else:
        # Non-source ranks only carry dtype / trailing shape: send nothing.
        front = front[:0]
        send = [0] * world
    recv = [sizes[rank] if j == src else 0 for j in range(world)]
    return _exchange(front, send, recv, group)


# ---------------------------------------------------------------------------------------------
# autograd functions
# ---------------------------------------------------------------------------------------------

class AllGatherVAutograd(torch.autograd.Function):
    """All-gather of variable-size shards; backward is a reduce-scatter (sum over ranks)."""

    @staticmethod
    def forward(ctx, tensor, sizes, dim, use_fp32, group, rank):
        ctx.sizes, ctx.dim, ctx.use_fp32, ctx.group, ctx.rank = sizes, dim, use_fp32, group, rank
        return _from_front(_all_gather_front(_to_front(tensor, dim), sizes, rank, group), dim)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return (None,) * 6
        out = ReduceScatterVAutograd.apply(grad, ctx.sizes, ctx.dim, ctx.use_fp32, ctx.group, ctx.rank)
        return out, None, None, None, None, None


class ReduceScatterVAutograd(torch.autograd.Function):
    """Reduce-scatter to variable-size shards (adjoint of all-gather-v); backward is all-gather-v."""

    @staticmethod
    def forward(ctx, tensor, sizes, dim, use_fp32, group, rank):
        ctx.sizes, ctx.dim, ctx.use_fp32, ctx.group, ctx.rank = sizes, dim, use_fp32, group, rank
        return _from_front(_reduce_scatter_front(_to_front(tensor, dim), sizes, rank, use_fp32, group), dim)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return (None,) * 6
        out = AllGatherVAutograd.apply(grad, ctx.sizes, ctx.dim, ctx.use_fp32, ctx.group, ctx.rank)
        return out, None, None, None, None, None


class GatherVAutograd(torch.autograd.Function):
    """Gather of variable-size shards to ``dst``; backward scatters the gradient from ``dst``."""

    @staticmethod
    def forward(ctx, tensor, sizes, dim, dst, group, rank):
        ctx.sizes, ctx.dim, ctx.dst, ctx.group, ctx.rank = sizes, dim, dst, group, rank
        return _from_front(_gather_front(_to_front(tensor, dim), sizes, rank, dst, group), dim)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return (None,) * 6
        out = ScatterVAutograd.apply(grad, ctx.sizes, ctx.dim, ctx.dst, ctx.group, ctx.rank)
        return out, None, None, None, None, None


class ScatterVAutograd(torch.autograd.Function):
    """Scatter of variable-size shards from ``src``; backward gathers the gradient to ``src``."""

    @staticmethod
    def forward(ctx, tensor, sizes, dim, src, group, rank):
        ctx.sizes, ctx.dim, ctx.src, ctx.group, ctx.rank = sizes, dim, src, group, rank
        ctx.in_shape = tuple(tensor.shape)
        if rank == src:
            front = _to_front(tensor, dim)
        else:
            # Carrier tensor: only its dtype and trailing shape matter; avoid copying its rows.
            front = _to_front(tensor.narrow(dim, 0, 0), dim)
        return _from_front(_scatter_front(front, sizes, rank, src, group), dim)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return (None,) * 6
        out = GatherVAutograd.apply(grad, ctx.sizes, ctx.dim, ctx.src, ctx.group, ctx.rank)
        if ctx.rank != ctx.src and tuple(out.shape) != ctx.in_shape:
            # The carrier received no data, so its gradient is zero (in its own shape).
            out = grad.new_zeros(ctx.in_shape)
        return out, None, None, None, None, None


class AllToAllVAutograd(torch.autograd.Function):
    """Variable-size all-to-all; backward is the all-to-all with transposed ``sizes``."""

    @staticmethod
    def forward(ctx, tensor, sizes, dim, group, rank):
        ctx.sizes, ctx.dim, ctx.group, ctx.rank = sizes, dim, group, rank
        send = sizes[rank]
        recv = [row[rank] for row in sizes]
        return _from_front(_exchange(_to_front(tensor, dim), send, recv, group), dim)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return (None,) * 5
        transposed = [list(col) for col in zip(*ctx.sizes)]
        out = AllToAllVAutograd.apply(grad, transposed, ctx.dim, ctx.group, ctx.rank)
        return out, None, None, None, None


class IndexedAllToAllVAutograd(torch.autograd.Function):
    """All-to-all of indexed rows; backward sends gradients back and index-adds them (sums repeats)."""

    @staticmethod
    def forward(ctx, tensor, flat_index, sizes, use_fp32, dim, group, rank):
        ctx.sizes, ctx.use_fp32, ctx.dim, ctx.group, ctx.rank = sizes, use_fp32, dim, group, rank
        ctx.num_rows = tensor.shape[dim]
        ctx.save_for_backward(flat_index)
        front = _to_front(tensor, dim).index_select(0, flat_index)
        send = sizes[rank]
        recv = [row[rank] for row in sizes]
        return _from_front(_exchange(front, send, recv, group), dim)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[0]:
            return (None,) * 7
        (flat_index,) = ctx.saved_tensors
        rank, sizes, dim = ctx.rank, ctx.sizes, ctx.dim
        back = _exchange(_to_front(grad, dim), [row[rank] for row in sizes], sizes[rank], ctx.group)
        acc_dtype = torch.float32 if ctx.use_fp32 and _is_low_precision_float(grad.dtype) else grad.dtype
        out = torch.zeros((ctx.num_rows,) + tuple(back.shape[1:]), dtype=acc_dtype, device=back.device)
        out.index_add_(0, flat_index.to(back.device), back.to(acc_dtype))
        return _from_front(out.to(grad.dtype), dim), None, None, None, None, None, None


class AllReduceSumAutograd(torch.autograd.Function):
    """Sum over ranks, replicated on every rank; backward passes the (replicated) gradient through."""

    @staticmethod
    def forward(ctx, tensor, group):
        out = tensor.clone(memory_format=torch.contiguous_format)
        if get_world_size(group) > 1:
            all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad, None


# ---------------------------------------------------------------------------------------------
# public functions
# ---------------------------------------------------------------------------------------------

def all_gather_v(
    tensor: torch.Tensor,
    sizes: SizesLike,
    dim: int = 0,
    use_fp32: bool = True,
    group=None,
) -> torch.Tensor:
    """Concatenate every rank's shard along ``dim`` on every rank (differentiable).

    Args:
        tensor: this rank's shard; ``tensor.size(dim) == sizes[rank]``. Every rank passes the same
            dtype and the same sizes in every other dimension.
        sizes: ``W`` non-negative ints (list or 1-d LongTensor), ``sizes[r]`` = size of rank
            ``r``'s shard along ``dim``; identical on every rank.
        dim: the sharded dimension (negative allowed).
        use_fp32: sum float16 / bfloat16 gradients in float32 in the backward pass.
        group: process group (``None``: the default group).

    Returns:
        The full tensor, ``sum(sizes)`` along ``dim``, on every rank (on ``tensor``'s device).
        Backward: each rank receives the sum over all ranks of the gradient slice of its own
        shard (reduce-scatter-v).
    """
    what = "all_gather_v"
    _check_tensor(tensor, what)
    world, rank = get_world_size(group), get_rank(group)
    errors: List[str] = []
    dim_n, err = _norm_dim(dim, tensor.dim())
    if err:
        errors.append(err)
    sizes_l = _as_sizes(sizes, world, errors)
    if not err and not errors and tensor.shape[dim_n] != sizes_l[rank]:
        errors.append(f"tensor.size({dim})={tensor.shape[dim_n]} but sizes[{rank}]={sizes_l[rank]}")
    agree(what, group, errors, lambda: _tensor_fields(tensor, dim_n) + [Field("sizes", sizes_l)])
    return AllGatherVAutograd.apply(tensor, sizes_l, dim_n, use_fp32, group, rank)


def reduce_scatter_v(
    tensor: torch.Tensor,
    sizes: SizesLike,
    dim: int = 0,
    group=None,
    use_fp32: bool = True,
) -> torch.Tensor:
    """Sum every rank's full-size tensor and keep this rank's slice (adjoint of :func:`all_gather_v`).

    Args:
        tensor: a full-size tensor on every rank (different values per rank),
            ``tensor.size(dim) == sum(sizes)``.
        sizes: ``W`` non-negative ints, ``sizes[r]`` = size of rank ``r``'s slice along ``dim``.
        dim: the dimension that is split (negative allowed).
        group: process group.
        use_fp32: sum float16 / bfloat16 in float32 (then cast back).

    Returns:
        ``sum over ranks of tensor.narrow(dim, offset[rank], sizes[rank])`` with
        ``sizes[rank]`` along ``dim``. Backward: all-gather-v of the gradient.
    """
    what = "reduce_scatter_v"
    _check_tensor(tensor, what)
    world, rank = get_world_size(group), get_rank(group)
    errors: List[str] = []
    dim_n, err = _norm_dim(dim, tensor.dim())
    if err:
        errors.append(err)
    sizes_l = _as_sizes(sizes, world, errors)
    if not err and not errors and tensor.shape[dim_n] != sum(sizes_l):
        errors.append(f"tensor.size({dim})={tensor.shape[dim_n]} but sum(sizes)={sum(sizes_l)}")
    agree(what, group, errors, lambda: _tensor_fields(tensor, dim_n) + [Field("sizes", sizes_l)])
    return ReduceScatterVAutograd.apply(tensor, sizes_l, dim_n, use_fp32, group, rank)


def all_reduce_v(
    tensor: torch.Tensor,
    sizes: SizesLike,
    dim: int = 0,
    use_fp32: bool = True,
    group=None,
) -> torch.Tensor:
    """PhysicsNeMo's name ("AllReduceV", the backward of all-gather-v) for :func:`reduce_scatter_v`,
    with its argument order ``(tensor, sizes, dim, use_fp32, group)``.

    Args:
        tensor: a full-size tensor on every rank, ``tensor.size(dim) == sum(sizes)``.
        sizes: ``W`` non-negative ints, ``sizes[r]`` = size of rank ``r``'s slice along ``dim``.
        dim: the dimension that is split (negative allowed).
        use_fp32: sum float16 / bfloat16 in float32 (then cast back).
        group: process group.

    Returns:
        This rank's slice summed over ranks, ``sizes[rank]`` along ``dim``.
    """
    return reduce_scatter_v(tensor, sizes, dim=dim, group=group, use_fp32=use_fp32)


def gather_v(
    tensor: torch.Tensor,
    sizes: SizesLike,
    dim: int = 0,
    dst: int = 0,
    group=None,
) -> torch.Tensor:
    """Concatenate every rank's shard along ``dim`` on rank ``dst`` (differentiable).

    Args:
        tensor: this rank's shard, ``tensor.size(dim) == sizes[rank]``; same dtype and other
            sizes on every rank.
        sizes: ``W`` non-negative ints, identical on every rank.
        dim: the sharded dimension (negative allowed).
        dst: rank (in ``group``) that receives the full tensor.
        group: process group.

    Returns:
        On ``dst``: the full tensor with ``sum(sizes)`` along ``dim``. On every other rank: an
        empty tensor with size 0 along ``dim`` and the shard's other sizes, dtype and device
        (never uninitialised data). Backward: scatter-v of ``dst``'s gradient.
    """
    what = "gather_v"
    _check_tensor(tensor, what)
    world, rank = get_world_size(group), get_rank(group)
    errors: List[str] = []
    dim_n, err = _norm_dim(dim, tensor.dim())
    if err:
        errors.append(err)
    sizes_l = _as_sizes(sizes, world, errors)
    if not isinstance(dst, int) or not 0 <= dst < world:
        errors.append(f"dst={dst} is not a rank of a group of size {world}")
    elif not err and not errors and tensor.shape[dim_n] != sizes_l[rank]:
        errors.append(f"tensor.size({dim})={tensor.shape[dim_n]} but sizes[{rank}]={sizes_l[rank]}")
    dst_i = dst if isinstance(dst, int) else -1
    agree(what, group, errors, lambda: _tensor_fields(tensor, dim_n) + [Field("sizes", sizes_l), Field("dst", [dst_i])])
    return GatherVAutograd.apply(tensor, sizes_l, dim_n, dst, group, rank)


def scatter_v(
    tensor: torch.Tensor,
    sizes: SizesLike,
    dim: int = 0,
    src: int = 0,
    group=None,
) -> torch.Tensor:
    """Split ``src``'s tensor along ``dim`` into shards of ``sizes`` and send one to each rank.

    Only each rank's own slice travels.

    Args:
        tensor: on ``src``, the full tensor with ``sum(sizes)`` along ``dim``. On every other
            rank, a carrier that gives only dtype and the sizes of the other dimensions; its
            size along ``dim`` may be anything (0 is cheapest) and its values are never read.
        sizes: ``W`` non-negative ints, identical on every rank.
        dim: the dimension to split (negative allowed).
        src: rank (in ``group``) that holds the full tensor.
        group: process group.

    Returns:
        This rank's slice, ``sizes[rank]`` along ``dim``. Backward: gather-v of the gradients to
        ``src``; a carrier's gradient is zeros of its own shape.
    """
    what = "scatter_v"
    _check_tensor(tensor, what)
    world, rank = get_world_size(group), get_rank(group)
    errors: List[str] = []
    dim_n, err = _norm_dim(dim, tensor.dim())
    if err:
        errors.append(err)
    sizes_l = _as_sizes(sizes, world, errors)
    if not isinstance(src, int) or not 0 <= src < world:
        errors.append(f"src={src} is not a rank of a group of size {world}")
    elif rank == src and not err and not errors and tensor.shape[dim_n] != sum(sizes_l):
        errors.append(f"source tensor.size({dim})={tensor.shape[dim_n]} but sum(sizes)={sum(sizes_l)}")
    src_i = src if isinstance(src, int) else -1
    agree(what, group, errors, lambda: _tensor_fields(tensor, dim_n) + [Field("sizes", sizes_l), Field("src", [src_i])])
    return ScatterVAutograd.apply(tensor, sizes_l, dim_n, src, group, rank)


def _count_fields(tensor: torch.Tensor, dim: int, mat: List[List[int]], rank: int) -> List[Field]:
    return _tensor_fields(tensor, dim) + [
        Field("send counts", mat[rank], must_match=False),
        Field("receive counts", [row[rank] for row in mat], must_match=False),
    ]


def _pairwise_counts_check(per_rank: List[List[List[int]]]) -> Optional[str]:
    """Cross-check that what rank i sends to j equals what j expects from i."""
    bad = []
    for i, fields in enumerate(per_rank):
        send = fields[-2]
        for j in range(len(per_rank)):
            expected = per_rank[j][-1][i]
            if send[j] != expected:
                bad.append(f"rank {i} sends {send[j]} to rank {j}, which expects {expected}")
    return ("ranks disagree on sizes: " + "; ".join(bad[:8]) + (" ..." if len(bad) > 8 else "")) if bad else None


def all_to_all_v(
    tensor: torch.Tensor,
    sizes: SizesMatrixLike,
    dim: int = 0,
    group=None,
) -> torch.Tensor:
    """Variable-size all-to-all along ``dim`` (differentiable).

    Args:
        tensor: this rank's rows grouped by destination rank, in rank order:
            ``tensor.size(dim) == sum(sizes[rank])``.
        sizes: ``W x W`` nested list or LongTensor; ``sizes[i][j]`` = slices rank ``i`` sends to
            rank ``j``. Every rank passes the same matrix (only row ``rank`` and column ``rank``
            are used and checked on each rank).
        dim: the exchanged dimension (negative allowed).
        group: process group.

    Returns:
        The received blocks concatenated in source-rank order: ``sum_i sizes[i][rank]`` along
        ``dim``. Backward: the all-to-all with transposed ``sizes``.
    """
    what = "all_to_all_v"
    _check_tensor(tensor, what)
    world, rank = get_world_size(group), get_rank(group)
    errors: List[str] = []
    dim_n, err = _norm_dim(dim, tensor.dim())
    if err:
        errors.append(err)
    mat = _as_size_matrix(sizes, world, errors)
    if not err and not errors and tensor.shape[dim_n] != sum(mat[rank]):
        errors.append(f"tensor.size({dim})={tensor.shape[dim_n]} but sum(sizes[{rank}])={sum(mat[rank])}")
    agree(what, group, errors, lambda: _count_fields(tensor, dim_n, mat, rank), _pairwise_counts_check)
    return AllToAllVAutograd.apply(tensor, mat, dim_n, group, rank)


def indexed_all_to_all_v(
    tensor: torch.Tensor,
    indices: Sequence[torch.Tensor],
    sizes: SizesMatrixLike,
    use_fp32: bool = True,
    dim: int = 0,
    group=None,
) -> torch.Tensor:
    """Send ``tensor.index_select(dim, indices[j])`` to every rank ``j`` (differentiable).

    Args:
        tensor: this rank's local tensor (any size along ``dim``).
        indices: ``W`` integer tensors; ``indices[j]`` (1-d, values in
            ``[0, tensor.size(dim))``, repeats allowed) are the slices sent to rank ``j``.
        sizes: ``W x W`` nested list or LongTensor; ``sizes[i][j] = len(indices[j])`` on rank
            ``i``. Every rank passes the same matrix.
        use_fp32: accumulate float16 / bfloat16 gradients in float32 in the backward pass.
        dim: the indexed dimension (negative allowed).
        group: process group.

    Returns:
        The received blocks concatenated in source-rank order, ``sum_i sizes[i][rank]`` along
        ``dim``. Backward: gradients go back with the transposed all-to-all and are index-added
        into zeros, so a slice sent several times gets the sum of its gradients.
    """
    what = "indexed_all_to_all_v"
    _check_tensor(tensor, what)
    world, rank = get_world_size(group), get_rank(group)
    errors: List[str] = []
    dim_n, err = _norm_dim(dim, tensor.dim())
    if err:
        errors.append(err)
    mat = _as_size_matrix(sizes, world, errors)
    flat_index = None
    try:
        idx_list = list(indices)
    except TypeError:
        idx_list = None
        errors.append(f"indices must be a list of {world} integer tensors, got {type(indices).__name__}")
    if idx_list is not None:
        if len(idx_list) != world:
            errors.append(f"len(indices)={len(idx_list)} does not equal the world size {world}")
        elif not all(isinstance(i, torch.Tensor) and not i.is_floating_point() and not i.is_complex() and i.dim() <= 1 for i in idx_list):
            errors.append("indices must be 1-d integer tensors")
        else:
            counts = [int(i.numel()) for i in idx_list]
            if not errors and counts != mat[rank]:
                errors.append(f"index counts {counts} do not equal sizes[{rank}]={mat[rank]}")
            flat_index = torch.cat([i.reshape(-1).to(device=tensor.device, dtype=torch.int64) for i in idx_list]) \
                if idx_list else torch.zeros(0, dtype=torch.int64, device=tensor.device)
            if get_validation() and not err and flat_index.numel() > 0:
                lo, hi = int(flat_index.min()), int(flat_index.max())
                if lo < 0 or hi >= tensor.shape[dim_n]:
                    errors.append(f"indices must lie in [0, {tensor.shape[dim_n]}), got range [{lo}, {hi}]")
    agree(what, group, errors, lambda: _count_fields(tensor, dim_n, mat, rank), _pairwise_counts_check)
    return IndexedAllToAllVAutograd.apply(tensor, flat_index, mat, use_fp32, dim_n, group, rank)


def all_reduce_sum(tensor: torch.Tensor, group=None) -> torch.Tensor:
    """Sum ``tensor`` over ranks; every rank gets the sum (differentiable).

    Gradient convention (*replicated*): the output is one logical tensor held identically by
    every rank, and every rank calls backward with the same upstream gradient ``g`` (e.g. a loss
    computed from the replicated sum). The gradient with respect to each rank's input is then
    ``g`` itself, so backward is the identity and sends nothing. (Under the sum convention
    used by :func:`all_gather_v`, the gradient would be ``all_reduce(g)``, ``W`` times larger
    for identical ``g``.)

    Args:
        tensor: same shape and dtype on every rank.
        group: process group.

    Returns:
        A new tensor holding the elementwise sum over ranks, on ``tensor``'s device.
    """
    what = "all_reduce_sum"
    _check_tensor(tensor, what)
    shape = list(tensor.shape)
    fields = lambda: [  # noqa: E731
        Field("dtype", [dtype_code(tensor.dtype)], lambda v: dtype_name(v[0])),
        Field("ndim", [tensor.dim()]),
        Field("shape", _shape_without(shape + [0], len(shape)), lambda v: str(tuple(x for x in v if x != -1))),
    ]
    agree(what, group, [], fields)
    return AllReduceSumAutograd.apply(tensor, group)
