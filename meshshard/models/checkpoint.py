"""Self-contained checkpoints: the weights plus everything needed to apply the model to new meshes.

A checkpoint is the dict that ``torch.save`` writes (``examples/train_meshgraphnet.py --save``
writes one through :func:`training_checkpoint`)::

    "model"      the inner model's state dict (not DomainParallel's: it loads on any number of ranks)
    "optimizer", "step", "rng", "args"   training state for --resume (optional)
    "meshshard"  {"format", "format_version", "model_class", "model_config", "dtype", "stats",
                  "features", "targets", "feature_columns", "target_columns", "node_types", "knn",
                  "nodes" (optional, "points" when absent)}

A learned simulator's checkpoint (:func:`simulator_checkpoint`, written by
``examples/train_simulator.py --save``) has ``"kind": "simulator"`` and format version 2 in its
``"meshshard"`` entry, and instead of the steady keys from ``"stats"`` on: ``"simulator"``, the
:class:`~meshshard.models.SimulatorSpec` as plain data (state and feature specs and columns, node
type field and codes, evolving node types, statistics of states, increments, features and edge
features, training noise).

The ``"meshshard"`` entry is plain data (strings, numbers, lists), so :func:`load_checkpoint` reads
the file with ``torch.load(weights_only=True)`` and rebuilds the model from an allow-list of
classes: a checkpoint never runs code.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple, Union

import torch
from torch import nn

from meshshard.datasets.stats import DatasetStats
from meshshard.models.meshgraphnet import MeshGraphNet

__all__ = ["training_checkpoint", "simulator_checkpoint", "load_checkpoint", "CheckpointInfo", "CHECKPOINT_FORMAT",
           "CHECKPOINT_FORMAT_VERSION", "MODEL_CLASSES"]

CHECKPOINT_FORMAT = "meshshard-checkpoint"
CHECKPOINT_FORMAT_VERSION = 1
#: format version of simulator checkpoints (``"kind": "simulator"``; older readers refuse them by version)
SIMULATOR_CHECKPOINT_VERSION = 2
#: model classes a checkpoint may name (by class name)
MODEL_CLASSES = {"MeshGraphNet": MeshGraphNet}
_ENTRY_KEYS = ("model_class", "model_config", "dtype", "stats", "features", "targets", "feature_columns",
               "target_columns", "node_types", "knn")
_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}
PathLike = Union[str, os.PathLike]


@dataclass
class CheckpointInfo:
    """What a checkpoint says about its model and data (the ``"meshshard"`` entry, parsed).

    Attributes:
        model_class: the model's class name (a key of :data:`MODEL_CLASSES`).
        model_config: its constructor arguments (``activation`` as a ``torch.nn`` class).
        dtype: the parameters' dtype.
        stats: the training data's normalisation statistics.
        features, targets: field specs of the node inputs and targets (``"velocity[0,1]"``).
        feature_columns, target_columns: one name per column (``velocity_0``, ``pressure``).
        node_types: node-set names in type order (type ``k + 1`` is ``node_types[k]``).
        knn: neighbours per point for point clouds (files without cells).
        nodes: ``"points"`` (trained on mesh vertices) or ``"cells"`` (on cell-centred data:
            ``read_mesh(path, nodes="cells")``).
        step: the training step it was saved at.
        extra: the rest of the checkpoint dict (``optimizer``, ``rng``, ``args``, ...).
        kind: ``"steady"`` (fields to fields) or ``"simulator"`` (a state to its next step).
        simulator: a simulator's :class:`~meshshard.models.SimulatorSpec` (``None`` for a steady
            model); for a simulator the steady attributes say: ``features`` / ``targets`` the
            feature and state specs, ``stats`` x = features, y = increments, ``node_types`` the
            codes as strings.
    """

    model_class: str
    model_config: dict
    dtype: torch.dtype
    stats: DatasetStats
    features: List[str]
    targets: List[str]
    feature_columns: List[str]
    target_columns: List[str]
    node_types: List[str]
    knn: int
    step: int = 0
    nodes: str = "points"
    extra: dict = field(default_factory=dict)
    kind: str = "steady"
    simulator: Optional[object] = None


def _dataset_spec(dataset) -> dict:
    """Features, targets, columns, node types, knn and statistics of a Mesh- or ShardedMeshDataset."""
    meta = getattr(dataset, "meta", None)
    if isinstance(meta, dict):  # ShardedMeshDataset: all of it is in the dataset meta.json
        return dict(features=list(meta["features"]), targets=list(meta["targets"]),
                    feature_columns=list(dataset.feature_columns), target_columns=list(dataset.target_columns),
                    node_types=list(dataset.node_types), knn=int(meta["knn"]), stats=dataset.stats.to_dict(),
                    nodes=str(meta.get("nodes", "points")))
    if not all(hasattr(dataset, a) for a in ("files", "features", "targets", "node_types", "knn", "stats")):
        raise TypeError(f"training_checkpoint needs a MeshDataset or ShardedMeshDataset, got {type(dataset).__name__}")
    from meshshard.datasets.fields import field_columns
    from meshshard.io import read_mesh

    nodes = str(getattr(dataset, "nodes", "points"))
    first = read_mesh(dataset.files[0], nodes=nodes)  # column names only (every file has the same ones)
    return dict(features=list(dataset.features), targets=list(dataset.targets),
                feature_columns=field_columns(first, dataset.features), target_columns=field_columns(first, dataset.targets),
                node_types=list(dataset.node_types), knn=int(dataset.knn), stats=dataset.stats.to_dict(), nodes=nodes)


def _plain_model(model) -> nn.Module:
    """The model inside a DomainParallel (or DDP) wrapper."""
    return getattr(model, "module", model)


def training_checkpoint(model, dataset, *, optimizer=None, step: int = 0, rng: Optional[torch.Tensor] = None,
                        args: Optional[dict] = None) -> dict:
    """The checkpoint dict of a model trained on ``dataset``: weights, training state, and what
    ``meshshard predict`` needs to apply it (see the module docstring). Save it with
    :func:`meshshard._fileutil.atomic_torch_save` or ``torch.save``.

    Args:
        model: a :class:`MeshGraphNet`, or a ``DomainParallel`` wrapping one (its inner model's
            state dict is stored, so the checkpoint loads on any number of ranks).
        dataset: the :class:`~meshshard.datasets.MeshDataset` or
            :class:`~meshshard.datasets.ShardedMeshDataset` it was trained on (statistics,
            field specs and columns, node types, knn).
        optimizer: its optimizer (state stored for resuming), or ``None``.
        step: optimizer steps taken.
        rng: ``torch.get_rng_state()`` to resume with, or ``None``.
        args: the training options (plain values), or ``None``.

    Returns:
        ``{"model": state_dict, "step": int, "meshshard": {...}}`` plus ``"optimizer"``, ``"rng"``,
        ``"args"`` when given.
    """
    net = _plain_model(model)
    name = type(net).__name__
    if MODEL_CLASSES.get(name) is not type(net) or not hasattr(net, "config"):
        raise TypeError(f"training_checkpoint: {name} is not a model class a checkpoint can rebuild "
                        f"({sorted(MODEL_CLASSES)})")
    config = dict(net.config)
    config["activation"] = config["activation"].__name__  # plain data: resolved in torch.nn on load
    dtype = next(net.parameters()).dtype
    ckpt = {"model": net.state_dict(), "step": int(step),
            "meshshard": {"format": CHECKPOINT_FORMAT, "format_version": CHECKPOINT_FORMAT_VERSION,
                          "model_class": name, "model_config": config, "dtype": str(dtype).replace("torch.", ""),
                          **_dataset_spec(dataset)}}
    if optimizer is not None:
        ckpt["optimizer"] = optimizer.state_dict()
    if rng is not None:
        ckpt["rng"] = rng
    if args is not None:
        ckpt["args"] = dict(args)
    return ckpt


def simulator_checkpoint(model, spec, *, optimizer=None, step: int = 0, rng: Optional[torch.Tensor] = None,
                         args: Optional[dict] = None) -> dict:
    """The checkpoint dict of a learned simulator (see the module docstring): weights, training
    state, and the :class:`~meshshard.models.SimulatorSpec` that ``meshshard rollout`` needs.

    Args:
        model: a :class:`MeshGraphNet`, or a ``DomainParallel`` wrapping one.
        spec: its :class:`~meshshard.models.SimulatorSpec`.
        optimizer, step, rng, args: as :func:`training_checkpoint`.

    Returns:
        ``{"model", "step", "meshshard": {..., "kind": "simulator", "simulator": {...}}}`` plus
        ``"optimizer"``, ``"rng"``, ``"args"`` when given.
    """
    net = _plain_model(model)
    name = type(net).__name__
    if MODEL_CLASSES.get(name) is not type(net) or not hasattr(net, "config"):
        raise TypeError(f"simulator_checkpoint: {name} is not a model class a checkpoint can rebuild "
                        f"({sorted(MODEL_CLASSES)})")
    config = dict(net.config)
    config["activation"] = config["activation"].__name__
    dtype = next(net.parameters()).dtype
    ckpt = {"model": net.state_dict(), "step": int(step),
            "meshshard": {"format": CHECKPOINT_FORMAT, "format_version": SIMULATOR_CHECKPOINT_VERSION,
                          "kind": "simulator", "model_class": name, "model_config": config,
                          "dtype": str(dtype).replace("torch.", ""), "simulator": spec.to_dict()}}
    for key, value in (("optimizer", optimizer.state_dict() if optimizer is not None else None), ("rng", rng),
                       ("args", dict(args) if args is not None else None)):
        if value is not None:
            ckpt[key] = value
    return ckpt


def _activation(name) -> type:
    act = getattr(nn, str(name), None)
    if not (isinstance(act, type) and issubclass(act, nn.Module)):
        raise ValueError(f"model_config activation {name!r} is not a torch.nn module class")
    return act


def load_checkpoint(path: PathLike, map_location=None) -> Tuple[nn.Module, CheckpointInfo]:
    """Rebuild the model of a checkpoint written with :func:`training_checkpoint`.

    Args:
        path: the checkpoint file.
        map_location: as ``torch.load`` (e.g. ``"cpu"``); a device (or its name) also moves the
            model there.

    Returns:
        ``(model, info)``: the model in eval mode, in the stored dtype, weights loaded; and a
        :class:`CheckpointInfo`.

    Raises:
        FileNotFoundError: no such file. ValueError: not a torch file, no ``"meshshard"`` entry
            (a checkpoint of an older ``train_meshgraphnet.py``: the message says what is
            missing), a newer format, an unknown model class, or weights that do not fit it.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets one clear message
        raise ValueError(f"{path}: not a readable torch checkpoint ({type(exc).__name__}: {exc})") from exc
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise ValueError(f"{path}: not a meshshard checkpoint (a dict with 'model' and 'meshshard' entries)")
    entry = ckpt.get("meshshard")
    if not isinstance(entry, dict):
        raise ValueError(
            f"{path}: the checkpoint has no 'meshshard' entry, so it lacks what predicting needs: the model "
            "class and its configuration, the normalisation statistics, the feature and target fields, the "
            "node types and knn (it has only " + ", ".join(repr(k) for k in ckpt) + "). It was written by an "
            "older train_meshgraphnet.py; save it again with meshshard.models.training_checkpoint")
    if entry.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path}: 'meshshard' entry of format {entry.get('format')!r}, expected {CHECKPOINT_FORMAT!r}")
    kind = entry.get("kind", "steady")
    newest = SIMULATOR_CHECKPOINT_VERSION if kind == "simulator" else CHECKPOINT_FORMAT_VERSION
    if int(entry.get("format_version", -1)) > newest:
        raise ValueError(f"{path}: checkpoint format {entry['format_version']} is newer than this meshshard reads "
                         f"({newest})")
    if kind not in ("steady", "simulator"):
        raise ValueError(f"{path}: unknown checkpoint kind {kind!r} (known: 'steady', 'simulator')")
    spec = None
    if kind == "simulator":
        from meshshard.io.graph import DEFAULT_KNN
        from meshshard.models.simulator import SimulatorSpec

        if not isinstance(entry.get("simulator"), dict):
            raise ValueError(f"{path}: a simulator checkpoint without its 'simulator' entry")
        spec = SimulatorSpec.from_dict(entry["simulator"])
        entry = dict(entry, stats={"x": entry["simulator"]["stats"]["features"],
                                   "y": entry["simulator"]["stats"]["increment"],
                                   "edge_attr": entry["simulator"]["stats"]["edge_attr"]},
                     features=spec.features, targets=spec.state, feature_columns=spec.feature_columns,
                     target_columns=spec.state_columns, node_types=[str(c) for c in spec.node_type_codes],
                     knn=DEFAULT_KNN)
    missing = [k for k in _ENTRY_KEYS if k not in entry]
    if missing:
        raise ValueError(f"{path}: the 'meshshard' entry lacks {missing}")
    cls = MODEL_CLASSES.get(entry["model_class"])
    if cls is None:
        raise ValueError(f"{path}: unknown model class {entry['model_class']!r} (known: {sorted(MODEL_CLASSES)})")
    if entry.get("nodes", "points") not in ("points", "cells"):
        raise ValueError(f"{path}: nodes must be 'points' or 'cells', got {entry['nodes']!r}")
    if entry["dtype"] not in _DTYPES:
        raise ValueError(f"{path}: unknown dtype {entry['dtype']!r}")
    config = dict(entry["model_config"])
    config["activation"] = _activation(config.get("activation", "ReLU"))
    dtype = _DTYPES[entry["dtype"]]
    try:
        model = cls(**config).to(dtype)
        model.load_state_dict(ckpt["model"])
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"{path}: the weights do not fit {entry['model_class']}({entry['model_config']}): {exc}") from exc
    if isinstance(map_location, (str, torch.device)):
        model.to(torch.device(map_location))
    model.eval()
    info = CheckpointInfo(
        model_class=entry["model_class"], model_config=config, dtype=dtype,
        stats=DatasetStats.from_dict(entry["stats"]), features=list(entry["features"]),
        targets=list(entry["targets"]), feature_columns=list(entry["feature_columns"]),
        target_columns=list(entry["target_columns"]), node_types=list(entry["node_types"]), knn=int(entry["knn"]),
        nodes=str(entry.get("nodes", "points")), step=int(ckpt.get("step", 0)),
        extra={k: v for k, v in ckpt.items() if k not in ("model", "meshshard", "step")}, kind=kind, simulator=spec)
    return model, info
