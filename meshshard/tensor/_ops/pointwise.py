"""Element-wise ops (``add``, activations, dtype casts, comparisons ...): local, layout kept."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from meshshard.distributed import Partial
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor._ops._common import (is_replicated, layout, local_of, op_name, promote_plain, reference,
                                          register, wrap)

__all__ = ["pointwise_handler", "POINTWISE_NAMES"]


_ADD = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.sub, torch.Tensor.sub,
        torch.subtract, torch.Tensor.subtract, torch.Tensor.__sub__}
_SCALE = {torch.mul, torch.Tensor.mul, torch.multiply, torch.Tensor.multiply, torch.Tensor.__mul__,
          torch.Tensor.__rmul__, torch.div, torch.Tensor.div, torch.divide, torch.Tensor.divide,
          torch.true_divide, torch.Tensor.true_divide, torch.Tensor.__truediv__}
_NEG = {torch.neg, torch.Tensor.neg, torch.negative, torch.Tensor.negative, torch.Tensor.__neg__}


def _partial_linear(func, args, kwargs):
    """Linear ops on Partial tensors stay Partial (no all-reduce): the sum or difference of two
    ShardTensors of the same layout, a product with / quotient by a Python number, a negation.
    ``None`` when ``func(args)`` is not one of them."""
    a = args[0] if args else None
    if kwargs or not isinstance(a, ShardTensor):
        return None
    b = args[1] if len(args) > 1 else None
    if func in _ADD and len(args) == 2 and isinstance(b, ShardTensor) and layout(a) == layout(b):
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
    """An in-place element-wise op on a ShardTensor: the out-of-place result, then one ``copy_``
    into the ShardTensor recorded by autograd on the ShardTensor itself, so its history continues
    from the result (as in-place ops on plain tensors do) and backward stays exact."""
    x = args[0] if args else kwargs.get("input")
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: in-place {op_name(func)} on a plain tensor with a ShardTensor "
                                  "argument would write rows of other ranks into it; use the out-of-place op")
    out = pointwise_handler(twin[0], types, args, twin[1])
    if not isinstance(out, ShardTensor) or layout(out) != layout(x) or out.dtype != x.dtype:
        raise NotImplementedError(f"ShardTensor: in-place {op_name(func)} would change the tensor's layout or dtype; "
                                  "use the out-of-place op")
    with torch._C.DisableTorchFunctionSubclass():
        torch.Tensor.copy_(x, out)
    return x


def pointwise_handler(func, types, args, kwargs):
    """Element-wise ops: local computation, layout kept. On Partial tensors only the linear ops of
    :func:`_partial_linear` run (staying Partial); any other raises NotImplementedError. In-place
    variants run out of place and are copied into the ShardTensor under autograd."""
    twin = _out_of_place(func, kwargs)
    if twin is not None:
        return _inplace(func, types, args, kwargs, twin)
    leaves = pytree.tree_leaves((args, kwargs))
    sts = [x for x in leaves if isinstance(x, ShardTensor)]
    if any(isinstance(p, Partial) for st in sts for p in st.placements):
        out = _partial_linear(func, args, kwargs)
        if out is not None:
            return out
    ref = reference(func, sts)

    def unwrap(x):
        if isinstance(x, ShardTensor):
            if x.dim() != ref.dim() and not is_replicated(x):
                raise ValueError(f"ShardTensor: {op_name(func)} on ShardTensors of different ndim")
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


POINTWISE_NAMES = [
    "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide", "remainder", "fmod",
    "pow", "neg", "negative", "abs", "exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "sqrt", "rsqrt",
    "square", "sin", "cos", "tan", "sinh", "cosh", "tanh", "asin", "acos", "atan", "atan2", "sigmoid", "relu",
    "clamp", "clip", "clamp_min", "clamp_max", "maximum", "minimum", "where", "reciprocal", "sign", "floor", "ceil",
    "round", "trunc", "frac", "erf", "erfc", "lerp", "addcmul", "addcdiv", "logical_and", "logical_or",
    "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isfinite", "nan_to_num", "hypot", "logaddexp",
    "float_power", "rsub", "sgn", "xlogy", "gelu", "silu",
]
_TENSOR_ONLY = ["float", "double", "half", "bfloat16", "to", "type_as", "contiguous", "clone",
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
