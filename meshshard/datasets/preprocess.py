"""Turn a dataset of meshes with point fields into sharded training data (``meshshard preprocess``).

Layout of ``OUT/``::

    meta.json                 dataset level: settings, feature/target columns, node types,
                              normalisation statistics, and per sample its folder, source file,
                              source sha256 and the sha256 of every file in its folder
    00000_<stem>/             one shard folder per sample, written by meshshard.graph.save_parts:
        meta.json             (sample settings, per-sample moments, node-set names, file sha256)
        partition.pt, part_0000.pt, ...
                              node_data: pos, x, y, node_type_id (owned + ghost rows)
                              edge_data: edge_attr (local edges)

Samples are processed in parallel (one process per file). Each sample folder is built by
``save_parts`` in a temporary folder beside its target and renamed into place whole, so a sample
folder is complete or absent; a rerun skips every sample whose folder verifies and was written with
the same settings from the same source, so an interrupted run resumes where it stopped. The
dataset ``meta.json`` is written last, so a folder without it is never mistaken for a finished
dataset. Every file's fields are checked before the first partition. The on-disk format is
described key by key in ``docs/format.md``.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from meshshard._fileutil import atomic_dir, atomic_path, created_dir, read_json_dict, remove_stale_temps, sha256_file
from meshshard.io.fields import check_fields
from meshshard.io.graph import DEFAULT_KNN
from meshshard.datasets.stats import DatasetStats, Moments, STAT_KEYS

__all__ = ["preprocess_dataset", "PreprocessResult", "DATASET_FORMAT", "DATASET_FORMAT_VERSION", "sample_dir_name",
           "read_dataset_meta", "verify_dataset", "check_dataset_dir", "is_dataset_dir"]

DATASET_FORMAT = "meshshard-dataset"
DATASET_FORMAT_VERSION = 1
PathLike = Union[str, os.PathLike]
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def sample_dir_name(index: int, path: PathLike) -> str:
    """Folder name of sample ``index`` read from ``path``: ``00003_<stem>`` (safe characters only).

    The stem is the whole file name less its suffix (``box_U1.5.vtu`` -> ``box_U1.5``), less both
    parts of a double suffix meshio reads (``.vol.gz``).

    Args:
        index: the sample's position in the dataset.
        path: its source file.
    """
    import meshio

    name = Path(path).name
    double = [s for s in meshio.extension_to_filetypes if s.count(".") > 1 and name.lower().endswith(s)]
    stem = name[:-len(double[0])] if double else Path(name).stem
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", stem)[:60] or "sample"
    return f"{index:05d}_{stem}"


@dataclass
class PreprocessResult:
    """What :func:`preprocess_dataset` did.

    Attributes:
        out_dir: the dataset folder.
        written: sample names written in this run.
        skipped: sample names already complete and verified (a resumed run).
        stats: normalisation statistics over the whole dataset.
        seconds: wall time of the run.
    """

    out_dir: Path
    written: List[str]
    skipped: List[str]
    stats: DatasetStats
    seconds: float


def _settings(num_parts, method, halo_hops, features, targets, seed, dtype, knn) -> dict:
    return {"num_parts": int(num_parts), "method": str(method), "halo_hops": int(halo_hops),
            "features": list(features), "targets": list(targets), "seed": int(seed), "dtype": str(dtype),
            "knn": int(knn)}


def _sample_is_done(sample_dir: Path, settings: dict, source_sha: str) -> Optional[dict]:
    """The sample's meta.json when its folder verifies and matches settings and source; else None."""
    from meshshard.graph import read_meta, verify_parts

    if not (sample_dir / "meta.json").exists():
        return None
    if verify_parts(sample_dir):
        return None
    meta = read_meta(sample_dir)
    if meta.get("settings") != settings or meta.get("source_sha256") != source_sha:
        return None
    return meta


def _process_one(index: int, path: str, out_dir: str, settings: dict, threads: int = 1) -> dict:
    """Read, partition and write one sample (runs in a worker process). Returns its meta.json."""
    torch.set_num_threads(max(1, threads))
    from meshshard.datasets.fields import field_columns, node_type_ids, select_fields
    from meshshard.graph import LazyRows, read_meta, save_parts
    from meshshard.io import graph as _graph
    from meshshard.io import read_mesh
    from meshshard.partitioners import partition

    src = Path(path)
    sample_dir = Path(out_dir) / sample_dir_name(index, src)
    source_sha = sha256_file(src)
    done = _sample_is_done(sample_dir, settings, source_sha)
    if done is not None:
        return {"skipped": True, "meta": done, "dir": sample_dir.name}
    mesh = read_mesh(src, nodes=settings.get("nodes", "points"))
    field = settings.get("node_type_field")
    if field:  # integer types from a field: type v > 0 is the node type named "FIELD=v", 0 interior
        from meshshard.io import node_type_from_field

        raw = node_type_from_field(mesh, field)
        values = sorted(set(raw.unique().tolist()) - {0})
        names = [f"{field}={v}" for v in values]
        lut = torch.zeros(int(raw.max()) + 1, dtype=torch.long)
        lut[torch.tensor(values, dtype=torch.long)] = torch.arange(1, len(values) + 1)
        type_ids = lut[raw]
    else:
        names = sorted(mesh.node_sets)  # per-sample node types: ids into this sorted list (0 = interior)
        type_ids = node_type_ids(mesh, names)
    # Built one array at a time, each freed after its last use (the mesh's cells and fields once the
    # edges and features are taken, float64 copies once rounded), the partitioner run before the edge
    # features exist, and those stored part by part: no phase holds every array at once.
    feature_columns = field_columns(mesh, settings["features"])
    target_columns = field_columns(mesh, settings["targets"])
    edge_index = _graph.mesh_graph(mesh, settings["knn"])
    if mesh.num_nodes <= torch.iinfo(torch.int32).max:  # the largest array kept: int32 ids halve it (same files)
        edge_index = edge_index.to(torch.int32)
    dtype = _DTYPES[settings["dtype"]]
    x64 = torch.as_tensor(select_fields(mesh, settings["features"]))
    y64 = torch.as_tensor(select_fields(mesh, settings["targets"]))
    points = mesh.points
    pos64 = torch.as_tensor(np.asarray(points, dtype=np.float64))
    del mesh  # its cells and point fields; the points stay for the partitioner
    moments = {"x": Moments.of(x64), "y": Moments.of(y64)}
    node_data = {"pos": pos64.to(dtype), "x": x64.to(dtype), "y": y64.to(dtype), "node_type_id": type_ids}
    del x64, y64
    method = settings["method"]
    part = partition(points, settings["num_parts"], method=method, edge_index=edge_index, seed=settings["seed"])
    del points
    pos64 = pos64.contiguous()  # (a view of the points when they have a dropped zero z column) rows gather faster
    moments["edge_attr"] = _edge_moments(pos64, edge_index)
    # each part's edge features are computed as it is written: the [E, d + 1] array never exists
    edge_attr = LazyRows(edge_index.shape[1], (pos64.shape[1] + 1,), dtype,
                         lambda ids: _edge_features_into(pos64, edge_index[:, ids],
                                                         torch.empty((ids.numel(), pos64.shape[1] + 1), dtype=dtype)))
    meta = {
        "settings": settings,
        "source": os.path.abspath(src),
        "source_sha256": source_sha,
        "sample_index": index,
        "node_set_names": names,
        "feature_columns": feature_columns,
        "target_columns": target_columns,
        "moments": {k: moments[k].to_dict() for k in STAT_KEYS},
    }
    # built beside its target and renamed into place (replacing a stale or damaged folder), so a
    # sample folder is whole or absent, whatever interrupts the run
    with atomic_dir(sample_dir) as tmp:
        save_parts(tmp, edge_index, part, node_data=node_data,
                   edge_data={"edge_attr": edge_attr}, halo_hops=settings["halo_hops"],
                   meta=meta, progress=False)
    return {"skipped": False, "meta": read_meta(sample_dir), "dir": sample_dir.name}


#: edges whose features are computed at a time: small enough that torch runs each step on one thread (its
#: kernels split work above 32768 elements, and waiting for a second, busy core slowed these steps down)
_EDGE_CHUNK = 1 << 13


def _edge_features_into(pos64: torch.Tensor, edge_index: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out[:] = edge_features(pos64, edge_index)`` rounded to ``out``'s dtype, in chunks of rows.

    The same values: each row's difference and norm are computed alone from the same float64
    numbers (the gathers are copies, the difference and the norm the same kernels on the same
    rows), then rounded once, as ``edge_features(...).to(dtype)`` does.

    Args:
        pos64: node coordinates ``[N, d]`` float64.
        edge_index: ``[2, E]``.
        out: ``[E, d + 1]``, any floating dtype.

    Returns:
        ``out``.
    """
    d = pos64.shape[1]
    for s in range(0, edge_index.shape[1], _EDGE_CHUNK):
        block = edge_index[:, s:s + _EDGE_CHUNK]
        rel = pos64.index_select(0, block[0]).sub_(pos64.index_select(0, block[1]))
        rows = out[s:s + _EDGE_CHUNK]
        rows[:, :d] = rel
        rows[:, d:] = rel.norm(dim=1, keepdim=True)
    return out


def _edge_moments(pos64: torch.Tensor, edge_index: torch.Tensor) -> Moments:
    """:meth:`Moments.of` MeshGraphNet's edge features ``edge_features(pos64, edge_index)``, the same values.

    Their float64 array (:func:`_edge_features_into`) is squared in place, so it is the only
    full-size temporary.

    Args:
        pos64: node coordinates ``[N, d]`` float64.
        edge_index: ``[2, E]``.
    """
    e = edge_index.shape[1]
    ea64 = _edge_features_into(pos64, edge_index, torch.empty((e, pos64.shape[1] + 1), dtype=torch.float64))
    if e == 0:
        return Moments.of(ea64)
    mean = ea64.mean(dim=0)
    return Moments(e, mean, ea64.sub_(mean).square_().sum(dim=0))  # Moments.of's ((v - mean) ** 2).sum(0)

def preprocess_dataset(
    inputs: Union[PathLike, Sequence[PathLike]],
    out_dir: PathLike,
    num_parts: int,
    features: Sequence[str],
    targets: Sequence[str],
    method: str = "kdtree",
    halo_hops: int = 1,
    workers: int = 1,
    seed: int = 0,
    dtype: str = "float32",
    progress: bool = True,
    on_sample: Optional[Callable[[str, bool], None]] = None,
    knn: int = DEFAULT_KNN,
    node_type_field: Optional[str] = None,
    nodes: str = "points",
) -> PreprocessResult:
    """Partition every mesh of a dataset and write it as sharded training data (see module doc).

    Args:
        inputs: a folder of mesh files, one file, or a list of files (any meshio format).
        out_dir: output folder.
        num_parts: parts per sample (best: the ranks that will train on it; any other number of ranks
            merges or splits them on load).
        features: field specs of the node inputs ``x`` (``"velocity"``, ``"velocity[0,1]"``, ``"pos"``).
        targets: field specs of ``y``.
        method: partitioner (``kdtree``, ``morton``, ``hilbert``, ``graph``).
        halo_hops: halo depth stored per part (``>= num_layers`` lets MeshGraphNet exchange once).
        workers: processes working on files in parallel.
        seed: partitioner seed.
        dtype: ``"float32"`` or ``"float64"`` storage of node and edge features.
        progress: show a tqdm bar over samples.
        on_sample: called with ``(sample_dir_name, skipped)`` as each sample finishes.
        knn: neighbours per point for files without cells (point clouds, e.g. ``.npz``).
        node_type_field: a point or cell field holding integer node types
            (:func:`meshshard.io.node_type_from_field`), instead of the mesh's named boundary sets;
            type ``v > 0`` becomes the node type named ``"FIELD=v"``, ``0`` interior.
        nodes: ``"points"`` (the mesh vertices are the nodes, point fields the features and
            targets) or ``"cells"`` (cell-centred data, :func:`meshshard.io.cells_as_nodes`: the
            volume cells are the nodes, cell fields the features and targets, cells sharing a
            face the edges); recorded in the settings as ``"nodes": "cells"``.

    Returns:
        :class:`PreprocessResult`.

    Warns:
        UserWarning: once, when samples have no boundary information at all (no named sets and no
            ``node_type_field``): every node of theirs is ``interior``.

    Raises:
        ValueError: ``out_dir`` exists and holds something other than a (partial) meshshard
            dataset, e.g. a folder written by ``meshshard partition``; a field name the files do
            not have (the message lists the ones they do); more parts than nodes.
    """
    from meshshard.datasets.mesh_dataset import list_mesh_files

    files = list_mesh_files(inputs)
    if isinstance(features, str) or isinstance(targets, str):
        raise TypeError("features and targets must be lists of field names")
    if not isinstance(num_parts, int) or num_parts < 1:
        raise ValueError(f"num_parts must be an int >= 1, got {num_parts!r}")
    if not isinstance(halo_hops, int) or halo_hops < 1:
        raise ValueError(f"halo_hops must be an int >= 1, got {halo_hops!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    if not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an int >= 1, got {workers!r}")
    if not isinstance(knn, int) or isinstance(knn, bool) or knn < 1:
        raise ValueError(f"knn must be an int >= 1, got {knn!r}")
    if nodes not in ("points", "cells"):
        raise ValueError(f"nodes must be 'points' (mesh vertices) or 'cells' (cell centres), got {nodes!r}")
    names = [sample_dir_name(i, f) for i, f in enumerate(files)]
    out = Path(out_dir)
    check_dataset_dir(out)
    check_fields(files, features, targets, nodes=nodes)  # every file, before the first partition
    settings = _settings(num_parts, method, halo_hops, features, targets, seed, dtype, knn)
    if node_type_field is not None:  # only when given: datasets written without it keep their settings
        settings["node_type_field"] = str(node_type_field)
    if nodes == "cells":  # likewise: vertex-based datasets keep the settings they were written with
        settings["nodes"] = "cells"
    t0 = time.perf_counter()
    # A failed run removes the output folder if it made it and no sample was finished, and puts back
    # the dataset meta.json of an earlier run if every sample it vouches for is still the same.
    with created_dir(out), _meta_restored_on_failure(out):
        for name in names:  # left by a killed run
            remove_stale_temps(out / name)
        results = _run_samples(files, out, settings, workers, progress, on_sample)
        return _finish(files, names, out, settings, results, t0)


def _run_samples(files, out: Path, settings: dict, workers: int, progress: bool, on_sample) -> Dict[int, dict]:
    from tqdm.auto import tqdm

    results: Dict[int, dict] = {}
    bar = tqdm(total=len(files), desc="preprocess", unit="mesh", disable=not progress)
    stack = contextlib.ExitStack()
    try:
        if workers == 1 or len(files) == 1:
            threads = torch.get_num_threads()
            for i, f in enumerate(files):
                results[i] = _process_one(i, str(f), str(out), settings, threads)
                bar.update(1)
                if on_sample:
                    on_sample(results[i]["dir"], results[i]["skipped"])
        else:
            import multiprocessing as mp
            from logging.handlers import QueueListener

            threads = max(1, (os.cpu_count() or 1) // workers)
            ctx = mp.get_context("spawn")
            # the workers' log lines (numba's compile notice) are logged again here, through this process's
            # handlers: the CLI's print them above the progress bar instead of into it
            log_queue = ctx.Queue()
            listener = QueueListener(log_queue, _RelogHandler())
            listener.start()
            stack.callback(listener.stop)
            with ProcessPoolExecutor(max_workers=min(workers, len(files)), mp_context=ctx,
                                     initializer=_log_to_queue, initargs=(log_queue,)) as pool:
                futures = {pool.submit(_process_one, i, str(f), str(out), settings, threads): i for i, f in enumerate(files)}
                for fut in as_completed(futures):
                    i = futures[fut]
                    try:
                        results[i] = fut.result()
                    except Exception as exc:
                        for other in futures:
                            other.cancel()
                        if isinstance(exc, (ValueError, TypeError)) and str(files[i]) not in str(exc):
                            raise type(exc)(f"{files[i]}: {exc}") from exc
                        raise
                    bar.update(1)
                    if on_sample:
                        on_sample(results[i]["dir"], results[i]["skipped"])
    finally:
        stack.close()
        bar.close()
    return results


class _RelogHandler(logging.Handler):
    """Hands a record from a worker process to this process's logger of the same name."""

    def emit(self, record: logging.LogRecord) -> None:
        logger = logging.getLogger(record.name)
        if logger.isEnabledFor(record.levelno):
            logger.handle(record)


def _log_to_queue(queue) -> None:
    """Worker initializer: the ``meshshard`` logger's records go to ``queue`` (see :func:`_run_samples`)."""
    from logging.handlers import QueueHandler

    logger = logging.getLogger("meshshard")
    logger.handlers = [QueueHandler(queue)]
    logger.propagate = False


@contextlib.contextmanager
def _meta_restored_on_failure(out: Path):
    """Remove the dataset meta.json for the run (it vouches for every sample, and samples are about
    to be rewritten); if the run fails, put it back when the samples it lists are unchanged."""
    meta = out / "meta.json"
    old = meta.read_bytes() if meta.is_file() else None
    meta.unlink(missing_ok=True)
    try:
        yield
    except BaseException:
        if old is not None and not meta.exists() and _samples_unchanged(out, old):
            with atomic_path(meta) as tmp:
                tmp.write_bytes(old)
        raise


def _samples_unchanged(out: Path, meta_bytes: bytes) -> bool:
    try:
        samples = json.loads(meta_bytes)["samples"]
        return all((out / s["dir"] / "meta.json").is_file()
                   and sha256_file(out / s["dir"] / "meta.json") == s["meta_sha256"] for s in samples)
    except (ValueError, KeyError, TypeError):
        return False


def _finish(files, names, out: Path, settings: dict, results: Dict[int, dict], t0: float) -> PreprocessResult:
    """Dataset statistics and meta.json from every sample's meta.json."""
    from meshshard.datasets.mesh_dataset import node_type_vocabulary

    metas = [results[i]["meta"] for i in range(len(files))]
    cols = {(tuple(m["feature_columns"]), tuple(m["target_columns"])) for m in metas}
    if len(cols) > 1:
        raise ValueError(f"samples disagree on feature/target columns (vector fields of different widths?): {sorted(cols)}")
    bare = [names[i] for i, m in enumerate(metas) if not m["node_set_names"]]
    if bare and not settings.get("node_type_field"):
        warnings.warn(f"{len(bare)} of {len(files)} samples have no boundary information (no SU2 markers, gmsh "
                      f"physical groups, VTK block names or OpenFOAM patches; first: {bare[0]}), so every node of "
                      "theirs is typed 'interior': give node types from a field with --node-type FIELD "
                      "(preprocess_dataset(node_type_field=...)) or use a file that keeps its boundaries",
                      stacklevel=3)
    per_sample = [{k: Moments.from_dict(m["moments"][k]) for k in STAT_KEYS} for m in metas]
    stats = DatasetStats.from_sample_moments(per_sample)
    samples = []
    for i, (f, m) in enumerate(zip(files, metas)):
        d = out / names[i]
        samples.append({
            "name": names[i],
            "dir": names[i],
            "source": os.path.abspath(f),
            "source_sha256": m["source_sha256"],
            "num_nodes": m["num_nodes"],
            "num_edges": m["num_edges"],
            "node_set_names": m["node_set_names"],
            "meta_sha256": sha256_file(d / "meta.json"),
            "files": m["files"],
        })
    dataset_meta = {
        "format": DATASET_FORMAT,
        "format_version": DATASET_FORMAT_VERSION,
        **settings,
        "feature_columns": metas[0]["feature_columns"],
        "target_columns": metas[0]["target_columns"],
        "node_types": node_type_vocabulary([m["node_set_names"] for m in metas]),
        "num_samples": len(files),
        "stats": stats.to_dict(),
        "samples": samples,
    }
    with atomic_path(out / "meta.json") as tmp:
        Path(tmp).write_text(json.dumps(dataset_meta, indent=1))
    skipped = [results[i]["dir"] for i in range(len(files)) if results[i]["skipped"]]
    written = [results[i]["dir"] for i in range(len(files)) if not results[i]["skipped"]]
    return PreprocessResult(out, written, skipped, stats, time.perf_counter() - t0)


_SAMPLE_DIR = re.compile(r"^\d{5}_[A-Za-z0-9_.-]+$")


def check_dataset_dir(out: PathLike) -> None:
    """Refuse to write a dataset into a folder that holds something else.

    Accepted: a missing or empty folder, a finished dataset (its ``meta.json`` says
    ``format: meshshard-dataset``), or the sample folders of an interrupted run (names
    ``00000_<stem>``, no ``meta.json`` yet).

    Args:
        out: the output folder.

    Raises:
        ValueError: ``out`` is a file, a shard folder of ``meshshard partition``, or holds other files.
    """
    out = Path(out)
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"output {out} exists and is not a folder")
    meta = out / "meta.json"
    if meta.exists():
        d = read_json_dict(meta) or {}
        if d.get("format") == DATASET_FORMAT:
            return
        what = ("a shard folder written by `meshshard partition`" if "num_parts" in d
                else "a meta.json that is not a meshshard dataset's")
        raise ValueError(f"output {out} exists and holds {what}, not a preprocessed dataset; "
                         "choose another -o/--out folder (or delete this one)")
    other = sorted(p.name for p in out.iterdir()
                   if not p.name.startswith(".") and not (p.is_dir() and _SAMPLE_DIR.match(p.name)))
    if other:
        shown = ", ".join(other[:5]) + (", ..." if len(other) > 5 else "")
        raise ValueError(f"output {out} exists and holds files that are not part of a meshshard dataset ({shown}); "
                         "choose another -o/--out folder (or an empty one)")


def read_dataset_meta(root: PathLike) -> dict:
    """Read a preprocessed dataset's ``meta.json``.

    Args:
        root: the preprocessed folder.

    Returns:
        the parsed ``meta.json`` (settings, columns, node types, ``stats``, ``samples``).

    Raises:
        FileNotFoundError: no ``meta.json`` (not preprocessed, or the run did not finish).
        ValueError: not a meshshard dataset, or a newer format.
    """
    path = Path(root) / "meta.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a preprocessed meshshard dataset, or preprocessing "
                                "did not finish (rerun `meshshard preprocess` to resume)")
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != DATASET_FORMAT:
        raise ValueError(f"{path}: not a meshshard dataset meta.json (format {meta.get('format') if isinstance(meta, dict) else None!r})")
    if int(meta.get("format_version", -1)) > DATASET_FORMAT_VERSION:
        raise ValueError(f"{path}: dataset format {meta['format_version']} is newer than this meshshard reads")
    return meta


def is_dataset_dir(root: PathLike) -> bool:
    """True when ``root/meta.json`` says it is a preprocessed meshshard dataset (not verified).

    Args:
        root: a folder.
    """
    meta = Path(root) / "meta.json"
    return meta.is_file() and (read_json_dict(meta) or {}).get("format") == DATASET_FORMAT


def verify_dataset(root: PathLike, progress: bool = False) -> List[str]:
    """Check every sample folder against the checksums in the dataset ``meta.json``.

    Args:
        root: the preprocessed folder.
        progress: show a tqdm bar (on stderr) over samples.

    Returns:
        Problems found (one line each, ``<sample dir>/<file>: ...``); empty when the dataset is intact.
    """
    from tqdm.auto import tqdm

    from meshshard.graph import verify_parts

    try:
        meta = read_dataset_meta(root)
    except (FileNotFoundError, ValueError) as exc:
        return [str(exc)]
    problems = []
    for s in tqdm(meta["samples"], desc="verifying", unit="sample", disable=not progress, leave=False):
        d = Path(root) / s["dir"]
        if not (d / "meta.json").exists():
            problems.append(f"{s['dir']}: meta.json missing")
            continue
        if sha256_file(d / "meta.json") != s["meta_sha256"]:
            problems.append(f"{s['dir']}/meta.json: sha256 differs from the dataset meta.json")
        problems += [f"{s['dir']}/{p}" for p in verify_parts(d)]
    return problems
