"""A small transient case written as a ParaView collection: a scalar advected and diffused on a
triangulated square, its boundary nodes (node_type 1) held at fixed values, the interior (0) evolving."""
from pathlib import Path

import meshio
import numpy as np


def grid_mesh(nx: int, ny: int):
    """Points [nx * ny, 2] on [0, 1]^2, triangles, and node types (1 on the boundary, 0 inside)."""
    x, y = np.meshgrid(np.linspace(0, 1, nx), np.linspace(0, 1, ny), indexing="xy")
    pts = np.c_[x.ravel(), y.ravel()]
    tri = []
    for j in range(ny - 1):
        for i in range(nx - 1):
            a = j * nx + i
            tri += [[a, a + 1, a + nx + 1], [a, a + nx + 1, a + nx]]
    edge = (np.isclose(pts, 0) | np.isclose(pts, 1)).any(axis=1)
    return pts, np.array(tri), edge.astype(np.int64)


def diffusion_states(pts, tri, node_type, steps: int, dt: float = 0.2):
    """[steps, N, 1] temperature: u <- u + dt * (graph Laplacian u + drift), boundary fixed."""
    n = len(pts)
    edges = {tuple(sorted((int(a), int(b)))) for t in tri for a, b in ((t[0], t[1]), (t[1], t[2]), (t[0], t[2]))}
    lap = np.zeros((n, n))
    for a, b in edges:
        lap[a, b] = lap[b, a] = 1.0
    lap -= np.diag(lap.sum(1))
    lap /= np.abs(np.diag(lap)).max()
    u = np.exp(-20 * ((pts[:, 0] - 0.4) ** 2 + (pts[:, 1] - 0.5) ** 2)) + 0.3 * np.sin(3 * pts[:, 0])
    out = [u.copy()]
    inside = node_type == 0
    for _ in range(steps - 1):
        u = u + dt * np.where(inside, lap @ u + 0.05 * np.cos(2 * pts[:, 1]), 0.0)
        out.append(u.copy())
    return np.stack(out)[:, :, None]


def write_diffusion_pvd(folder: Path, name: str = "heat", nx: int = 9, ny: int = 8, steps: int = 60) -> Path:
    """``folder/<name>.pvd`` with ``steps`` step files holding ``temperature`` and ``node_type``."""
    folder.mkdir(parents=True, exist_ok=True)
    pts, tri, types = grid_mesh(nx, ny)
    states = diffusion_states(pts, tri, types, steps)
    rows = []
    for k in range(steps):
        f = f"{name}_{k:03d}.vtu"
        meshio.write(folder / f, meshio.Mesh(np.c_[pts, np.zeros(len(pts))], [("triangle", tri)],
                                             point_data={"temperature": states[k], "node_type": types}))
        rows.append(f'    <DataSet timestep="{0.1 * k:.6f}" part="0" file="{f}"/>')
    pvd = folder / f"{name}.pvd"
    pvd.write_text('<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1">\n  <Collection>\n'
                   + "\n".join(rows) + "\n  </Collection>\n</VTKFile>\n")
    return pvd


def load_train_simulator():
    """examples/train_simulator.py as a module."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "train_simulator.py"
    spec = importlib.util.spec_from_file_location("train_simulator", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def trained_checkpoint(folder: Path, pvd: Path, steps: int = 4) -> Path:
    """A tiny float64 simulator trained for a few steps in this process on ``pvd`` (one part)."""
    from meshshard.datasets import preprocess_trajectories

    data = folder / "data1"
    preprocess_trajectories(pvd, data, 1, state=["temperature"], features=["pos"], node_type="node_type",
                            dtype="float64")
    ckpt = folder / "sim.pt"
    example = load_train_simulator()
    example.train(example.parse_args(["--data", str(data), "--steps", str(steps), "--hidden", "8", "--layers", "2",
                                      "--mlp-layers", "1", "--dtype", "float64", "--lr", "1e-3", "--noise-std", "0.01",
                                      "--save", str(ckpt)]))
    return ckpt
