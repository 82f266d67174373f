"""meshshard.io.fields: field specs, the columns they select, the check of files before any work;
meshshard.datasets keeps the same functions under its own names."""
import numpy as np
import pytest

from meshshard.io import Mesh, check_fields, field_columns, parse_field, select_fields


def _mesh():
    pts = np.arange(12.0).reshape(4, 3)
    m = Mesh.from_points(pts)
    m.point_data.update(velocity=np.arange(12.0).reshape(4, 3) * 2, pressure=np.array([1.0, 2.0, 3.0, 4.0]))
    return m


def test_specs_columns_and_selection():
    assert parse_field("velocity") == ("velocity", None) and parse_field(" velocity[0, 2] ") == ("velocity", [0, 2])
    m = _mesh()
    specs = ["velocity[0,2]", "pressure", "pos[1]"]
    assert field_columns(m, specs) == ["velocity_0", "velocity_2", "pressure", "pos_1"]
    got = select_fields(m, specs)
    want = np.stack([m.point_data["velocity"][:, 0], m.point_data["velocity"][:, 2], m.point_data["pressure"],
                     m.points[:, 1]], axis=1)
    assert got.dtype == np.float64 and np.array_equal(got, want)
    assert select_fields(m, []).shape == (4, 0)


@pytest.mark.parametrize("spec,exc,match", [("velocity[]", ValueError, "bad field spec"),
                                            ("missing", ValueError, "'missing' not found"),
                                            ("velocity[3]", ValueError, "asks for \\[3\\]"),
                                            (3, TypeError, "by name")])
def test_bad_specs_are_named(spec, exc, match):
    with pytest.raises(exc, match=match):
        select_fields(_mesh(), [spec])


def test_check_fields_lists_every_missing_field_per_file(tmp_path):
    path = tmp_path / "cloud.npz"
    np.savez(path, points=np.zeros((3, 2)), pressure=np.zeros(3))
    check_fields([path], ["pos", "pressure"], [])
    with pytest.raises(ValueError, match=r"'velocity' not found \(features\).*'y' not found \(targets\)"):
        check_fields([path], ["velocity"], ["y"])


def test_datasets_names_are_the_same_functions():
    import meshshard.datasets as ds

    assert ds.parse_field is parse_field and ds.select_fields is select_fields and ds.field_columns is field_columns
