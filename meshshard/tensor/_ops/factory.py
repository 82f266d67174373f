"""New tensors made from a ShardTensor: ``new_zeros`` / ``new_ones`` / ``new_full`` / ``new_empty`` /
``new_tensor`` and ``zeros_like`` / ``ones_like`` / ``full_like`` / ``empty_like`` / ``rand_like`` /
``randn_like`` / ``randint_like``. No communication except for the random ones on replicated mesh dims.

Layouts (DTensor's rule for ``new_*``):

* ``x.new_*(size)`` with ``size`` equal to ``x``'s global shape, ``x`` sharded: ``x``'s layout (its
  placements and shard sizes; a Partial mesh dim becomes Replicate). Any other size, or an ``x``
  that is not sharded: a Replicate ShardTensor of global shape ``size``, every rank holding the
  whole tensor. ``x.new_tensor(data)`` is Replicate (every rank must pass the same ``data``).
* ``*_like(x)``: ``x``'s layout, a Partial mesh dim becoming Replicate (``ones_like`` of a Partial
  tensor is ones, not ``W`` times ones).
* ``rand_like`` / ``randn_like`` / ``randint_like``: every rank draws its own shard from its own
  generator, so the values are not those one process would draw; along every mesh dim that does
  not shard ``x`` the draw of coordinate 0 is sent to the others (one all-reduce), so replicated
  values agree on every rank.

Keyword arguments (``dtype``, ``device``, ``requires_grad``, ``layout``, ``pin_memory``,
``memory_format``) act as in torch; ``requires_grad=True`` gives a leaf ShardTensor. ``out=`` is
refused.
"""
from __future__ import annotations

import torch

from meshshard.distributed import Replicate, Shard, all_reduce
from meshshard.tensor.shard_tensor import ShardTensor, _make
from meshshard.tensor.spec import gradient_placements, shard_dims_of
from meshshard.tensor._ops._common import WAY_OUT, op_name, register

__all__ = ["new_factory_handler", "like_factory_handler"]

_NEW_FILL = {torch.Tensor.new_full}
_NEW_DATA = {torch.Tensor.new_tensor}
_RANDOM = {torch.rand_like, torch.randn_like, torch.randint_like}


def _size(rest, kwargs):
    """The ``size`` of ``new_zeros(2, 3)`` / ``new_zeros((2, 3))`` / ``new_zeros(size=(2, 3))``."""
    if "size" in kwargs:
        rest = (kwargs.pop("size"),)
    if len(rest) == 1 and not isinstance(rest[0], int):
        rest = tuple(rest[0])
    return tuple(int(v) for v in rest)


def _leaf(local, x, placements, sizes, requires_grad):
    return _make(local, x.device_mesh, placements, sizes, requires_grad=bool(requires_grad))


def new_factory_handler(func, types, args, kwargs):
    """``x.new_zeros`` / ``new_ones`` / ``new_empty`` / ``new_full`` / ``new_tensor`` (layouts in the
    module docstring)."""
    x, rest = args[0], tuple(args[1:])
    kw = dict(kwargs)
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor argument other than self; "
                                  f"{WAY_OUT}")
    if kw.get("out") is not None:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with out=; use the returned tensor")
    requires_grad = kw.pop("requires_grad", False)
    mesh = x.device_mesh
    replicate = (Replicate(),) * mesh.ndim
    local_x = x._local_tensor
    if func in _NEW_DATA:
        data = rest[0] if rest else kw.pop("data")
        if isinstance(data, ShardTensor):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} of a ShardTensor; use .clone().detach()")
        return _leaf(local_x.new_tensor(data, **kw), x, replicate, None, requires_grad)
    fill = ()
    if func in _NEW_FILL:
        if "fill_value" in kw:
            fill = (kw.pop("fill_value"),)
        else:
            fill, rest = (rest[-1],), rest[:-1]
    size = _size(rest, kw)
    if size == tuple(x.shape) and shard_dims_of(x.placements):
        return _leaf(func(local_x, tuple(local_x.shape), *fill, **kw), x, gradient_placements(x.placements),
                     x._shard_sizes, requires_grad)
    return _leaf(func(local_x, size, *fill, **kw), x, replicate, None, requires_grad)


def _agree_on_replicated_dims(local, mesh, placements):
    """Make a random local draw identical along every mesh dim that does not Shard: coordinate 0's
    values reach the others (the rest add zeros, exact)."""
    for m, p in enumerate(placements):
        if isinstance(p, Shard) or mesh.size(m) == 1:
            continue
        if mesh.get_local_rank(m) != 0:
            local.zero_()
        all_reduce(local, group=mesh.get_group(m))
    return local


def like_factory_handler(func, types, args, kwargs):
    """``zeros_like`` / ``ones_like`` / ``full_like`` / ``empty_like`` / ``rand_like`` / ``randn_like`` /
    ``randint_like`` of a ShardTensor (layouts in the module docstring)."""
    x = args[0] if args else kwargs.get("input")
    kw = {k: v for k, v in kwargs.items() if k != "input"}
    rest = tuple(args[1:])
    if not isinstance(x, ShardTensor) or any(isinstance(v, ShardTensor) for v in rest + tuple(kw.values())):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor argument other than the "
                                  f"input; {WAY_OUT}")
    if kw.get("out") is not None:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with out=; use the returned tensor")
    requires_grad = kw.pop("requires_grad", False)
    placements = gradient_placements(x.placements)
    with torch.no_grad():
        local = func(x._local_tensor, *rest, **kw)
        if func in _RANDOM:
            local = _agree_on_replicated_dims(local, x.device_mesh, placements)
    return _leaf(local, x, placements, x._shard_sizes, requires_grad)


register(new_factory_handler, (torch.Tensor.new_zeros, torch.Tensor.new_ones, torch.Tensor.new_empty,
                               torch.Tensor.new_full, torch.Tensor.new_tensor))
register(like_factory_handler, (torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like,
                                torch.rand_like, torch.randn_like, torch.randint_like))
