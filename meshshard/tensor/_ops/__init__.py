"""ShardTensor op families, one per file; importing a file registers its handlers.

Every handler has PhysicsNeMo's signature ``handler(func, types, args, kwargs)``; it unwraps
ShardTensors to local tensors (differentiably), runs ``func`` locally, adds the collective the op
needs and rewraps. User handlers (``ShardTensor.register_function_handler``) are looked up first.
"""
from meshshard.tensor._ops import attention, cat, conv, einsum, extrema, factory, index, interpolate, loss  # noqa: F401
from meshshard.tensor._ops import matmul, norm, pad, permute, pointwise, pool, reduction, rowwise  # noqa: F401
from meshshard.tensor._ops import repeat, scatter, view  # noqa: F401

__all__: list = []
