"""A parallel VTK file read piece-wise by a process group, into a :class:`~meshshard.graph.ShardedGraph`
(layer 3): no rank ever holds the whole mesh.

Each rank reads a contiguous block of the pieces (:func:`meshshard.io.pieces.read_pieces`), then:

1. *one number per point*: a point on a piece border is held by several ranks. Every rank hashes
   the key of each of its points (the global point id array when every piece has one, else the
   exact coordinates) to an owner rank; the owner keeps each key once, makes the lowest rank that
   sent it its *holder*, numbers the keys holder by holder and sends the numbers back. The
   holders' points, in number order, are the ranks' slices of the point set;
2. :func:`meshshard.ops.partition_distributed` partitions the slices; the point fields follow
   their points to their new rank;
3. every rank turns its cells into edges between the new node ids (owned rows in rank order, the
   numbering of :meth:`ShardedGraph.from_global_edges`), sends each edge to the owner of its
   target, and :meth:`ShardedGraph.from_global_edges` builds the halos with the distributed halo
   builder.

The graph equals the one of the merged file (:func:`meshshard.io.read_mesh`) up to the node
numbering: the same points, the same element edges. Every step uses layer 0's
``all_to_all_single`` / ``all_gather_into_tensor``; no step gathers the mesh anywhere.
"""
from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from meshshard import distributed as msd
from meshshard.graph.sharded_graph import ShardedGraph
from meshshard.io.cell_edges import _edge_keys, _local_edges, topological_dim
from meshshard.io.pieces import PieceSet, piece_sources, pieces_of_rank, read_pieces
from meshshard.ops.partition import partition_distributed

__all__ = ["PieceGraph", "read_pieces_distributed", "RowFetch", "RowPush"]

PathLike = Union[str, os.PathLike]


@dataclasses.dataclass
class PieceGraph:
    r"""This rank's share of a parallel VTK file read piece-wise (:func:`read_pieces_distributed`).

    Attributes:
        graph: :class:`~meshshard.graph.ShardedGraph` of the mesh's element edges; node ids in
            ShardTensor order (rank ``r`` owns ``graph.offsets[r]..graph.offsets[r + 1] - 1``).
        points: ``float64 [n_owned, d]`` coordinates of the owned nodes (``d = 2`` for a planar
            mesh, as :func:`meshshard.io.read_mesh` gives it).
        point_data: name -> ``[n_owned, ...]`` point fields of the owned nodes (the fields every
            piece has).
        keys: ``int64 [n_owned, K]`` the key of every owned node: its global point id (``K = 1``)
            or the bit patterns of its three float64 coordinates (``K = 3``).
        key_kind: ``"ids"`` or ``"coordinates"``.
        local: the :class:`~meshshard.io.pieces.PieceSet` this rank read (for writing its piece back),
            its fields cut down to those every piece of the file has.
        local_ids: ``LongTensor [local.num_points]`` the node id of every point read here.
        point_ids: ``int64 [local.num_points]`` a number of every point read here that is the same
            on every rank holding the point (written as ``GlobalPointIds`` with the pieces).
        num_nodes: nodes of the whole mesh.
        source: the master file.
    """

    graph: ShardedGraph
    points: torch.Tensor
    point_data: Dict[str, np.ndarray]
    keys: np.ndarray
    key_kind: str
    local: PieceSet
    local_ids: torch.Tensor
    point_ids: np.ndarray
    num_nodes: int
    source: Path

    @property
    def dim(self) -> int:
        """Coordinates per node (2 or 3)."""
        return int(self.points.shape[1])


def _send(rows: np.ndarray, dest: np.ndarray, world: int, group) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Send row ``i`` of an int64 ``[n, c]`` matrix to rank ``dest[i]`` (collective).

    Returns:
        ``(received rows grouped by source rank, rows received from each rank, the send order)``:
        ``order[j]`` is the input row sent ``j``-th, so a reply in the received order comes back
        in ``order``.
    """
    order = np.argsort(dest, kind="stable")
    send = np.bincount(dest, minlength=world).astype(np.int64)
    counts = msd.all_gather_sizes(send, group).numpy()  # [W, W]: counts[i, j] rows i -> j
    recv = counts[:, msd.get_rank(group)]
    out = msd.all_to_all_single(torch.from_numpy(np.ascontiguousarray(rows[order])),
                                output_split_sizes=recv.tolist(), input_split_sizes=send.tolist(), group=group)
    return out.numpy().reshape((-1,) + rows.shape[1:]), recv, order


def _reply(rows: np.ndarray, recv: np.ndarray, order: np.ndarray, world: int, group) -> np.ndarray:
    """Answer the rows :func:`_send` delivered, one answer row per received row; the asker gets
    them back in its input row order (collective)."""
    send = msd.all_gather_sizes(recv, group).numpy()[:, msd.get_rank(group)]  # what this rank asked of each
    got = msd.all_to_all_single(torch.from_numpy(np.ascontiguousarray(rows)), output_split_sizes=send.tolist(),
                                input_split_sizes=recv.tolist(), group=group).numpy()
    out = np.empty_like(got)
    out[order] = got
    return out


def _lookup(query: np.ndarray, offsets: np.ndarray, table: np.ndarray, world: int, group) -> np.ndarray:
    """``value[g]`` for ids ``query``, where rank ``r`` holds ``table`` for ids
    ``offsets[r]..offsets[r + 1] - 1`` (collective)."""
    dest = np.searchsorted(offsets, query, side="right") - 1
    got, recv, order = _send(query[:, None], dest, world, group)
    rank = msd.get_rank(group)
    return _reply(table[got[:, 0] - offsets[rank]].reshape(len(got), -1), recv, order, world, group)[:, 0]


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser over uint64 (wrapping arithmetic)."""
    h = h + np.uint64(0x9E3779B97F4A7C15)
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def _hash_owner(keys: np.ndarray, world: int) -> np.ndarray:
    """A rank per key row, the same on every rank for equal keys."""
    with np.errstate(over="ignore"):
        h = np.zeros(len(keys), dtype=np.uint64)
        for j in range(keys.shape[1]):
            h = _mix(h ^ keys[:, j].view(np.uint64))
    return (h % np.uint64(world)).astype(np.int64)


def _unique_rows(keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """``(first row of every distinct key, inverse)``, keys in sorted order (first: lowest row)."""
    if len(keys) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort(keys.T[::-1])
    k = keys[order]
    new = np.concatenate([[True], (k[1:] != k[:-1]).any(axis=1)])
    group_of = np.cumsum(new) - 1
    inv = np.empty(len(keys), dtype=np.int64)
    inv[order] = group_of
    return order[new], inv


def _pack(fields: Dict[str, np.ndarray], n: int) -> np.ndarray:
    """Fields as int64 columns (their bytes, each field padded to 8 bytes a row)."""
    cols = [np.zeros((n, 0), np.int64)]
    for v in fields.values():
        b = np.ascontiguousarray(v).reshape(n, -1).view(np.uint8).reshape(n, -1)
        pad = -b.shape[1] % 8
        if pad:
            b = np.concatenate([b, np.zeros((n, pad), np.uint8)], axis=1)
        cols.append(np.ascontiguousarray(b).view(np.int64))
    return np.concatenate(cols, axis=1)


def _unpack(cols: np.ndarray, like: Dict[str, Tuple[tuple, str]]) -> Dict[str, np.ndarray]:
    """The inverse of :func:`_pack` for fields of the given ``(row shape, dtype)``."""
    n, at, out = cols.shape[0], 0, {}
    raw = np.ascontiguousarray(cols).view(np.uint8).reshape(n, -1)
    for name, (shape, dtype) in like.items():
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        out[name] = np.ascontiguousarray(raw[:, at:at + nbytes]).view(dt).reshape((n,) + tuple(shape))
        at += nbytes + (-nbytes % 8)
    return out


def _agree_fields(fields: Dict[str, np.ndarray], group) -> Tuple[Dict[str, Tuple[tuple, str]], List[str]]:
    """The fields every rank has with one row shape, with a common dtype; the names of the rest."""
    mine = {k: (tuple(v.shape[1:]), np.asarray(v).dtype.str) for k, v in fields.items()}
    every = msd.all_gather_object(mine, group)
    keep, dropped = {}, sorted(set().union(*every) - set.intersection(*[set(e) for e in every]))
    for k in fields:
        if k in dropped:
            continue
        if len({e[k][0] for e in every}) > 1:
            dropped.append(k)
            continue
        keep[k] = (every[0][k][0], np.result_type(*[np.dtype(e[k][1]) for e in every]).str)
    return keep, dropped


def _coordinate_keys(points: np.ndarray) -> np.ndarray:
    """float64 coordinates as int64 bit patterns (``-0.0`` as ``0.0``)."""
    return np.ascontiguousarray(points + 0.0, dtype=np.float64).view(np.int64).reshape(len(points), -1)


def _owner_edges(cells, top: int, node_u: np.ndarray, inv: np.ndarray, offsets: np.ndarray, world: int,
                 group) -> torch.Tensor:
    """This rank's in-edges: every element edge of the cells read here, sent to the owner of its
    target, each edge once (collective).

    Args:
        cells: cell type -> ``[m, k]`` point rows of the pieces read here.
        top: the topological dimension whose cells give the edges.
        node_u / inv: node id of every distinct point read here / distinct point of every point.
        offsets: ``[W + 1]`` node id offsets of the ranks.

    Returns:
        ``LongTensor [2, E_r]`` (source, target) sorted by (target, source); targets owned here.
    """
    n = np.int64(max(int(offsets[-1]), 1))
    blocks = [(node_u[inv[c]], _local_edges(t, c)) for t, c in cells.items()
              if len(c) and topological_dim(t) == top]
    ek = _edge_keys(blocks, n) if blocks else np.zeros(0, np.int64)
    del blocks
    ek = _sorted_unique(ek[ek >= 0])
    # ids fit 32 bits on any mesh below 2**31 nodes: the pairs travel at half the bytes
    idt = np.int32 if int(offsets[-1]) < 2**31 else np.int64
    m = len(ek)
    pairs = np.empty((2 * m, 2), dtype=idt)  # (source, target): both directions
    lo, hi = np.divmod(ek, n)
    del ek
    pairs[:m, 0], pairs[:m, 1], pairs[m:, 0], pairs[m:, 1] = lo, hi, hi, lo
    del lo, hi
    dest = np.searchsorted(offsets, pairs[:, 1], side="right") - 1
    got, _, _ = _send(pairs, dest, world, group)
    del pairs, dest
    key = got[:, 1].astype(np.int64)
    key *= n
    key += got[:, 0]
    del got
    key = _sorted_unique(key)  # each edge once, by (target, source)
    ei = np.empty((2, len(key)), dtype=np.int64)
    np.divmod(key, n, out=(ei[1], ei[0]))
    return torch.from_numpy(ei)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)`` sorting ``a`` (a temporary) in place."""
    a.sort()
    if len(a) < 2:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def read_pieces_distributed(path: PathLike, *, method: str = "kdtree", halo_hops: int = 1, group=None,
                            warn: bool = True) -> PieceGraph:
    """Read a ``.pvtu`` / ``.pvtp`` piece-wise and build this rank's :class:`~meshshard.graph.ShardedGraph` (collective).

    Rank ``r`` of ``W`` reads pieces ``r * K // W .. (r + 1) * K // W - 1``; the points are
    numbered once, partitioned with :func:`meshshard.ops.partition_distributed` and the halos
    built with the distributed halo builder (see the module notes). The result equals
    ``ShardedGraph.from_partition`` of the merged mesh's graph up to the numbering of the nodes.

    Args:
        path: the master file, with at least ``W`` pieces.
        method: ``"kdtree"``, ``"hilbert"`` or ``"morton"`` (:func:`partition_distributed`).
        halo_hops: halo depth ``k >= 1``.
        group: process group (default: the world; works without one as a single rank).
        warn: warn (on rank 0) about fields some piece lacks (they are dropped, as the merged reader does).

    Returns:
        :class:`PieceGraph`.

    Raises:
        ValueError / FileNotFoundError / ImportError on every rank: fewer pieces than ranks, a bad
        piece on any rank, a mesh without cells (a point cloud has no element edges).
    """
    world, rank = msd.get_world_size(group), msd.get_rank(group)
    path = Path(path)

    def mine():
        count = len(piece_sources(path))
        if count < world:
            raise ValueError(f"{path} has {count} pieces, fewer than the {world} ranks reading it piece-wise")
        return read_pieces(path, pieces_of_rank(count, world, rank))

    ps = msd.run_together(mine, f"reading the pieces of {path.name}", group)

    # what every rank must agree on: the key, the fields, the cells' dimension, planarity
    cells = ps.cells()
    dims = [topological_dim(t) for t in cells]
    del cells  # grouped again for the edges (step 4): not held through the numbering and the partition
    flags = msd.all_gather_sizes([int(ps.global_ids is not None), max(dims, default=-1),
                                  int(bool(ps.points[:, 2].any()))], group).numpy()
    use_ids = bool(flags[:, 0].all())
    top = int(flags[:, 1].max())
    planar = top <= 2 and not flags[:, 2].any()
    if top < 1:
        raise ValueError(f"{path}: the pieces hold no cells of dimension 1 to 3 (a point cloud): read it whole with "
                         "meshshard.read_mesh and build its kNN graph")
    pfields, p_dropped = _agree_fields(ps.point_data, group)
    if warn and rank == 0 and (p_dropped or ps.dropped):
        warnings.warn(f"{path.name}: point fields {sorted(set(p_dropped) | set(ps.dropped))} are not on every piece "
                      "(or differ in shape between them); dropped", stacklevel=2)
    point_data = {k: ps.point_data[k].astype(np.dtype(dt), copy=False) for k, (_, dt) in pfields.items()}
    cfields, _ = _agree_fields(ps.cell_data, group)
    # the pieces read keep only the fields every piece has, so that every rank's piece written back holds them
    ps.point_data = point_data
    ps.cell_data = {k: ps.cell_data[k].astype(np.dtype(dt), copy=False) for k, (_, dt) in cfields.items()}
    dim = 2 if planar else 3

    # 1. one number per point: local duplicates first, then the key's owner decides
    keys = ps.global_ids[:, None].copy() if use_ids else _coordinate_keys(ps.points)
    first, inv = _unique_rows(keys)
    ukeys = keys[first]
    got, recv, order = _send(ukeys, _hash_owner(ukeys, world), world, group)
    o_first, o_inv = _unique_rows(got)
    source = np.repeat(np.arange(world), recv)
    holder = source[o_first]  # the lowest rank sending the key (rows come in source order)
    per_holder = msd.all_gather_sizes(np.bincount(holder, minlength=world), group).numpy()  # [owner, holder]
    base = np.concatenate([[0], np.cumsum(per_holder.sum(axis=0))])  # holder h's slice starts at base[h]
    before = per_holder[:rank].sum(axis=0)  # keys of each holder numbered by lower owners
    by_holder = np.argsort(holder, kind="stable")
    rank_in = np.empty(len(holder), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(np.bincount(holder, minlength=world))])
    rank_in[by_holder] = np.arange(len(holder)) - starts[holder[by_holder]]
    number = base[holder] + before[holder] + rank_in
    answer = np.stack([number[o_inv], (source == holder[o_inv]).astype(np.int64)], axis=1)
    back = _reply(answer, recv, order, world, group)
    gid_u, held = back[:, 0].copy(), back[:, 1].astype(bool)
    del got, o_first, o_inv, source, holder, answer, back, number, rank_in, by_holder, ukeys

    # 2. the holders' slices, partitioned; fields travel with their points
    rows = first[held][np.argsort(gid_u[held])]
    gids = np.sort(gid_u[held])
    if not np.array_equal(gids, np.arange(base[rank], base[rank + 1])):
        raise RuntimeError(f"rank {rank}: the point numbering is not contiguous (internal error)")
    part = partition_distributed(ps.points[rows, :dim], world, method, group=group)
    payload = np.concatenate([gids[:, None], keys[rows], _pack({k: v[rows] for k, v in point_data.items()}, len(rows))],
                             axis=1)
    dest = part.assignment.numpy() * world // part.num_parts
    delivered, _, _ = _send(payload, dest, world, group)
    del payload, dest
    delivered = delivered[np.argsort(delivered[:, 0], kind="stable")]
    if not np.array_equal(delivered[:, 0], part.global_ids.numpy()):
        raise RuntimeError(f"rank {rank}: the fields did not arrive with their points (internal error)")
    kw = keys.shape[1]
    owned_fields = _unpack(delivered[:, 1 + kw:], pfields)

    # 3. node ids in rank order: the holders learn them, then every rank looks its points up
    sizes = [int(s) for s in part.sizes]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    node = offsets[rank] + np.arange(sizes[rank], dtype=np.int64)
    src_holder = np.searchsorted(base, delivered[:, 0], side="right") - 1
    told, _, _ = _send(np.stack([delivered[:, 0], node], axis=1), src_holder, world, group)
    table = np.empty(int(base[rank + 1] - base[rank]), dtype=np.int64)
    table[told[:, 0] - base[rank]] = told[:, 1]
    owned_keys = delivered[:, 1:1 + kw].copy()
    del told, delivered
    node_u = _lookup(gid_u, base, table, world, group)
    del table, keys, first, rows, held

    # 4. edges of the cells of the top dimension, each sent to the owner of its target
    ei = _owner_edges(ps.cells(), top, node_u, inv, offsets, world, group)
    graph = ShardedGraph.from_global_edges(ei, sizes, group=group, halo_hops=halo_hops)
    return PieceGraph(graph=graph, points=part.points.to(torch.float64), point_data=owned_fields,
                      keys=owned_keys, key_kind="ids" if use_ids else "coordinates", local=ps,
                      local_ids=torch.from_numpy(node_u[inv]), point_ids=gid_u[inv], num_nodes=int(offsets[-1]),
                      source=path)


class RowFetch:
    """Rows of a node-sharded tensor at given node ids, from their owners (collective).

    Built once per set of ids (an all-to-all of the ids), then :meth:`__call__` moves only the
    rows (one ``all_to_all_single``): what a rank needs to write the points of its pieces with
    values that live on the nodes' owners.

    Args:
        ids: ``LongTensor [m]`` node ids (ShardTensor order, repeats allowed).
        sizes: owned node count of every rank.
        group: process group.
    """

    def __init__(self, ids: torch.Tensor, sizes: Sequence[int], group=None) -> None:
        self.group = group
        self.world, self.rank = msd.get_world_size(group), msd.get_rank(group)
        self.offsets = np.concatenate([[0], np.cumsum([int(s) for s in sizes])]).astype(np.int64)
        ids = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.offsets[-1]):
            raise ValueError(f"ids must lie in [0, {int(self.offsets[-1])}), got [{int(ids.min())}, {int(ids.max())}]")
        uniq, self.inv = np.unique(ids, return_inverse=True)
        dest = np.searchsorted(self.offsets, uniq, side="right") - 1
        got, self.recv, self.order = _send(uniq[:, None], dest, self.world, group)
        self.rows = torch.from_numpy(got[:, 0] - self.offsets[self.rank])
        self.send = msd.all_gather_sizes(self.recv, group).numpy()[:, self.rank]

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        """The rows of the asked ids.

        Args:
            x_owned: ``[n_owned, *]`` this rank's owned rows.

        Returns:
            ``[m, *]`` on ``x_owned``'s device, in the order of the ids given at construction.
        """
        out = msd.all_to_all_single(x_owned.index_select(0, self.rows.to(x_owned.device)),
                                    output_split_sizes=self.send.tolist(), input_split_sizes=self.recv.tolist(),
                                    group=self.group)
        full = torch.empty_like(out)
        full[torch.from_numpy(self.order).to(out.device)] = out
        return full.index_select(0, torch.from_numpy(self.inv.reshape(-1)).to(out.device))


class RowPush:
    """Rows held where nodes were read, sent to the nodes' owners (collective): the reverse of :class:`RowFetch`.

    A rank holds rows for node ids ``ids`` (repeats allowed: a point on a piece border is read by
    every piece that holds it, on one rank or several); each owned node takes the row of the lowest
    rank holding it (the first such row there). Built once per set of ids (an all-to-all of the
    ids), then :meth:`__call__` moves only one row per node and holder (one ``all_to_all_single``):
    how the fields of a later time step, read piece by piece like the first, reach the owners.

    Args:
        ids: ``LongTensor [m]`` node ids (ShardTensor order) of the rows this rank holds.
        sizes: owned node count of every rank.
        group: process group.

    Raises:
        ValueError: an id outside the nodes; an owned node that no rank holds (on every rank).
    """

    def __init__(self, ids: torch.Tensor, sizes: Sequence[int], group=None) -> None:
        self.group = group
        world, rank = msd.get_world_size(group), msd.get_rank(group)
        offsets = np.concatenate([[0], np.cumsum([int(s) for s in sizes])]).astype(np.int64)
        ids = np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else ids, dtype=np.int64).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= offsets[-1]):
            raise ValueError(f"ids must lie in [0, {int(offsets[-1])}), got [{int(ids.min())}, {int(ids.max())}]")
        uniq, first = np.unique(ids, return_index=True)
        dest = np.searchsorted(offsets, uniq, side="right") - 1
        got, self.recv, order = _send(uniq[:, None], dest, world, group)
        self.rows = torch.from_numpy(first[order])  # the rows to send, in send order
        self.send = np.bincount(dest, minlength=world).astype(np.int64)
        have, take = np.unique(got[:, 0] - offsets[rank], return_index=True)  # rows come in source-rank order
        missing = int(sizes[rank]) - len(have)

        def check():
            if missing:
                raise ValueError(f"rank {rank}: {missing} of its {int(sizes[rank])} owned nodes are held by no rank")

        msd.run_together(check, "sending rows to their owners", group)
        self.take = torch.from_numpy(take)

    def __call__(self, x_held: torch.Tensor) -> torch.Tensor:
        """The owned nodes' rows.

        Args:
            x_held: ``[m, *]`` a row per id given at construction.

        Returns:
            ``[n_owned, *]`` on ``x_held``'s device, in owned-row order.
        """
        out = msd.all_to_all_single(x_held.index_select(0, self.rows.to(x_held.device)),
                                    output_split_sizes=self.recv.tolist(), input_split_sizes=self.send.tolist(),
                                    group=self.group)
        return out.index_select(0, self.take.to(out.device))
