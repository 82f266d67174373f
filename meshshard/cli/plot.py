"""``meshshard plot``: draw a partition (cells coloured by part, ghost nodes marked, part sizes), or a
point field of a mesh file (``--field``), or truth, prediction and error side by side (``--compare``)."""
from __future__ import annotations

import argparse
from pathlib import Path

from meshshard.cli._mesh_cmd import METHODS, add_nodes_argument, load_mesh_and_graph, progress, run_partition
from meshshard.io.graph import DEFAULT_KNN

HELP = "draw a partition (cells coloured by part, ghost nodes marked, part sizes) or a point field (--field, --compare)"

__all__ = ["HELP", "add_arguments", "run"]

_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
# options that only a partition plot uses (dest, flag): refused beside --field / --compare
_PARTITION_ONLY = (("num_parts", "-k"), ("method", "-m"), ("seed", "--seed"), ("no_refine", "--no-refine"),
                   ("knn", "--knn"), ("mesh", "--mesh"), ("sample", "--sample"), ("no_ghosts", "--no-ghosts"),
                   ("no_zoom", "--no-zoom"))
_FIELD_ONLY = (("units", "--units"), ("view", "--view"))
_ANIMATION_ONLY = (("fps", "--fps", 5.0), ("every", "--every", 1))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    parser.add_argument("source", metavar="MESH_OR_OUT", help="a mesh / point-cloud file (partitioned on the fly "
                        "with -k/-m, or with --field/--compare its point fields drawn), a shard folder written by "
                        "`meshshard partition`, or a dataset folder written by `meshshard preprocess` (see --sample)")
    parser.add_argument("-o", "--out", required=True, metavar="FILE", help="image to write (.png .pdf .svg .jpg)")
    parser.add_argument("-k", "--num-parts", type=int, metavar="N", help="parts, when MESH_OR_OUT is a mesh file")
    parser.add_argument("-m", "--method", choices=METHODS, help="partitioner for a mesh file (default: kdtree)")
    parser.add_argument("--seed", type=int, metavar="S", help="random seed (default: 0)")
    parser.add_argument("--no-refine", action="store_true", help="skip boundary refinement")
    parser.add_argument("--knn", type=int, metavar="K", help="neighbours per point for point "
                        f"clouds (default: {DEFAULT_KNN}; a shard folder uses the k it was made with)")
    parser.add_argument("--mesh", metavar="PATH", help="for a shard folder: the mesh file, when it moved since "
                        "partitioning (its sha256 must match meta.json)")
    parser.add_argument("--sample", type=int, metavar="I", help="for a dataset folder: the sample to draw "
                        "(default: 0)")
    parser.add_argument("--no-ghosts", action="store_true", help="do not mark ghost nodes")
    zoom = parser.add_mutually_exclusive_group()
    zoom.add_argument("--zoom", type=float, nargs=4, metavar=("XMIN", "XMAX", "YMIN", "YMAX"),
                      help="2D: the box of the zoom panel (default: automatic, around the finest cells); with "
                      "--field / --compare: the box drawn instead of the whole mesh")
    zoom.add_argument("--no-zoom", action="store_true", help="2D: no zoom panel")
    parser.add_argument("--dpi", type=int, default=120, help="resolution (default: 120)")
    add_nodes_argument(parser, default=None, extra="Default: a shard folder's or dataset's own; for a mesh file "
                       "points, and with --field / --compare cells when the field is a cell field only. Cell data "
                       "is drawn one colour per cell in 2D, as points at the cell centres in 3D")
    fields = parser.add_argument_group("point fields of a mesh file (instead of a partition; e.g. the OUT/<sample>.vtu "
                                       "of `meshshard predict`)")
    fields.add_argument("--field", metavar="NAME", help="draw this point field: 2D filled contours on the cells, 3D "
                        "the boundary surface, point clouds coloured points; a vector field's magnitude, or one "
                        "component as NAME[i] (e.g. velocity_pred[0]). With --compare: the prediction to compare")
    fields.add_argument("--compare", metavar="TRUTH", help="draw TRUTH, its prediction (or --field) and the error "
                        "side by side, the prediction and error fields found as `meshshard predict` named them "
                        "(NAME_pred / NAME_error, or NAME_<i>_pred / NAME_<i>_error per component; prediction - "
                        "truth when there is no error field): truth and prediction share their colour limits, the "
                        "error map is diverging and symmetric")
    fields.add_argument("--units", help="the field's units, shown on the colour bars")
    fields.add_argument("--animate", action="store_true", help="MESH_OR_OUT is a time series (a .pvd whose steps are "
                        ".vtu or .pvtu, e.g. OUT/<name>.pvd of `meshshard rollout`, or any trajectory): write -o as an "
                        "animation (.gif, or .mp4 with ffmpeg), one frame per step, of --field or of --compare's "
                        "truth | prediction | error, the colour limits fixed over all frames")
    fields.add_argument("--fps", type=float, default=5.0, help="--animate: frames per second (default: 5)")
    fields.add_argument("--every", type=int, default=1, metavar="N",
                        help="--animate: draw every N-th step (default: 1, every step; the last step always)")
    from meshshard.viz import DEFAULT_VIEW

    fields.add_argument("--view", type=float, nargs=2, metavar=("ELEV", "AZIM"),
                        help=f"3D: camera elevation and azimuth in degrees (default: {DEFAULT_VIEW[0]:g} "
                        f"{DEFAULT_VIEW[1]:g})")


def run(args: argparse.Namespace) -> int:
    """Load or partition, then draw the summary figure (views, zoom, part sizes, quality).

    Args:
        args: the parsed options.

    Returns:
        the exit status.
    """
    from meshshard.viz import plot_partition_summary

    from meshshard.viz.animation import ANIMATION_SUFFIXES

    out = Path(args.out)
    if args.dpi < 10 or args.dpi > 1200:
        raise ValueError(f"--dpi must be in [10, 1200], got {args.dpi}")
    if args.animate:
        if out.suffix.lower() not in ANIMATION_SUFFIXES:
            raise ValueError(f"-o {out}: --animate writes {' or '.join(ANIMATION_SUFFIXES)}")
    elif out.suffix.lower() not in _SUFFIXES:
        hint = "; an animation (--animate) is .gif or .mp4" if out.suffix.lower() in ANIMATION_SUFFIXES else ""
        raise ValueError(f"-o {out}: unsupported image type; use one of {' '.join(_SUFFIXES)}{hint}")
    given = [flag for dest, flag, default in _ANIMATION_ONLY if getattr(args, dest) != default]
    if given and not args.animate:
        raise ValueError(f"{', '.join(given)}: only with --animate")
    src = Path(args.source)
    if not src.exists():
        raise FileNotFoundError(f"{src} not found (expected a mesh file or a shard folder)")
    if args.animate:
        return _run_animation(args, src, out)
    if args.field is not None or args.compare is not None:
        return _run_field(args, src, out)
    given = [flag for dest, flag in _FIELD_ONLY if getattr(args, dest) is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: only with --field / --compare")

    from meshshard.datasets import is_dataset_dir, read_dataset_meta

    if src.is_dir() and is_dataset_dir(src):
        samples = read_dataset_meta(src)["samples"]
        sample = args.sample if args.sample is not None else 0
        if not -len(samples) <= sample < len(samples):
            raise ValueError(f"--sample {sample}: {src} has {len(samples)} sample(s)")
        src = src / samples[sample]["dir"]

    with progress(4, "meshshard plot", not args.quiet) as bar:
        if src.is_dir():
            mesh, edge_index, part, quality = _from_shards(src, args, bar)
        else:
            if args.num_parts is None:
                raise ValueError("plotting a mesh file needs -k/--num-parts (or pass a shard folder)")
            mesh, edge_index, _ = load_mesh_and_graph(src, DEFAULT_KNN if args.knn is None else args.knn, bar,
                                                      nodes=args.nodes or "points")
            part = run_partition(mesh, edge_index, args.num_parts, args.method or "kdtree",
                                 0 if args.seed is None else args.seed, not args.no_refine, bar)
            quality = _quality(part, edge_index)
        bar.set_postfix_str(f"drawing {out.name}")
        zoom = None if args.no_zoom else (tuple(args.zoom) if args.zoom else "auto")
        name = mesh.source.name if mesh.source is not None else src.name
        what = "cells" if mesh.nodes == "cells" else "nodes"
        title = f"{name}: {mesh.num_nodes:,} {what}, {part.num_parts} parts ({part.method or args.method or 'kdtree'})"
        plot_partition_summary(mesh, part, edge_index=edge_index, quality=quality, path=out, title=title,
                               show_ghosts=not args.no_ghosts, zoom=zoom, dpi=args.dpi)
        bar.update()
    _note_3d_cells(mesh)
    print(f"wrote {out}")
    return 0


def _note_3d_cells(mesh) -> None:
    """Say how 3D cell data was drawn (there is no per-cell surface rendering of volume cells)."""
    if mesh.nodes == "cells" and mesh.dim == 3:
        print("note: 3D cell data is drawn as points at the cell centres, one colour per cell (volume cells are "
              "not drawn as faces)")


def _given(value) -> bool:
    """Whether an option was given: not its default None / False (``--seed 0`` is given, though 0 == False)."""
    return value is not None and value is not False


def _run_field(args, src: Path, out: Path) -> int:
    """``--field`` / ``--compare``: read the mesh file and draw its point field(s)."""
    from meshshard.io import read_mesh
    from meshshard.viz import DEFAULT_VIEW, plot_field, plot_field_comparison, prediction_field_names

    given = [flag for dest, flag in _PARTITION_ONLY if _given(getattr(args, dest))]
    if given:
        raise ValueError(f"{', '.join(given)}: only for a partition plot, not with --field / --compare")
    if src.is_dir():
        raise ValueError(f"--field / --compare draw the point fields of a mesh file; {src} is a folder")
    view = tuple(args.view) if args.view is not None else DEFAULT_VIEW
    with progress(2, "meshshard plot", not args.quiet) as bar:
        bar.set_postfix_str(f"reading {src.name}")
        mesh = _field_mesh(read_mesh(src), args.nodes, args.compare if args.compare is not None else args.field)
        bar.update()
        bar.set_postfix_str(f"drawing {out.name}")
        if args.compare is not None:
            if args.field is not None:  # another prediction: the file's error field belongs to the default one
                pred, error = args.field, None
            else:
                pred, error = prediction_field_names(args.compare, mesh)
            shown = pred if isinstance(pred, str) else " and ".join(pred)
            plot_field_comparison(mesh, args.compare, pred, error, path=out, units=args.units, view=view,
                                  zoom=args.zoom, dpi=args.dpi,
                                  title=f"{src.name}: {args.compare}, prediction {shown} and error")
        else:
            what = "cells" if mesh.nodes == "cells" else "nodes"
            plot_field(mesh, args.field, path=out, units=args.units, view=view, zoom=args.zoom, dpi=args.dpi,
                       title=f"{src.name}: {args.field} ({mesh.num_nodes:,} {what})")
        bar.update()
    _note_3d_cells(mesh)
    print(f"wrote {out}")
    return 0


def _run_animation(args, src: Path, out: Path) -> int:
    """``--animate``: read the time series and write its frames (the library does the drawing)."""
    from meshshard.viz import DEFAULT_VIEW
    from meshshard.viz.animation import animate_field, animate_field_comparison

    given = [flag for dest, flag in _PARTITION_ONLY if _given(getattr(args, dest))]
    given += [flag for dest, flag in (("zoom", "--zoom"), ("nodes", "--nodes")) if _given(getattr(args, dest))]
    if given:
        raise ValueError(f"{', '.join(given)}: not with --animate")
    if args.compare is None and args.field is None:
        raise ValueError("--animate draws --field NAME, or --compare TRUTH (truth | prediction | error per frame)")
    if src.suffix.lower() not in (".pvd", ".xdmf", ".xmf") and not src.is_dir():
        raise ValueError(f"--animate draws a time series: a .pvd collection (or an XDMF time series, or a folder of "
                         f"numbered step files); {src} is a single {src.suffix or 'file'}; without --animate "
                         "--field / --compare draw one mesh file")
    if args.every < 1:
        raise ValueError(f"--every must be >= 1, got {args.every}")
    if not args.fps > 0:
        raise ValueError(f"--fps must be > 0, got {args.fps}")
    view = tuple(args.view) if args.view is not None else DEFAULT_VIEW
    common = dict(fps=args.fps, every=args.every, units=args.units, view=view, dpi=args.dpi, progress=not args.quiet)
    if args.compare is not None:
        anim = animate_field_comparison(src, args.compare, out, pred=args.field, **common)
    else:
        anim = animate_field(src, args.field, out, **common)
    print(f"wrote {out} ({anim.frames_written} frames of {anim.num_frames} steps)")
    return 0


def _field_mesh(mesh, nodes, spec: str):
    """The mesh whose node fields ``--field`` / ``--compare`` draw: ``mesh`` (point fields), or its
    cell-centred view (cell fields) when ``nodes`` is ``"cells"``, or when ``nodes`` is not given and
    the field is a cell field only (as ``meshshard predict`` writes a cell-centred model's output)."""
    from meshshard.io import cells_as_nodes, parse_field

    if nodes is None:
        name = parse_field(spec)[0]
        nodes = "cells" if name not in mesh.point_data and name in mesh.cell_data else "points"
    return cells_as_nodes(mesh) if nodes == "cells" else mesh


def _quality(part, edge_index):
    try:
        from meshshard.partitioners import partition_quality
    except ImportError:
        return None
    q = partition_quality(part, edge_index)
    return {k: (v.item() if hasattr(v, "item") and getattr(v, "numel", lambda: 2)() == 1 else v) for k, v in q.items()}


def _from_shards(folder: Path, args, bar):
    from meshshard._fileutil import sha256_file
    from meshshard.graph import read_meta
    from meshshard.partitioners import Partition

    meta = read_meta(folder)
    mesh_path = Path(args.mesh) if args.mesh else Path(meta.get("source") or "")
    if not meta.get("source") and not args.mesh:
        raise ValueError(f"{folder}/meta.json records no source mesh; pass it with --mesh PATH")
    if not mesh_path.is_file():
        raise FileNotFoundError(f"source mesh {mesh_path} (from {folder}/meta.json) not found; pass --mesh PATH")
    want = meta.get("source_sha256")
    if want and sha256_file(mesh_path) != want:
        raise ValueError(f"{mesh_path} differs from the mesh {folder} was made from (sha256 mismatch)")
    part_file = folder / "partition.pt"
    if not part_file.is_file():
        raise FileNotFoundError(f"{part_file} missing")
    if meta["files"].get("partition.pt") != sha256_file(part_file):
        raise ValueError(f"{part_file}: sha256 mismatch (corrupt or changed after writing)")
    knn = int(meta.get("knn_k") or (meta.get("settings") or {}).get("knn")
              or (DEFAULT_KNN if args.knn is None else args.knn))
    nodes = meta.get("nodes") or (meta.get("settings") or {}).get("nodes", "points")  # a dataset sample: its settings
    if args.nodes is not None and args.nodes != nodes:
        raise ValueError(f"--nodes {args.nodes}: {folder} was partitioned with nodes = {nodes}; drop --nodes")
    mesh, edge_index, _ = load_mesh_and_graph(mesh_path, knn, bar, nodes=nodes)
    try:
        part = Partition.load(part_file)
    except Exception as exc:  # noqa: BLE001 - an unreadable file is a bad input, not a crash
        raise ValueError(f"{part_file}: cannot load partition ({exc})") from exc
    if part.num_nodes != mesh.num_nodes:
        raise ValueError(f"{part_file} has {part.num_nodes} nodes but {mesh_path} has {mesh.num_nodes}")
    bar.update()
    return mesh, edge_index, part, meta.get("quality")
