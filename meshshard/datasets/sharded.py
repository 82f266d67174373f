"""A preprocessed dataset read shard by shard: each rank loads only its own part of every sample."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

import torch

from meshshard.datasets.preprocess import read_dataset_meta
from meshshard.datasets.stats import DatasetStats, Moments, STAT_KEYS
from meshshard.tensor import ShardTensor

__all__ = ["ShardedMeshDataset", "ShardedSample"]

PathLike = Union[str, os.PathLike]


@dataclass
class ShardedSample:
    """One sample on one rank.

    The node fields are :class:`~meshshard.tensor.ShardTensor` s (``Shard(0)`` over the dataset's
    domain group, shard sizes ``graph.sizes``: every rank's owned-node count), so a training loop
    reads like single-process code (``F.mse_loss(pred, s.y)`` is the loss of the whole mesh);
    ``s.x.to_local()`` is this rank's ``[num_owned, F]`` rows, and ``s.x.full_tensor()`` every
    owned row in rank order (``graph.global_ids`` of each rank's owned nodes, one rank after the other).

    Attributes:
        graph: this rank's :class:`meshshard.ShardedGraph` (owned + ghost nodes, exchange plan).
        pos, x, y: ShardTensors of global shape ``[N, *]``; local rows are the owned nodes (in
            ``graph.global_ids`` order).
        node_type: ShardTensor ``[N, T + 1]``, one-hot in the DATASET's node-type vocabulary.
        edge_attr: plain ``[E_local, d + 1]`` tensor aligned with ``graph.edge_index`` (local
            edges include the ones into ghost nodes, so they are not a partition of the edges).
        name: the sample's folder name.
    """

    graph: object
    pos: ShardTensor
    x: ShardTensor
    y: ShardTensor
    node_type: ShardTensor
    edge_attr: torch.Tensor
    name: str

    @property
    def owned_ids(self) -> torch.Tensor:
        """Original node ids of the owned rows."""
        return self.graph.global_ids[: self.graph.num_owned]


class ShardedMeshDataset(torch.utils.data.Dataset):
    r"""A dataset written by ``meshshard preprocess`` (or :func:`preprocess_dataset`), read per rank.

    ``ds[i]`` reads only this rank's ``part_XXXX.pt`` of sample ``i`` (checksum verified; on a
    group of another size than the dataset's parts, the parts its share touches) and
    returns a :class:`ShardedSample` whose node fields are ShardTensors of the owned rows. Construction and ``ds[i]`` are collective: every rank of
    the group must build the dataset and ask for the same samples in the same order. A missing
    or corrupt file on one rank raises the same error on every rank, naming that rank and the
    cause.

    Args:
        root: the preprocessed folder (with the dataset ``meta.json``).
        rank: this rank (default: the group rank).
        group: process group (default: the world). In data x domain training, the domain group
            (``mesh2d["domain"].get_group()``): its ranks share each sample, and other groups may
            read other samples. Of any size: a dataset preprocessed into ``K`` parts is
            repartitioned on load for a group of ``W != K`` ranks (neighbouring parts merged or
            parts split, :func:`meshshard.graph.repartition.load_repartitioned`), each rank
            reading only the parts its share touches; results equal those on ``K`` ranks.
        dtype: floating dtype of the returned tensors (default: as stored).
        cache: keep loaded samples in memory.

    Attributes:
        meta (dict): the dataset ``meta.json``.
        stats (:class:`DatasetStats`): normalisation statistics of the whole dataset, computed
            once at preprocessing; the same on every rank and equal to
            :attr:`MeshDataset.stats` of the source files.
        node_types (list[str]), feature_columns, target_columns.
    """

    def __init__(self, root: PathLike, rank: Optional[int] = None, group=None,
                 dtype: Optional[torch.dtype] = None, cache: bool = True) -> None:
        from meshshard.distributed import get_rank, get_world_size, run_together

        self.root = Path(root)
        self.group = group
        self.rank = get_rank(group) if rank is None else int(rank)
        world = get_world_size(group)

        self.world_size = world
        # Ranks may read different copies (node-local disks): one bad copy fails every rank alike.
        self.meta = run_together(lambda: read_dataset_meta(self.root), "ShardedMeshDataset", group)
        self.stats = DatasetStats.from_dict(self.meta["stats"])
        self.node_types: List[str] = list(self.meta["node_types"])
        self.feature_columns: List[str] = list(self.meta["feature_columns"])
        self.target_columns: List[str] = list(self.meta["target_columns"])
        self.dtype = dtype
        self.cache = cache
        self._cache: dict = {}
        self._mesh = None

    def __len__(self) -> int:
        return len(self.meta["samples"])

    @property
    def halo_hops(self) -> int:
        """Ghost rings stored per part (``>= num_layers`` lets MeshGraphNet exchange once)."""
        return int(self.meta["halo_hops"])

    @property
    def num_node_features(self) -> int:
        """Width of ``x_in`` from :meth:`model_inputs` (features + one-hot node type)."""
        return len(self.feature_columns) + len(self.node_types) + 1

    @property
    def num_edge_features(self) -> int:
        """Width of ``edge_attr`` (``d + 1``)."""
        return len(self.stats.edge_attr.mean)

    @property
    def num_targets(self) -> int:
        """Width of ``y``."""
        return len(self.target_columns)

    def __getitem__(self, idx: int) -> ShardedSample:
        if not -len(self) <= idx < len(self):
            raise IndexError(f"sample {idx} out of range for {len(self)} samples")
        idx %= len(self)
        if idx in self._cache:
            return self._cache[idx]
        from meshshard.distributed import run_together
        from meshshard.graph import ShardedGraph

        entry = self.meta["samples"][idx]
        g = ShardedGraph.load(self.root / entry["dir"], rank=self.rank, group=self.group)  # agreed inside
        rows = run_together(lambda: self._rows(entry, g), f"ShardedMeshDataset[{idx}] ({entry['dir']})", self.group)
        # Wrapped only once every rank has its rows: from_local is itself a collective.
        mesh = self.device_mesh
        node = {k: ShardTensor.from_local(v, mesh, sharding_shapes={0: g.sizes}) for k, v in rows.items()
                if k != "edge_attr"}
        sample = ShardedSample(graph=g, edge_attr=rows["edge_attr"], name=entry["name"], **node)
        if self.cache:
            self._cache[idx] = sample
        return sample

    @property
    def device_mesh(self):
        """The 1-D :class:`~meshshard.distributed.DeviceMesh` over the dataset's group that the
        samples' ShardTensors live on (made on first use; collective like ``ds[i]``)."""
        if self._mesh is None:
            from meshshard.distributed import DeviceMesh, comm_device, default_device_mesh

            self._mesh = default_device_mesh() if self.group is None else \
                DeviceMesh.from_group(self.group, comm_device(self.group).type)
        return self._mesh

    def _rows(self, entry: dict, g) -> dict:
        """This rank's owned rows of the node fields and its local edges' ``edge_attr``."""
        n_own = g.num_owned
        nd, ed = g.node_data, g.edge_data
        # Sample-local node-type ids -> the dataset's vocabulary (both are sorted name lists).
        lut = torch.tensor([0] + [self.node_types.index(n) + 1 for n in entry["node_set_names"]], dtype=torch.long)
        node_type = torch.nn.functional.one_hot(lut[nd["node_type_id"][:n_own]], len(self.node_types) + 1)
        dtype = self.dtype or nd["x"].dtype
        return {"pos": nd["pos"][:n_own].to(dtype), "x": nd["x"][:n_own].to(dtype), "y": nd["y"][:n_own].to(dtype),
                "node_type": node_type.to(dtype), "edge_attr": ed["edge_attr"].to(dtype)}

    def model_inputs(self, sample: ShardedSample) -> Tuple[ShardTensor, torch.Tensor, ShardTensor]:
        """``(x_in [N, F], edge_attr_in [E_local, d+1], y [N, T])`` normalised with :attr:`stats`:
        ``x_in`` and ``y`` ShardTensors laid out like ``sample.x``, ``edge_attr_in`` a plain tensor
        of the local edges. They go in as they are:
        ``pred = DomainParallel(model)(x_in, sample.graph, edge_attr_in)`` and
        ``F.mse_loss(pred, y)`` (or ``train_step(model, opt, x_in, edge_attr_in, y, graph=sample.graph)``).

        Args:
            sample: ``ds[i]`` on this rank.
        """
        from meshshard.datasets.mesh_dataset import model_inputs

        return model_inputs(sample, self.stats)

    def compute_stats(self) -> DatasetStats:
        """Recompute the statistics from the shards (collective): each rank contributes its owned
        nodes and the edges into them (every node and edge counted once), merged over ranks and
        samples. Agrees with :attr:`stats` to float64 rounding."""
        per_sample = []
        for i in range(len(self)):
            s = self[i]
            n_edges = int(s.graph.edge_hop_ptr[1]) if hasattr(s.graph, "edge_hop_ptr") else \
                int((s.graph.edge_index[1] < s.graph.num_owned).sum())
            local = {"x": Moments.of(s.x.to_local().double()), "y": Moments.of(s.y.to_local().double()),
                     "edge_attr": Moments.of(s.edge_attr[:n_edges].double())}
            per_sample.append({k: local[k].all_reduce(self.group) for k in STAT_KEYS})
        return DatasetStats.from_sample_moments(per_sample)

    def __repr__(self) -> str:
        return (f"ShardedMeshDataset({self.root}, {len(self)} samples, rank {self.rank}/{self.world_size} "
                f"({self.meta['num_parts']} parts stored), "
                f"features={self.feature_columns}, targets={self.target_columns})")
