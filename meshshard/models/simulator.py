"""A learned simulator (Pfaff et al., 2021): a graph model that maps the state at step t to its
normalised change to step t + 1, trained on random steps with noise on the input state, and rolled
forward autoregressively with the nodes that do not evolve (boundaries) set from the truth.

:class:`SimulatorSpec` holds what turns fields into model inputs and outputs back into states
(field specs, node type codes, the statistics of states, increments, features and edge features);
a simulator checkpoint stores it (:func:`meshshard.models.simulator_checkpoint`). The same
functions run on a whole mesh and on one rank's owned rows, so a sharded step computes what the
single-process step computes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from meshshard.datasets.stats import FieldStats

__all__ = ["SimulatorSpec", "draw_training_steps", "training_noise", "rollout_states", "SIMULATOR_STAT_KEYS"]

#: statistics a simulator normalises with
SIMULATOR_STAT_KEYS = ("state", "increment", "features", "edge_attr")


@dataclass
class SimulatorSpec:
    """What a learned simulator reads and predicts.

    Attributes:
        state: field specs of the evolving fields (``"velocity"``, ``"pressure"``).
        state_columns: one name per state column.
        features: field specs of the static node inputs (may be empty).
        feature_columns: one name per feature column.
        node_type: the static field of integer node type codes, or ``None`` (every node evolves).
        node_type_codes: every code of the training data, in one-hot order.
        evolving_types: the codes whose nodes the model moves (the loss is taken on them); the
            other nodes take their values from the truth in a rollout. Empty: every node evolves.
        stats: :class:`FieldStats` of ``"state"``, ``"increment"``, ``"features"``, ``"edge_attr"``.
        noise_std: standard deviation of the training noise on the input state (field units).
    """

    state: List[str]
    state_columns: List[str]
    features: List[str]
    feature_columns: List[str]
    node_type: Optional[str]
    node_type_codes: List[int]
    evolving_types: List[int]
    stats: Dict[str, FieldStats]
    noise_std: float = 0.0

    @classmethod
    def from_dataset(cls, dataset, evolving_types: Optional[Sequence[int]] = None,
                     noise_std: float = 0.0) -> "SimulatorSpec":
        """The spec of a :class:`~meshshard.datasets.ShardedTrajectoryDataset`.

        Args:
            dataset: the training data (its ``meta``, ``stats``, columns and node type codes).
            evolving_types: node type codes that evolve; default: ``[0]`` when the dataset has node
                types (MeshGraphNets' ``NORMAL``; interior for ``meshshard.io.node_type_from_field``),
                else every node.
            noise_std: training noise (recorded).

        Raises:
            ValueError: evolving types the dataset does not have, or none of its nodes evolving.
        """
        meta = dataset.meta
        codes = [int(c) for c in dataset.node_type_codes]
        if meta.get("node_type") is None:
            if evolving_types:
                raise ValueError(f"evolving node types {list(evolving_types)} given, but the dataset has no node "
                                 "types (preprocess it with --node-type FIELD)")
            evolving = []
        else:
            evolving = [0] if evolving_types is None else sorted({int(c) for c in evolving_types})
            unknown = [c for c in evolving if c not in codes]
            if unknown and evolving_types is not None:
                raise ValueError(f"node types {unknown} do not occur in the dataset (its codes: {codes})")
            evolving = [c for c in evolving if c in codes]
            if not evolving:
                raise ValueError(f"no node of the dataset evolves: it has node types {codes}, none of them in "
                                 f"{list(evolving_types) if evolving_types is not None else [0]}; pass the codes "
                                 "of the nodes the model moves (--loss-node-types)")
        return cls(state=list(meta["state"]), state_columns=list(dataset.state_columns),
                   features=list(meta["features"]), feature_columns=list(dataset.feature_columns),
                   node_type=meta.get("node_type"), node_type_codes=codes, evolving_types=evolving,
                   stats=dict(dataset.stats), noise_std=float(noise_std))

    @property
    def num_state(self) -> int:
        """State columns ``S`` (the model's outputs)."""
        return len(self.state_columns)

    @property
    def num_node_inputs(self) -> int:
        """Model input width: state, features and the one-hot node type."""
        return len(self.state_columns) + len(self.feature_columns) + len(self.node_type_codes)

    @property
    def num_edge_features(self) -> int:
        """Edge feature width ``d + 1``."""
        return len(self.stats["edge_attr"].mean)

    def evolving(self, node_type: torch.Tensor) -> torch.Tensor:
        """Which nodes evolve.

        Args:
            node_type: ``[n]`` integer codes.

        Returns:
            bool ``[n]``.
        """
        if not self.evolving_types:
            return torch.ones(node_type.shape[0], dtype=torch.bool, device=node_type.device)
        return torch.isin(node_type, torch.tensor(self.evolving_types, device=node_type.device))

    def one_hot(self, node_type: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``[n, len(node_type_codes)]`` one-hot node types.

        Args:
            node_type: ``[n]`` integer codes.
            dtype: of the result.

        Raises:
            ValueError: a code the training data did not have.
        """
        codes = torch.tensor(self.node_type_codes, dtype=torch.long, device=node_type.device)
        if not len(codes):
            return torch.zeros(node_type.shape[0], 0, dtype=dtype, device=node_type.device)
        hit = node_type[:, None] == codes[None]
        if not bool(hit.any(dim=1).all()):
            bad = sorted(set(node_type[~hit.any(dim=1)].tolist()))
            raise ValueError(f"node type codes {bad} were not in the training data (codes {self.node_type_codes})")
        return hit.to(dtype)

    def node_inputs(self, state: torch.Tensor, features: torch.Tensor, node_type: torch.Tensor) -> torch.Tensor:
        """The model's node inputs: normalised state and features, one-hot node type.

        Args:
            state: ``[n, S]`` (field units).
            features: ``[n, F]``.
            node_type: ``[n]`` codes.

        Returns:
            ``[n, S + F + K]`` in ``state``'s dtype.
        """
        parts = [self.stats["state"].normalize(state)]
        if features.shape[1]:
            parts.append(self.stats["features"].normalize(features.to(state.dtype)))
        parts.append(self.one_hot(node_type, state.dtype))
        return torch.cat(parts, dim=1)

    def edge_inputs(self, edge_attr: torch.Tensor) -> torch.Tensor:
        """Normalised edge features.

        Args:
            edge_attr: ``[E, d + 1]``.
        """
        return self.stats["edge_attr"].normalize(edge_attr)

    def target(self, next_state: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """The training target: the normalised increment ``next_state - state``.

        Args:
            next_state, state: ``[n, S]`` (``state`` the noisy input).
        """
        return self.stats["increment"].normalize(next_state - state)

    def advance(self, state: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
        """One step: ``state`` plus the de-normalised predicted increment.

        Args:
            state: ``[n, S]``.
            pred: ``[n, S]`` the model's output.
        """
        return state + self.stats["increment"].denormalize(pred.to(state.dtype))

    def to_dict(self) -> dict:
        """JSON-ready form (what a simulator checkpoint stores)."""
        return {"state": self.state, "state_columns": self.state_columns, "features": self.features,
                "feature_columns": self.feature_columns, "node_type": self.node_type,
                "node_type_codes": self.node_type_codes, "evolving_types": self.evolving_types,
                "stats": {k: self.stats[k].to_dict() for k in SIMULATOR_STAT_KEYS}, "noise_std": self.noise_std}

    @classmethod
    def from_dict(cls, d: dict) -> "SimulatorSpec":
        """Inverse of :meth:`to_dict`.

        Args:
            d: as :meth:`to_dict` gives it.

        Raises:
            ValueError: a key is missing.
        """
        keys = ("state", "state_columns", "features", "feature_columns", "node_type", "node_type_codes",
                "evolving_types", "stats")
        missing = [k for k in keys if k not in d] + [f"stats.{k}" for k in SIMULATOR_STAT_KEYS
                                                      if k not in d.get("stats", {})]
        if missing:
            raise ValueError(f"simulator spec lacks {missing}")
        return cls(state=list(d["state"]), state_columns=list(d["state_columns"]), features=list(d["features"]),
                   feature_columns=list(d["feature_columns"]), node_type=d["node_type"],
                   node_type_codes=[int(c) for c in d["node_type_codes"]],
                   evolving_types=[int(c) for c in d["evolving_types"]],
                   stats={k: FieldStats.from_dict(d["stats"][k]) for k in SIMULATOR_STAT_KEYS},
                   noise_std=float(d.get("noise_std", 0.0)))


def _generator(seed: int, *keys: int) -> torch.Generator:
    s = int(seed)
    for k in keys:
        s = (s * 1_000_003 + int(k) + 1) % (2 ** 63 - 1)
    return torch.Generator().manual_seed(s)


def draw_training_steps(seed: int, step: int, count: int, num_steps: Sequence[int]) -> List[Tuple[int, int]]:
    """The ``(trajectory, t)`` pairs optimizer step ``step`` trains on: ``count`` random
    trajectories, each at a random step ``t`` in ``[0, T - 1)`` (so ``t + 1`` exists).

    A function of ``(seed, step)`` only: every rank draws the same pairs, and a resumed run the
    pairs an uninterrupted one draws.

    Args:
        seed: the run's seed.
        step: the optimizer step.
        count: pairs to draw.
        num_steps: ``T`` of every trajectory.

    Returns:
        ``count`` pairs.
    """
    g = _generator(seed, step)
    trajs = torch.randint(len(num_steps), (count,), generator=g).tolist()
    return [(i, int(torch.randint(int(num_steps[i]) - 1, (1,), generator=g))) for i in trajs]


def training_noise(seed: int, step: int, pair: int, num_nodes: int, width: int, std: float,
                   dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Gaussian noise on the input state of one training pair, for EVERY node of the mesh (a rank
    takes the rows of its owned nodes, so sharded and single-process runs add the same noise).

    Args:
        seed, step: as :func:`draw_training_steps`.
        pair: the pair's index in the step.
        num_nodes: nodes of the whole mesh.
        width: state columns.
        std: standard deviation (field units); ``0``: zeros.
        dtype: of the result.

    Returns:
        ``[num_nodes, width]``.
    """
    if not std:
        return torch.zeros(num_nodes, width, dtype=dtype)
    g = _generator(seed, step, pair, 7919)
    return (torch.randn(num_nodes, width, generator=g, dtype=torch.float64) * float(std)).to(dtype)


def rollout_states(model: torch.nn.Module, spec: SimulatorSpec, state: torch.Tensor, features: torch.Tensor,
                   node_type: torch.Tensor, edge_attr: torch.Tensor, truth: Callable[[int], torch.Tensor],
                   steps: int, *, edge_index: Optional[torch.Tensor] = None, graph=None,
                   on_step: Optional[Callable[[int, torch.Tensor], None]] = None) -> torch.Tensor:
    """Apply the model ``steps`` times from ``state``: each step adds the predicted increment to the
    nodes that evolve and sets the others to ``truth(k)`` (Dirichlet boundaries).

    On one rank's shard (``graph``) every tensor is the owned rows (``edge_attr``: the local edges)
    and only the halo rows move per step, inside the model; on a whole mesh pass ``edge_index``.

    Args:
        model: a :class:`MeshGraphNet` (called as ``model(x, edge_index, e)`` or
            ``model(x, e, graph=graph)``).
        spec: the simulator's :class:`SimulatorSpec`.
        state: ``[n, S]`` the state at the start.
        features: ``[n, F]``, node_type: ``[n]`` codes, edge_attr: ``[E, d + 1]`` raw edge features.
        truth: ``k -> [n, S]`` the true state after step ``k`` (``k = 1..steps``), for the nodes
            that do not evolve.
        steps: model applications.
        edge_index: ``[2, E]`` the whole graph (one process).
        graph: a :class:`meshshard.ShardedGraph` (sharded).
        on_step: called with ``(k, state after step k)``.

    Returns:
        the final state ``[n, S]``.
    """
    if (edge_index is None) == (graph is None):
        raise TypeError("rollout_states needs exactly one of edge_index (a whole mesh) and graph (a shard)")
    fixed = ~spec.evolving(node_type)[:, None]
    e_in = spec.edge_inputs(edge_attr.to(state.dtype))
    with torch.no_grad():
        for k in range(1, steps + 1):
            x_in = spec.node_inputs(state, features, node_type)
            pred = model(x_in, edge_index, e_in) if graph is None else model(x_in, e_in, graph=graph)
            state = torch.where(fixed, truth(k).to(state.dtype), spec.advance(state, pred))
            if on_step is not None:
                on_step(k, state)
    return state
