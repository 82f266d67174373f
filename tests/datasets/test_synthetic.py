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
