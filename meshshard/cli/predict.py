"""``meshshard predict``: apply a trained model to meshes or a preprocessed dataset, write VTU files.

Each input sample becomes ``OUT/<sample>.vtu``: the input mesh (every cell and point field it had)
with the model's prediction added as point data ``<target>_pred``, de-normalised with the
checkpoint's statistics, and, when the input holds the target fields, ``<target>_error``
(prediction minus truth) and a metrics line per target column (MSE, relative L2, max abs error).
A checkpoint trained on cell-centred data (``--nodes cells`` at preprocessing, ``CheckpointInfo.nodes``)
reads its inputs with ``read_mesh(path, nodes="cells")`` and writes ``<target>_pred`` /
``<target>_error`` as CELL data of the input mesh (NaN on its boundary cells).
:func:`meshshard.io.write_prediction` writes it (``meshshard demo`` writes its prediction with it too).

Everything the model needs comes from the checkpoint (:func:`meshshard.models.load_checkpoint`):
model class and configuration, statistics, feature and target fields, node types, knn, dtype.

On one process the model runs on the whole mesh. Under torchrun each rank runs the model on its
part: mesh files are partitioned on the fly (every rank reads the mesh and builds the same
partition), a preprocessed dataset folder is read part by part (each rank reads only its own part,
or, on another number of ranks than the dataset's parts, the parts its share touches: parts are
merged or split on load), and rank 0 gathers the prediction in the original node order and writes.
A ``.pvtu`` / ``.pvtp`` with at least as many pieces as ranks is read piece-wise instead
(:func:`meshshard.ops.pieces.read_pieces_distributed`: each rank reads only its pieces, no rank
holds the whole mesh) and written back as ``OUT/<sample>.pvtu`` with one piece per rank,
``OUT/<sample>/<sample>_<rank>.vtu`` (the cells and points that rank read, its points' prediction
fetched from their owners), without a gather on rank 0.
Sharded and single-process outputs are equal (float64 to 1e-10).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import List, Optional, Sequence

import torch

from meshshard.cli._mesh_cmd import torchrun_device

HELP = ("apply a trained model (a checkpoint of examples/train_meshgraphnet.py) to mesh files or a preprocessed "
        "dataset; write OUT/<sample>.vtu with <target>_pred (and <target>_error when the targets exist)")

__all__ = ["HELP", "add_arguments", "run", "predict", "AMP_BF16_TOLERANCE"]


def __getattr__(name: str):
    if name in ("write_vtu", "write_prediction"):  # moved to meshshard.io (layer 1), where meshes are written
        import warnings

        from meshshard.io import write

        warnings.warn(f"meshshard.cli.predict.{name} moved to meshshard.io.{name}; import it from there",
                      DeprecationWarning, stacklevel=2)
        return getattr(write, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Largest difference of ``--amp bf16`` predictions to float32 ones, in units of the target's standard
#: deviation (what the model outputs before de-normalising); tests/cli/test_predict.py checks it. bfloat16
#: keeps 8 significant bits (relative rounding 2**-9 per operation), and the rounding of every layer adds up,
#: so deeper and wider models differ more; the bound leaves room above the differences of the models in the
#: README's "Predicting" section.
AMP_BF16_TOLERANCE = 5e-2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="mesh files with the feature fields (any meshio format, .npz point clouds), folders of "
                             "them, or folders written by `meshshard preprocess`")
    parser.add_argument("--checkpoint", required=True, metavar="CKPT",
                        help="checkpoint written by examples/train_meshgraphnet.py --save (or training_checkpoint)")
    parser.add_argument("-o", "--out", required=True, help="output folder for <sample>.vtu")
    from meshshard.cli._mesh_cmd import METHODS

    parser.add_argument("-m", "--method", default="kdtree", choices=METHODS,
                        help="partitioner for meshes partitioned on the fly (default kdtree)")
    parser.add_argument("--seed", type=int, default=0, help="partitioner seed")
    parser.add_argument("--amp", default="none", choices=["none", "bf16"],
                        help="bf16: run the model under torch.autocast(bfloat16) (CPU or CUDA; float32 models)")
    parser.add_argument("--dtype", default=None, choices=["float32", "float64"],
                        help="compute dtype (default: the checkpoint's)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="auto: cuda when available (NCCL under torchrun), else cpu (gloo)")
    from meshshard.cli._mesh_cmd import add_nodes_argument

    add_nodes_argument(parser, default=None, extra="Default: as the checkpoint was trained (given, it must match). "
                       "Cell-centred predictions are written as cell fields <target>_pred / <target>_error")


def run(args: argparse.Namespace) -> int:
    """Start the process group when launched by torchrun, predict every sample, print the metrics.

    Args:
        args: the parsed options.

    Returns:
        the exit status (0).
    """
    with torchrun_device(args.device) as device:
        predict(args.checkpoint, args.inputs, args.out, method=args.method, seed=args.seed,
                amp=None if args.amp == "none" else args.amp, dtype=args.dtype, device=device,
                progress=not args.quiet, nodes=args.nodes)
    return 0


def _samples(inputs, world: int) -> List[dict]:
    """Every sample to predict, in order: a mesh file, or a part-by-part read of a dataset."""
    from meshshard.datasets import is_dataset_dir, list_mesh_files, read_dataset_meta

    samples = []
    for inp in inputs:
        if Path(inp).is_dir() and is_dataset_dir(inp):
            meta = read_dataset_meta(inp)
            for i, s in enumerate(meta["samples"]):
                source = Path(s["source"])
                if not source.is_file():
                    raise FileNotFoundError(f"{inp}: sample {s['name']}'s source mesh {source} is missing (predict "
                                            "writes the source mesh with the predicted fields)")
                # read part by part, on any number of ranks (parts merged or split on load)
                samples.append({"name": s["name"], "source": source, "dataset": Path(inp), "index": i,
                                "source_sha256": s["source_sha256"]})
        else:
            samples += [{"name": f.stem, "source": f} for f in list_mesh_files(inp)]
    names = [s["name"] for s in samples]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"several inputs would be written to the same OUT/<sample>.vtu: {dup}; predict them into "
                         "separate -o folders")
    return samples


def _check_features(samples: List[dict], info) -> None:
    """Every mesh input has the feature fields (checked before any work, naming file and field)."""
    from meshshard.io.fields import check_fields

    check_fields([s["source"] for s in samples if "dataset" not in s], info.features, [], nodes=info.nodes)


def _normalised(x, node_type, edge_attr, info, dtype):
    """The model's inputs, as :func:`meshshard.datasets.model_inputs` builds them in training."""
    s = info.stats
    x_in = torch.cat([s.x.normalize(x.to(dtype)), node_type.to(dtype)], dim=1)
    return x_in, s.edge_attr.normalize(edge_attr.to(dtype))


def _mesh_inputs(path: Path, info, dtype):
    """Every rank: the mesh, its graph and normalised inputs (node types in the checkpoint's vocabulary)."""
    from meshshard.datasets.fields import field_columns, mesh_arrays
    from meshshard.io import read_mesh

    mesh = read_mesh(path, nodes=info.nodes)
    dims = len(info.stats.edge_attr.mean) - 1
    if mesh.points.shape[1] != dims:
        raise ValueError(f"{path}: a {mesh.points.shape[1]}D mesh, but the checkpoint was trained on {dims}D meshes")
    cols = field_columns(mesh, info.features)
    if cols != info.feature_columns:
        raise ValueError(f"{path}: the features {info.features} give the columns {cols}, the checkpoint was trained "
                         f"on {info.feature_columns}")
    a = mesh_arrays(mesh, info.features, [], info.node_types, dtype=torch.float64, knn=info.knn)
    x_in, e_in = _normalised(a["x"], a["node_type"], a["edge_attr"], info, dtype)
    unknown = sorted(set(mesh.node_sets) - set(info.node_types))
    return mesh, a["edge_index"], x_in, e_in, unknown


class _Datasets:
    """ShardedMeshDatasets opened once per folder (construction is collective)."""

    def __init__(self, group, dtype) -> None:
        self.group, self.dtype, self.open = group, dtype, {}

    def sample_inputs(self, sample: dict, info):
        from meshshard.datasets import ShardedMeshDataset

        root = sample["dataset"]
        if root not in self.open:
            ds = ShardedMeshDataset(root, group=self.group, dtype=self.dtype, cache=False)
            ds_nodes = ds.meta.get("nodes", "points")
            if ds_nodes != info.nodes:
                raise ValueError(f"{root}: its nodes are the mesh {ds_nodes}, the checkpoint was trained with nodes "
                                 f"= {info.nodes}; preprocess it again with --nodes {info.nodes}")
            if ds.feature_columns != info.feature_columns:
                raise ValueError(f"{root}: its feature columns {ds.feature_columns} are not the checkpoint's "
                                 f"{info.feature_columns}")
            if len(ds.stats.edge_attr.mean) != len(info.stats.edge_attr.mean):
                raise ValueError(f"{root}: its meshes are {len(ds.stats.edge_attr.mean) - 1}D, the checkpoint was "
                                 f"trained on {len(info.stats.edge_attr.mean) - 1}D meshes")
            self.open[root] = ds
        ds = self.open[root]
        s = ds[sample["index"]]
        # the dataset's node types -> the checkpoint's (a type it does not know counts as interior)
        lut = torch.tensor([0] + [info.node_types.index(n) + 1 if n in info.node_types else 0 for n in ds.node_types])
        node_type = torch.nn.functional.one_hot(lut[s.node_type.to_local().argmax(dim=1)], len(info.node_types) + 1)
        x_in, e_in = _normalised(s.x.to_local(), node_type, s.edge_attr, info, self.dtype)
        unknown = sorted(set(ds.meta["samples"][sample["index"]]["node_set_names"]) - set(info.node_types))
        return s.graph, x_in, e_in, unknown


def _print_metrics(res: dict, say) -> None:
    """One line per sample with the metrics of every compared field (when the mesh had the truth)."""
    if res["metrics"]:
        say(f"{res['name']}: " + "; ".join(
            f"{c}: MSE {m['mse']:.4g}, relative L2 {m['rel_l2']:.4g}, max |error| {m['max_abs']:.4g}"
            for c, m in res["metrics"].items()))


def _write_sample(sample: dict, mesh, pred: torch.Tensor, info, out_dir: Path) -> dict:
    """Rank 0: write ``OUT/<sample>.vtu`` (:func:`meshshard.io.write_prediction`) for a mesh file or a dataset sample."""
    from meshshard._fileutil import sha256_file
    from meshshard.io import read_mesh, write_prediction

    source = sample["source"]
    if mesh is None:  # a dataset sample: the mesh to write is its source file
        if sha256_file(source) != sample["source_sha256"]:
            raise ValueError(f"{source} changed since it was preprocessed (sha256 differs); preprocess it again or "
                             "predict the file itself")
        mesh = read_mesh(source, nodes=info.nodes)
    path = out_dir / f"{sample['name']}.vtu"
    metrics = write_prediction(path, mesh, pred, info.targets, info.target_columns, source=source)
    return {"name": sample["name"], "path": path, "num_nodes": pred.shape[0], "metrics": metrics}


def _piecewise(source: Path, info, world: int, group, echo) -> bool:
    """Whether a mesh file is read piece-wise: under torchrun, a ``.pvtu`` / ``.pvtp`` with at least
    as many pieces as ranks and a vertex-based checkpoint (rank 0 says in one line why not)."""
    from meshshard.distributed import get_rank, run_together
    from meshshard.io.pieces import PIECE_SUFFIXES, piece_sources

    if world == 1 or source.suffix.lower() not in PIECE_SUFFIXES:
        return False
    count = run_together(lambda: len(piece_sources(source)), f"predict: reading {source}", group)
    why = None
    if count < world:
        why = f"has {count} piece(s), fewer than the {world} ranks"
    elif info.nodes != "points":
        why = "is predicted cell-centred (nodes = cells), which is not read piece-wise"
    if why and get_rank(group) == 0:
        echo(f"{source.name} {why}: every rank reads the whole mesh")
    return why is None


def _piece_inputs(source: Path, info, dtype, method: str, group):
    """Every rank: its share of a ``.pvtu`` / ``.pvtp`` read piece-wise (:func:`meshshard.ops.pieces.read_pieces_distributed`)
    and the normalised inputs of its owned nodes and local edges."""
    from meshshard.datasets.fields import edge_features
    from meshshard.distributed import run_together
    from meshshard.io import Mesh
    from meshshard.io.fields import field_columns, select_fields
    from meshshard.ops.pieces import read_pieces_distributed

    pg = read_pieces_distributed(source, method=method, group=group)
    graph = pg.graph

    def owned_inputs():
        dims = len(info.stats.edge_attr.mean) - 1
        if pg.dim != dims:
            raise ValueError(f"{source}: a {pg.dim}D mesh, but the checkpoint was trained on {dims}D meshes")
        owned = Mesh(pg.points.numpy(), point_data=pg.point_data, source=source)
        cols = field_columns(owned, info.features)
        if cols != info.feature_columns:
            raise ValueError(f"{source}: the features {info.features} give the columns {cols}, the checkpoint was "
                             f"trained on {info.feature_columns}")
        return owned, torch.from_numpy(select_fields(owned, info.features))

    owned, x = run_together(owned_inputs, f"predict: the inputs of {source}", group)
    # the pieces carry no node sets: every node is interior, as in the merged file
    node_type = torch.nn.functional.one_hot(torch.zeros(owned.num_nodes, dtype=torch.long), len(info.node_types) + 1)
    pos = graph.exchange(pg.points)  # owned + ghost rows
    x_in, e_in = _normalised(x, node_type, edge_features(pos, graph.edge_index), info, dtype)
    return pg, owned, x_in, e_in


def _write_pieces_sample(sample: dict, pg, owned, pred: torch.Tensor, info, out_dir: Path, group) -> dict:
    """Every rank writes ``OUT/<name>/<name>_<rank>.vtu`` (the pieces it read, with the prediction
    fetched from the nodes' owners); rank 0 then writes the master ``OUT/<name>.pvtu``."""
    from meshshard.distributed import ReduceOp, all_reduce, get_rank, get_world_size, run_together
    from meshshard.io import Mesh
    from meshshard.io.pieces import write_piece, write_pvtu
    from meshshard.io.write import prediction_fields
    from meshshard.ops.pieces import RowFetch

    rank, world, name = get_rank(group), get_world_size(group), sample["name"]
    pred = pred.detach().to("cpu", torch.float64)
    local_pred = RowFetch(pg.local_ids, pg.graph.sizes, group)(pred)
    ps = pg.local
    pieces = [Path(name) / f"{name}_{r:04d}.vtu" for r in range(world)]

    def write():
        local = Mesh(ps.points[:, :pg.dim], point_data=ps.point_data, source=sample["source"])
        fields, _ = prediction_fields(local, local_pred, info.targets, info.target_columns)
        ids = ps.global_ids if pg.key_kind == "ids" else pg.point_ids
        point_data = {**ps.point_data, "GlobalPointIds": ids, **fields}
        write_piece(out_dir / pieces[rank], ps.points, ps.cell_types, ps.cell_offsets, ps.cell_conn, point_data,
                    ps.cell_data)
        return point_data

    point_data = run_together(write, f"predict: writing {pieces[rank]}", group)
    run_together(lambda: write_pvtu(out_dir / f"{name}.pvtu", pieces, point_data, ps.cell_data) if rank == 0 else None,
                 f"predict: writing {name}.pvtu", group)
    # metrics over the owned nodes, summed over the ranks
    _, truth = prediction_fields(owned, pred, info.targets, info.target_columns)
    metrics = None
    if truth is not None:
        err = pred - truth
        sums = all_reduce(torch.stack([(err ** 2).sum(0), (truth ** 2).sum(0)]), group=group)
        worst = all_reduce(err.abs().amax(0) if len(err) else torch.zeros(err.shape[1], dtype=err.dtype),
                           op=ReduceOp.MAX, group=group)
        n = pg.num_nodes
        metrics = {c: {"mse": float(sums[0, j] / n),
                       "rel_l2": float(sums[0, j].sqrt() / sums[1, j].sqrt()) if sums[1, j] > 0 else float("nan"),
                       "max_abs": float(worst[j])} for j, c in enumerate(info.target_columns)}
    return {"name": name, "path": out_dir / f"{name}.pvtu", "num_nodes": pg.num_nodes, "metrics": metrics}


def predict(checkpoint, inputs: Sequence, out, *, method: str = "kdtree", seed: int = 0, amp: Optional[str] = None,
            dtype: Optional[str] = None, device=None, group=None, progress: bool = True, echo=print,
            nodes: Optional[str] = None) -> List[dict]:
    """Predict every input sample with a checkpoint's model and write ``out/<sample>.vtu`` (collective).

    Every rank of ``group`` calls it with the same arguments; one rank runs the whole mesh,
    several run one part each (see the module docstring). A bad input raises on every rank.

    Args:
        checkpoint: file written by :func:`meshshard.models.training_checkpoint`.
        inputs: mesh files, folders of mesh files, preprocessed dataset folders (or one of them).
        out: output folder (created; ``<sample>.vtu`` files in it are replaced atomically).
        method: partitioner for meshes partitioned on the fly.
        seed: partitioner seed.
        amp: ``"bf16"``: the forward pass under ``torch.autocast(dtype=torch.bfloat16)``
            (float32 models; outputs differ from float32 by up to :data:`AMP_BF16_TOLERANCE`
            target standard deviations); ``None``: off.
        dtype: ``"float32"`` / ``"float64"`` compute dtype (default: the checkpoint's).
        device: torch device of the model (default CPU).
        group: process group (default: the world).
        progress: a progress bar over samples (rank 0).
        echo: where rank 0 prints its lines.
        nodes: ``"points"`` or ``"cells"``; default (``None``) and required: the checkpoint's
            (``CheckpointInfo.nodes``). Cell-centred predictions are written as cell fields of the
            input mesh.

    Returns:
        On rank 0, per sample ``{"name", "path", "num_nodes", "metrics"}`` (``metrics``: per
        target column ``{"mse", "rel_l2", "max_abs"}``, or ``None`` without the targets); ``[]``
        on other ranks.
    """
    from tqdm import tqdm

    from meshshard.distributed import get_rank, get_world_size, run_together
    from meshshard.graph import ShardedGraph
    from meshshard.models import load_checkpoint
    from meshshard.partitioners import partition

    rank, world = get_rank(group), get_world_size(group)
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    device = torch.device("cpu") if device is None else torch.device(device)
    if amp not in (None, "bf16"):
        raise ValueError(f"amp must be None or 'bf16', got {amp!r}")
    if dtype not in (None, "float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"-o/--out {out_dir} exists and is not a folder")
    def load():
        net, info = load_checkpoint(checkpoint)
        if info.kind == "simulator":
            raise ValueError(f"{checkpoint} is a learned simulator's checkpoint (a state to its next step); roll it "
                             "out on a trajectory with `meshshard rollout`")
        return net, info

    net, info = run_together(load, f"predict: reading {checkpoint}", group)
    if nodes is not None and nodes != info.nodes:
        raise ValueError(f"--nodes {nodes}: the checkpoint {checkpoint} was trained with nodes = {info.nodes} "
                         f"(its model takes {info.nodes == 'cells' and 'cell' or 'point'} fields); drop --nodes or "
                         f"give --nodes {info.nodes}")
    run_dtype = getattr(torch, dtype) if dtype else info.dtype
    if amp == "bf16" and run_dtype != torch.float32:
        raise ValueError(f"--amp bf16 runs float32 layers in bfloat16; this run is {str(run_dtype)[6:]}: "
                         "add --dtype float32")
    net = net.to(device=device, dtype=run_dtype)
    samples = run_together(lambda: _samples(inputs, world), "predict: listing the inputs", group)
    run_together(lambda: _check_features(samples, info), "predict: checking the input fields", group)
    datasets = _Datasets(group, run_dtype)
    if rank == 0:
        cfg = info.model_config
        echo(f"{info.model_class}(hidden={cfg.get('hidden')}, layers={cfg.get('num_layers')}) from {checkpoint} "
             f"(step {info.step}): {info.targets} from {info.features}; {len(samples)} sample(s) on {world} rank(s), "
             f"{str(run_dtype)[6:]}{', amp bf16' if amp else ''}, {device}")
    results = []
    t0 = time.perf_counter()
    bar = tqdm(samples, desc="predict", unit="sample", disable=not progress or rank != 0, file=sys.stderr)
    for sample in bar:
        mesh = None
        if "dataset" not in sample and _piecewise(Path(sample["source"]), info, world, group,
                                                  lambda m: bar.write(m, file=sys.stderr)):
            pg, owned, x_in, e_in = _piece_inputs(Path(sample["source"]), info, run_dtype, method, group)
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp == "bf16"):
                pred = net(x_in.to(device), e_in.to(device), graph=pg.graph.to(device)).to(run_dtype)
            res = _write_pieces_sample(sample, pg, owned, info.stats.y.denormalize(pred), info, out_dir, group)
            if rank == 0:
                results.append(res)
                _print_metrics(res, echo if bar.disable else bar.write)
            continue
        if "dataset" in sample:
            graph, x_in, e_in, unknown = run_together(lambda: datasets.sample_inputs(sample, info),
                                                      f"predict: {sample['name']}", group)
        else:
            mesh, ei, x_in, e_in, unknown = run_together(lambda: _mesh_inputs(sample["source"], info, run_dtype),
                                                         f"predict: reading {sample['source']}", group)
            graph = None
            if world > 1:  # every rank builds the same partition (deterministic for a seed)
                # unrefined: for one forward pass, refining the cut costs more time than the halo rows it saves
                part = run_together(lambda: partition(mesh.points, world, method=method, edge_index=ei, seed=seed,
                                                      refine=False),
                                    f"predict: partitioning {sample['source']}", group)
                graph = ShardedGraph.from_partition(ei, part, group=group)
                x_in, e_in = x_in[graph.owned_ids], e_in[graph.edge_ids]
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp == "bf16"):
            if graph is None:
                pred = net(x_in.to(device), ei.to(device), e_in.to(device))
            else:
                pred = net(x_in.to(device), e_in.to(device), graph=graph.to(device))
        pred = pred.to(run_dtype)
        if graph is not None:
            pred = graph.gather(pred, dst=0)  # original node order, on rank 0
        if rank == 0 and unknown:
            bar.write(f"{sample['name']}: node sets {unknown} are not node types of the checkpoint "
                      f"({info.node_types}); their nodes count as interior", file=sys.stderr)
        res = run_together(lambda: _write_sample(sample, mesh, info.stats.y.denormalize(pred), info, out_dir)
                           if rank == 0 else None, f"predict: writing {sample['name']}.vtu", group)
        if rank == 0:
            results.append(res)
            _print_metrics(res, echo if bar.disable else bar.write)
    bar.close()
    if rank == 0:
        echo(f"wrote {len(results)} file(s) to {out_dir} in {time.perf_counter() - t0:.1f} s")
    return results
