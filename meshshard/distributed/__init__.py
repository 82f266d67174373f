"""Layer 0: the one place in meshshard that talks to :mod:`torch.distributed`.

Everything above this layer (tensor, graph, ops, models) moves data between ranks through the
functions re-exported here, so that gloo (CPU) and NCCL (GPU) share one code path and so that every
function also works in a plain single process with no process group (world size 1).
"""
from typing import TYPE_CHECKING

from meshshard._lazy import lazy_exports
from meshshard.distributed.process_group import (
    init_distributed,
    destroy_distributed,
    default_backend,
    set_local_device,
    is_initialized,
    get_rank,
    get_world_size,
    get_backend,
    comm_device,
    local_rank,
    lost_ranks,
    RankLostError,
    DEFAULT_TIMEOUT,
)
from meshshard.distributed.comm import (
    ReduceOp,
    ProcessGroup,
    P2POp,
    all_to_all_single,
    all_gather_into_tensor,
    all_gather_sizes,
    all_gather_object,
    all_reduce,
    all_reduce_async,
    broadcast,
    barrier,
    batch_isend_irecv,
    isend,
    irecv,
    new_group,
    CollectiveMismatchError,
)
from meshshard.distributed.agree import (
    CollectiveTypeError,
    Field,
    agree,
    check_same_across_ranks,
    dtype_code,
    dtype_name,
    get_validation,
    raise_together,
    run_together,
    validation,
)

# DTensor's names load torch.distributed.tensor (slow to import) on first use: the halo and
# partition code needs only the collectives above
__getattr__, __dir__ = lazy_exports(__name__, {name: f"{__name__}.dtensor" for name in (
    "DTensor", "DeviceMesh", "DTensorSpec", "TensorMeta", "Placement", "Shard", "Replicate", "Partial",
    "init_device_mesh", "default_device_mesh")})


if TYPE_CHECKING:  # pragma: no cover - for static analysers only
    from meshshard.distributed.dtensor import (
        DTensor,
        DeviceMesh,
        DTensorSpec,
        TensorMeta,
        Placement,
        Shard,
        Replicate,
        Partial,
        init_device_mesh,
        default_device_mesh,
    )

__all__ = [
    "init_distributed",
    "destroy_distributed",
    "default_backend",
    "set_local_device",
    "is_initialized",
    "get_rank",
    "get_world_size",
    "get_backend",
    "comm_device",
    "local_rank",
    "lost_ranks",
    "RankLostError",
    "DEFAULT_TIMEOUT",
    "ReduceOp",
    "ProcessGroup",
    "P2POp",
    "all_to_all_single",
    "all_gather_into_tensor",
    "all_gather_sizes",
    "all_gather_object",
    "all_reduce",
    "all_reduce_async",
    "broadcast",
    "barrier",
    "batch_isend_irecv",
    "isend",
    "irecv",
    "new_group",
    "CollectiveMismatchError",
    "CollectiveTypeError",
    "Field",
    "agree",
    "check_same_across_ranks",
    "dtype_code",
    "dtype_name",
    "get_validation",
    "raise_together",
    "run_together",
    "validation",
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
