"""Helpers every ShardTensor op family uses: unwrap arguments to local tensors laid out like a
reference ShardTensor, and wrap local results back with that layout.

Checks that keep results exact:

* ShardTensors combined element-wise must have the same layout (placements and every rank's
  shard size); different shard boundaries raise ValueError instead of pairing wrong rows.
* A plain tensor (or a fully replicated ShardTensor) is a replicated value: it broadcasts along
  the feature dims; if it spans the sharded dim with the global size, each rank uses its own rows.
  A replicated ShardTensor's gradient is summed over the shard group in backward (exact); a plain
  tensor's gradient is this rank's partial sum (all-reduce it, as in DDP).
"""
from __future__ import annotations

import types
import warnings

import torch
from torch.utils import _pytree as pytree

from meshshard.distributed import Partial, Replicate, Shard
from meshshard.tensor import _registry as reg
from meshshard.tensor import promotion_mode as _promotion
from meshshard.tensor.promotion_mode import PromotionWarning
from meshshard.tensor.shard_tensor import _FromLocal
from meshshard.tensor.spec import shard_dims_of, sizes_by_mesh_dim

__all__ = ["WAY_OUT", "PromotionWarning", "promote_plain", "layout", "is_replicated", "op_name", "reference", "local_of", "align_plain", "wrap",
           "norm_dims", "register"]

WAY_OUT = ("register a handler with ShardTensor.register_function_handler, or redistribute / "
            "full_tensor() first")


def layout(st):
    """The layout that must match for element-wise pairing: (mesh, placements, shard sizes)."""
    return (st.device_mesh, tuple(st.placements), st._shard_sizes)


def is_replicated(st) -> bool:
    """True when every placement is Replicate."""
    return all(isinstance(p, Replicate) for p in st.placements)


def op_name(func) -> str:
    """A readable name of ``func`` for error messages."""
    names = reg.function_names(func)
    return names[-1]


def reference(func, sts):
    """The ShardTensor whose layout the result takes (the first sharded one)."""
    for st in sts:
        if any(isinstance(p, Partial) for p in st.placements):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} on a Partial ShardTensor; call "
                                      ".redistribute(placements=(Replicate(),)) or .full_tensor() first")
    for st in sts:
        if shard_dims_of(st.placements):
            return st
    return sts[0]


def local_of(func, st, ref, align: bool = False):
    """Differentiable local tensor of ``st`` for a computation laid out like ``ref``.

    With ``align`` (element-wise ops), a replicated ``st`` that spans the sharded dim with the
    global size contributes only this rank's rows, exactly like a plain tensor."""
    if layout(st) == layout(ref):
        return st.to_local()
    if st.device_mesh == ref.device_mesh and tuple(st.placements) == tuple(ref.placements):
        # The same sharded dims with other boundaries (a U-Net's upsampled branch meeting its skip
        # connection): move st's rows onto ref's boundaries (exact, differentiable), as DTensor
        # redistributes an operand rather than refuse.
        return _rebalanced_like(st, ref).to_local()
    if is_replicated(st) and st.device_mesh == ref.device_mesh:
        # A replicated value feeding sharded rows: each rank's gradient is a partial sum, so
        # declare it Partial on the sharding mesh dim and let backward all-reduce it.
        grad_pl = tuple(Partial() if isinstance(p, Shard) else Replicate() for p in ref.placements)
        local = st.to_local(grad_placements=grad_pl)
        return align_plain(func, local, ref) if align else local
    raise ValueError(
        f"ShardTensor: {op_name(func)} on ShardTensors with different layouts: {st.placements} with shard "
        f"sizes {st._shard_sizes} vs {ref.placements} with shard sizes {ref._shard_sizes}. Shard "
        "boundaries must match element by element; redistribute one of them first "
        "(x.redistribute(placements=..., sharding_shapes=y.sharding_shapes())).")


def _rebalanced_like(st, ref):
    """``st`` redistributed onto ``ref``'s shard sizes (same placements, same mesh)."""
    ref_sizes = sizes_by_mesh_dim(ref.placements, ref._shard_sizes)
    shapes = {}
    for m, d in shard_dims_of(ref.placements):
        if st.shape[d] != ref.shape[d]:
            raise ValueError(f"ShardTensor: tensors sharded along dim {d} with global sizes {st.shape[d]} and "
                             f"{ref.shape[d]} cannot be paired row by row")
        shapes[m] = [tuple(n if i == d else s for i, s in enumerate(st._local_tensor.shape)) for n in ref_sizes[m]]
    return st.redistribute(placements=ref.placements, sharding_shapes=shapes)


def _is_parameter(t: torch.Tensor) -> bool:
    """An ``nn.Parameter`` or a view of one (``self.placeholder[None, None, :]``): replicated by contract."""
    return isinstance(t, torch.nn.Parameter) or isinstance(getattr(t, "_base", None), torch.nn.Parameter)


def promote_plain(func, t: torch.Tensor, ref):
    """The promotion rule for a plain tensor ``t`` meeting ShardTensors laid out like ``ref``:
    it is a Replicate value, so each rank uses the rows that meet its shard (:func:`align_plain`).
    Unless it is 0-d, an ``nn.Parameter`` or a view of one (``self.pos[None]``), the promotion mode
    (:func:`meshshard.tensor.set_promotion`) says whether to warn once per op with
    :class:`PromotionWarning` (``"warn"``, the default), raise a TypeError naming the op
    (``"raise"``) or say nothing (``"silent"``).

    Args:
        func: the op, for the message.
        t: the plain tensor.
        ref: the reference ShardTensor.

    Returns:
        ``t`` aligned with this rank's shard.
    """
    mode = _promotion.get_promotion()
    if _is_parameter(t):
        return align_plain(func, t, ref)
    if t.dim() > 0 and mode == "raise":
        raise TypeError(f"ShardTensor: {op_name(func)} mixes a plain tensor of shape {tuple(t.shape)} with a "
                        "ShardTensor, and the promotion mode is 'raise'. Wrap the plain tensor with "
                        "ShardTensor.from_local(t, mesh, (Replicate(),)) (every rank passes the same value), or "
                        "allow the promotion with meshshard.tensor.promotion('warn') / ('silent')")
    if t.dim() > 0 and mode == "warn":
        warnings.warn(f"ShardTensor: {op_name(func)} mixes a plain tensor with a ShardTensor; the plain tensor "
                      "is promoted to Replicate, so every rank must pass the same value (wrap it with "
                      "ShardTensor.from_local(t, mesh, (Replicate(),)) to state that and get an exact gradient)",
                      PromotionWarning, stacklevel=4)
    return align_plain(func, t, ref)


def align_plain(func, t: torch.Tensor, ref):
    """Rows of a plain (replicated) tensor that meet this rank's shard under broadcasting."""
    per_dim = sizes_by_mesh_dim(ref.placements, ref._shard_sizes)
    for m, d in shard_dims_of(ref.placements):
        k = t.dim() - (ref.dim() - d)
        if k < 0 or t.shape[k] == 1:
            continue
        if t.shape[k] != ref.shape[d]:
            raise ValueError(f"ShardTensor: {op_name(func)}: plain tensor of shape {tuple(t.shape)} does not "
                             f"broadcast against the global shape {tuple(ref.shape)} along the sharded dim {d}")
        t = t.narrow(k, ref.offsets(m), per_dim[m][ref.device_mesh.get_local_rank(m)])
    return t


def wrap(func, out, ref, shard_shift: int = 0, placements=None):
    """Wrap local results with ``ref``'s layout (every sharded dim moved by ``shard_shift``, or
    the given ``placements`` with ``ref``'s shard sizes per mesh dim)."""
    mesh, ref_placements, sizes = layout(ref)
    if placements is None:
        placements = tuple(Shard(p.dim + shard_shift) if isinstance(p, Shard) and shard_shift else p
                           for p in ref_placements)
    per_dim = sizes_by_mesh_dim(ref_placements, sizes)
    sds = shard_dims_of(placements)

    def wrap(t):
        if not isinstance(t, torch.Tensor):
            return t
        for m, d in sds:
            if t.dim() <= d or t.shape[d] != per_dim[m][mesh.get_local_rank(m)]:
                raise NotImplementedError(f"ShardTensor: {op_name(func)} changed the sharded dim "
                                          f"({tuple(t.shape)}); it is not a supported row-wise op; {WAY_OUT}")
        return _FromLocal.apply(t, mesh, placements, sizes)

    return pytree.tree_map(wrap, out)

def norm_dims(dims, ndim):
    """``dims`` (int, list or None) as a sorted list of non-negative dims of an ``ndim``-dim tensor."""
    if dims is None:
        return None
    if isinstance(dims, int):
        dims = [dims]
    return sorted({int(x) % max(ndim, 1) for x in dims})



def _replaced_torch_builtin(f):
    """The C function that ``torch.<name>`` was before a library replaced it with the Python
    wrapper ``f``, or None. torch_geometric does this to ``torch.select`` and ``torch.index_select``
    on import; the wrapper calls the original, and the original is what ``__torch_function__``
    receives, so a handler keyed only by the wrapper would never be found."""
    if isinstance(f, types.BuiltinFunctionType):
        return None
    for name, value in vars(torch).items():
        if value is f:
            return getattr(torch._C._VariableFunctions, name, None)
    return None


def register(handler, funcs) -> None:
    """Register ``handler`` as meshshard's built-in handler for every function in ``funcs``
    (``None`` entries, functions this torch lacks, are skipped), and for the torch builtin behind
    a ``torch.<name>`` that another library wrapped before meshshard was imported."""
    for f in funcs:
        if f is not None:
            reg.BUILTIN_FUNCTION_HANDLERS[f] = handler
            original = _replaced_torch_builtin(f)
            if original is not None:
                reg.BUILTIN_FUNCTION_HANDLERS[original] = handler
