"""Element-wise ops (``add``, activations, dtype casts, comparisons ...): local, layout kept."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor._ops._common import align_plain, is_replicated, local_of, op_name, reference, register, wrap

__all__ = ["pointwise_handler", "POINTWISE_NAMES"]


def pointwise_handler(func, types, args, kwargs):
    """Element-wise ops: local computation, layout kept."""
    leaves = pytree.tree_leaves((args, kwargs))
    sts = [x for x in leaves if isinstance(x, ShardTensor)]
    ref = reference(func, sts)

    def unwrap(x):
        if isinstance(x, ShardTensor):
            if x.dim() != ref.dim() and not is_replicated(x):
                raise ValueError(f"ShardTensor: {op_name(func)} on ShardTensors of different ndim")
            return local_of(func, x, ref, align=True)
        if isinstance(x, torch.Tensor):
            return align_plain(func, x, ref)
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
