"""The halo exchange plan: which owned rows every rank sends to every other rank.

A plan is built once per graph (from a global view without communication, or from each rank's
ghost list with one all-to-all of requests) and reused by every :meth:`ShardedGraph.exchange`:
no shapes or counts cross the wire per call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import torch

from meshshard import distributed as msd

__all__ = ["ExchangePlan", "plans_from_requests", "build_plan_distributed"]


@dataclass
class ExchangePlan:
    """Send/receive schedule of one rank.

    Attributes:
        rank: this rank.
        send_index: ``world_size`` LongTensors; ``send_index[j]`` are the owned rows sent to rank ``j``
            (empty for ``j == rank``), in the order rank ``j`` stores them as ghosts.
        send_counts: ``LongTensor [W, W]``; ``send_counts[i, j]`` rows rank ``i`` sends to rank ``j``
            (the ``sizes`` argument of :func:`indexed_all_to_all_v`).
    """

    rank: int
    send_index: List[torch.Tensor]
    send_counts: torch.Tensor

    @property
    def world_size(self) -> int:
        """Number of ranks the plan spans."""
        return len(self.send_index)

    @property
    def recv_counts(self) -> List[int]:
        """Rows received from each rank (ghosts per owner)."""
        return self.send_counts[:, self.rank].tolist()

    @property
    def sizes(self) -> List[List[int]]:
        """``send_counts`` as nested lists, the form PhysicsNeMo's collectives take."""
        return self.send_counts.tolist()

    @property
    def num_send(self) -> int:
        """Rows this rank sends in one exchange (all destinations)."""
        return int(self.send_counts[self.rank].sum())

    @property
    def num_recv(self) -> int:
        """Rows this rank receives in one exchange: its ghost count."""
        return int(self.send_counts[:, self.rank].sum())

    def state_dict(self) -> dict:
        """Tensors to store the plan with a part file (see :meth:`from_state_dict`)."""
        return {"send_index": list(self.send_index), "send_counts": self.send_counts}

    @classmethod
    def from_state_dict(cls, rank: int, state: dict) -> "ExchangePlan":
        """Rebuild rank ``rank``'s plan from :meth:`state_dict` output.

        Args:
            rank: the rank the plan belongs to.
            state: ``{"send_index": [W tensors], "send_counts": [W, W]}``.
        """
        return cls(rank, [torch.as_tensor(t, dtype=torch.long) for t in state["send_index"]],
                   torch.as_tensor(state["send_counts"], dtype=torch.long))


def _group_by_owner(ghost_owner: torch.Tensor, ghost_owner_index: torch.Tensor, world_size: int):
    counts = torch.bincount(ghost_owner, minlength=world_size)[:world_size] if ghost_owner.numel() else torch.zeros(world_size, dtype=torch.long)
    return counts, list(torch.split(ghost_owner_index, counts.tolist()))


def plans_from_requests(ghost_owners: Sequence[torch.Tensor], ghost_owner_indices: Sequence[torch.Tensor]) -> List[ExchangePlan]:
    """Every rank's plan from every rank's ghost list (single process, no communication).

    Args:
        ghost_owners: per rank, ``LongTensor [n_ghost_r]`` owner of each ghost (grouped ascending).
        ghost_owner_indices: per rank, row of each ghost in its owner.

    Returns:
        ``world_size`` :class:`ExchangePlan`.
    """
    world = len(ghost_owners)
    counts = torch.zeros(world, world, dtype=torch.long)  # [sender, receiver]
    send_index = [[torch.empty(0, dtype=torch.long) for _ in range(world)] for _ in range(world)]
    for r in range(world):
        c, chunks = _group_by_owner(ghost_owners[r], ghost_owner_indices[r], world)
        counts[:, r] = c
        for q in range(world):
            send_index[q][r] = chunks[q].clone()
    return [ExchangePlan(q, send_index[q], counts.clone()) for q in range(world)]


def build_plan_distributed(ghost_owner: torch.Tensor, ghost_owner_index: torch.Tensor, group=None) -> ExchangePlan:
    """This rank's plan from its ghost list, with one all-to-all of requests (collective).

    Args:
        ghost_owner: ``LongTensor [n_ghost]`` owner rank of each ghost, grouped ascending.
        ghost_owner_index: row of each ghost in its owner's owned rows.
        group: process group.
    """
    rank, world = msd.get_rank(group), msd.get_world_size(group)
    recv_counts, _ = _group_by_owner(ghost_owner, ghost_owner_index, world)
    dev = msd.comm_device(group)
    # Tell each owner how many rows we want from it, then which ones.
    send_counts = msd.all_to_all_single(recv_counts.to(dev), [1] * world, [1] * world, group=group).cpu()
    requests = msd.all_to_all_single(
        ghost_owner_index.to(dev), send_counts.tolist(), recv_counts.tolist(), group=group
    ).cpu()
    send_index = [t.clone() for t in torch.split(requests, send_counts.tolist())]
    full = msd.all_gather_sizes(send_counts.tolist(), group)  # [sender, receiver]
    return ExchangePlan(rank, send_index, full)
