"""A preprocessed trajectory dataset read shard by shard: each rank loads only its own part of
every trajectory (the state of its owned nodes at every step)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Union

import torch

from meshshard.datasets.stats import FieldStats
from meshshard.datasets.trajectories import TRAJECTORY_STAT_KEYS, read_trajectory_dataset_meta

__all__ = ["ShardedTrajectoryDataset", "TrajectoryShard"]

PathLike = Union[str, os.PathLike]


@dataclass
class TrajectoryShard:
    """One trajectory on one rank: its owned rows at every step.

    Attributes:
        graph: this rank's :class:`meshshard.ShardedGraph` (owned + ghost nodes, exchange plan).
        state: ``[T, num_owned, S]`` the evolving fields of the owned nodes at every step.
        features: ``[num_owned, F]`` the static node inputs (``F`` may be 0).
        node_type: ``[num_owned]`` int64 node type codes (zeros when the dataset has none).
        edge_attr: ``[E_local, d + 1]`` features of the local edges (``graph.edge_index``).
        times: ``[T]`` float64 step times.
        name: the trajectory's folder name.
    """

    graph: object
    state: torch.Tensor
    features: torch.Tensor
    node_type: torch.Tensor
    edge_attr: torch.Tensor
    times: torch.Tensor
    name: str

    @property
    def num_steps(self) -> int:
        """Time steps ``T``."""
        return int(self.state.shape[0])

    @property
    def owned_ids(self) -> torch.Tensor:
        """Original node ids of the owned rows."""
        return self.graph.global_ids[: self.graph.num_owned]


class ShardedTrajectoryDataset:
    """A folder written by ``meshshard preprocess --state ...`` (:func:`preprocess_trajectories`),
    read per rank.

    ``ds[i]`` reads only this rank's part of trajectory ``i`` (checksum verified) and returns a
    :class:`TrajectoryShard`. Construction and ``ds[i]`` are collective over ``group``: every rank
    builds the dataset and asks for the same trajectories in the same order; a missing or corrupt
    file on one rank raises the same error on every rank.

    Args:
        root: the dataset folder.
        group: process group (default: the world); its size must equal the dataset's parts (in
            data x domain training, the domain group).
        dtype: floating dtype of the returned tensors (default: as stored).
        cache: keep loaded trajectories in memory.

    Attributes:
        meta (dict): the dataset ``meta.json``.
        stats (dict): :class:`FieldStats` of ``"state"``, ``"increment"`` (``state[t+1] -
            state[t]``), ``"features"`` and ``"edge_attr"`` over every step of every trajectory.
        state_columns, feature_columns (list[str]), node_type_codes (list[int]).
    """

    def __init__(self, root: PathLike, group=None, dtype: Optional[torch.dtype] = None, cache: bool = True) -> None:
        from meshshard.distributed import get_rank, get_world_size, run_together

        self.root = Path(root)
        self.group = group
        self.rank = get_rank(group)
        world = get_world_size(group)

        def read_meta() -> dict:
            meta = read_trajectory_dataset_meta(self.root)
            if int(meta["num_parts"]) != world:
                raise ValueError(f"{self.root} was preprocessed into {meta['num_parts']} parts but this group has "
                                 f"{world} ranks; rerun `meshshard preprocess -k {world}` or give the group "
                                 f"{meta['num_parts']} ranks (the world, or the domain group of data x domain training)")
            return meta

        self.meta = run_together(read_meta, "ShardedTrajectoryDataset", group)
        self.stats: Dict[str, FieldStats] = {k: FieldStats.from_dict(self.meta["stats"][k])
                                             for k in TRAJECTORY_STAT_KEYS}
        self.state_columns: List[str] = list(self.meta["state_columns"])
        self.feature_columns: List[str] = list(self.meta["feature_columns"])
        self.node_type_codes: List[int] = [int(c) for c in self.meta.get("node_type_codes", [])]
        self.dtype = dtype
        self.cache = cache
        self._cache: dict = {}
        self._mesh = None

    def __len__(self) -> int:
        return len(self.meta["samples"])

    @property
    def halo_hops(self) -> int:
        """Ghost rings stored per part."""
        return int(self.meta["halo_hops"])

    @property
    def num_edge_features(self) -> int:
        """Width of ``edge_attr`` (``d + 1``)."""
        return len(self.stats["edge_attr"].mean)

    def num_steps(self, idx: int) -> int:
        """Time steps of trajectory ``idx`` (from ``meta.json``; reads no part).

        Args:
            idx: the trajectory.
        """
        return int(self.meta["samples"][idx]["num_steps"])

    def __getitem__(self, idx: int) -> TrajectoryShard:
        if not -len(self) <= idx < len(self):
            raise IndexError(f"trajectory {idx} out of range for {len(self)} trajectories")
        idx %= len(self)
        if idx in self._cache:
            return self._cache[idx]
        from meshshard.datasets.trajectories import load_trajectory_part
        from meshshard.distributed import run_together
        from meshshard.graph import ShardedGraph

        entry = self.meta["samples"][idx]
        part = run_together(lambda: load_trajectory_part(self.root, idx, self.rank),
                            f"ShardedTrajectoryDataset[{idx}] ({entry['dir']})", self.group)
        g = ShardedGraph.from_part(part, self.group)
        n = g.num_owned
        dtype = self.dtype or part["state"].dtype
        feats = part["features"][:n] if "features" in part else torch.zeros(n, 0)
        types = part["node_type"][:n] if "node_type" in part else torch.zeros(n, dtype=torch.long)
        shard = TrajectoryShard(graph=g, state=part["state"][:, :n].to(dtype), features=feats.to(dtype),
                                node_type=types.long(), edge_attr=part["edge_attr"].to(dtype), times=part["times"],
                                name=entry["dir"])
        g.node_data, g.edge_data = {}, {}  # kept once, in the shard
        if self.cache:
            self._cache[idx] = shard
        return shard

    @property
    def device_mesh(self):
        """The 1-D :class:`~meshshard.distributed.DeviceMesh` over the dataset's group (made on
        first use; collective like ``ds[i]``)."""
        if self._mesh is None:
            from meshshard.distributed import DeviceMesh, comm_device, default_device_mesh

            self._mesh = default_device_mesh() if self.group is None else \
                DeviceMesh.from_group(self.group, comm_device(self.group).type)
        return self._mesh

    def shard_tensor(self, rows: torch.Tensor, shard: TrajectoryShard):
        """Owned rows of ``shard`` as a ShardTensor (``Shard(0)``, sizes ``graph.sizes``), as
        ``DomainParallel`` and the ShardTensor losses take them.

        Args:
            rows: ``[num_owned, *]`` this rank's rows.
            shard: the trajectory they belong to.
        """
        from meshshard.tensor import ShardTensor

        return ShardTensor.from_local(rows, self.device_mesh, sharding_shapes={0: shard.graph.sizes})

    def __repr__(self) -> str:
        return (f"ShardedTrajectoryDataset({self.root}, {len(self)} trajectories, rank {self.rank}/"
                f"{self.meta['num_parts']}, state={self.state_columns}, features={self.feature_columns})")
