"""Shared machinery of the grid op families (conv, pool, pad, interpolate) on a ShardTensor
``[N, C, *spatial]`` (or unbatched ``[C, *spatial]``) sharded along one spatial dim.

Output ownership rule: every global output row along the sharded dim has an *anchor*, a global
input row that is non-decreasing in the output index (for a window op the window's start, for
``pad`` / ``interpolate`` the source row), clamped into ``[0, N)``. The rank owning the anchor owns
the output row. Output shards are therefore contiguous, cover the global output exactly once, and
every rank computes every rank's output size from the input shard sizes alone (no
communication). Each rank then fetches the input rows its outputs read (its own rows plus halos,
from as many ranks as needed when shards are thin) with
:func:`meshshard.distributed.neighbors.fetch_ranges` and runs the torch op locally.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from meshshard.distributed.neighbors import fetch_ranges
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import shard_dim_of
from meshshard.tensor._ops._common import WAY_OUT, is_replicated, local_of, op_name, reference

__all__ = ["GridInput", "grid_input", "bind", "tuple_of", "owned_outputs", "fetch", "keep_connected", "empty_output",
           "param_local", "wrap_grid"]


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


class GridInput:
    """A ShardTensor grid input, unpacked.

    Args:
        func: the torch function (for messages).
        x: the input ShardTensor.
        nd: number of spatial dims the op works on (the last ``nd`` dims); ``x.dim()`` for an op
            that treats every dim alike (``pad``).

    Attributes: ``x``, ``ref``, ``nd``, ``sd`` (``(mesh_dim, tensor_dim)`` or ``None``),
    ``j`` (index of the sharded dim among the spatial dims, ``None`` when a batch dim or nothing
    is sharded), ``sizes`` (shard sizes), ``n`` (global length), ``coord``, ``group``, ``local``.
    """

    def __init__(self, func, x, nd: int):
        if not isinstance(x, ShardTensor):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter (only the "
                                      "input may be a ShardTensor); use .to_local()")
        self.func, self.x, self.nd = func, x, nd
        self.ref = reference(func, [x])
        self.sd = shard_dim_of(x.placements)
        if x.dim() not in (nd, nd + 1, nd + 2):
            raise ValueError(f"ShardTensor: {op_name(func)} expects a {nd + 1}-d or {nd + 2}-d input, got shape "
                             f"{tuple(x.shape)}")
        first_spatial = x.dim() - nd
        self.j = None
        if self.sd is not None:
            d = self.sd[1]
            if d >= first_spatial:
                self.j = d - first_spatial
            elif x.dim() == nd + 2 and d == 1:
                raise NotImplementedError(f"ShardTensor: {op_name(func)} on a tensor sharded along its channel dim; "
                                          f"shard a spatial (or the batch) dim instead; {WAY_OUT}")
            self.sizes = list(x._shard_sizes)
            self.n = int(x.shape[d])
            self.coord = x.device_mesh.get_local_rank(self.sd[0])
            self.group = x.device_mesh.get_group(self.sd[0])
        self.local = x.to_local()

    @property
    def dim(self) -> int:
        """The sharded tensor dim."""
        return self.sd[1]

    def offset(self, r: int) -> int:
        """Global start of rank ``r``'s rows."""
        return sum(self.sizes[:r])


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


def owned_outputs(g: GridInput, anchors: torch.Tensor) -> List[int]:
    """Output rows of every rank along the sharded dim.

    Args:
        g: the grid input.
        anchors: ``[n_out]`` int64 global input row of every output row, non-decreasing
            (clamped here into ``[0, N)``).

    Returns:
        ``W`` counts: rank ``r`` owns the outputs whose anchor lies in its rows.
    """
    if g.n == 0:
        raise ValueError(f"ShardTensor: {op_name(g.func)} of a tensor with 0 rows along the sharded dim {g.dim}")
    ends = torch.tensor(g.sizes, dtype=torch.long).cumsum(0)
    owner = torch.searchsorted(ends, anchors.clamp(0, g.n - 1), right=True)
    return torch.bincount(owner, minlength=len(g.sizes)).tolist()


def fetch(g: GridInput, windows: Sequence[Sequence[Tuple[int, int]]]) -> torch.Tensor:
    """Rows ``windows[coord]`` of the global input (every rank passes every rank's windows).

    Args:
        g: the grid input.
        windows: per rank, its global ``(start, stop)`` ranges (clipped to ``[0, N)`` here).

    Returns:
        The local tensor with the fetched rows along the sharded dim, in range order.
    """
    clipped = [[(min(max(a, 0), g.n), min(max(b, 0), g.n)) for a, b in w] for w in windows]
    clipped = [[(a, max(a, b)) for a, b in w] for w in clipped]
    return fetch_ranges(g.local, g.sizes, clipped, dim=g.dim, group=g.group)


def keep_connected(out: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    """``out`` made to depend on ``inputs`` (adds 0): a rank that computes nothing from its fetched
    rows must still run the backward of the exchange, which is a collective, and its weights get a
    zero gradient (not ``None``) for the caller's all-reduce."""
    for t in inputs:
        if t is not None and t.requires_grad:
            out = out + t.reshape(-1)[:0].sum()  # an empty sum: exactly 0 even if t holds inf or nan
    return out


def empty_output(g: GridInput, call, win: torch.Tensor, rows: int, *params) -> torch.Tensor:
    """The local output of a rank that owns no output row: ``call`` on ``rows`` zero rows (to learn
    the other dims' sizes), cut to 0 rows, linked to the fetched rows and the weights.

    Args:
        g: the grid input.
        call: the local op, ``call(tensor) -> tensor``.
        win: the fetched (here: empty) rows.
        rows: rows along the sharded dim that give ``call`` a non-empty output.
        params: weights to link (zero gradients).

    Returns:
        The empty local output.
    """
    shape = list(win.shape)
    shape[g.dim] = rows
    with torch.no_grad():
        probe = call(win.new_zeros(shape))
    return keep_connected(probe.narrow(g.dim, 0, 0), win, *params)


def param_local(func, p, g: GridInput):
    """A weight / bias argument as a plain local tensor (replicated ShardTensors allowed)."""
    if isinstance(p, ShardTensor):
        if not is_replicated(p):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a sharded weight; weights must be "
                                      "plain or replicated tensors")
        return local_of(func, p, g.ref)
    return p


def wrap_grid(g: GridInput, out: torch.Tensor, out_sizes) -> ShardTensor:
    """Wrap a local grid result; ``out_sizes``: every rank's output rows along the sharded dim
    (``None``: unchanged layout, for a sharded batch dim or a replicated input)."""
    mesh, placements = g.x.device_mesh, tuple(g.x.placements)
    sizes = g.x._shard_sizes if out_sizes is None else tuple(int(s) for s in out_sizes)
    if g.sd is not None and out.shape[g.dim] != sizes[g.coord]:
        raise RuntimeError(f"ShardTensor: {op_name(g.func)}: local output has {out.shape[g.dim]} rows, expected {sizes[g.coord]}")
    return _FromLocal.apply(out, mesh, placements, sizes)

