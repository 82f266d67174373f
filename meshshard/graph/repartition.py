"""Repartition on load: a graph saved in ``K`` parts read by a group of ``W != K`` ranks.

Solver restarts are repartitioned the same way: the ``K`` parts, one after the other, give an
order of all nodes (the *partition order*: part 0's owned rows, then part 1's, ...). The ``W``
ranks split that order into ``W`` contiguous ranges (:func:`split_ranges`): with ``W < K`` each
rank takes whole neighbouring parts (merged), with ``W > K`` each part is cut into pieces
(split), so a rank reads only the part files its range touches and never the whole graph (unless
``W = 1``). Each rank keeps the edges into its range (every part file holds the edges into its
owned nodes, with their sources' owners), and the halo and exchange plan of the new split are built
with the distributed halo builder (:func:`meshshard.graph.halo.build_halo_distributed`); ghost
rows of the stored node fields and the rows of the stored edge fields come from the ranks that
hold them. Node and edge ids stay the original ones, so ``gather`` returns rows in original node
order and results equal those on ``K`` ranks (to the rounding of sums taken in another order).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch

from meshshard import distributed as msd
from meshshard.graph.halo import HaloLayout, build_halo_distributed
from meshshard.graph.parts_io import load_part, read_meta
from meshshard.graph.plan import build_plan_distributed

__all__ = ["split_ranges", "load_repartitioned"]


def split_ranges(sizes: Sequence[int], world: int) -> List[Tuple[int, int]]:
    """The ``[start, stop)`` range of the partition order each of ``world`` ranks owns.

    Args:
        sizes: owned nodes of each of the ``K`` stored parts.
        world: ranks ``W >= 1`` to split them over.

    Returns:
        ``W`` contiguous ranges covering ``[0, sum(sizes))`` in rank order. ``W <= K``: rank ``r``
        owns whole parts ``round(r K / W) .. round((r + 1) K / W) - 1``. ``W > K``: part ``k`` is cut
        into ``n_k >= 1`` pieces of (nearly) equal size, ``n_k`` proportional to its size
        (largest remainders, ``sum n_k = W``), the pieces of part 0 first.

    Raises:
        ValueError: ``world < 1`` or no parts.
    """
    sizes = [int(s) for s in sizes]
    k, world = len(sizes), int(world)
    if world < 1 or k < 1:
        raise ValueError(f"split_ranges needs at least one part and one rank, got {k} parts and {world} ranks")
    offsets = [0]
    for s in sizes:
        offsets.append(offsets[-1] + s)
    if world <= k:
        bounds = [offsets[(r * k + world // 2) // world] for r in range(world)] + [offsets[-1]]
        return [(bounds[r], bounds[r + 1]) for r in range(world)]
    total = max(offsets[-1], 1)
    extra = world - k  # every part gets one piece, the rest by size
    share = [s * extra / total for s in sizes]
    pieces = [1 + int(x) for x in share]
    by_remainder = sorted(range(k), key=lambda i: (-(share[i] - int(share[i])), i))
    for i in by_remainder[: world - sum(pieces)]:
        pieces[i] += 1
    out = []
    for part, n in enumerate(pieces):
        lo, s = offsets[part], sizes[part]
        out += [(lo + j * s // n, lo + (j + 1) * s // n) for j in range(n)]
    return out


class _Requests:
    """Rows to fetch from their owner ranks: ``(owner, index)`` pairs, asked once, answered per table."""

    def __init__(self, owner: torch.Tensor, index: torch.Tensor, group) -> None:
        world = msd.get_world_size(group)
        self.group = group
        self.order = torch.argsort(owner, stable=True)
        self.want = torch.bincount(owner, minlength=world) if owner.numel() else torch.zeros(world, dtype=torch.long)
        ones = [1] * world
        self.give = msd.all_to_all_single(self.want, ones, ones, group)
        self.asked = msd.all_to_all_single(index[self.order], self.give.tolist(), self.want.tolist(), group)

    def fetch(self, table: torch.Tensor) -> torch.Tensor:
        """The asked rows of every rank's ``table`` (collective; same trailing shape and dtype everywhere)."""
        got = msd.all_to_all_single(table[self.asked].contiguous(), self.want.tolist(), self.give.tolist(), self.group)
        out = torch.empty_like(got)
        out[self.order] = got
        return out


def _empty(spec: dict, what: str, name: str) -> torch.Tensor:
    """A ``[0, *shape]`` tensor of a stored field, from its ``meta.json`` entry (shape and dtype)."""
    dtype = getattr(torch, str(spec.get("dtype", "")), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"meta.json: {what}[{name!r}] has an unknown dtype {spec.get('dtype')!r}")
    return torch.empty((0, *[int(d) for d in spec.get("shape", [])]), dtype=dtype)


def _rows_of_range(parts: List[dict], part_offsets: List[int], lo: int, hi: int, meta: dict):
    """From the loaded parts: the edges into ``[lo, hi)`` in partition-order ids, their original ids and
    fields, and the owned rows in that range (original ids and node fields). Fields are named by
    ``meta.json``, so a rank whose range is empty (it read no part) has them too, with no rows."""
    edges = [torch.empty(2, 0, dtype=torch.long)]
    edge_orig, owned_orig = [torch.empty(0, dtype=torch.long)], [torch.empty(0, dtype=torch.long)]
    node_fields = {n: [_empty(spec, "node_features", n)] for n, spec in (meta.get("node_features") or {}).items()}
    edge_fields = {n: [_empty(spec, "edge_features", n)] for n, spec in (meta.get("edge_features") or {}).items()}
    offsets = torch.tensor(part_offsets, dtype=torch.long)
    for p in parts:
        k = int(p["rank"])
        n_own = int(p["owned_ids"].numel())
        # partition-order id of every local row: owned rows follow the part's offset, a ghost its owner's
        pid = torch.cat([offsets[k] + torch.arange(n_own), offsets[p["ghost_owner"]] + p["ghost_owner_index"]])
        into_owned = int(p["edge_hop_ptr"][1])
        ei = pid[p["edge_index"][:, :into_owned]]
        keep = (ei[1] >= lo) & (ei[1] < hi)
        edges.append(ei[:, keep])
        edge_orig.append(p["edge_ids"][:into_owned][keep])
        rows = torch.nonzero((pid[:n_own] >= lo) & (pid[:n_own] < hi)).view(-1)
        owned_orig.append(p["owned_ids"][rows])
        for fields, stored, index, what in ((node_fields, p.get("node_data") or {}, rows, "node"),
                                            (edge_fields, p.get("edge_data") or {}, None, "edge")):
            if set(stored) != set(fields):
                raise ValueError(f"part {k} stores the {what} fields {sorted(stored)}, meta.json names {sorted(fields)}")
            for name, t in stored.items():
                fields[name].append(t[index] if index is not None else t[:into_owned][keep])
    return (torch.cat(edges, 1), torch.cat(edge_orig), {n: torch.cat(v) for n, v in sorted(edge_fields.items())},
            torch.cat(owned_orig), {n: torch.cat(v) for n, v in sorted(node_fields.items())})


def load_repartitioned(out_dir, group=None):
    """This rank's :class:`~meshshard.graph.ShardedGraph` of a graph saved in ``K`` parts, for a group
    of any size ``W`` (collective; see the module docstring).

    Each rank reads only ``meta.json`` and the part files that its range of
    :func:`split_ranges` touches (checksums verified). ``node_data`` / ``edge_data`` hold the stored
    fields (owned + ghost rows, local edges) as :meth:`ShardedGraph.load` gives them.

    Args:
        out_dir: a folder written by :func:`meshshard.graph.save_parts`.
        group: process group of ``W`` ranks (``None``: the world; ``W = 1`` without one).

    Returns:
        :class:`~meshshard.graph.ShardedGraph` with ``W`` parts; ``global_ids`` and ``edge_ids`` are
        the original node and edge ids.

    Raises:
        FileNotFoundError / ValueError: on every rank, when a part file a rank needs is missing or
        corrupt, or the parts do not belong together.
    """
    from meshshard.graph.sharded_graph import ShardedGraph

    rank, world = msd.get_rank(group), msd.get_world_size(group)

    def read():
        meta = read_meta(out_dir)
        sizes = [int(s) for s in meta["sizes"]]
        if len(sizes) != int(meta["num_parts"]):
            raise ValueError(f"{out_dir}/meta.json: sizes has {len(sizes)} entries for {meta['num_parts']} parts")
        ranges = split_ranges(sizes, world)
        lo, hi = ranges[rank]
        offsets = [0]
        for s in sizes:
            offsets.append(offsets[-1] + s)
        needed = [k for k in range(len(sizes)) if offsets[k] < hi and offsets[k + 1] > lo]
        parts = []
        for k in needed:
            p = load_part(out_dir, k)
            if [int(s) for s in p["sizes"]] != sizes or int(p["num_parts"]) != len(sizes):
                raise ValueError(f"{out_dir}: part {k} belongs to another split than meta.json describes")
            parts.append(p)
        return meta, ranges, offsets, parts

    meta, ranges, offsets, parts = msd.run_together(read, f"ShardedGraph.load({out_dir}) on {world} ranks", group)
    lo, hi = ranges[rank]
    halo_hops = int(meta["halo_hops"])
    new_sizes = [b - a for a, b in ranges]
    ei, edge_orig, edge_fields, owned_orig, node_fields = _rows_of_range(parts, offsets, lo, hi, meta)
    del parts
    if owned_orig.numel() != hi - lo:
        raise ValueError(f"{out_dir}: rank {rank} found {owned_orig.numel()} of the {hi - lo} nodes of its range")
    layout = build_halo_distributed(ei, new_sizes, halo_hops, group)
    plan = build_plan_distributed(layout.ghost_owner, layout.ghost_owner_index, group)
    # original ids and stored fields of the ghost rows and of the edges, from the ranks that hold them
    ghosts = _Requests(layout.ghost_owner, layout.ghost_owner_index, group)
    edge_counts = msd.all_gather_sizes([ei.shape[1]], group).view(-1)
    edge_offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(edge_counts, 0)])
    edge_owner = torch.searchsorted(edge_offsets, layout.edge_ids, right=True) - 1
    edges = _Requests(edge_owner, layout.edge_ids - edge_offsets[edge_owner], group)
    # every rank names the fields in the same order (as stored), so the collectives pair up
    local = HaloLayout(owned_orig, ghosts.fetch(owned_orig), layout.ghost_owner, layout.ghost_owner_index,
                       layout.node_hop, layout.edge_index, edges.fetch(edge_orig), layout.edge_hop_ptr)
    g = ShardedGraph(local, plan, new_sizes, halo_hops=halo_hops, group=group,
                     global_perm=owned_orig if world == 1 else None)
    g.node_data = {n: torch.cat([t, ghosts.fetch(t)]) for n, t in node_fields.items()}
    g.edge_data = {n: edges.fetch(t) for n, t in edge_fields.items()}
    return g
