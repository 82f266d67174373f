"""meshshard.tensor: ShardTensor, a DTensor with uneven shards, and scatter_tensor.

Example (``torchrun --nproc-per-node 3 example.py``)::

    import torch, meshshard as ms
    from meshshard.tensor import ShardTensor
    ms.init_distributed()
    rank = ms.get_rank()
    x = ShardTensor.from_local(torch.randn(rank + 1, 4))       # 1, 2, 3 rows
    x.full_tensor().shape                                       # (6, 4), rows in rank order
"""
from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor import _ops  # noqa: F401  (registers the built-in op families)
from meshshard.tensor.promotion_mode import PromotionWarning, get_promotion, promotion, set_promotion
from meshshard.tensor.scatter import scatter_tensor
from meshshard.tensor.functional import max_abs_error, neighborhood_attention, relative_l2_error

__all__ = ["ShardTensor", "scatter_tensor", "PromotionWarning", "set_promotion", "get_promotion", "promotion",
           "relative_l2_error", "max_abs_error", "neighborhood_attention"]
