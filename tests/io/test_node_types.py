"""node_type_from_field: integer node types from a point field or a cell field."""
import numpy as np
import pytest

from meshshard.io import Mesh, node_type_from_field


def _mesh():
    pts = np.array([[0, 0], [1, 0], [1, 1], [0, 1.0], [2, 0]])
    return Mesh(pts, cells={"triangle": [[0, 1, 2], [0, 2, 3], [1, 4, 2]]},
                point_data={"node_type": np.array([[0], [6], [6], [4], [0]], dtype=np.int32),
                            "frac": np.array([0, 0.5, 0, 0, 0]), "neg": np.array([0, -1, 0, 0, 0]),
                            "vec": np.zeros((5, 2))},
                cell_data={"ctype": np.array([1.0, 3.0, 2.0])})


def test_point_field_is_taken_as_is():
    assert node_type_from_field(_mesh(), "node_type").tolist() == [0, 6, 6, 4, 0]


def test_cell_field_gives_each_node_the_largest_type_of_its_cells():
    # node 0: cells 0, 1 -> 3; node 1: cells 0, 2 -> 2; node 2: all -> 3; node 3: cell 1 -> 3; node 4: cell 2 -> 2
    assert node_type_from_field(_mesh(), "ctype").tolist() == [3, 2, 3, 3, 2]


@pytest.mark.parametrize("field,exc,match", [("nope", KeyError, "point fields"), ("frac", ValueError, "row 1"),
                                             ("neg", ValueError, "non-negative"), ("vec", ValueError, "one column")])
def test_bad_fields_are_named(field, exc, match):
    with pytest.raises(exc, match=match):
        node_type_from_field(_mesh(), field)
