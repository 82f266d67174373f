"""On-disk shard format: one file per part, so each rank reads only its own part.

Layout of ``OUT/`` (format version 1)::

    meta.json        {"format_version", "num_parts", "method", "num_nodes", "num_edges", "dim",
                      "halo_hops", "quality", "node_features", "edge_features", "files", ...meta}
    partition.pt     Partition.save: assignment [N], perm, offsets
    part_0000.pt     dict, see below
    ...

Each ``part_XXXX.pt`` (``torch.save`` of plain tensors, readable with ``weights_only=True``)::

    format_version, rank, num_parts, num_nodes, num_edges, halo_hops
    owned_ids          LongTensor [n_own]      original ids of owned nodes (local rows 0..n_own-1)
    ghost_ids          LongTensor [n_ghost]    original ids of ghosts (local rows n_own..), grouped by owner
    ghost_owner        LongTensor [n_ghost]    owner rank of each ghost
    ghost_owner_index  LongTensor [n_ghost]    row of each ghost in its owner's owned rows
    node_hop           LongTensor [n_own + n_ghost]  ring of each local node (0 = owned)
    edge_index         LongTensor [2, E_local] local ids (row 0 source, row 1 target)
    edge_ids           LongTensor [E_local]    positions in the global edge_index
    edge_hop_ptr       LongTensor [halo_hops + 1]
    send_index         list of num_parts LongTensors: owned rows sent to each part
    send_counts        LongTensor [P, P]       rows part i sends to part j
    sizes              list[int]               owned nodes of every part
    node_data          {name: Tensor [n_own + n_ghost, ...]}  owned then ghost rows
    edge_data          {name: Tensor [E_local, ...]}

``meta.json["files"]`` maps every file name to its sha256 (hashed while written; the same input
gives byte-identical files). Every file is written under a temporary name and renamed into place,
``meta.json`` last (after removing an old one first), so an interrupted run leaves no directory
that reads as complete.
"""
from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional, Union

import torch

from meshshard._fileutil import atomic_path, atomic_torch_save, sha256_file
from meshshard.graph.halo import check_edge_index, check_hops
from meshshard.graph.lazy_rows import LazyRows

__all__ = ["FORMAT_VERSION", "save_parts", "read_meta", "verify_parts", "load_part", "part_file_name"]

FORMAT_VERSION = 1
PathLike = Union[str, os.PathLike]


def part_file_name(rank: int) -> str:
    """File name of part ``rank``: ``part_0000.pt``."""
    return f"part_{rank:04d}.pt"


def _check_data(data: Optional[Dict[str, torch.Tensor]], rows: int, what: str) -> Dict[str, torch.Tensor]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TypeError(f"{what} must be a dict name -> Tensor, got {type(data).__name__}")
    out = {}
    for name, t in data.items():
        if not isinstance(name, str):
            raise TypeError(f"{what} keys must be str, got {name!r}")
        lazy = isinstance(t, LazyRows)  # rows computed as each part asks for them
        t = t if lazy else torch.as_tensor(t)
        if t.dim() == 0 or t.shape[0] != rows:
            raise ValueError(f"{what}[{name!r}] has shape {tuple(t.shape)}, expected {rows} rows")
        out[name] = t if lazy else t.detach().cpu()
    return out


def _feature_info(data: Dict[str, torch.Tensor]) -> Dict[str, dict]:
    return {k: {"shape": list(v.shape[1:]), "dtype": str(v.dtype).replace("torch.", "")} for k, v in data.items()}


def save_parts(
    out_dir: PathLike,
    edge_index: torch.Tensor,
    partition,
    *,
    node_data: Optional[Dict[str, torch.Tensor]] = None,
    edge_data: Optional[Dict[str, torch.Tensor]] = None,
    halo_hops: int = 1,
    meta: Optional[dict] = None,
    progress: bool = True,
) -> Path:
    """Write a partitioned graph as one file per part (single process).

    Two helper threads work beside the halo building: one computes ``meta["quality"]``, the other
    serialises, hashes and writes the previous part, so two parts are in memory at a time.

    Args:
        out_dir: output directory (created). Written into again, it ends with exactly this
            partition's files: ``meta.json`` is removed first (so no old checksums vouch for new
            files while they are written) and part files beyond ``num_parts`` are deleted.
        edge_index: ``LongTensor [2, E]`` global edges (row 0 source, row 1 target); an ``IntTensor`` is
            read as it is (half the memory; the files are the same).
        partition: :class:`meshshard.partitioners.Partition` of the ``N`` nodes.
        node_data: ``{name: Tensor [N, ...]}``; each part stores its owned + ghost rows.
            ``"pos"`` sets ``meta["dim"]``.
        edge_data: ``{name: Tensor [E, ...]}``; each part stores its local edges' rows. A value of
            ``node_data`` or ``edge_data`` may be a :class:`meshshard.graph.LazyRows`: each part's rows
            are then computed when it is written, and the whole array never exists.
        halo_hops: halo depth ``k >= 1`` stored in every part.
        meta: extra JSON-serialisable entries merged into ``meta.json`` (e.g. source file, sha256).
        progress: show a progress bar over parts.

    Returns:
        ``Path`` of ``out_dir``.
    """
    from meshshard.partitioners import Partition

    if not isinstance(partition, Partition):
        raise TypeError(f"partition must be a meshshard Partition, got {type(partition).__name__}")
    check_hops(halo_hops)
    n = partition.num_nodes
    ei = check_edge_index(edge_index, n, keep_int32=True)
    nodes = _check_data(node_data, n, "node_data")
    edges = _check_data(edge_data, ei.shape[1], "edge_data")
    if meta is not None and not isinstance(meta, dict):
        raise TypeError(f"meta must be a dict, got {type(meta).__name__}")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # An old meta.json would vouch for files we are about to replace: remove it first.
    (out / "meta.json").unlink(missing_ok=True)

    from meshshard.partitioners import partition_quality

    # the quality report reads only the edges and the assignment: it runs beside the writing (its union-find and
    # numpy's loops release the GIL), so it overlaps the part files' writing instead of adding to it
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="meshshard-quality") as background:
        quality_job = background.submit(partition_quality, partition, ei)
        files = _write_part_files(out, ei, partition, nodes, edges, halo_hops, progress)
        quality = {k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in quality_job.result().items()}

    info = {
        "format_version": FORMAT_VERSION,
        "num_parts": partition.num_parts,
        "method": partition.method,
        "num_nodes": n,
        "num_edges": int(ei.shape[1]),
        "dim": int(nodes["pos"].shape[1]) if "pos" in nodes and nodes["pos"].dim() == 2 else None,
        "halo_hops": halo_hops,
        "sizes": list(partition.sizes),
        "quality": quality,
        "node_features": _feature_info(nodes),
        "edge_features": _feature_info(edges),
    }
    if meta:
        info.update(meta)
    info["files"] = files  # never overridden by meta
    with atomic_path(out / "meta.json") as tmp:
        tmp.write_text(json.dumps(info, indent=2, default=_json_default))
    return out


def _write_part_files(out: Path, ei, partition, nodes, edges, halo_hops: int, progress: bool) -> Dict[str, str]:
    """Write ``partition.pt`` and every part file into ``out`` -> ``{file name: sha256}``; delete stale part files."""
    from tqdm import tqdm

    from meshshard.graph.halo import iter_all_parts

    n = partition.num_nodes
    files: Dict[str, str] = {}
    files["partition.pt"] = atomic_torch_save(partition.state_dict(), out / "partition.pt")  # what Partition.save writes
    parts = iter_all_parts(ei, partition, halo_hops)  # one part's edges in memory at a time
    # a thread serialises, hashes and writes part r while this one builds part r + 1's halo (hashing and file
    # writes release the GIL); one file in flight at most, so two parts are in memory at a time
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="meshshard-write") as writer:
        pending = None
        for r, (lay, plan) in enumerate(tqdm(parts, total=partition.num_parts, desc="writing parts",
                                             disable=not progress)):
            local_ids = torch.cat([lay.owned_ids, lay.ghost_ids])
            part = {
                "format_version": FORMAT_VERSION,
                "rank": r,
                "num_parts": partition.num_parts,
                "num_nodes": n,
                "num_edges": int(ei.shape[1]),
                "halo_hops": halo_hops,
                "owned_ids": lay.owned_ids,
                "ghost_ids": lay.ghost_ids,
                "ghost_owner": lay.ghost_owner,
                "ghost_owner_index": lay.ghost_owner_index,
                "node_hop": lay.node_hop,
                "edge_index": lay.edge_index,
                "edge_ids": lay.edge_ids,
                "edge_hop_ptr": lay.edge_hop_ptr,
                "send_index": plan.send_index,
                "send_counts": plan.send_counts,
                "sizes": list(partition.sizes),
                # indexing copies: the part file holds only these rows, not the [N] / [E] arrays
                "node_data": {k: v[local_ids] for k, v in nodes.items()},
                "edge_data": {k: v[lay.edge_ids] for k, v in edges.items()},
            }
            if pending is not None:
                files[pending[0]] = pending[1].result()
            name = part_file_name(r)
            pending = (name, writer.submit(atomic_torch_save, part, out / name))
            del part
        if pending is not None:
            files[pending[0]] = pending[1].result()

    # parts of an earlier run with more parts would look like ours to a reader that globs: remove them
    for stale in out.glob("part_*.pt"):
        if stale.name not in files:
            stale.unlink()
    return files


def _json_default(o):
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"meta value of type {type(o).__name__} is not JSON serialisable")


def read_meta(out_dir: PathLike) -> dict:
    """Read ``OUT/meta.json``.

    Args:
        out_dir: directory written by :func:`save_parts`.

    Returns:
        The ``meta.json`` dict (keys in this module's docstring).

    Raises:
        FileNotFoundError: no ``meta.json`` (not a shard directory, or an interrupted write).
        ValueError: ``meta.json`` is not valid JSON or lacks the required fields.
    """
    path = Path(out_dir) / "meta.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: not a meshshard shard directory, or its write was interrupted")
    try:
        info = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(info, dict) or "num_parts" not in info or "files" not in info:
        raise ValueError(f"{path}: not a meshshard meta.json (no num_parts/files)")
    if int(info.get("format_version", -1)) > FORMAT_VERSION:
        raise ValueError(f"{path}: format_version {info.get('format_version')} is newer than this meshshard reads ({FORMAT_VERSION})")
    return info


def verify_parts(out_dir: PathLike) -> List[str]:
    """Check every file listed in ``meta.json`` exists and matches its sha256.

    Args:
        out_dir: directory written by :func:`save_parts`.

    Returns:
        Problems found (one line each); an empty list when the directory is intact.
    """
    try:
        info = read_meta(out_dir)
    except (FileNotFoundError, ValueError) as exc:
        return [str(exc)]
    problems = []
    out = Path(out_dir)
    expected = {"partition.pt"} | {part_file_name(r) for r in range(int(info["num_parts"]))}
    for name in sorted(expected - set(info["files"])):
        problems.append(f"{name}: not listed in meta.json")
    for name, digest in sorted(info["files"].items()):
        path = out / name
        if not path.exists():
            problems.append(f"{name}: missing")
            continue
        try:
            actual = sha256_file(path)
        except OSError as exc:
            problems.append(f"{name}: unreadable ({exc})")
            continue
        if actual != digest:
            problems.append(f"{name}: sha256 mismatch (file changed or corrupt)")
    return problems


def load_part(out_dir: PathLike, rank: int) -> dict:
    """Read part ``rank`` after checking its sha256 against ``meta.json``.

    Reads only ``meta.json`` and ``part_XXXX.pt`` of that rank (never the other parts).

    Args:
        out_dir: directory written by :func:`save_parts`.
        rank: the part, ``0 <= rank < num_parts``.

    Returns:
        The part dict (keys listed in this module's docstring).

    Raises:
        FileNotFoundError: missing ``meta.json`` or part file.
        ValueError: ``rank`` out of range, checksum mismatch, or an unreadable file.
    """
    info = read_meta(out_dir)
    num_parts = int(info["num_parts"])
    if not 0 <= int(rank) < num_parts:
        raise ValueError(f"rank must be in [0, {num_parts}) for {out_dir}, got {rank}")
    name = part_file_name(int(rank))
    path = Path(out_dir) / name
    if not path.exists():
        raise FileNotFoundError(f"{path} not found (listed in meta.json)")
    digest = info["files"].get(name)
    if digest is None:
        raise ValueError(f"{path}: not listed in meta.json files")
    if sha256_file(path) != digest:
        raise ValueError(f"{path}: sha256 mismatch: the part file is corrupt or was changed after writing")
    try:
        part = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a bad file
        raise ValueError(f"{path}: unreadable part file ({exc})") from exc
    if not isinstance(part, dict) or int(part.get("rank", -1)) != int(rank):
        raise ValueError(f"{path}: not part {rank} of a meshshard shard directory")
    return part
