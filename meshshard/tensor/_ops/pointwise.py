"""Element-wise ops (``add``, activations, ``where``, ``masked_fill``, dtype casts, comparisons ...):
local, layout kept.

Pairing the operands (every ShardTensor and plain tensor of one call, broadcast as torch does,
dims aligned from the right):

* Operands sharded alike (each sharding mesh dim shards the same right-aligned dim with the same
  shard sizes) pair rows locally; fully replicated operands and plain tensors (promoted to
  Replicate, see :func:`meshshard.tensor.set_promotion`) contribute the rows that meet this rank's
  shard.
* Operands sharded on *different* dims (or by different mesh dims), such as the pairwise
  differences ``x[:, None] - y[None, :]`` of two sharded point sets ``[N, 3]`` and ``[M, 3]``, follow
  DTensor's rule: the cheaper side is redistributed to Replicate and the other keeps its sharding.
  Cheaper means fewer bytes (global element count times element size) to gather; on a tie the
  operand that comes first in the call keeps its sharding. Every rank takes the same decision
  (it depends on global shapes only). Values are exact; the gathered operand's gradient is summed
  over the ranks and sliced back to its shards, so it is exact too. The cost is one all-gather of
  the cheaper operand: to avoid it, gather or redistribute yourself first.
* Operands sharding the *same* dims with different shard boundaries (a U-Net's upsampled branch
  and its skip connection) pair after the later operand's rows move onto the reference's
  boundaries (one exact, differentiable rebalance).
* In-place variants (``x.relu_()``, ``x += y``, ``F.relu(x, inplace=True)``) compute out of place
  and copy the result into the ShardTensor under autograd, so its history continues exactly.

Dtype casts (``to``, ``type_as``, ``float`` ...) read only the dtype / device of a tensor argument,
so it is not promoted. ``torch.where(condition)`` with one argument (indices of the local rows)
is refused. On Partial tensors only the linear ops run (sum / difference of two of one layout,
product with / quotient by a Python number, negation, ``clone`` / ``contiguous``), staying Partial.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from meshshard.distributed import Partial, Replicate, Shard
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal, assign_inplace
from meshshard.tensor.spec import shard_dims_of
from meshshard.tensor._ops._common import (WAY_OUT, is_replicated, layout, local_of, op_name, promote_plain,
                                          reference, register, wrap)

__all__ = ["pointwise_handler", "cast_handler", "broadcast_layouts", "POINTWISE_NAMES"]


_ADD = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.sub, torch.Tensor.sub,
        torch.subtract, torch.Tensor.subtract, torch.Tensor.__sub__}
_SCALE = {torch.mul, torch.Tensor.mul, torch.multiply, torch.Tensor.multiply, torch.Tensor.__mul__,
          torch.Tensor.__rmul__, torch.div, torch.Tensor.div, torch.divide, torch.Tensor.divide,
          torch.true_divide, torch.Tensor.true_divide, torch.Tensor.__truediv__}
_NEG = {torch.neg, torch.Tensor.neg, torch.negative, torch.Tensor.negative, torch.Tensor.__neg__}
_COPY = {torch.clone, torch.Tensor.clone, torch.Tensor.contiguous}
_WHERE = {torch.where, torch.Tensor.where}


def _partial_linear(func, args, kwargs):
    """Linear ops on Partial tensors stay Partial (no all-reduce): the sum or difference of two
    ShardTensors of the same layout, a product with / quotient by a Python number, a negation, a
    copy. ``None`` when ``func(args)`` is not one of them."""
    a = args[0] if args else None
    if not isinstance(a, ShardTensor):
        return None
    b = args[1] if len(args) > 1 else None
    if func in _COPY and len(args) == 1 and set(kwargs) <= {"memory_format"}:
        out = func(a.to_local(), **kwargs)
    elif kwargs:
        return None
    elif func in _ADD and len(args) == 2 and isinstance(b, ShardTensor) and layout(a) == layout(b):
        out = func(a.to_local(), b.to_local())
    elif func in _SCALE and len(args) == 2 and isinstance(b, (int, float)) and not isinstance(b, bool):
        out = func(a.to_local(), b)
    elif func in _NEG and len(args) == 1:
        out = func(a.to_local())
    else:
        return None
    mesh, placements, sizes = layout(a)
    return _FromLocal.apply(out, mesh, placements, sizes)


def _out_of_place(func, kwargs):
    """The out-of-place twin of an in-place element-wise op (``relu_``, ``x += y``,
    ``F.relu(x, inplace=True)``), with its kwargs; ``None`` for an op that is not in-place."""
    if kwargs.get("inplace") is True:
        return func, {k: v for k, v in kwargs.items() if k != "inplace"}
    name = getattr(func, "__name__", "")
    if name.startswith("__i") and name.endswith("__"):
        twin = getattr(torch.Tensor, "__" + name[3:], None)
    elif name.endswith("_") and not name.endswith("__"):
        twin = getattr(torch.Tensor, name[:-1], None)
    else:
        return None
    return (twin, kwargs) if twin is not None else None


def _inplace(func, types, args, kwargs, twin):
    """An in-place element-wise op on a ShardTensor: the out-of-place result, assigned to the
    ShardTensor by one ``copy_`` that autograd records on it, so its history continues from the
    result (as in-place ops on plain tensors do) and backward stays exact."""
    x = args[0] if args else kwargs.get("input")
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: in-place {op_name(func)} on a plain tensor with a ShardTensor "
                                  "argument would write rows of other ranks into it; use the out-of-place op")
    out = pointwise_handler(twin[0], types, args, twin[1])
    if not isinstance(out, ShardTensor) or layout(out) != layout(x) or out.dtype != x.dtype:
        raise NotImplementedError(f"ShardTensor: in-place {op_name(func)} would change the tensor's layout or dtype; "
                                  "use the out-of-place op")
    return assign_inplace(x, out)


def _aligned(st):
    """The pairing key of a ShardTensor: its mesh and each placement with a Shard dim counted from
    the right (broadcasting aligns trailing dims). Operands with one key but other shard sizes
    pair too: :func:`~meshshard.tensor._ops._common.local_of` moves their rows onto the
    reference's boundaries."""
    pl = tuple(("S", p.dim - st.dim()) if isinstance(p, Shard) else type(p).__name__ for p in st.placements)
    return st.device_mesh, pl


def _nbytes(st) -> int:
    return st.numel() * st.element_size()


def broadcast_layouts(func, sts):
    """Which ShardTensor operands of an element-wise op keep their sharding and which are gathered.

    Args:
        func: the op, for messages.
        sts: the ShardTensor operands (none Partial), in call order.

    Returns:
        ``(ref, gather)``: the operand whose layout the result takes, and the ids of the operands
        to redistribute to Replicate first (DTensor's rule: the cheaper side, by bytes; see the
        module docstring).

    Raises:
        ValueError: operands on different device meshes.
    """
    sharded = [st for st in sts if shard_dims_of(st.placements)]
    if not sharded:
        return sts[0], set()
    groups = []  # [(aligned key, [operands])] in call order
    for st in sharded:
        key = _aligned(st)
        for k, members in groups:
            if k == key:
                members.append(st)
                break
        else:
            groups.append((key, [st]))
    if len(groups) == 1:
        return sharded[0], set()
    for i, (ka, ga) in enumerate(groups):
        for kb, gb in groups[i + 1:]:
            if ga[0].device_mesh != gb[0].device_mesh:
                raise ValueError(f"ShardTensor: {op_name(func)} on ShardTensors of different device meshes")
    # DTensor's rule: keep the sharding of the operand that is dearest to gather, gather the rest
    weights = [max(_nbytes(st) for st in members) for _, members in groups]
    keep = max(range(len(groups)), key=lambda i: (weights[i], -i))
    gather = {id(st) for i, (_, members) in enumerate(groups) if i != keep for st in members}
    return groups[keep][1][0], gather


def pointwise_handler(func, types, args, kwargs):
    """Element-wise ops: local computation, layout kept (see the module docstring for how operands of
    different layouts pair). On Partial tensors only the linear ops of :func:`_partial_linear` run
    (staying Partial); any other raises NotImplementedError. In-place variants run out of place and
    are copied into the ShardTensor under autograd."""
    twin = _out_of_place(func, kwargs)
    if twin is not None:
        return _inplace(func, types, args, kwargs, twin)
    leaves = pytree.tree_leaves((args, kwargs))
    sts = [x for x in leaves if isinstance(x, ShardTensor)]
    if func in _WHERE and len(args) + len(kwargs) == 1:
        raise NotImplementedError(f"ShardTensor: {op_name(func)}(condition) with one argument gives the indices of "
                                  "the local rows, not global ones; use torch.where(condition, x, y), or "
                                  "call it on .full_tensor()")
    if any(isinstance(p, Partial) for st in sts for p in st.placements):
        out = _partial_linear(func, args, kwargs)
        if out is not None:
            return out
    reference(func, sts)  # refuses Partial
    ref, gather = broadcast_layouts(func, sts)
    ref_key = _aligned(ref)

    def unwrap(x):
        if isinstance(x, ShardTensor):
            if id(x) in gather:
                x = x.redistribute(placements=(Replicate(),) * x.device_mesh.ndim)
            if _aligned(x) == ref_key and x._shard_sizes == ref._shard_sizes and not is_replicated(x):
                return x.to_local()
            return local_of(func, x, ref, align=True)
        if isinstance(x, torch.Tensor):
            return promote_plain(func, x, ref)
        return x

    largs, lkwargs = pytree.tree_map(unwrap, (args, kwargs))
    out = func(*largs, **lkwargs)
    shift = 0
    first = pytree.tree_leaves(out)
    if first and isinstance(first[0], torch.Tensor):
        shift = first[0].dim() - ref._local_tensor.dim()
    return wrap(func, out, ref, shift)


def cast_handler(func, types, args, kwargs):
    """Dtype / device casts (``to``, ``type_as``, ``type``, ``float``, ``double``, ``half``, ``bfloat16``,
    ``long``, ``int``, ``short``, ``byte``, ``char``, ``bool``):
    local, layout kept. A tensor argument (``x.to(other)``, ``x.type_as(other)``) only gives its dtype
    and device, so it is neither promoted nor paired with ``x``'s rows."""
    x = args[0] if args else kwargs.get("input", kwargs.get("self"))
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as the target type; "
                                  f"cast the plain tensor with .to(dtype); {WAY_OUT}")
    ref = reference(func, [x])

    def meta(t):  # only dtype / device are read from another tensor
        return t._local_tensor if isinstance(t, ShardTensor) else t

    rest, kw = pytree.tree_map(meta, (tuple(args[1:]), {k: v for k, v in kwargs.items() if k not in ("input", "self")}))
    out = func(x.to_local(), *rest, **kw)
    return wrap(func, out, ref)


POINTWISE_NAMES = [
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder", "fmod",
    "pow", "neg", "negative", "abs", "exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sqrt", "rsqrt",
    "square", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "atan2", "sigmoid", "relu",
    "clamp", "clip", "clamp_min", "clamp_max", "maximum", "minimum", "where", "reciprocal", "sign", "floor", "ceil",
    "round", "trunc", "frac", "erf", "erfc", "lerp", "addcmul", "addcdiv", "logical_and", "logical_or",
    "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isfinite", "nan_to_num", "hypot", "logaddexp",
    "float_power", "rsub", "sgn", "xlogy", "gelu", "silu", "masked_fill",
]
_CASTS = ["float", "double", "half", "bfloat16", "long", "int", "short", "byte", "char", "bool", "to", "type_as",
          "type"]
_TENSOR_ONLY = ["contiguous", "clone",
                "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                "__rtruediv__", "__pow__", "__rpow__", "__neg__", "__abs__", "__eq__", "__ne__", "__lt__",
                "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__", "__invert__", "__floordiv__",
                "__rfloordiv__", "__mod__", "__div__", "__rdiv__"]
_FUNCTIONAL = ["relu", "relu6", "gelu", "silu", "elu", "selu", "celu", "leaky_relu", "softplus", "sigmoid", "tanh",
               "hardtanh", "mish", "hardswish", "hardsigmoid", "dropout", "logsigmoid", "softsign", "tanhshrink",
               "threshold"]



for _name in POINTWISE_NAMES:
    register(pointwise_handler, (getattr(torch, _name, None), getattr(torch.Tensor, _name, None)))
register(pointwise_handler, [getattr(torch.Tensor, n, None) for n in _TENSOR_ONLY])
register(pointwise_handler, [getattr(F, n, None) for n in _FUNCTIONAL])
register(pointwise_handler, [torch.clone])
# in-place variants (x.relu_(), x += y, ...): out of place, then copied in under autograd
register(pointwise_handler, [getattr(torch.Tensor, n + "_", None) for n in POINTWISE_NAMES if not n.startswith("__")])
register(pointwise_handler, [getattr(torch.Tensor, n, None) for n in
                             ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ipow__")])
register(pointwise_handler, [getattr(F, n + "_", None) for n in _FUNCTIONAL])
register(cast_handler, [getattr(torch.Tensor, n, None) for n in _CASTS])
