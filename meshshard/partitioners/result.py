"""The :class:`Partition` value: which shard owns each node."""
from __future__ import annotations

import os
from typing import List, Optional, Union

import numpy as np
import torch

from meshshard._fileutil import atomic_torch_save

__all__ = ["Partition"]

_FORMAT_VERSION = 1


def _group_by_part(assignment: torch.Tensor, num_parts: int) -> torch.Tensor:
    """Stable argsort of the shard ids (node ids grouped by shard, increasing within a shard)."""
    if num_parts <= np.iinfo(np.int16).max:
        # numpy's stable sort of 16-bit ints is a linear-time radix sort, where the int64 ids take a
        # comparison sort
        small = assignment.numpy().astype(np.int16)
        return torch.from_numpy(np.argsort(small, kind="stable").astype(np.int64, copy=False))
    return torch.sort(assignment, stable=True).indices


class Partition:
    r"""Assignment of ``N`` nodes to ``num_parts`` shards of uneven size.

    A partition is a plain value: computed once (in preprocessing, or on rank 0), then saved,
    loaded, compared and plotted. Shard ``r`` owns ``perm[offsets[r]:offsets[r + 1]]``, the nodes
    with ``assignment == r`` in increasing global id; this is the row order of shard ``r``'s
    local tensors (a ShardTensor's order).

    Args:
        assignment: ``LongTensor [N]`` (or anything ``torch.as_tensor`` takes) of shard ids in
            ``[0, num_parts)``.
        num_parts: number of shards (``>= 1``); shards may be empty.
        method: name of the method that produced it (informational).
        node_weights: optional ``[N]`` non-negative weights the partitioner balanced.

    Attributes:
        assignment (LongTensor [N]): shard id of every node.
        sizes (list[int]): nodes per shard, ``sum(sizes) == N``.
        perm (LongTensor [N]): node ids grouped by shard (stable: increasing id within a shard).
        offsets (LongTensor [num_parts + 1]): where each shard starts in ``perm``.
    """

    def __init__(
        self,
        assignment,
        num_parts: int,
        method: str = "",
        node_weights: Optional[torch.Tensor] = None,
    ) -> None:
        assignment = torch.as_tensor(assignment)
        if assignment.dim() != 1:
            raise ValueError(f"assignment must be 1-D [N], got shape {tuple(assignment.shape)}")
        if assignment.dtype.is_floating_point or assignment.dtype == torch.bool:
            raise TypeError(f"assignment must hold integer shard ids, got dtype {assignment.dtype}")
        assignment = assignment.to(torch.long).cpu().contiguous()
        num_parts = int(num_parts)
        if num_parts < 1:
            raise ValueError(f"num_parts must be >= 1, got {num_parts}")
        # numpy for the O(N) bookkeeping: torch's threaded kernels are slow on a busy machine
        a_np = assignment.numpy()
        if a_np.size and (int(a_np.min()) < 0 or int(a_np.max()) >= num_parts):
            raise ValueError(
                f"assignment holds shard ids outside [0, {num_parts}): "
                f"min {int(a_np.min())}, max {int(a_np.max())}"
            )
        if node_weights is not None:
            node_weights = torch.as_tensor(node_weights, dtype=torch.float64).cpu()
            if node_weights.shape != assignment.shape:
                raise ValueError(
                    f"node_weights has shape {tuple(node_weights.shape)}, expected [{assignment.numel()}]"
                )
        self.assignment = assignment
        self.num_parts = num_parts
        self.method = str(method)
        self.node_weights = node_weights
        counts = torch.from_numpy(np.bincount(a_np, minlength=num_parts).astype(np.int64))
        self.sizes: List[int] = counts.tolist()
        self.offsets = torch.zeros(num_parts + 1, dtype=torch.long)
        self.offsets[1:] = torch.cumsum(counts, 0)
        self.perm = _group_by_part(assignment, num_parts)

    @property
    def num_nodes(self) -> int:
        """``N``, the number of nodes."""
        return int(self.assignment.numel())

    def part_nodes(self, part: int) -> torch.Tensor:
        """Global ids owned by one shard.

        Args:
            part: shard id in ``[0, num_parts)``.

        Returns:
            ``LongTensor [sizes[part]]``, increasing.
        """
        if not 0 <= part < self.num_parts:
            raise ValueError(f"part must be in [0, {self.num_parts}), got {part}")
        return self.perm[self.offsets[part] : self.offsets[part + 1]]

    def local_index(self) -> torch.Tensor:
        """Position of every node inside its shard: ``LongTensor [N]``."""
        pos = torch.empty_like(self.perm)
        pos[self.perm] = torch.arange(self.num_nodes) - self.offsets[self.assignment[self.perm]]
        return pos

    def part_weights(self) -> torch.Tensor:
        """Total node weight per shard (counts when unweighted): ``DoubleTensor [num_parts]``."""
        w = self.node_weights if self.node_weights is not None else torch.ones(self.num_nodes, dtype=torch.float64)
        return torch.zeros(self.num_parts, dtype=torch.float64).index_add_(0, self.assignment, w)

    def state_dict(self) -> dict:
        """Plain dict of tensors and numbers (what :meth:`save` writes): format_version,
        assignment [N], num_parts, method, node_weights [N] or None, perm [N], offsets [P + 1]."""
        return {
            "format_version": _FORMAT_VERSION,
            "assignment": self.assignment,
            "num_parts": self.num_parts,
            "method": self.method,
            "node_weights": self.node_weights,
            "perm": self.perm,
            "offsets": self.offsets,
        }

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Write to a file atomically (no partial file on interruption).

        Args:
            path: destination file (``torch.save`` format; parent folders are created).
        """
        atomic_torch_save(self.state_dict(), path)

    @classmethod
    def load(cls, path: Union[str, os.PathLike]) -> "Partition":
        """Read a partition written by :meth:`save`.

        Args:
            path: file written by :meth:`save`.

        Returns:
            :class:`Partition` (``perm`` and ``offsets`` recomputed from the assignment).

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is not a meshshard partition.
        """
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            raise
        except Exception as exc:
            raise ValueError(f"{path}: not a readable meshshard partition file ({exc})") from exc
        if not isinstance(state, dict) or "assignment" not in state or "num_parts" not in state:
            raise ValueError(f"{path}: not a meshshard partition file (no assignment/num_parts)")
        return cls(state["assignment"], state["num_parts"], state.get("method", ""), state.get("node_weights"))

    def __eq__(self, other) -> bool:
        if not isinstance(other, Partition):
            return NotImplemented
        return self.num_parts == other.num_parts and torch.equal(self.assignment, other.assignment)

    def __repr__(self) -> str:
        sizes = self.sizes if self.num_parts <= 8 else self.sizes[:8] + ["..."]
        return f"Partition(num_nodes={self.num_nodes}, num_parts={self.num_parts}, method={self.method!r}, sizes={sizes})"
