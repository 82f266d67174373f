"""DTensor building blocks, re-exported so that upper layers never import torch.distributed."""
from __future__ import annotations

from typing import Optional

from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Placement, Replicate, Shard
from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta

from meshshard.distributed.process_group import comm_device, get_world_size, is_initialized

__all__ = [
    "DTensor",
    "DeviceMesh",
    "DTensorSpec",
    "TensorMeta",
    "Placement",
    "Shard",
    "Replicate",
    "Partial",
    "init_device_mesh",
    "default_device_mesh",
]


def default_device_mesh(device_type: Optional[str] = None) -> DeviceMesh:
    """A 1-D :class:`DeviceMesh` over every rank of the default group.

    In a single process with no process group this starts a one-rank gloo group on a private
    store first, because a DeviceMesh cannot exist without one.

    Args:
        device_type: ``"cpu"`` or ``"cuda"`` (``None``: the device of :func:`comm_device`).

    Returns:
        A 1-D mesh of ``get_world_size()`` ranks.
    """
    if not is_initialized():
        import torch.distributed as dist  # layer 0 may

        store = dist.HashStore()
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    if device_type is None:
        device_type = comm_device().type
    return init_device_mesh(device_type, (get_world_size(),))
