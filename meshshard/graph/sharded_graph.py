"""``ShardedGraph``: one rank's view of a partitioned graph (owned + ghost nodes, exchange plan)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from meshshard import distributed as msd
from meshshard.graph.halo import (HaloLayout, build_halo, build_halo_distributed, builder_and_plans, check_edge_index,
                                  check_hops)
from meshshard.graph.parts_io import load_part, read_meta
from meshshard.graph.plan import ExchangePlan, build_plan_distributed

__all__ = ["ShardedGraph"]




class ShardedGraph:
    r"""This rank's view of a graph whose nodes are split across ranks.

    Local node rows are the owned nodes (in the partition's order) followed by ghost nodes grouped
    by owner rank. ``edge_index`` holds, in local ids, every edge whose target is owned; with
    ``halo_hops = k`` it also holds the edges into rings ``1..k-1``, so ``k`` message-passing
    layers run on the local rows with a single :meth:`exchange` before the first one.

    Build one with :meth:`from_partition` (every rank holds the global graph),
    :meth:`from_global_edges` (each rank holds only the edges into its own nodes), or
    :meth:`load` / :meth:`from_part` (each rank reads its part written by
    :func:`meshshard.graph.save_parts`).

    Empty parts are supported: a rank that owns no node (more ranks than a small graph needs, or a
    partitioner leaving a part empty) has ``num_owned == 0`` and joins every collective with
    ``[0, F]`` tensors; its ``exchange`` / ``ShardedConv`` outputs are empty.

    Attributes:
        rank, world_size, group: this rank, the number of parts, the process group.
        num_owned, num_ghost, num_nodes: owned rows, ghost rows, and their sum (local rows).
        global_ids (LongTensor [num_nodes]): original node id of every local row.
        ghost_owner (LongTensor [num_ghost]): owner rank of every ghost row.
        ghost_owner_index (LongTensor [num_ghost]): row of every ghost in its owner's owned rows.
        node_hop (LongTensor [num_nodes]): ring of each local row (0 owned, ``h`` = ``h`` hops out).
        edge_index (LongTensor [2, E_local]): local edges (row 0 source, row 1 target), sorted by
            the ring of their target.
        edge_ids (LongTensor [E_local]): positions of local edges in the global edge list, so
            ``edge_attr_global[g.edge_ids]`` are the local edge features.
        edge_hop_ptr (LongTensor [halo_hops + 1]): edges ``edge_hop_ptr[h]:edge_hop_ptr[h+1]``
            point into ring ``h``; ``edge_index[:, :edge_hop_ptr[1]]`` are the edges into owned nodes.
        halo_hops: halo depth ``k``.
        sizes (list[int]): owned rows of every rank; offsets (LongTensor [W + 1]) their cumsum.
        plan (:class:`ExchangePlan`): rows sent to each rank and the ``[W, W]`` count matrix,
            built once at construction.
        node_data, edge_data (dict): features read from disk by :meth:`load` (else empty).
    """

    def __init__(
        self,
        layout: HaloLayout,
        plan: ExchangePlan,
        sizes: Sequence[int],
        *,
        halo_hops: int,
        group=None,
        global_perm: Optional[torch.Tensor] = None,
        identity_order: bool = False,
        offline: bool = False,
    ) -> None:
        self.rank = plan.rank
        self.world_size = len(sizes)
        self.group = group
        self.halo_hops = int(halo_hops)
        self.num_owned = int(layout.owned_ids.numel())
        self.num_ghost = int(layout.ghost_ids.numel())
        self.num_nodes = self.num_owned + self.num_ghost
        self.global_ids = torch.cat([layout.owned_ids, layout.ghost_ids])
        self.ghost_owner = layout.ghost_owner
        self.ghost_owner_index = layout.ghost_owner_index
        self.node_hop = layout.node_hop
        self.edge_index = layout.edge_index
        self.edge_ids = layout.edge_ids
        self.edge_hop_ptr = layout.edge_hop_ptr
        self.plan = plan
        self._exchange_sizes = plan.sizes  # the [W, W] counts as nested lists, fixed: not rebuilt per exchange
        self.sizes: List[int] = [int(s) for s in sizes]
        self.offsets = torch.zeros(self.world_size + 1, dtype=torch.long)
        self.offsets[1:] = torch.cumsum(torch.tensor(self.sizes, dtype=torch.long), 0)
        self.num_global_nodes = int(self.offsets[-1])
        self.node_data: Dict[str, torch.Tensor] = {}
        self.edge_data: Dict[str, torch.Tensor] = {}
        # Original ids of all ranks' owned rows in rank order (None: fetched on first gather).
        self._global_perm = global_perm
        self._identity_order = identity_order
        self._offline = offline
        self._index_cache: Dict = {}
        self.cache: Dict = {}  # per-graph values layers may reuse (e.g. GCN degrees)
        if self.num_owned != self.sizes[self.rank]:
            raise ValueError(f"rank {self.rank} owns {self.num_owned} nodes but sizes says {self.sizes[self.rank]}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_partition(cls, edge_index, partition, rank: Optional[int] = None, group=None, halo_hops: int = 1) -> "ShardedGraph":
        """Build this rank's view when every rank holds the whole graph (collective).

        Args:
            edge_index: ``LongTensor [2, E]`` global edges, PyG flow (row 0 source, row 1 target).
            partition: :class:`meshshard.partitioners.Partition` of the ``N`` nodes into
                ``world_size`` parts; it defines ``N`` (nodes without edges are allowed, so a
                partition of more nodes than ``edge_index`` mentions is accepted, while an edge id
                ``>= N`` raises).
            rank: the part to build; defaults to this process's rank in ``group``. Without a
                process group any ``rank`` of a multi-part partition may be built: an *offline*
                view (layout and plan for inspection; :meth:`exchange` needs the real ranks).
            group: process group (``None``: the default group).
            halo_hops: halo depth ``k >= 1``.

        Returns:
            :class:`ShardedGraph`.
        """
        world = msd.get_world_size(group)
        distributed = msd.is_initialized()

        def validate():
            from meshshard.partitioners import Partition

            if not isinstance(partition, Partition):
                raise TypeError(f"partition must be a meshshard Partition, got {type(partition).__name__}")
            check_hops(halo_hops)
            ei = check_edge_index(edge_index, partition.num_nodes)
            if distributed or partition.num_parts == 1:
                if partition.num_parts != world:
                    raise ValueError(f"partition has {partition.num_parts} parts but the process group has {world} ranks")
                r = msd.get_rank(group)
                if rank is not None and rank != r:
                    raise ValueError(f"rank={rank} does not match this process's rank {r} in the group")
            else:
                r = 0 if rank is None else int(rank)
                if not 0 <= r < partition.num_parts:
                    raise ValueError(f"rank must be in [0, {partition.num_parts}), got {r}")
            return ei, r

        ei, r = msd.run_together(validate, "ShardedGraph.from_partition", group)
        if distributed:
            # Ranks must agree on the graph, or the plan would pair unrelated rows.
            msd.check_same_across_ranks(
                [partition.num_nodes, partition.num_parts, ei.shape[1], halo_hops] + partition.sizes,
                "ShardedGraph.from_partition", ["num_nodes", "num_parts", "num_edges", "halo_hops"]
                + [f"size{i}" for i in range(partition.num_parts)], group)
            layout = build_halo(ei, partition, r, halo_hops)
            plan = build_plan_distributed(layout.ghost_owner, layout.ghost_owner_index, group)
            return cls(layout, plan, partition.sizes, halo_hops=halo_hops, group=group, global_perm=partition.perm)
        builder, plans = builder_and_plans(ei, partition, halo_hops)  # every part's ghosts, one part's edges
        return cls(builder.layout(r), plans[r], partition.sizes, halo_hops=halo_hops, group=group,
                   global_perm=partition.perm, offline=partition.num_parts > 1)

    @classmethod
    def from_global_edges(cls, edge_index, sizes, group=None, halo_hops: int = 1) -> "ShardedGraph":
        """Build the graph when each rank holds only the edges into its own nodes (collective).

        Node ids are "ShardTensor order" global ids: rank ``r`` owns ``offsets[r]..offsets[r+1]-1``
        with ``offsets = [0, *cumsum(sizes)]``. Edges are numbered by concatenating the ranks'
        lists in rank order (``edge_ids`` refer to that numbering). Ghosts and (for
        ``halo_hops > 1``) the edges into them are fetched from their owners.

        Args:
            edge_index: ``LongTensor [2, E_r]`` this rank's edges (row 0 source anywhere in
                ``[0, N)``, row 1 target owned by this rank).
            sizes: owned node count of every rank (same on every rank); a list of ints, or a
                ShardTensor-style ``{0: [(n, ...), ...]}`` dict.
            group: process group.
            halo_hops: halo depth ``k >= 1``.
        """
        rank, world = msd.get_rank(group), msd.get_world_size(group)
        if isinstance(sizes, dict):
            sizes = [int(s[0]) for s in sizes[0]]

        def validate():
            check_hops(halo_hops)
            sz = [int(s) for s in torch.as_tensor(sizes).reshape(-1).tolist()]
            if len(sz) != world:
                raise ValueError(f"sizes has {len(sz)} entries but the process group has {world} ranks")
            if any(s < 0 for s in sz):
                raise ValueError(f"sizes must be non-negative, got {sz}")
            n = sum(sz)
            ei = check_edge_index(edge_index, n)
            lo, hi = sum(sz[:rank]), sum(sz[: rank + 1])
            if ei.numel() and (int(ei[1].min()) < lo or int(ei[1].max()) >= hi):
                raise ValueError(
                    f"rank {rank}: edge targets (row 1) must be this rank's nodes [{lo}, {hi}), got "
                    f"[{int(ei[1].min())}, {int(ei[1].max())}]"
                )
            return ei, sz

        ei, sz = msd.run_together(validate, "ShardedGraph.from_global_edges", group)
        msd.check_same_across_ranks(sz + [halo_hops], "ShardedGraph.from_global_edges",
                                    [f"size{i}" for i in range(world)] + ["halo_hops"], group)
        layout = build_halo_distributed(ei, sz, halo_hops, group)
        plan = build_plan_distributed(layout.ghost_owner, layout.ghost_owner_index, group)
        return cls(layout, plan, sz, halo_hops=halo_hops, group=group, identity_order=True)

    @classmethod
    def from_part(cls, part: dict, group=None) -> "ShardedGraph":
        """Build this rank's view from one part dict (as returned by :func:`load_part`); collective.

        Checks that the parts loaded on the ranks belong together (same ``num_parts``, ``N``,
        halo depth, and part ``r`` on rank ``r``); a mismatch raises on every rank.

        Args:
            part: the dict of one part (keys in :mod:`meshshard.graph.parts_io`).
            group: process group with ``part["num_parts"]`` ranks.

        Returns:
            :class:`ShardedGraph` with ``node_data`` / ``edge_data`` from the part.
        """
        rank, world = msd.get_rank(group), msd.get_world_size(group)

        def validate():
            missing = [k for k in ("rank", "num_parts", "owned_ids", "ghost_ids", "ghost_owner", "edge_index",
                                   "edge_ids", "send_index", "send_counts", "sizes") if k not in part]
            if missing:
                raise ValueError(f"part dict misses keys {missing}")
            if int(part["num_parts"]) != world:
                raise ValueError(f"the part belongs to a {part['num_parts']}-part split but the group has {world} ranks")
            if int(part["rank"]) != rank:
                raise ValueError(f"rank {rank} was given part {part['rank']}")

        msd.run_together(validate, "ShardedGraph.from_part", group)
        msd.check_same_across_ranks([int(part["num_parts"]), int(part["num_nodes"]), int(part["halo_hops"])] + list(part["sizes"]),
                                    "ShardedGraph.from_part", None, group)
        layout = HaloLayout(part["owned_ids"], part["ghost_ids"], part["ghost_owner"], part["ghost_owner_index"],
                            part["node_hop"], part["edge_index"], part["edge_ids"], part["edge_hop_ptr"])
        plan = ExchangePlan.from_state_dict(rank, part)
        g = cls(layout, plan, part["sizes"], halo_hops=int(part["halo_hops"]), group=group)
        g.node_data = dict(part.get("node_data") or {})
        g.edge_data = dict(part.get("edge_data") or {})
        return g

    @classmethod
    def load(cls, out_dir, rank: Optional[int] = None, group=None) -> "ShardedGraph":
        """Read this rank's part from a directory written by :func:`save_parts` (collective).

        Each rank reads only ``meta.json`` and its own ``part_XXXX.pt`` (checksum verified); the
        other parts need not even be present on its file system. Features stored with the part are
        in ``g.node_data`` (owned + ghost rows) and ``g.edge_data`` (local edges).

        A group of another size than the stored parts repartitions on load
        (:func:`meshshard.graph.repartition.load_repartitioned`): neighbouring parts merged, or
        parts split, each rank reading only the parts its share touches; results equal those on
        ``num_parts`` ranks.

        Args:
            out_dir: directory written by :func:`meshshard.graph.save_parts`.
            rank: part to read (default: this process's rank in ``group``; must equal it).
            group: process group, of ``num_parts`` ranks or any other size.

        Returns:
            :class:`ShardedGraph`.

        Raises:
            FileNotFoundError / ValueError: on every rank, when any rank's part is missing,
            corrupt (sha256), or the parts do not belong together.
        """
        r = msd.get_rank(group) if rank is None else int(rank)
        world = msd.get_world_size(group)
        num_parts = msd.run_together(lambda: int(read_meta(out_dir)["num_parts"]), "ShardedGraph.load", group)
        if num_parts != world:
            if r != msd.get_rank(group):
                raise ValueError(f"rank={r} does not match this process's rank {msd.get_rank(group)} in the group")
            from meshshard.graph.repartition import load_repartitioned

            return load_repartitioned(out_dir, group)
        part = msd.run_together(lambda: load_part(out_dir, r), "ShardedGraph.load", group)
        return cls.from_part(part, group)

    # ------------------------------------------------------------------ properties
    @property
    def owned_ids(self) -> torch.Tensor:
        """Original ids of the owned rows: ``LongTensor [num_owned]``."""
        return self.global_ids[: self.num_owned]

    @property
    def ghost_ids(self) -> torch.Tensor:
        """Original ids of the ghost rows: ``LongTensor [num_ghost]``."""
        return self.global_ids[self.num_owned :]

    @property
    def recv_counts(self) -> List[int]:
        """Ghost rows received from each rank."""
        return self.plan.recv_counts

    @property
    def send_index(self) -> List[torch.Tensor]:
        """Owned rows sent to each rank."""
        return self.plan.send_index

    def owned_edge_index(self) -> torch.Tensor:
        """Local edges into owned nodes only: ``edge_index[:, :edge_hop_ptr[1]]``."""
        return self.edge_index[:, : int(self.edge_hop_ptr[1])]

    def __repr__(self) -> str:
        return (f"ShardedGraph(rank={self.rank}/{self.world_size}, num_owned={self.num_owned}, "
                f"num_ghost={self.num_ghost}, num_edges={self.edge_index.shape[1]}, halo_hops={self.halo_hops})")

    # ------------------------------------------------------------------ data movement
    def _local_rows(self, x, what: str) -> torch.Tensor:
        # Accept a ShardTensor / DTensor of owned rows: operate on its local shard.
        if isinstance(x, msd.DTensor):
            x = x.to_local()
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{what}: expected a Tensor or ShardTensor of owned rows, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[0] != self.num_owned:
            raise ValueError(f"{what}: rank {self.rank} expected {self.num_owned} owned rows, got shape {tuple(x.shape)}")
        if self._offline:
            raise RuntimeError(f"{what}: this is an offline view built without a process group of {self.world_size} ranks")
        return x

    def _device_index(self, device) -> List[torch.Tensor]:
        key = ("send", device)
        if key not in self._index_cache:
            self._index_cache[key] = [t.to(device) for t in self.plan.send_index]
        return self._index_cache[key]

    def exchange(self, x_owned) -> torch.Tensor:
        """Append ghost rows to owned rows: only ghost rows cross the wire (collective).

        Args:
            x_owned: ``Tensor [num_owned, *]`` (or a ShardTensor whose local shard is that);
                trailing shape and dtype must agree across ranks.

        Returns:
            ``Tensor [num_nodes, *]`` = owned rows then ghost rows (a plain local tensor).
            Differentiable: the gradient of a ghost row is summed into its owner's row.

        Communication: one ``all_to_all_single`` of ``plan.num_send`` rows out and ``num_ghost``
        rows in, with split sizes from the plan built at construction (nothing about sizes is
        exchanged per call). By default :mod:`meshshard.distributed.autograd` also checks, in one
        tiny all-gather of a few integers, that dtype and trailing shape agree across ranks (a
        clear error instead of a hang); ``with meshshard.distributed.validation(False):`` skips that
        check in hot loops.
        """
        x = self._local_rows(x_owned, "ShardedGraph.exchange")
        if self.world_size == 1:
            return x
        from meshshard.distributed.autograd import indexed_all_to_all_v

        use_fp32 = x.dtype in (torch.float16, torch.bfloat16)
        ghosts = indexed_all_to_all_v(x, self._device_index(x.device), self._exchange_sizes, use_fp32=use_fp32, dim=0,
                                      group=self.group)
        return torch.cat([x, ghosts], 0)

    def _perm_for(self, device) -> Optional[torch.Tensor]:
        """Index turning rank-order rows into original-id order (None: identity)."""
        if self._identity_order:
            return None
        key = ("inv_perm", device)
        if key not in self._index_cache:
            perm = self._global_perm
            if perm is None:
                # Loaded parts know only their own ids: gather every rank's once (padded, equal shapes).
                pad = max(self.sizes)
                mine = torch.full((pad,), -1, dtype=torch.long)
                mine[: self.num_owned] = self.owned_ids
                table = msd.all_gather_into_tensor(mine.to(msd.comm_device(self.group)), self.group).cpu()
                perm = torch.cat([table[r, : self.sizes[r]] for r in range(self.world_size)])
                self._global_perm = perm
            inv = torch.empty_like(perm)
            inv[perm] = torch.arange(perm.numel())
            self._index_cache[key] = inv.to(device)
        return self._index_cache[key]

    def all_gather(self, x_owned) -> torch.Tensor:
        """Every rank gets all nodes' rows in original node-id order (collective, differentiable).

        This moves the whole tensor to every rank: use it for output and checks, not inside a
        layer (:meth:`exchange` moves only ghost rows).

        Args:
            x_owned: ``Tensor [num_owned, *]`` or a ShardTensor whose local shard is that.

        Returns:
            ``Tensor [N, *]`` (row ``i`` belongs to node ``i``). Backward: every rank's gradient
            of its copy is summed into the owners' rows.
        """
        x = self._local_rows(x_owned, "ShardedGraph.all_gather")
        from meshshard.distributed.autograd import all_gather_v

        full = x if self.world_size == 1 else all_gather_v(x, self.sizes, dim=0, group=self.group)
        inv = self._perm_for(x.device) if self.world_size > 1 or self._global_perm is not None else None
        return full if inv is None else full.index_select(0, inv)

    def gather(self, x_owned, dst: int = 0) -> Optional[torch.Tensor]:
        """Rank ``dst`` gets all nodes' rows in original node-id order (collective, differentiable).

        Args:
            x_owned: ``Tensor [num_owned, *]`` or a ShardTensor whose local shard is that.
            dst: the receiving rank.

        Returns:
            ``Tensor [N, *]`` on ``dst``; on every other rank an empty ``Tensor [0, *]`` (same
            dtype, still part of the autograd graph). Backward: ``dst``'s gradient is scattered
            back to the owners.
        """
        x = self._local_rows(x_owned, "ShardedGraph.gather")
        from meshshard.distributed.autograd import gather_v

        inv = self._perm_for(x.device) if (self.world_size > 1 or self._global_perm is not None) else None
        full = x if self.world_size == 1 else gather_v(x, self.sizes, dim=0, dst=dst, group=self.group)
        if self.rank != dst or inv is None:
            return full
        return full.index_select(0, inv)

    def to(self, device) -> "ShardedGraph":
        """Move index tensors used in computation (``edge_index``, ``edge_ids``) to ``device`` (in place).

        Args:
            device: target device (e.g. the features' CUDA device).

        Returns:
            ``self``.
        """
        self.edge_index = self.edge_index.to(device)
        self.edge_ids = self.edge_ids.to(device)
        return self
