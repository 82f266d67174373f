"""Built-in ShardTensor function handlers: element-wise, row-wise, ``sum`` / ``mean``, ``cat``,
dim permutations (``t`` / ``.T`` / ``transpose`` / ``permute``) and ``matmul``.

Every handler has PhysicsNeMo's signature ``handler(func, types, args, kwargs)``; it unwraps
ShardTensors to local tensors (differentiably), runs ``func`` locally, adds the collective the op
needs and rewraps. Checks that keep results exact:

* ShardTensors combined element-wise must have the same layout (placements and every rank's
  shard size); different shard boundaries raise ValueError instead of pairing wrong rows.
* A plain tensor (or a fully replicated ShardTensor) is a replicated value: it broadcasts along
  the feature dims; if it spans the sharded dim with the global size, each rank uses its own rows.
  A replicated ShardTensor's gradient is summed over the shard group in backward (exact); a plain
  tensor's gradient is this rank's partial sum (all-reduce it, as in DDP).
* Row-wise ops (linear, layer_norm, softmax, normalize, cat) must not mix the sharded dim.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from meshshard.distributed import Partial, Replicate, Shard
from meshshard.distributed.autograd import all_reduce_sum
from meshshard.tensor import _registry as reg
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import shard_dim_of

__all__ = ["pointwise_handler", "rowwise_handler", "reduction_handler", "cat_handler", "permute_handler",
           "matmul_handler", "scalar_handler", "POINTWISE_NAMES"]


_WAY_OUT = ("register a handler with ShardTensor.register_function_handler, or redistribute / "
            "full_tensor() first")


def _layout(st):
    return (st.device_mesh, tuple(st.placements), st._shard_sizes)


def _is_replicated(st) -> bool:
    return all(isinstance(p, Replicate) for p in st.placements)


def _name(func) -> str:
    names = reg.function_names(func)
    return names[-1]


def _reference(func, sts):
    """The ShardTensor whose layout the result takes (the first sharded one)."""
    for st in sts:
        if any(isinstance(p, Partial) for p in st.placements):
            raise NotImplementedError(f"ShardTensor: {_name(func)} on a Partial ShardTensor; call "
                                      ".redistribute(placements=(Replicate(),)) or .full_tensor() first")
    for st in sts:
        if shard_dim_of(st.placements) is not None:
            return st
    return sts[0]


def _local_of(func, st, ref, align: bool = False):
    """Differentiable local tensor of ``st`` for a computation laid out like ``ref``.

    With ``align`` (element-wise ops), a replicated ``st`` that spans the sharded dim with the
    global size contributes only this rank's rows, exactly like a plain tensor."""
    if _layout(st) == _layout(ref):
        return st.to_local()
    if _is_replicated(st) and st.device_mesh == ref.device_mesh:
        # A replicated value feeding sharded rows: each rank's gradient is a partial sum, so
        # declare it Partial on the sharding mesh dim and let backward all-reduce it.
        grad_pl = tuple(Partial() if isinstance(p, Shard) else Replicate() for p in ref.placements)
        local = st.to_local(grad_placements=grad_pl)
        return _align_plain(func, local, ref) if align else local
    raise ValueError(
        f"ShardTensor: {_name(func)} on ShardTensors with different layouts: {st.placements} with shard "
        f"sizes {st._shard_sizes} vs {ref.placements} with shard sizes {ref._shard_sizes}. Shard "
        "boundaries must match element by element; redistribute one of them first "
        "(x.redistribute(placements=..., sharding_shapes=y.sharding_shapes())).")


def _align_plain(func, t: torch.Tensor, ref):
    """Rows of a plain (replicated) tensor that meet this rank's shard under broadcasting."""
    sd = shard_dim_of(ref.placements)
    if sd is None or t.dim() == 0:
        return t
    m, d = sd
    k = t.dim() - (ref.dim() - d)
    if k < 0 or t.shape[k] == 1:
        return t
    n = ref.shape[d]
    if t.shape[k] != n:
        raise ValueError(f"ShardTensor: {_name(func)}: plain tensor of shape {tuple(t.shape)} does not "
                         f"broadcast against the global shape {tuple(ref.shape)} along the sharded dim {d}")
    coord = ref.device_mesh.get_local_rank(m)
    return t.narrow(k, ref.offsets(m), ref._shard_sizes[coord])


def _wrap(func, out, ref, shard_shift: int = 0):
    """Wrap local results with ``ref``'s layout (the sharded dim moved by ``shard_shift``)."""
    mesh, placements, sizes = _layout(ref)
    if shard_shift:
        placements = tuple(Shard(p.dim + shard_shift) if isinstance(p, Shard) else p for p in placements)
    sd = shard_dim_of(placements)

    def wrap(t):
        if not isinstance(t, torch.Tensor):
            return t
        if sd is not None:
            coord = mesh.get_local_rank(sd[0])
            if t.dim() <= sd[1] or t.shape[sd[1]] != sizes[coord]:
                raise NotImplementedError(f"ShardTensor: {_name(func)} changed the sharded dim "
                                          f"({tuple(t.shape)}); it is not a supported row-wise op; {_WAY_OUT}")
        return _FromLocal.apply(t, mesh, placements, sizes)

    return pytree.tree_map(wrap, out)


def pointwise_handler(func, types, args, kwargs):
    """Element-wise ops: local computation, layout kept."""
    leaves = pytree.tree_leaves((args, kwargs))
    sts = [x for x in leaves if isinstance(x, ShardTensor)]
    ref = _reference(func, sts)

    def unwrap(x):
        if isinstance(x, ShardTensor):
            if x.dim() != ref.dim() and not _is_replicated(x):
                raise ValueError(f"ShardTensor: {_name(func)} on ShardTensors of different ndim")
            return _local_of(func, x, ref, align=True)
        if isinstance(x, torch.Tensor):
            return _align_plain(func, x, ref)
        return x

    largs, lkwargs = pytree.tree_map(unwrap, (args, kwargs))
    out = func(*largs, **lkwargs)
    shift = 0
    first = pytree.tree_leaves(out)
    if first and isinstance(first[0], torch.Tensor):
        shift = first[0].dim() - ref._local_tensor.dim()
    return _wrap(func, out, ref, shift)


def _norm_dims(dims, ndim):
    if dims is None:
        return None
    if isinstance(dims, int):
        dims = [dims]
    return sorted({int(x) % max(ndim, 1) for x in dims})


def _mixed_dims(func, args, kwargs, ndim):
    """Dims a row-wise op combines values across."""
    if func is F.linear:
        return [ndim - 1]
    if func in (F.layer_norm, getattr(F, "rms_norm", None)):
        ns = args[1] if len(args) > 1 else kwargs["normalized_shape"]
        ns = [ns] if isinstance(ns, int) else list(ns)
        return list(range(ndim - len(ns), ndim))
    if func is F.normalize:
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 1)
        return _norm_dims(dim, ndim)
    # softmax family: (input, dim, ...)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None:
        raise NotImplementedError(f"ShardTensor: {_name(func)} without an explicit dim")
    return _norm_dims(dim, ndim)


def rowwise_handler(func, types, args, kwargs):
    """Ops that mix values only inside a row (feature dims): local, unless they mix the sharded dim."""
    x = args[0] if args else kwargs["input"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {_name(func)} with a ShardTensor as a parameter "
                                  "(only the input may be a ShardTensor); use .to_local()")
    ref = _reference(func, [x])
    sd = shard_dim_of(ref.placements)
    mixed = _mixed_dims(func, args, kwargs, x.dim())
    if sd is not None and sd[1] in mixed:
        raise NotImplementedError(
            f"ShardTensor: {_name(func)} over the sharded dim {sd[1]} would need rows of other ranks; "
            "register a handler with ShardTensor.register_function_handler or redistribute first")
    largs, lkwargs = pytree.tree_map(
        lambda t: _local_of(func, t, ref) if isinstance(t, ShardTensor) else t, (args, kwargs))
    return _wrap(func, func(*largs, **lkwargs), ref)


def cat_handler(func, types, args, kwargs):
    """``torch.cat`` along a dim that is not sharded."""
    tensors = args[0] if args else kwargs["tensors"]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    sts = [t for t in tensors if isinstance(t, ShardTensor)]
    ref = _reference(func, sts)
    sd = shard_dim_of(ref.placements)
    if sd is not None and dim % ref.dim() == sd[1]:
        raise NotImplementedError(f"ShardTensor: {_name(func)} along the sharded dim {sd[1]}; "
                                  "register a handler with ShardTensor.register_function_handler")
    locals_ = [_local_of(func, t, ref, align=True) if isinstance(t, ShardTensor) else _align_plain(func, t, ref)
               for t in tensors]
    return _wrap(func, func(locals_, dim), ref)


_MEAN = {torch.mean, torch.Tensor.mean}


def reduction_handler(func, types, args, kwargs):
    """``sum`` / ``mean`` over all dims or any dims including the sharded one: local partial sum, then
    an all-reduce over the sharding mesh dim; the result is replicated. ``mean`` divides by the
    global element count. Over feature dims only: local, layout kept."""
    x = args[0] if args else kwargs["input"]
    rest = list(args[1:])
    dim = rest[0] if rest else kwargs.get("dim")
    keepdim = rest[1] if len(rest) > 1 else kwargs.get("keepdim", False)
    dtype = kwargs.get("dtype")
    if isinstance(dim, torch.dtype):  # torch.sum(x, torch.float64)
        dim, dtype = None, dim
    ref = _reference(func, [x])
    sd = shard_dim_of(ref.placements)
    dims = _norm_dims(dim, x.dim()) if dim is not None and not (isinstance(dim, (list, tuple)) and len(dim) == 0) else None
    local = x.to_local()
    if sd is None or (dims is not None and sd[1] not in dims):
        out = func(local, *args[1:], **kwargs)
        shift = 0 if keepdim or dims is None or sd is None else -sum(1 for k in dims if k < sd[1])
        return _wrap(func, out, ref, shift)
    m, _ = sd
    red = list(range(x.dim())) if dims is None else dims
    total = torch.sum(local, dim=red, keepdim=bool(keepdim) and dims is not None, dtype=dtype)
    if func in _MEAN:
        count = 1
        for k in red:
            count *= x.shape[k]
        total = total / count
    total = all_reduce_sum(total, group=x.device_mesh.get_group(m))
    rep = tuple(Replicate() for _ in x.placements)
    return _FromLocal.apply(total, x.device_mesh, rep, None)


def permute_handler(func, types, args, kwargs):
    """Dim permutations (``t``, ``.T``, ``.mT``, ``transpose``, ``swapaxes``, ``permute``): local,
    the Shard placement follows its dim to the new position, shard sizes unchanged."""
    x = args[0] if args else kwargs["input"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {_name(func)} with a ShardTensor as a parameter; {_WAY_OUT}")
    ref = _reference(func, [x])
    sd = shard_dim_of(ref.placements)
    rest = args[1:] if args else ()
    kw = {k: v for k, v in kwargs.items() if k != "input"}
    shift = 0
    if sd is not None:
        # Where does the sharded dim go? Apply the same op to a meta tensor whose strides name
        # the dims (a permutation permutes the strides).
        n = x.dim()
        probe = torch.empty_strided(tuple(x._local_tensor.shape), [1 << k for k in range(n)], device="meta")
        moved = func(probe, *rest, **kw)
        strides = list(moved.stride())
        if moved.dim() != n or sorted(strides) != [1 << k for k in range(n)]:
            raise NotImplementedError(f"ShardTensor: {_name(func)} is not a permutation of dims here; {_WAY_OUT}")
        shift = strides.index(1 << sd[1]) - sd[1]
    out = func(x.to_local(), *rest, **kw)
    return _wrap(func, out, ref, shift)


def matmul_handler(func, types, args, kwargs):
    """``matmul`` / ``mm`` / ``mv`` / ``@`` with one sharded operand, when the sharded dim is not
    contracted (``X @ W`` with rows sharded, ``W @ X`` with columns sharded; the other operand is a
    plain / replicated value), or when both operands are sharded along the contracted dim with the
    same shard sizes (``X.T @ Y``: local product, then a sum over ranks; replicated result).
    Anything else would need rows of other ranks and raises NotImplementedError."""
    if kwargs:
        raise NotImplementedError(f"ShardTensor: {_name(func)} with keyword arguments ({sorted(kwargs)}); {_WAY_OUT}")
    a, b = args[0], args[1]
    local_fn = func
    if func is torch.Tensor.__rmatmul__:
        a, b, local_fn = b, a, torch.matmul
    sts = [t for t in (a, b) if isinstance(t, ShardTensor)]
    ref = _reference(func, sts)
    sd_a = shard_dim_of(a.placements) if isinstance(a, ShardTensor) else None
    sd_b = shard_dim_of(b.placements) if isinstance(b, ShardTensor) else None
    how = (f"ShardTensor: {_name(func)} of shapes {tuple(a.shape)} ({getattr(a, 'placements', 'plain')}) and "
           f"{tuple(b.shape)} ({getattr(b, 'placements', 'plain')})")

    def local(t, r):
        return _local_of(func, t, r) if isinstance(t, ShardTensor) else t

    if sd_a is not None and sd_b is None:
        if a.dim() < 2 or sd_a[1] >= a.dim() - 1 or b.dim() > 2:
            raise NotImplementedError(f"{how}: the sharded dim of the left operand is contracted (or "
                                      f"batched); {_WAY_OUT}")
        out = local_fn(local(a, a), local(b, a))
        return _wrap(func, out, a)  # rows stay where they were (b 1-d drops the last, unsharded dim)
    if sd_b is not None and sd_a is None:
        if b.dim() < 2 or sd_b[1] != b.dim() - 1 or a.dim() > 2:
            raise NotImplementedError(f"{how}: the sharded dim of the right operand is contracted (or "
                                      f"batched); {_WAY_OUT}")
        out = local_fn(local(a, b), local(b, b))
        return _wrap(func, out, b, out.dim() - b.dim())
    if sd_a is not None and sd_b is not None:
        contracted_b = 0 if b.dim() == 1 else b.dim() - 2
        if a.dim() > 2 or b.dim() > 2 or sd_a[1] != a.dim() - 1 or sd_b[1] != contracted_b or sd_a[0] != sd_b[0]:
            raise NotImplementedError(f"{how}: only the contracted dim may be sharded on both operands; {_WAY_OUT}")
        if a.device_mesh != b.device_mesh or a._shard_sizes != b._shard_sizes:
            raise ValueError(f"{how}: operands with different layouts (shard sizes {a._shard_sizes} vs "
                             f"{b._shard_sizes}); redistribute one of them first")
        partial = local_fn(a.to_local(), b.to_local())
        total = all_reduce_sum(partial, group=a.device_mesh.get_group(sd_a[0]))
        return _FromLocal.apply(total, a.device_mesh, tuple(Replicate() for _ in a.placements), None)
    # neither sharded: replicated operands, local product stays replicated
    out = local_fn(local(a, ref), local(b, ref))
    return _wrap(func, out, ref)


def scalar_handler(func, types, args, kwargs):
    """``item()`` / ``tolist()`` of a replicated ShardTensor (e.g. a loss for logging): its local
    value is the whole value. A sharded or Partial tensor raises (call ``full_tensor()`` first)."""
    x = args[0]
    if not _is_replicated(x):
        raise NotImplementedError(f"ShardTensor: {_name(func)} of a {x.placements} tensor would see only this "
                                  "rank's part; call .full_tensor() first")
    return func(x._local_tensor, *args[1:], **kwargs)


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


def _register_builtins():
    table = reg.BUILTIN_FUNCTION_HANDLERS
    for name in POINTWISE_NAMES:
        for owner in (torch, torch.Tensor):
            f = getattr(owner, name, None)
            if f is not None:
                table[f] = pointwise_handler
    for name in _TENSOR_ONLY:
        f = getattr(torch.Tensor, name, None)
        if f is not None:
            table[f] = pointwise_handler
    for name in _FUNCTIONAL:
        f = getattr(F, name, None)
        if f is not None:
            table[f] = pointwise_handler
    table[torch.clone] = pointwise_handler
    for f in (F.linear, F.layer_norm, F.normalize, torch.softmax, torch.log_softmax, torch.Tensor.softmax,
              torch.Tensor.log_softmax, F.softmax, F.log_softmax, getattr(F, "rms_norm", None)):
        if f is not None:
            table[f] = rowwise_handler
    for f in (torch.cat, torch.concat, getattr(torch, "concatenate", None)):
        if f is not None:
            table[f] = cat_handler
    for f in (torch.sum, torch.Tensor.sum, torch.mean, torch.Tensor.mean):
        table[f] = reduction_handler
    for f in (torch.Tensor.item, torch.Tensor.tolist):
        table[f] = scalar_handler
    for f in (torch.t, torch.Tensor.t, torch.transpose, torch.Tensor.transpose, torch.swapaxes,
              torch.Tensor.swapaxes, torch.swapdims, torch.Tensor.swapdims, torch.permute, torch.Tensor.permute,
              torch.Tensor.T.__get__, torch.Tensor.mT.__get__):
        table[f] = permute_handler
    for f in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.mm,
              torch.Tensor.mm, torch.mv, torch.Tensor.mv):
        table[f] = matmul_handler


_register_builtins()
