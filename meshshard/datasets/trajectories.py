"""Transient training data on disk: trajectories partitioned once, each rank reading only its rows.

Layout of ``OUT/``::

    meta.json                 format "meshshard-trajectories": settings, state / feature columns,
                              statistics of states, of increments (state[t+1] - state[t]), of
                              features and edge features over every step of every trajectory, and
                              per sample its folder, name, source, number of steps and nodes, the
                              sha256 of its meta.json and of every file in its folder
    00000_<name>/             one folder per trajectory, written by meshshard.graph.save_parts:
        meta.json             (sample settings, times, content sha256, per-sample moments)
        partition.pt, part_0000.pt, ...
                              node_data: pos [n_local, d], state [n_local, T, S],
                              features [n_local, F] (when any), node_type [n_local] (when asked)
                              edge_data: edge_attr [E_local, d + 1]

:func:`load_trajectory_part` gives a rank its rows with the state as ``[T, n_local, S]``. Each
sample folder is built under a temporary name and renamed into place whole; a rerun skips every
sample whose folder verifies and was written with the same settings from the same content
(a sha256 of the arrays read), and the dataset ``meta.json`` is written last.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from meshshard._fileutil import atomic_dir, atomic_path, created_dir, read_json_dict, remove_stale_temps, sha256_file
from meshshard.datasets.fields import DEFAULT_KNN, edge_features, parse_field
from meshshard.datasets.stats import Moments

__all__ = ["preprocess_trajectories", "TrajectoryPreprocessResult", "load_trajectory_part", "load_trajectory_whole",
           "read_trajectory_dataset_meta", "trajectory_columns", "trajectory_node_types", "TRAJECTORY_FORMAT",
           "TRAJECTORY_STAT_KEYS"]

TRAJECTORY_FORMAT = "meshshard-trajectories"
TRAJECTORY_FORMAT_VERSION = 1
#: statistics stored in meta.json["stats"] (FieldStats dicts) and meta.json["moments"]
TRAJECTORY_STAT_KEYS = ("state", "increment", "features", "edge_attr")
PathLike = Union[str, os.PathLike]
_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_SAMPLE_DIR = re.compile(r"^\d{5}_[A-Za-z0-9_.-]+$")


@dataclass
class TrajectoryPreprocessResult:
    """What :func:`preprocess_trajectories` did.

    Attributes:
        out_dir: the dataset folder.
        written: sample folders written in this run.
        skipped: sample folders already complete and verified (a resumed run).
        stats: ``{"state", "increment", "features", "edge_attr"}`` -> :class:`FieldStats`.
    """

    out_dir: Path
    written: List[str]
    skipped: List[str]
    stats: dict


def trajectory_columns(traj, specs: Sequence[str], what: str, static_only: bool):
    """A trajectory's columns for field specs, as :func:`preprocess_trajectories` stores them.

    Args:
        traj: a :class:`meshshard.io.Trajectory`.
        specs: field specs (``"velocity"``, ``"velocity[0,1]"``, ``"pos"``).
        what: what the fields are for (named in errors: ``"state"``, ``"features"``).
        static_only: the fields must not change over the steps (features).

    Returns:
        ``(array, names)``: float64 ``[T, N, C]`` (``[N, C]`` when ``static_only``) and one name per
        column (``name`` for a one-column field, ``name[i]`` otherwise).

    Raises:
        ValueError: a missing field, a feature that changes, a component out of range.
    """
    blocks, names = [], []
    for spec in specs:
        name, comps = parse_field(spec)
        if name == "pos" and "pos" not in traj.field_names:
            arr = np.broadcast_to(traj.points[None], (traj.num_steps,) + traj.points.shape)
        else:
            try:
                arr = traj.field(name)
            except KeyError as exc:
                raise ValueError(f"trajectory {traj.name!r} ({traj.source}): missing field {name!r} ({what}); it has "
                                 f"{traj.field_names}") from exc
        if static_only and name in traj.fields and not (arr == arr[:1]).all():
            raise ValueError(f"trajectory {traj.name!r}: feature {name!r} changes over the steps; a field that "
                             "evolves is a state (state=...), features are fields fixed in time")
        if comps is not None:
            bad = [c for c in comps if not 0 <= c < arr.shape[2]]
            if bad:
                raise ValueError(f"field {spec!r}: components {bad} out of range for {arr.shape[2]} columns")
            arr = arr[:, :, comps]
        cols = comps if comps is not None else range(arr.shape[2])
        names += [name if arr.shape[2] == 1 and comps is None else f"{name}[{c}]" for c in cols]
        blocks.append(np.asarray(arr, dtype=np.float64))
    if not blocks:
        shape = (traj.num_nodes, 0) if static_only else (traj.num_steps, traj.num_nodes, 0)
        return np.zeros(shape), names
    out = np.concatenate(blocks, axis=2)
    return (out[0] if static_only else out), names


def trajectory_node_types(traj, field: Optional[str]) -> Optional[np.ndarray]:
    """A trajectory's integer node type codes from a static field (``None`` when ``field`` is).

    Args:
        traj: a :class:`meshshard.io.Trajectory`.
        field: the static one-column field of integer codes, or ``None``.

    Returns:
        int64 ``[N]`` or ``None``.

    Raises:
        ValueError: the field changes over the steps, is missing, or does not hold integer codes.
    """
    if field is None:
        return None
    if field not in traj.static:
        where = "changes over the steps" if field in traj.fields else f"is not a field (fields: {traj.field_names})"
        raise ValueError(f"trajectory {traj.name!r}: node type field {field!r} {where}; it must be static")
    codes = np.asarray(traj.static[field])
    if codes.shape[1] != 1 or not np.array_equal(codes, np.round(codes)):
        raise ValueError(f"node type field {field!r} must be one column of integer codes, got shape "
                         f"{list(codes.shape)} dtype {codes.dtype}")
    return codes[:, 0].astype(np.int64)


def _content_sha(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _sample_name(index: int, name: str) -> str:
    return f"{index:05d}_" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "trajectory")


def _done(sample_dir: Path, settings: dict, content: str) -> Optional[dict]:
    from meshshard.graph import read_meta, verify_parts

    if not (sample_dir / "meta.json").exists() or verify_parts(sample_dir):
        return None
    meta = read_meta(sample_dir)
    return meta if meta.get("settings") == settings and meta.get("content_sha256") == content else None


def _process(index: int, traj, out: Path, settings: dict) -> dict:
    from meshshard.graph import read_meta, save_parts
    from meshshard.partitioners import partition

    state, state_cols = trajectory_columns(traj, settings["state"], "state", static_only=False)
    feats, feat_cols = trajectory_columns(traj, settings["features"], "features", static_only=True)
    codes = trajectory_node_types(traj, settings["node_type"])
    edge_index = traj.edge_index(knn=DEFAULT_KNN)
    content = _content_sha(traj.points, traj.times, edge_index.numpy(), state, feats,
                           codes if codes is not None else np.zeros(0))
    name = _sample_name(index, traj.name)
    sample_dir = out / name
    done = _done(sample_dir, settings, content)
    if done is not None:
        return {"skipped": True, "meta": done, "dir": name}
    pos = torch.as_tensor(traj.points, dtype=torch.float64)
    edge_attr = edge_features(pos, edge_index)
    increments = state[1:] - state[:-1]
    s = state.shape[2]
    moments = {"state": Moments.of(torch.from_numpy(state.reshape(-1, s))),
               "increment": Moments.of(torch.from_numpy(increments.reshape(-1, s))),
               "features": Moments.of(torch.from_numpy(feats)), "edge_attr": Moments.of(edge_attr)}
    dtype = _DTYPES[settings["dtype"]]
    node_data = {"pos": pos.to(dtype), "state": torch.from_numpy(state.transpose(1, 0, 2).copy()).to(dtype)}
    if feats.shape[1]:
        node_data["features"] = torch.from_numpy(feats).to(dtype)
    if codes is not None:
        node_data["node_type"] = torch.from_numpy(codes)
    part = partition(traj.points, settings["num_parts"], method=settings["method"], edge_index=edge_index,
                     seed=settings["seed"])
    meta = {"settings": settings, "name": traj.name, "source": str(traj.source) if traj.source else None,
            "content_sha256": content,
            "node_type_codes": sorted(set(codes.tolist())) if codes is not None else [], "sample_index": index, "times": traj.times.tolist(),
            "num_steps": traj.num_steps, "state_columns": state_cols, "feature_columns": feat_cols,
            "moments": {k: m.to_dict() for k, m in moments.items()}}
    with atomic_dir(sample_dir) as tmp:
        save_parts(tmp, edge_index, part, node_data=node_data, edge_data={"edge_attr": edge_attr.to(dtype)},
                   halo_hops=settings["halo_hops"], meta=meta, progress=False)
    return {"skipped": False, "meta": read_meta(sample_dir), "dir": name}


def _check_out(out: Path) -> None:
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"output {out} exists and is not a folder")
    meta = out / "meta.json"
    if meta.exists() and (read_json_dict(meta) or {}).get("format") != TRAJECTORY_FORMAT:
        raise ValueError(f"output {out} holds a meta.json that is not a meshshard trajectory dataset's; choose "
                         "another output folder (or delete this one)")
    other = sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and p.name != "meta.json"
                   and not (p.is_dir() and _SAMPLE_DIR.match(p.name)))
    if other:
        raise ValueError(f"output {out} holds files that are not part of a meshshard trajectory dataset "
                         f"({', '.join(other[:5])}); choose another output folder (or an empty one)")


def preprocess_trajectories(
    inputs: Union[PathLike, Sequence[PathLike]],
    out_dir: PathLike,
    num_parts: int,
    state: Sequence[str],
    features: Sequence[str] = (),
    node_type: Optional[str] = None,
    *,
    split: str = "train",
    method: str = "kdtree",
    halo_hops: int = 1,
    seed: int = 0,
    dtype: str = "float32",
) -> TrajectoryPreprocessResult:
    """Partition every trajectory into ``num_parts`` parts and write them as training data (module doc).

    Args:
        inputs: one path or a list, each read with :func:`meshshard.io.iter_trajectories` (a
            ``.pvd``, an XDMF series, a folder of step files, a MeshGraphNets dataset: every
            trajectory of ``split``).
        out_dir: output folder.
        num_parts: parts per trajectory (= ranks of a domain group).
        state: field specs (``"velocity"``, ``"velocity[0,1]"``) of the fields that evolve: the
            inputs at step t, whose change to t + 1 is the target.
        features: field specs of node inputs fixed in time (static fields, ``pos``).
        node_type: a static integer field of node type codes (MeshGraphNets: ``node_type``).
        split: the MeshGraphNets split.
        method: partitioner (``kdtree``, ``morton``, ``hilbert``, ``graph``).
        halo_hops: ghost rings stored per part.
        seed: partitioner seed.
        dtype: ``"float32"`` or ``"float64"`` storage of node and edge features.

    Returns:
        :class:`TrajectoryPreprocessResult`.

    Raises:
        ValueError: bad settings, a missing field, a feature that changes over time, samples that
            disagree on columns, an output folder holding other things.
    """
    from meshshard.io import iter_trajectories

    if isinstance(state, str) or isinstance(features, str):
        raise TypeError("state and features must be lists of field names")
    if not state:
        raise ValueError("state must name at least one field (the fields that evolve)")
    if not isinstance(num_parts, int) or num_parts < 1:
        raise ValueError(f"num_parts must be an int >= 1, got {num_parts!r}")
    if not isinstance(halo_hops, int) or halo_hops < 1:
        raise ValueError(f"halo_hops must be an int >= 1, got {halo_hops!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    out = Path(out_dir)
    _check_out(out)
    settings = {"num_parts": num_parts, "method": str(method), "halo_hops": halo_hops, "state": list(state),
                "features": list(features), "node_type": node_type, "seed": int(seed), "dtype": dtype}
    results = []
    with created_dir(out):
        (out / "meta.json").unlink(missing_ok=True)  # it vouches for samples about to be rewritten
        index = 0
        for p in paths:
            for traj in iter_trajectories(p, split=split):
                remove_stale_temps(out / _sample_name(index, traj.name))
                results.append(_process(index, traj, out, settings))
                index += 1
        if not results:
            raise ValueError(f"no trajectories found in {paths}")
        return _finish(out, settings, results)


def _finish(out: Path, settings: dict, results: List[dict]) -> TrajectoryPreprocessResult:
    metas = [r["meta"] for r in results]
    cols = {(tuple(m["state_columns"]), tuple(m["feature_columns"])) for m in metas}
    if len(cols) > 1:
        raise ValueError(f"trajectories disagree on state/feature columns: {sorted(cols)}")
    moments = {k: Moments.merge_all(Moments.from_dict(m["moments"][k]) for m in metas) for k in TRAJECTORY_STAT_KEYS}
    stats = {k: m.to_stats() for k, m in moments.items()}
    samples = [{"dir": r["dir"], "name": m["name"], "source": m["source"], "num_steps": m["num_steps"],
                "num_nodes": m["num_nodes"], "meta_sha256": sha256_file(out / r["dir"] / "meta.json"),
                "files": m["files"]} for r, m in zip(results, metas)]
    meta = {"format": TRAJECTORY_FORMAT, "format_version": TRAJECTORY_FORMAT_VERSION, **settings,
            "state_columns": metas[0]["state_columns"], "feature_columns": metas[0]["feature_columns"],
            "node_type_codes": sorted({c for m in metas for c in m.get("node_type_codes", [])}),
            "num_samples": len(samples), "stats": {k: s.to_dict() for k, s in stats.items()},
            "moments": {k: m.to_dict() for k, m in moments.items()}, "samples": samples}
    with atomic_path(out / "meta.json") as tmp:
        tmp.write_text(json.dumps(meta, indent=1))
    return TrajectoryPreprocessResult(out, [r["dir"] for r in results if not r["skipped"]],
                                      [r["dir"] for r in results if r["skipped"]], stats)


def read_trajectory_dataset_meta(root: PathLike) -> dict:
    """The ``meta.json`` of a folder written by :func:`preprocess_trajectories`.

    Args:
        root: the folder.

    Raises:
        FileNotFoundError: no ``meta.json`` (not preprocessed, or the run did not finish).
        ValueError: not a trajectory dataset, or a newer format.
    """
    path = Path(root) / "meta.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: not a trajectory dataset, or its preprocessing did not finish "
                                "(run it again to resume)")
    meta = read_json_dict(path)
    if not meta or meta.get("format") != TRAJECTORY_FORMAT:
        raise ValueError(f"{path}: not a meshshard trajectory dataset meta.json")
    if int(meta.get("format_version", -1)) > TRAJECTORY_FORMAT_VERSION:
        raise ValueError(f"{path}: trajectory dataset format {meta['format_version']} is newer than this meshshard reads")
    return meta


def load_trajectory_part(root: PathLike, sample: int, rank: int) -> dict:
    """One rank's rows of one trajectory (reads only that part's file, checked against its sha256).

    Args:
        root: the dataset folder.
        sample: the trajectory's index in ``meta.json["samples"]``.
        rank: the part.

    Returns:
        the part dict of :func:`meshshard.graph.load_part` (``owned_ids``, ``ghost_ids``,
        ``edge_index``, exchange plan, ...) plus ``state`` ``[T, n_local, S]``, ``pos``
        ``[n_local, d]``, ``features`` ``[n_local, F]`` and ``node_type`` ``[n_local]`` when
        stored, ``edge_attr`` ``[E_local, d + 1]`` and ``times`` ``[T]`` float64; local rows are
        the owned nodes, then the ghosts.
    """
    from meshshard.graph import load_part

    meta = read_trajectory_dataset_meta(root)
    samples = meta["samples"]
    if not 0 <= sample < len(samples):
        raise IndexError(f"sample {sample} out of range: {root} holds {len(samples)} trajectories")
    folder = Path(root) / samples[sample]["dir"]
    if sha256_file(folder / "meta.json") != samples[sample]["meta_sha256"]:
        raise ValueError(f"{folder}/meta.json: sha256 differs from the dataset meta.json (changed after writing)")
    part = load_part(folder, rank)
    nodes = part["node_data"]
    out = dict(part)
    out["state"] = nodes["state"].transpose(0, 1).contiguous()
    out["pos"] = nodes["pos"]
    for key in ("features", "node_type"):
        if key in nodes:
            out[key] = nodes[key]
    out["edge_attr"] = part["edge_data"]["edge_attr"]
    out["times"] = torch.tensor(json.loads((folder / "meta.json").read_text())["times"], dtype=torch.float64)
    return out


def load_trajectory_whole(root: PathLike, sample: int) -> dict:
    """One trajectory assembled from every part, in original node order (one process; for
    single-process references and checks).

    Args:
        root: the dataset folder.
        sample: the trajectory's index in ``meta.json["samples"]``.

    Returns:
        ``{"state": [T, N, S], "pos": [N, d], "features": [N, F] (when stored), "node_type": [N]
        (when stored), "edge_index": [2, E], "edge_attr": [E, d + 1], "times": [T]}``: every edge
        once (each part's edges into its owned nodes, parts in order), tensors in the stored dtype.
    """
    meta = read_trajectory_dataset_meta(root)
    k = int(meta["num_parts"])
    parts = [load_trajectory_part(root, sample, r) for r in range(k)]  # checks the index
    n = int(meta["samples"][sample]["num_nodes"])
    out: dict = {"times": parts[0]["times"]}
    edges, attrs = [], []
    for p in parts:
        own = p["owned_ids"]
        n_own = own.numel()
        gids = torch.cat([own, p["ghost_ids"]])
        for key in ("pos", "features", "node_type"):
            if key in p:
                if key not in out:
                    out[key] = torch.zeros((n,) + tuple(p[key].shape[1:]), dtype=p[key].dtype)
                out[key][own] = p[key][:n_own]
        if "state" not in out:
            out["state"] = torch.zeros((p["state"].shape[0], n, p["state"].shape[2]), dtype=p["state"].dtype)
        out["state"][:, own] = p["state"][:, :n_own]
        into_owned = p["edge_index"][1] < n_own
        edges.append(gids[p["edge_index"][:, into_owned]])
        attrs.append(p["edge_attr"][into_owned])
    out["edge_index"] = torch.cat(edges, dim=1)
    out["edge_attr"] = torch.cat(attrs)
    return out
