"""Shared machinery of the grid op families (conv, conv_transpose, pool, pad, interpolate) on a
ShardTensor ``[N, C, *spatial]`` (or unbatched ``[C, *spatial]``) sharded along one spatial dim,
or along several spatial dims by several mesh dims (an image split in height and width on a 2-D
mesh, ``(Shard(2), Shard(3))``).

Every sharded dim is an :class:`Axis`, handled on its own (the grid ops are separable along the
sharded dims: a window or a source row along one dim does not depend on the position along the
others). Output ownership rule along one axis: every global output row has an *anchor*, a global
input row that is non-decreasing in the output index (for a window op the window's start, for
``pad`` / ``interpolate`` the source row), clamped into ``[0, N)``. The rank owning the anchor owns
the output row. Output shards are therefore contiguous, cover the global output exactly once,
and every rank computes every rank's output size from the input shard sizes alone (no
communication). Each rank then fetches the input rows its outputs read (its own rows plus halos,
from as many ranks as needed when shards are thin) with
:func:`meshshard.distributed.neighbors.fetch_ranges`, one sharded dim at a time inside that mesh
dim's group (the second fetch works on the rows the first one brought, so the corner blocks come
along), and runs the torch op locally.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from meshshard.distributed.neighbors import fetch_ranges
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import pack_sizes, shard_dims_of, sizes_by_mesh_dim
from meshshard.tensor._ops._common import WAY_OUT, is_replicated, local_of, op_name, reference

__all__ = ["Axis", "GridInput", "grid_input", "bind", "tuple_of", "starts_of", "fetch", "keep_connected",
           "empty_output", "param_local", "wrap_grid"]

Windows = Sequence[Sequence[Tuple[int, int]]]


def bind(names: Sequence[str], defaults: dict, args, kwargs) -> dict:
    """Arguments of a torch function as a dict (positional ``args`` named by ``names``)."""
    out = dict(defaults)
    out.update(zip(names, args))
    out.update(kwargs)
    return out


def tuple_of(v, n: int, what: str) -> Tuple[int, ...]:
    """``v`` (int or sequence) as an ``n``-tuple of ints."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return (int(v),) * n
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"{what} has {len(v)} entries for {n} spatial dims")
    return v


def starts_of(counts: Sequence[int]) -> List[int]:
    """Exclusive prefix sums: the first global output row of every rank."""
    return [sum(counts[:r]) for r in range(len(counts))]


class Axis:
    """One sharded tensor dim of a grid input.

    Attributes: ``m`` (mesh dim), ``d`` (tensor dim), ``j`` (index among the spatial dims the op
    works on, ``None`` for a dim before them: the batch dim), ``sizes`` (every rank's rows along
    ``d``), ``n`` (global length), ``coord`` (this rank's index in the mesh dim), ``group``.
    """

    def __init__(self, func, mesh, m: int, d: int, j: Optional[int], sizes: Sequence[int]):
        self.func, self.m, self.d, self.j = func, m, d, j
        self.sizes = [int(v) for v in sizes]
        self.n = sum(self.sizes)
        self.coord = mesh.get_local_rank(m)
        self.group = mesh.get_group(m)

    def offset(self, r: Optional[int] = None) -> int:
        """Global start of rank ``r``'s rows (this rank's by default)."""
        return sum(self.sizes[: self.coord if r is None else r])

    def owned(self, anchors: torch.Tensor) -> List[int]:
        """Output rows of every rank along this dim.

        Args:
            anchors: ``[n_out]`` int64 global input row of every output row, non-decreasing
                (clamped here into ``[0, N)``).

        Returns:
            ``W`` counts: rank ``r`` owns the outputs whose anchor lies in its rows.
        """
        if self.n == 0:
            raise ValueError(f"ShardTensor: {op_name(self.func)} of a tensor with 0 rows along the sharded dim "
                             f"{self.d}")
        ends = torch.tensor(self.sizes, dtype=torch.long).cumsum(0)
        owner = torch.searchsorted(ends, anchors.clamp(0, self.n - 1), right=True)
        return torch.bincount(owner, minlength=len(self.sizes)).tolist()


class GridInput:
    """A ShardTensor grid input, unpacked.

    Args:
        func: the torch function (for messages).
        x: the input ShardTensor.
        nd: number of spatial dims the op works on (the last ``nd`` dims); ``x.dim()`` for an op
            that treats every dim alike (``pad``).

    Attributes: ``x``, ``ref``, ``nd``, ``first`` (first spatial tensor dim), ``axes`` (every
    sharded dim as an :class:`Axis`, in mesh-dim order), ``spatial`` (the axes along spatial
    dims), ``local`` (this rank's tensor).
    """

    def __init__(self, func, x, nd: int):
        if not isinstance(x, ShardTensor):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter (only the "
                                      "input may be a ShardTensor); use .to_local()")
        self.func, self.x, self.nd = func, x, nd
        self.ref = reference(func, [x])
        if x.dim() not in (nd, nd + 1, nd + 2):
            raise ValueError(f"ShardTensor: {op_name(func)} expects a {nd + 1}-d or {nd + 2}-d input, got shape "
                             f"{tuple(x.shape)}")
        self.first = x.dim() - nd
        per_dim = sizes_by_mesh_dim(x.placements, x._shard_sizes)
        self.axes: List[Axis] = []
        for m, d in shard_dims_of(x.placements):
            if d < self.first and x.dim() == nd + 2 and d == 1:
                raise NotImplementedError(f"ShardTensor: {op_name(func)} on a tensor sharded along its channel dim; "
                                          f"shard a spatial (or the batch) dim instead; {WAY_OUT}")
            j = d - self.first if d >= self.first else None
            self.axes.append(Axis(func, x.device_mesh, m, d, j, per_dim[m]))
        self.spatial = [ax for ax in self.axes if ax.j is not None]
        self.local = x.to_local()

    def axis(self, d: int) -> Optional[Axis]:
        """The axis of tensor dim ``d``, or ``None`` when ``d`` is not sharded."""
        for ax in self.axes:
            if ax.d == d:
                return ax
        return None


def grid_input(func, x, nd: int) -> GridInput:
    """:class:`GridInput` of ``x`` for ``func`` working on the last ``nd`` dims.

    Args:
        func: the torch function.
        x: the input ShardTensor ``[N, C, *spatial]`` or ``[C, *spatial]``.
        nd: number of spatial dims.

    Returns:
        The unpacked input.
    """
    return GridInput(func, x, nd)


def fetch(g: GridInput, windows: Dict[int, Windows], local: torch.Tensor | None = None) -> torch.Tensor:
    """The rows every rank needs, fetched along each sharded dim in turn (mesh-dim order, inside that
    mesh dim's group; each fetch works on what the previous ones brought, so corner blocks come too).

    Args:
        g: the grid input.
        windows: ``{tensor dim: per rank, its global (start, stop) ranges}`` (every rank passes every
            rank's ranges; clipped to ``[0, N)`` here). Sharded dims without an entry keep their rows.
        local: this rank's rows to start from (default ``g.local``; the same shape).

    Returns:
        The local tensor with the fetched rows along each listed dim, in range order.
    """
    local = g.local if local is None else local
    for ax in g.axes:
        if ax.d not in windows:
            continue
        clipped = [[(min(max(a, 0), ax.n), min(max(b, 0), ax.n)) for a, b in w] for w in windows[ax.d]]
        clipped = [[(a, max(a, b)) for a, b in w] for w in clipped]
        local = fetch_ranges(local, ax.sizes, clipped, dim=ax.d, group=ax.group)
    return local


def keep_connected(out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    """``out`` made to depend on ``inputs`` (adds 0): a rank that computes nothing from its fetched
    rows must still run the backward of the exchange, which is a collective, and its weights get a
    zero gradient (not ``None``) for the caller's all-reduce."""
    for t in inputs:
        if t is not None and t.requires_grad:
            out = out + t.reshape(-1)[:0].sum()  # an empty sum: exactly 0 even if t holds inf or nan
    return out


def empty_output(call, win: torch.Tensor, rows: Dict[int, int], *params) -> torch.Tensor:
    """The local output of a rank that owns no output row along some sharded dims: ``call`` on zero
    input with ``rows[d]`` rows along each such dim ``d`` (to learn the other dims' sizes), cut to 0
    rows along them, linked to the fetched rows and the weights.

    Args:
        call: the local op, ``call(tensor) -> tensor``.
        win: the fetched rows (empty along the dims of ``rows``).
        rows: ``{tensor dim: rows that give call a non-empty output along it}``.
        params: weights to link (zero gradients).

    Returns:
        The empty local output.
    """
    shape = list(win.shape)
    for d, r in rows.items():
        shape[d] = r
    with torch.no_grad():
        probe = call(win.new_zeros(shape))
    for d in rows:
        probe = probe.narrow(d, 0, 0)
    return keep_connected(probe, win, *params)


def param_local(func, p, g: GridInput):
    """A weight / bias argument as a plain local tensor; a replicated ShardTensor weight gets its
    gradient summed over the ranks (``local_of`` declares it Partial on every sharding mesh dim)."""
    if isinstance(p, ShardTensor):
        if not is_replicated(p):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a sharded weight; weights must be "
                                      "plain or replicated tensors")
        return local_of(func, p, g.ref)
    return p


def wrap_grid(g: GridInput, out: torch.Tensor, counts: Optional[Dict[int, Sequence[int]]] = None) -> ShardTensor:
    """Wrap a local grid result.

    Args:
        g: the grid input.
        out: this rank's local result.
        counts: ``{tensor dim: every rank's output rows along it}``; sharded dims without an entry
            (a sharded batch dim, a dim the op leaves alone) keep their shard sizes.

    Returns:
        The result ShardTensor, with the input's mesh and placements.
    """
    counts = counts or {}
    placements = tuple(g.x.placements)
    per_dim = list(sizes_by_mesh_dim(placements, g.x._shard_sizes))
    for ax in g.axes:
        sizes = [int(v) for v in counts.get(ax.d, ax.sizes)]
        if out.shape[ax.d] != sizes[ax.coord]:
            raise RuntimeError(f"ShardTensor: {op_name(g.func)}: local output has {out.shape[ax.d]} rows along dim "
                               f"{ax.d}, expected {sizes[ax.coord]}")
        per_dim[ax.m] = sizes
    return _FromLocal.apply(out, g.x.device_mesh, placements, pack_sizes(placements, per_dim))
