"""Roll a learned simulator forward from a step of a trajectory and write the comparison (``meshshard rollout``).

The model of a simulator checkpoint (``examples/train_simulator.py --save``) starts from step
``start`` of the true trajectory and is applied ``steps`` times (default: to the trajectory's
last step); after each step the nodes whose type does not evolve take their values from the truth
(Dirichlet boundaries, as Pfaff et al. do). Written to ``OUT/``:

- ``<name>.pvd``: a ParaView collection of one file per step from the start, each with the step's
  true fields, ``<field>_pred`` and ``<field>_error`` (prediction minus truth) for every state
  field: ``<name>/<name>_XXXX.vtu`` on one process; under torchrun ``<name>/<name>_XXXX.pvtu``, whose
  pieces ``<name>/<name>_XXXX/<name>_XXXX_RRRR.vtu`` are written by each rank RRRR (see
  :mod:`meshshard.models._rollout_pieces`);
- ``<name>_rollout_error.png``: the RMSE of every state field against the step.

The RMSE per step (over every node and column of the field) is printed. On one process the model
runs on the whole mesh. Under torchrun every rank reads the trajectory and builds the same
partition; the state stays sharded for the whole rollout (each rank keeps its owned rows, and per
step only the halo rows move, inside the model) and through the output: each rank writes the
piece of the cells it holds, fetching the few predicted rows of their points owned elsewhere, and
the RMSE is summed over the ranks; no rank gathers the state. Sharded and single-process rollouts
are equal (float64 to 1e-10), and so are their files read back merged (:func:`meshshard.io.read_trajectory`).
A ``.pvd`` whose steps are ``.pvtu`` files with at least as many pieces as ranks is read piece-wise
(:mod:`meshshard.models._rollout_read_pieces`: the graph from the first step's pieces, each step's
fields sent to the nodes' owners), so that no rank holds the whole mesh; each rank then writes back
the pieces it read.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import torch

__all__ = ["rollout_to_files"]


def _field_keys(traj, specs: List[str]) -> List[tuple]:
    """``(output name, first column, width)`` per state spec."""
    from meshshard.datasets.trajectories import trajectory_columns
    from meshshard.io.fields import parse_field

    keys, c = [], 0
    for spec in specs:
        width = len(trajectory_columns(traj, [spec], "state", static_only=False)[1])
        keys.append([parse_field(spec)[0], c, width])
        c += width
    names = [k[0] for k in keys]
    if len(set(names)) < len(names):  # two specs of one field: name the outputs by spec
        for k, spec in zip(keys, specs):
            k[0] = re.sub(r"[^A-Za-z0-9_]+", "_", spec).strip("_")
    return [tuple(k) for k in keys]


def _inputs(checkpoint, trajectory, index: int, split: str, start: int, steps: Optional[int], traj=None,
            edge_attr: Optional[torch.Tensor] = None) -> dict:
    """Every rank: the model, its spec, the trajectory's arrays and the rollout's range (checked).

    ``traj`` and ``edge_attr``: the owned nodes' trajectory and the local edges' features of a
    trajectory read piece-wise (otherwise the whole trajectory is read and its graph built here)."""
    from meshshard.datasets.fields import edge_features
    from meshshard.datasets.trajectories import trajectory_columns, trajectory_node_types
    from meshshard.io import DEFAULT_KNN, read_trajectory
    from meshshard.models import load_checkpoint

    net, info = load_checkpoint(checkpoint)
    if info.kind != "simulator":
        raise ValueError(f"{checkpoint} is a steady model's checkpoint (fields to fields); `meshshard rollout` needs a "
                         "simulator checkpoint (examples/train_simulator.py --save); apply this one with "
                         "`meshshard predict`")
    spec = info.simulator
    if traj is None:
        traj = read_trajectory(trajectory, index=index, split=split)
    state, cols = trajectory_columns(traj, spec.state, "state", static_only=False)
    if cols != spec.state_columns:
        raise ValueError(f"{trajectory}: the state {spec.state} gives the columns {cols}, the checkpoint was trained "
                         f"on {spec.state_columns}")
    feats, fcols = trajectory_columns(traj, spec.features, "features", static_only=True)
    if fcols != spec.feature_columns:
        raise ValueError(f"{trajectory}: the features {spec.features} give the columns {fcols}, the checkpoint was "
                         f"trained on {spec.feature_columns}")
    codes = trajectory_node_types(traj, spec.node_type)
    node_type = torch.zeros(traj.num_nodes, dtype=torch.long) if codes is None else torch.from_numpy(codes)
    spec.one_hot(node_type, torch.float64)  # every code known to the model
    t_count = traj.num_steps
    if not 0 <= start <= t_count - 2:
        raise ValueError(f"--start {start} is outside the trajectory's steps 0..{t_count - 2} (it has {t_count} steps "
                         "and a rollout needs at least one step after its start)")
    steps = t_count - 1 - start if steps is None else int(steps)
    if not 1 <= steps <= t_count - 1 - start:
        raise ValueError(f"--steps {steps}: from step {start} the trajectory has {t_count - 1 - start} steps left "
                         "(the truth of every step is needed for the boundary nodes and the error)")
    ei = None
    if edge_attr is None:
        ei = traj.edge_index(knn=DEFAULT_KNN)
        edge_attr = edge_features(torch.as_tensor(traj.points, dtype=torch.float64), ei)
    if edge_attr.shape[1] != spec.num_edge_features:
        raise ValueError(f"{trajectory}: a {traj.dim}D mesh, but the checkpoint was trained on "
                         f"{spec.num_edge_features - 1}D meshes")
    return dict(net=net, info=info, spec=spec, traj=traj, state=torch.from_numpy(state), features=torch.from_numpy(feats),
                node_type=node_type, edge_index=ei, edge_attr=edge_attr, steps=steps,
                keys=_field_keys(traj, spec.state))


def _write(out_dir: Path, name: str, traj, start: int, states: torch.Tensor, truth: torch.Tensor, keys,
           progress: bool) -> Dict[str, object]:
    """Rank 0: the step files, the collection, the errors per step and their plot."""
    from tqdm import tqdm

    from meshshard.io import write_pvd, write_vtu
    from meshshard.viz import plot_rollout_error

    frames = out_dir / name
    frames.mkdir(parents=True, exist_ok=True)
    entries = []
    rmse = {key: [] for key, _, _ in keys}
    for k in tqdm(range(states.shape[0]), desc="write", unit="step", disable=not progress, file=sys.stderr):
        fields = {}
        for key, c0, w in keys:
            pred, err = states[k, :, c0:c0 + w].numpy(), (states[k, :, c0:c0 + w] - truth[k, :, c0:c0 + w]).numpy()
            fields[f"{key}_pred"] = pred[:, 0] if w == 1 else pred
            fields[f"{key}_error"] = err[:, 0] if w == 1 else err
            rmse[key].append(float((err ** 2).mean() ** 0.5))
        f = frames / f"{name}_{k:04d}.vtu"
        write_vtu(f, traj.step(start + k), fields)
        entries.append((float(traj.times[start + k]), f.relative_to(out_dir)))
    pvd = write_pvd(out_dir / f"{name}.pvd", entries)
    png = out_dir / f"{name}_rollout_error.png"
    plot_rollout_error(list(range(start, start + states.shape[0])), rmse, png,
                       title=f"{name}: rollout from step {start}")
    return {"pvd": pvd, "png": png, "rmse": rmse}


def _write_pieces(out_dir: Path, name: str, d: dict, part, graph, start: int, kept: List[torch.Tensor], group,
                  progress: bool) -> Dict[str, object]:
    """Every rank: its piece of every step; rank 0 the masters, the collection and the plot (collective)."""
    from meshshard.models._rollout_pieces import RolloutPieces, write_rollout_pieces
    from meshshard.distributed import get_rank

    traj, truth_all = d["traj"], d["state"]
    row = torch.empty_like(part.perm)
    row[part.perm] = torch.arange(part.perm.numel())  # each node's row in ShardTensor order
    rank = get_rank(group)
    pieces = RolloutPieces.from_partition(traj.points, traj.cells, part.assignment.numpy(), row.numpy(), graph.sizes,
                                          rank, group)
    owned = graph.owned_ids.cpu()
    return write_rollout_pieces(out_dir, name, pieces,
                                lambda k: {f: np.asarray(v)[pieces.global_ids]
                                           for f, v in traj.step(start + k).point_data.items()},
                                traj.times[start:start + len(kept)], kept, truth_all[start:start + len(kept)][:, owned],
                                d["keys"], start, traj.num_nodes, group=group, progress=progress)


def rollout_to_files(checkpoint, trajectory, out, *, steps: Optional[int] = None, start: int = 0, index: int = 0,
            split: str = "train", method: str = "kdtree", seed: int = 0, dtype: Optional[str] = None, device=None,
            group=None, progress: bool = True, echo=print) -> dict:
    """Roll a simulator checkpoint's model forward on a trajectory and write the comparison (collective).

    Every rank of ``group`` calls it with the same arguments (see the module docstring). A bad input
    raises on every rank.

    Args:
        checkpoint: file written by :func:`meshshard.models.simulator_checkpoint`.
        trajectory: anything :func:`meshshard.io.read_trajectory` reads.
        out: output folder (created; files in it are replaced atomically).
        steps: model applications (default: to the last step).
        start: the true step to start from.
        index, split: the trajectory of a MeshGraphNets dataset.
        method, seed: partitioner and its seed (several ranks).
        dtype: ``"float32"`` / ``"float64"`` compute dtype (default: the checkpoint's).
        device: torch device of the model (default CPU).
        group: process group (default: the world).
        progress: progress bars (rank 0).
        echo: where rank 0 prints its lines.

    Returns:
        On every rank ``{"pvd", "png", "rmse": {field: [steps + 1]}, "states": [steps + 1, n, S] float64,
        "node_ids": LongTensor [n]}``: the predicted states from the start of this rank's ``n`` owned
        nodes, which are the trajectory's nodes ``node_ids`` (every node, in order, on one process);
        the files are written by rank 0 and, piece by piece, by every rank. ``"points"``: ``float64
        [n, d]`` those nodes' coordinates. A trajectory read piece-wise (a ``.pvd`` of ``.pvtu``
        steps with at least as many pieces as ranks) numbers its nodes only through the pieces:
        ``node_ids`` is ``None`` there (match the rows by ``points``).
    """
    from tqdm import tqdm

    from meshshard.distributed import get_rank, get_world_size, run_together
    from meshshard.graph import ShardedGraph
    from meshshard.partitioners import partition

    rank, world = get_rank(group), get_world_size(group)
    device = torch.device("cpu") if device is None else torch.device(device)
    if dtype not in (None, "float32", "float64"):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    out_dir = Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"-o/--out {out_dir} exists and is not a folder")
    from meshshard.models._rollout_read_pieces import piecewise_entries, read_owned_trajectory

    graph, part, rows, pg = None, None, slice(None), None
    entries = piecewise_entries(trajectory, world, group, echo)
    if entries:  # no rank holds the whole mesh: the graph from the first step's pieces, the owned rows of each step
        from meshshard.datasets.fields import edge_features

        pg, owned_traj, piece_fields = read_owned_trajectory(Path(trajectory), entries, method, group)
        graph = pg.graph.to(device)
        local_attr = edge_features(pg.graph.exchange(pg.points), pg.graph.edge_index)
        d = run_together(lambda: _inputs(checkpoint, trajectory, index, split, start, steps, traj=owned_traj,
                                         edge_attr=local_attr), f"rollout: reading {checkpoint} and {trajectory}",
                         group)
    else:
        d = run_together(lambda: _inputs(checkpoint, trajectory, index, split, start, steps),
                         f"rollout: reading {checkpoint} and {trajectory}", group)
    spec, traj, n_steps = d["spec"], d["traj"], d["steps"]
    num_nodes = traj.num_nodes if pg is None else pg.num_nodes
    run_dtype = getattr(torch, dtype) if dtype else d["info"].dtype
    net = d["net"].to(device=device, dtype=run_dtype)
    truth_all = d["state"]  # [T, N, S] float64 (the owned rows when read piece-wise): boundary values and error
    if pg is not None:
        edge_attr = d["edge_attr"]
    elif world > 1:
        part = run_together(lambda: partition(traj.points, world, method=method, edge_index=d["edge_index"],
                                              seed=seed, refine=False), f"rollout: partitioning {trajectory}", group)
        graph = ShardedGraph.from_partition(d["edge_index"], part, group=group).to(device)
        rows = graph.owned_ids
        edge_attr = d["edge_attr"][graph.edge_ids]
    else:
        edge_attr = d["edge_attr"]
    state0 = truth_all[start][rows].to(device, run_dtype)
    features, node_type = d["features"][rows].to(device, run_dtype), d["node_type"][rows].to(device)
    truth_rows = truth_all[:, rows].to(device, run_dtype)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", traj.name) or "trajectory"
    if rank == 0:
        cfg = d["info"].model_config
        echo(f"{d['info'].model_class}(hidden={cfg.get('hidden')}, layers={cfg.get('num_layers')}) from {checkpoint} "
             f"(step {d['info'].step}): {spec.state} from step {start} of {traj.name} ({num_nodes} nodes"
             f"{', read piece-wise' if pg is not None else ''}), {n_steps} steps on {world} rank(s), "
             f"{str(run_dtype)[6:]}, {device}; evolving node types "
             f"{spec.evolving_types or 'all'}")
    kept = []  # the owned rows of every step (every row on one process): nothing is gathered

    def keep(x: torch.Tensor) -> None:
        kept.append(x.detach().to("cpu", torch.float64))

    keep(state0)
    bar = tqdm(total=n_steps, desc="rollout", unit="step", disable=not progress or rank != 0, file=sys.stderr)
    t0 = time.perf_counter()

    def on_step(k: int, x: torch.Tensor) -> None:
        keep(x)
        bar.update(1)

    ei = d["edge_index"].to(device) if graph is None else None
    from meshshard.models import rollout_states

    rollout_states(net, spec, state0, features, node_type, edge_attr.to(device), lambda k: truth_rows[start + k],
                   n_steps, edge_index=ei, graph=graph, on_step=on_step)
    bar.close()
    seconds = time.perf_counter() - t0
    states = torch.stack(kept)
    window = slice(start, start + n_steps + 1)
    if graph is None:
        res = _write(out_dir, name, traj, start, states, truth_all[window], d["keys"], progress)
    elif pg is None:
        res = _write_pieces(out_dir, name, d, part, graph, start, kept, group, progress)
    else:
        from meshshard.models._rollout_pieces import RolloutPieces, write_rollout_pieces

        res = write_rollout_pieces(out_dir, name, RolloutPieces.from_piece_graph(pg, group),
                                   lambda k: piece_fields[start + k], traj.times[window], kept, truth_all[window],
                                   d["keys"], start, num_nodes, group=group, progress=progress)
    points = torch.as_tensor(traj.points if pg is not None or graph is None else traj.points[graph.owned_ids.cpu()])
    node_ids = None if pg is not None else (torch.arange(num_nodes) if graph is None else graph.owned_ids.cpu())
    if rank == 0:
        for k in range(n_steps + 1):
            echo(f"step {start + k}: RMSE " + ", ".join(f"{key} {res['rmse'][key][k]:.6g}" for key in res["rmse"]))
        what = "step files" if graph is None else f"steps of {world} pieces"
        echo(f"wrote {res['pvd']} ({n_steps + 1} {what}) and {res['png']}; {n_steps} steps in {seconds:.2f} s on "
             f"{world} rank(s)")
    return dict(res, states=states, node_ids=node_ids, points=points)
