"""jittered_grid_mesh: the vectorised large-mesh generator of benchmarks/bench_scale.py."""
import numpy as np
import pytest

from meshshard.datasets.synthetic import jittered_grid_mesh, potential_flow_fields


def _signed_areas(mesh):
    p, t = mesh.points, mesh.cells["triangle"]
    u, v = p[t[:, 1]] - p[t[:, 0]], p[t[:, 2]] - p[t[:, 0]]
    return u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0]


def test_jittered_grid_mesh_is_a_valid_shuffled_triangulation():
    mesh = jittered_grid_mesh(5000, aspect=2.0, jitter=0.24, seed=3)
    n = mesh.num_nodes
    ny = int(round(np.sqrt(5000 / 2.0)))
    nx = n // ny
    assert nx * ny == n and abs(n - 5000) <= ny
    tri = mesh.cells["triangle"]
    assert tri.shape == (2 * (nx - 1) * (ny - 1), 3)
    areas = _signed_areas(mesh)
    assert (areas > 0).all()  # no folded triangle even at jitter close to the bound
    h = 1.0 / (ny - 1)
    assert areas.sum() / 2 == pytest.approx((nx - 1) * h * 1.0)  # the triangles tile the rectangle
    ei = mesh.edge_index()
    # Each inner cell adds 3 undirected edges (2 sides + 1 diagonal) and the last row/column the rest.
    assert ei.shape[1] == 2 * (3 * (nx - 1) * (ny - 1) + (nx - 1) + (ny - 1))
    # Shuffled: grid neighbours are not neighbours in id order.
    assert np.median(np.abs(ei[0].numpy() - ei[1].numpy())) > n / 10
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    np.testing.assert_array_equal(mesh.node_sets["inlet"].numpy(), np.flatnonzero(x == 0))
    np.testing.assert_array_equal(mesh.node_sets["outlet"].numpy(), np.flatnonzero(np.isclose(x, (nx - 1) * h)))
    np.testing.assert_array_equal(mesh.node_sets["walls"].numpy(), np.flatnonzero((y == 0) | np.isclose(y, 1.0)))
    vel = potential_flow_fields(mesh.points, center=((nx - 1) * h / 3, 0.5), radius=0.1)["velocity"]
    np.testing.assert_allclose(mesh.point_data["velocity"], vel)
    assert np.isfinite(mesh.point_data["pressure"]).all() and mesh.point_data["pressure"].std() > 0


def test_jittered_grid_mesh_seed_and_order():
    a, b = jittered_grid_mesh(600, seed=1), jittered_grid_mesh(600, seed=1)
    np.testing.assert_array_equal(a.points, b.points)
    np.testing.assert_array_equal(a.cells["triangle"], b.cells["triangle"])
    assert not np.array_equal(a.points, jittered_grid_mesh(600, seed=2).points)
    plain = jittered_grid_mesh(600, jitter=0.0, shuffle=False)
    assert (np.diff(plain.points[:, 1]) >= 0).all()  # row-major grid order, unjittered
    assert plain.dim == 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_nodes=3), "num_nodes"),
    (dict(num_nodes=100.0), "num_nodes"),
    (dict(num_nodes=100, aspect=0), "aspect"),
    (dict(num_nodes=100, jitter=0.25), "jitter"),
    (dict(num_nodes=100, jitter=-0.1), "jitter"),
])
def test_jittered_grid_mesh_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jittered_grid_mesh(**kwargs)


# ---- advection_diffusion_trajectory ------------------------------------------------------------

def _hex_cube(k=4):
    """A k x k x k node cube of hexahedra (no node sets, no boundary cells)."""
    from meshshard.io import Mesh

    g = np.arange(k ** 3).reshape(k, k, k)  # [z, y, x]
    pts = np.zeros((k ** 3, 3))
    for iz in range(k):
        for iy in range(k):
            for ix in range(k):
                pts[g[iz, iy, ix]] = (ix, iy, iz)
    a = g[:-1, :-1, :-1].ravel()
    hexes = np.stack([a, a + 1, a + 1 + k, a + k, a + k * k, a + 1 + k * k, a + 1 + k + k * k, a + k + k * k], 1)
    return Mesh(pts / (k - 1), cells={"hexahedron": hexes})


def test_advection_diffusion_trajectory_shapes_determinism_and_fixed_boundary():
    from meshshard.datasets.synthetic import advection_diffusion_trajectory

    mesh = jittered_grid_mesh(300, aspect=2.0, seed=1)
    a = advection_diffusion_trajectory(mesh, steps=12, seed=5)
    b = advection_diffusion_trajectory(mesh, steps=12, seed=5)
    c = advection_diffusion_trajectory(mesh, steps=12, seed=6)
    n = mesh.num_nodes
    assert a.num_steps == 12 and a.fields["concentration"].shape == (12, n, 1)
    assert a.fields["velocity"].shape == (12, n, 2) and a.static["node_type"].shape == (n, 1)
    for key in ("concentration", "velocity"):
        assert np.array_equal(a.fields[key], b.fields[key])  # the same seed: the same arrays
        assert not np.allclose(a.fields[key], c.fields[key])  # another seed: another start
    assert np.allclose(np.diff(a.times), a.times[1])
    fixed = a.static["node_type"][:, 0] == 1
    expected = np.zeros(n, dtype=bool)
    for ids in mesh.node_sets.values():
        expected[ids] = True
    assert np.array_equal(fixed, expected) and 0 < fixed.sum() < n
    for key in ("concentration", "velocity"):
        v = a.fields[key]
        assert np.array_equal(v[:, fixed], np.broadcast_to(v[0, fixed], v[:, fixed].shape))  # Dirichlet, exactly
        assert np.abs(v[-1, ~fixed] - v[0, ~fixed]).max() > 1e-3  # the interior evolves
        # the implicit step keeps each component between its first extremes (a maximum principle)
        assert v.min() >= v[0].min(axis=0).min() - 1e-12 and v.max() <= v[0].max() + 1e-12
    assert np.allclose(a.fields["velocity"][:, fixed, 0], 1.0, atol=0.5)  # the stream away from the vortices


def test_advection_diffusion_trajectory_on_a_3d_mesh_finds_its_boundary():
    from meshshard.datasets.synthetic import advection_diffusion_trajectory, boundary_nodes

    mesh = _hex_cube(5)
    on_surface = ((mesh.points == 0) | (mesh.points == 1)).any(axis=1)
    assert np.array_equal(boundary_nodes(mesh), on_surface)
    t = advection_diffusion_trajectory(mesh, steps=4, seed=0)
    assert t.fields["velocity"].shape == (4, 125, 3) and t.dim == 3
    assert np.array_equal(t.static["node_type"][:, 0] == 1, on_surface)
    assert np.abs(t.fields["concentration"][-1, ~on_surface] - t.fields["concentration"][0, ~on_surface]).max() > 0


def test_advection_diffusion_trajectory_refuses_bad_arguments():
    from meshshard.datasets.synthetic import advection_diffusion_trajectory
    from meshshard.io import Mesh

    mesh = jittered_grid_mesh(100, seed=0)
    with pytest.raises(ValueError, match="steps must be an int >= 2"):
        advection_diffusion_trajectory(mesh, steps=1)
    with pytest.raises(ValueError, match="diffusivity must be finite and >= 0"):
        advection_diffusion_trajectory(mesh, diffusivity=-1.0)
    with pytest.raises(ValueError, match="point cloud"):
        advection_diffusion_trajectory(Mesh.from_points(mesh.points))
    with pytest.raises(ValueError, match="boundary holds every node"):
        advection_diffusion_trajectory(mesh, boundary=np.ones(mesh.num_nodes, dtype=bool))
    with pytest.raises(ValueError, match=rf"boundary must be a bool mask of shape \[{mesh.num_nodes}\]"):
        advection_diffusion_trajectory(mesh, boundary=np.ones(3, dtype=bool))


def test_written_trajectory_reads_back_and_preprocesses(tmp_path):
    from meshshard.datasets import preprocess_trajectories, read_trajectory_dataset_meta
    from meshshard.datasets.synthetic import advection_diffusion_trajectory
    from meshshard.io import read_trajectory, write_trajectory

    traj = advection_diffusion_trajectory(jittered_grid_mesh(200, seed=2), steps=6, seed=3)
    pvd = write_trajectory(traj, tmp_path / "case" / "adv.pvd")
    assert sorted(p.name for p in (tmp_path / "case" / "adv").iterdir()) == [f"adv_{k:04d}.vtu" for k in range(6)]
    back = read_trajectory(pvd)
    assert np.allclose(back.times, traj.times, rtol=0, atol=1e-15)
    for key in ("concentration", "velocity"):
        assert np.array_equal(back.fields[key], traj.fields[key])
    assert np.array_equal(back.static["node_type"], traj.static["node_type"])
    out = tmp_path / "data"
    preprocess_trajectories(pvd, out, 2, state=["velocity", "concentration"], features=["pos"],
                            node_type="node_type", dtype="float64")
    meta = read_trajectory_dataset_meta(out)
    assert meta["state"] == ["velocity", "concentration"] and len(meta["samples"]) == 1
    assert meta["samples"][0]["num_nodes"] == traj.num_nodes
