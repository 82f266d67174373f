"""Halo (ghost node) construction: which nodes and edges a rank needs for ``k`` message-passing layers.

Single-process construction from a global graph (:class:`HaloBuilder`, :func:`build_all_parts`),
and the distributed one for ranks that hold only the edges into their own nodes
(:func:`build_halo_distributed`); :class:`meshshard.graph.ShardedGraph` is built from these.

Terminology. A rank *owns* a set of nodes. Its *ring* ``0`` is the owned set; ring ``h`` holds the
nodes at in-edge distance ``h`` from it (sources of edges whose target is in ring ``h - 1``, not
already in an inner ring). With ``halo_hops = k`` a rank keeps rings ``0..k`` as local nodes and
every edge whose target lies in rings ``0..k-1``: exactly what ``k`` message-passing layers need to
compute owned outputs without another exchange (layer ``l`` is exact on rings ``0..k-l``).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from meshshard import distributed as msd
from meshshard.graph.plan import ExchangePlan, plans_from_requests

__all__ = ["HaloLayout", "HaloBuilder", "check_edge_index", "check_hops", "build_halo", "build_halos", "order_layout",
           "build_all_parts", "iter_all_parts", "builder_and_plans", "build_halo_distributed"]


@dataclass
class HaloLayout:
    """One rank's local view, in local ids (owned rows first, then ghosts grouped by owner rank).

    Attributes:
        owned_ids: ``LongTensor [n_own]`` global ids of owned nodes (local rows ``0..n_own-1``).
        ghost_ids: ``LongTensor [n_ghost]`` global ids of ghosts (local rows ``n_own..``), grouped by
            owner rank (ascending), inside a group in the owner's local row order.
        ghost_owner: ``LongTensor [n_ghost]`` owner rank of each ghost.
        ghost_owner_index: ``LongTensor [n_ghost]`` row of each ghost in its owner's owned rows.
        node_hop: ``LongTensor [n_own + n_ghost]`` ring of every local node (0 = owned).
        edge_index: ``LongTensor [2, E_local]`` local ids, sorted by the ring of the target (stable).
        edge_ids: ``LongTensor [E_local]`` position of each local edge in the global edge list.
        edge_hop_ptr: ``LongTensor [k + 1]``: edges ``edge_hop_ptr[h]:edge_hop_ptr[h+1]`` have a
            target in ring ``h``.
    """

    owned_ids: torch.Tensor
    ghost_ids: torch.Tensor
    ghost_owner: torch.Tensor
    ghost_owner_index: torch.Tensor
    node_hop: torch.Tensor
    edge_index: torch.Tensor
    edge_ids: torch.Tensor
    edge_hop_ptr: torch.Tensor


def check_edge_index(edge_index: torch.Tensor, num_nodes: int, what: str = "edge_index",
                     keep_int32: bool = False) -> torch.Tensor:
    """Validate ``[2, E]`` integer node ids in ``[0, num_nodes)``; return it as a CPU LongTensor.

    Args:
        edge_index: ``[2, E]`` integer tensor (or anything ``torch.as_tensor`` takes).
        num_nodes: ``N``; every id must lie in ``[0, N)``.
        what: name used in error messages.
        keep_int32: return an int32 ``edge_index`` as it is (no int64 copy), for readers that take either.

    Returns:
        ``LongTensor [2, E]`` on the CPU (``IntTensor`` for an int32 input with ``keep_int32``).

    Raises:
        TypeError: non-integer ids. ValueError: wrong shape or ids out of range.
    """
    if not isinstance(edge_index, torch.Tensor):
        edge_index = torch.as_tensor(edge_index)
    if edge_index.dtype.is_floating_point or edge_index.dtype == torch.bool or edge_index.is_complex():
        raise TypeError(f"{what} must hold integer node ids, got dtype {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.shape[0] != 2:
        raise ValueError(f"{what} must have shape [2, E], got {tuple(edge_index.shape)}")
    keep = keep_int32 and edge_index.dtype == torch.int32
    edge_index = edge_index.to(device="cpu", dtype=torch.int32 if keep else torch.long)
    if edge_index.numel():
        lo, hi = int(edge_index.min()), int(edge_index.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(
                f"{what} holds node ids outside [0, {num_nodes}): min {lo}, max {hi} "
                f"(does the partition/sizes cover every node?)"
            )
    return edge_index


def check_hops(halo_hops) -> int:
    """Validate a halo depth.

    Args:
        halo_hops: ghost-node rings ``k`` per part.

    Returns:
        ``halo_hops``.

    Raises:
        ValueError: not an int ``>= 1`` (a bool is refused too).
    """
    if isinstance(halo_hops, bool) or not isinstance(halo_hops, int) or halo_hops < 1:
        raise ValueError(f"halo_hops must be an int >= 1, got {halo_hops!r}")
    return halo_hops


def order_layout(
    owned_ids: torch.Tensor,
    ring_ids: List[torch.Tensor],
    owner_of,
    owner_index_of,
    edge_src: torch.Tensor,
    edge_dst: torch.Tensor,
    edge_ids: torch.Tensor,
    edge_target_hop: torch.Tensor,
    num_hops: int,
) -> HaloLayout:
    """Assemble a :class:`HaloLayout` from rings of global ids and the kept edges (global ids).

    Args:
        owned_ids: global ids of owned nodes, in local row order.
        ring_ids: ``num_hops`` tensors: global ids of rings ``1..num_hops``.
        owner_of / owner_index_of: callables mapping a LongTensor of global ids to owner ranks /
            rows in the owner.
        edge_src, edge_dst, edge_ids: kept edges (global ids) and their global positions.
        edge_target_hop: ring of each kept edge's target.
    """
    ghost_ids = torch.cat(ring_ids) if ring_ids else owned_ids.new_empty(0)
    ghost_hop = torch.cat([torch.full((r.numel(),), h + 1, dtype=torch.long) for h, r in enumerate(ring_ids)]) if ring_ids else owned_ids.new_empty(0)
    owner = owner_of(ghost_ids)
    owner_index = owner_index_of(ghost_ids)
    # Group ghosts by owner, then by row in the owner: the order the owner sends them in.
    big = int(owner_index.max()) + 1 if owner_index.numel() else 1
    order = torch.argsort(owner * big + owner_index)
    ghost_ids, ghost_hop, owner, owner_index = ghost_ids[order], ghost_hop[order], owner[order], owner_index[order]

    sorted_gids, sort_pos = torch.sort(torch.cat([owned_ids, ghost_ids]))
    if edge_target_hop.numel() > 1 and not bool((edge_target_hop[1:] >= edge_target_hop[:-1]).all()):
        eorder = torch.sort(edge_target_hop, stable=True).indices
        src, dst, eids, ehop = edge_src[eorder], edge_dst[eorder], edge_ids[eorder], edge_target_hop[eorder]
        del eorder
    else:  # already grouped by ring (the distributed builder's order): the stable sort is the identity
        src, dst, eids, ehop = edge_src, edge_dst, edge_ids, edge_target_hop
    local_ei = torch.empty(2, src.numel(), dtype=torch.long)
    chunk = 1 << 16  # the positions found are a temporary of this many ids, not of [E]
    for row, g in ((0, src), (1, dst)):
        for a in range(0, g.numel(), chunk):
            torch.index_select(sort_pos, 0, torch.searchsorted(sorted_gids, g[a:a + chunk]),
                               out=local_ei[row, a:a + chunk])
    counts = torch.bincount(ehop, minlength=num_hops)[:num_hops]
    ptr = torch.zeros(num_hops + 1, dtype=torch.long)
    ptr[1:] = torch.cumsum(counts, 0)
    node_hop = torch.cat([torch.zeros(owned_ids.numel(), dtype=torch.long), ghost_hop])
    return HaloLayout(owned_ids, ghost_ids, owner, owner_index, node_hop, local_ei, eids, ptr)


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + c)`` for every (start, count) pair, without a Python loop."""
    total = int(counts.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    return np.arange(total, dtype=np.int64) + shift


#: from this many edges on, edges are grouped by a compiled counting sort (below it, numpy's argsort is
#: faster than the one-time start of numba's compiler in a process that has not used numba yet)
_COMPILED_FROM = 1 << 20


@functools.lru_cache(maxsize=None)
def _compiled_fill():
    """The counting sort's fill loop, compiled on first use (numba is not imported before a large graph)."""
    from numba import njit

    @njit(cache=True)
    def fill(key, slot, out):
        for i in range(key.shape[0]):
            k = key[i]
            out[slot[k]] = i
            slot[k] += 1

    return fill


def _group_stable(key: np.ndarray, ptr: np.ndarray, dtype) -> np.ndarray:
    """Positions ``0..E-1`` grouped by ``key`` (group ``p`` at ``ptr[p]:ptr[p + 1]``), ascending
    inside a group: ``np.argsort(key, kind="stable")`` as ``dtype``. Large inputs take one compiled
    counting-sort pass that makes no ``[E]`` array beside the result, where numpy's stable argsort
    would need chunks and temporaries of its own."""
    if key.size < _COMPILED_FROM:
        return np.argsort(key, kind="stable").astype(dtype, copy=False)
    out = np.empty(key.size, dtype=dtype)
    _compiled_fill()(key, ptr[:-1].copy(), out)  # ptr[:-1]: the next free slot of every group
    return out


class HaloBuilder:
    """Halo layouts of the parts of one partitioned graph, built from one pass over its edges.

    The edges are grouped by the part owning their target once (a stable radix sort of the
    ``[E]`` part ids), so building all ``P`` parts costs ``O(E)`` in total instead of ``P``
    passes with ``[N]``-sized maps. Ghosts are kept as positions in ``partition.perm`` (owner
    rank, then row in the owner): sorted positions are exactly the owner-grouped ghost order, and
    global -> local ids is a ``searchsorted`` into them. :meth:`ghosts` (small) and
    :meth:`layout` (a part's edges) are separate, so a writer can plan the exchange from every
    part's ghosts and then hold one part's edges at a time.

    Args:
        edge_index: ``LongTensor [2, E]`` (or ``IntTensor``) global edges (row 0 source, row 1 target), validated.
        partition: a :class:`meshshard.partitioners.Partition` over the same ``N`` nodes.
        num_hops: halo depth ``k >= 1``.
    """

    def __init__(self, edge_index: torch.Tensor, partition, num_hops: int = 1) -> None:
        self.num_hops = int(num_hops)
        self.src, self.dst = edge_index[0].numpy(), edge_index[1].numpy()
        self.perm, self.offsets = partition.perm.numpy(), partition.offsets.numpy()
        n, num_parts = partition.num_nodes, partition.num_parts
        self.pos = np.empty(n, dtype=np.int64)  # position of every node in perm
        self.pos[self.perm] = np.arange(n, dtype=np.int64)
        # part of each edge's target; uint16 keys make numpy's stable argsort a radix sort (and the [E]
        # key array 2 bytes an entry)
        key = partition.assignment.numpy().astype(np.uint16 if num_parts <= 1 << 16 else np.int64)[self.dst]
        self.eptr = np.zeros(num_parts + 1, dtype=np.int64)
        np.cumsum(np.bincount(key, minlength=num_parts), out=self.eptr[1:])
        # int32 ids halve the one [E] array kept while parts are built
        self.by_part = _group_stable(key, self.eptr, np.int32 if self.src.size < 1 << 31 else np.int64)
        del key
        if self.num_hops > 1:  # CSR of in-edges, to walk from ring h to the edges into it
            self.by_dst = np.argsort(self.dst, kind="stable")
            self.dptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(self.dst, minlength=n), out=self.dptr[1:])
        self._ghosts: dict = {}

    def _rings(self, rank: int):
        """(ghost positions sorted, their rings, ids of the edges into rings 1..k-1 per ring)."""
        if rank in self._ghosts:
            return self._ghosts[rank]
        lo, hi = int(self.offsets[rank]), int(self.offsets[rank + 1])
        into = self.by_part[self.eptr[rank]:self.eptr[rank + 1]]  # edges into ring h - 1
        rings: List[np.ndarray] = []  # ring h + 1 as sorted positions in perm
        deeper: List[np.ndarray] = []  # edges into rings 1..k-1
        for h in range(1, self.num_hops + 1):
            cand = self.pos[self.src[into]]
            cand = np.unique(cand[(cand < lo) | (cand >= hi)])
            if rings:  # drop nodes of inner rings
                cand = cand[~np.isin(cand, np.concatenate(rings), assume_unique=True)]
            rings.append(cand)
            if h < self.num_hops:
                g = self.perm[cand]
                into = self.by_dst[_ranges(self.dptr[g], self.dptr[g + 1] - self.dptr[g])]
                into.sort()
                deeper.append(into)
        ghost_pos = np.concatenate(rings)
        ghost_hop = np.repeat(np.arange(1, self.num_hops + 1, dtype=np.int64), [x.size for x in rings])
        order = np.argsort(ghost_pos, kind="stable")
        self._ghosts[rank] = ghost_pos[order], ghost_hop[order], deeper
        return self._ghosts[rank]

    def ghosts(self, rank: int):
        """``(ghost_owner, ghost_owner_index)`` of part ``rank``: LongTensors ``[n_ghost]``.

        Args:
            rank: the part.
        """
        return self._owner_rows(self._rings(rank)[0])

    def _owner_rows(self, ghost_pos: np.ndarray):
        owner = np.searchsorted(self.offsets, ghost_pos, side="right") - 1
        return torch.from_numpy(owner), torch.from_numpy(ghost_pos - self.offsets[owner])

    def layout(self, rank: int) -> HaloLayout:
        """The :class:`HaloLayout` of part ``rank`` (its ghost lists are then dropped from the cache).

        Args:
            rank: the part.
        """
        ghost_pos, ghost_hop, deeper = self._rings(rank)
        del self._ghosts[rank]
        lo, hi = int(self.offsets[rank]), int(self.offsets[rank + 1])
        n_own = hi - lo
        ghost_owner, ghost_owner_index = self._owner_rows(ghost_pos)

        def to_local(g: np.ndarray) -> np.ndarray:
            p = self.pos[g]
            local = p - lo
            away = (p < lo) | (p >= hi)
            local[away] = n_own + np.searchsorted(ghost_pos, p[away])
            return local

        into = [self.by_part[self.eptr[rank]:self.eptr[rank + 1]]] + deeper
        eids = np.concatenate(into).astype(np.int64, copy=False)
        ptr = np.zeros(self.num_hops + 1, dtype=np.int64)
        np.cumsum([x.size for x in into], out=ptr[1:])
        src, dst = self.src[eids], self.dst[eids]
        local_ei = np.stack([to_local(src), to_local(dst)]) if eids.size else np.empty((2, 0), np.int64)
        return HaloLayout(
            owned_ids=torch.from_numpy(self.perm[lo:hi].copy()),
            ghost_ids=torch.from_numpy(self.perm[ghost_pos]),
            ghost_owner=ghost_owner,
            ghost_owner_index=ghost_owner_index,
            node_hop=torch.from_numpy(np.concatenate([np.zeros(n_own, dtype=np.int64), ghost_hop])),
            edge_index=torch.from_numpy(local_ei),
            edge_ids=torch.from_numpy(eids),
            edge_hop_ptr=torch.from_numpy(ptr),
        )


def build_halos(edge_index: torch.Tensor, partition, num_hops: int = 1,
                parts: Optional[Sequence[int]] = None) -> List[HaloLayout]:
    """Owned + ghost nodes and local edges of several parts, in one pass over the global graph
    (:class:`HaloBuilder`).

    Args:
        edge_index: ``LongTensor [2, E]`` global edges (row 0 source, row 1 target), validated.
        partition: a :class:`meshshard.partitioners.Partition` over the same ``N`` nodes.
        num_hops: halo depth ``k >= 1``.
        parts: the parts to build (default: all, in rank order).

    Returns:
        list of :class:`HaloLayout`, one per entry of ``parts``.
    """
    builder = HaloBuilder(edge_index, partition, num_hops)
    return [builder.layout(r) for r in (range(partition.num_parts) if parts is None else parts)]


def build_halo(edge_index: torch.Tensor, partition, rank: int, num_hops: int = 1) -> HaloLayout:
    """Owned + ghost nodes and local edges of part ``rank`` from the global graph.

    Args:
        edge_index: ``LongTensor [2, E]`` global edges (row 0 source, row 1 target), validated.
        partition: a :class:`meshshard.partitioners.Partition` over the same ``N`` nodes.
        rank: the part to build.
        num_hops: halo depth ``k >= 1``.

    Returns:
        :class:`HaloLayout`.
    """
    return build_halos(edge_index, partition, num_hops, [rank])[0]


def iter_all_parts(edge_index: torch.Tensor, partition, halo_hops: int = 1) -> Iterator[Tuple[HaloLayout, ExchangePlan]]:
    """Layout and exchange plan of every part in rank order, single process (used by ``save_parts``).

    Every part's ghost list is found first (to plan the exchange); each part's edges are built
    only when it is reached, so a writer holds one part's ``[2, E_local]`` arrays at a time.

    Args:
        edge_index: ``LongTensor [2, E]`` global edges, validated.
        partition: :class:`meshshard.partitioners.Partition` of the ``N`` nodes.
        halo_hops: halo depth ``k >= 1``.

    Returns:
        an iterator of ``(HaloLayout, ExchangePlan)``, one pair per part.
    """
    builder, plans = builder_and_plans(edge_index, partition, halo_hops)
    for r in range(partition.num_parts):
        yield builder.layout(r), plans[r]


def builder_and_plans(edge_index: torch.Tensor, partition, halo_hops: int):
    """A :class:`HaloBuilder` and every part's :class:`ExchangePlan` (from every part's ghost list).

    Args:
        edge_index: ``LongTensor [2, E]`` global edges, validated.
        partition: :class:`meshshard.partitioners.Partition` of the ``N`` nodes.
        halo_hops: halo depth ``k >= 1``.

    Returns:
        ``(builder, plans)``.
    """
    builder = HaloBuilder(edge_index, partition, halo_hops)
    ghosts = [builder.ghosts(r) for r in range(partition.num_parts)]
    return builder, plans_from_requests([g[0] for g in ghosts], [g[1] for g in ghosts])


def build_all_parts(edge_index: torch.Tensor, partition, halo_hops: int = 1):
    """Layouts and exchange plans of every part, single process (:func:`iter_all_parts` as lists).

    Args:
        edge_index: ``LongTensor [2, E]`` global edges, validated.
        partition: :class:`meshshard.partitioners.Partition` of the ``N`` nodes.
        halo_hops: halo depth ``k >= 1``.

    Returns:
        ``(layouts, plans)``: lists of :class:`HaloLayout` and :class:`ExchangePlan`, one per part.
    """
    pairs = list(iter_all_parts(edge_index, partition, halo_hops))
    return [p[0] for p in pairs], [p[1] for p in pairs]


def build_halo_distributed(edge_index: torch.Tensor, sizes: Sequence[int], halo_hops: int = 1, group=None) -> HaloLayout:
    """This rank's :class:`HaloLayout` when each rank holds only the edges into its own nodes (collective).

    Node ids are "ShardTensor order" global ids (rank ``r`` owns ``offsets[r]..offsets[r+1]-1``);
    edges are numbered by concatenating the ranks' lists in rank order. Ring ``h > 1`` is found
    by asking the owners of ring ``h - 1`` for their in-edges (two ``all_to_all_single`` per ring).

    Args:
        edge_index: ``LongTensor [2, E_r]`` this rank's edges, validated (targets owned here).
        sizes: owned node count of every rank.
        halo_hops: halo depth ``k >= 1``.
        group: process group.

    Returns:
        :class:`HaloLayout`.
    """
    ei, sz = edge_index, [int(n) for n in sizes]
    rank, world = msd.get_rank(group), msd.get_world_size(group)
    offsets = torch.zeros(world + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.tensor(sz, dtype=torch.long), 0)
    lo, hi = int(offsets[rank]), int(offsets[rank + 1])
    edge_counts = msd.all_gather_sizes([ei.shape[1]], group).view(-1)
    eid0 = int(edge_counts[:rank].sum())
    src, dst = ei[0], ei[1]
    eids = torch.arange(eid0, eid0 + ei.shape[1], dtype=torch.long)

    def owner_of(g):
        return torch.searchsorted(offsets, g, right=True) - 1

    if halo_hops > 1:  # CSR of local edges by target, to answer other ranks' requests for in-edges
        order = torch.argsort(dst - lo, stable=True)
        csr_dst, csr_src, csr_eid = dst[order], src[order], eids[order]
        rowptr = torch.zeros(hi - lo + 1, dtype=torch.long)
        rowptr[1:] = torch.cumsum(torch.bincount(dst - lo, minlength=hi - lo), 0)
        del order

    known = torch.arange(lo, hi, dtype=torch.long)  # sorted
    e_src, e_dst, e_id, e_hop = [src], [dst], [eids], [torch.zeros(1, dtype=torch.long).expand(src.numel())]
    rings: List[torch.Tensor] = []
    new = torch.unique(src[(src < lo) | (src >= hi)])
    rings.append(new)
    known = torch.unique(torch.cat([known, new]))
    dev = msd.comm_device(group)
    for h in range(2, halo_hops + 1):
        want = rings[-1]  # sorted, so grouped by owner
        want_counts = torch.bincount(owner_of(want), minlength=world) if want.numel() else torch.zeros(world, dtype=torch.long)
        give_counts = msd.all_to_all_single(want_counts.to(dev), [1] * world, [1] * world, group).cpu()
        asked = msd.all_to_all_single(want.to(dev), give_counts.tolist(), want_counts.tolist(), group).cpu()
        # Reply with (src, dst, eid) of every local edge into each asked node, per asker.
        loc = asked - lo
        starts, ends = rowptr[loc], rowptr[loc + 1]
        per_node = ends - starts
        idx = torch.repeat_interleave(starts, per_node) + (
            torch.arange(int(per_node.sum())) - torch.repeat_interleave(torch.cumsum(per_node, 0) - per_node, per_node))
        reply = torch.stack([csr_src[idx], csr_dst[idx], csr_eid[idx]], 1)
        asker = torch.repeat_interleave(torch.repeat_interleave(torch.arange(world), give_counts), per_node)
        reply_counts = torch.bincount(asker, minlength=world) if asker.numel() else torch.zeros(world, dtype=torch.long)
        back_counts = msd.all_to_all_single(reply_counts.to(dev), [1] * world, [1] * world, group).cpu()
        got = msd.all_to_all_single(reply.to(dev), back_counts.tolist(), reply_counts.tolist(), group).cpu()
        e_src.append(got[:, 0]); e_dst.append(got[:, 1]); e_id.append(got[:, 2])
        e_hop.append(torch.full((got.shape[0],), h - 1, dtype=torch.long))
        cand = torch.unique(got[:, 0])
        new = cand[~torch.isin(cand, known)]
        rings.append(new)
        known = torch.unique(torch.cat([known, new]))
    return order_layout(
        torch.arange(lo, hi, dtype=torch.long), rings, owner_of, lambda g: g - offsets[owner_of(g)],
        _cat(e_src), _cat(e_dst), _cat(e_id), _cat(e_hop), halo_hops)


def _cat(parts: List[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(parts)``, without a copy of a single part."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)
