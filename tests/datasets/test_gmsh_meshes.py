"""meshshard.datasets.gmsh_meshes: the family of generated test meshes."""
import numpy as np
import pytest

from meshshard.datasets import gmsh_meshes as G
from meshshard.partitioners.multilevel import part_components

_EXPECT = {  # name -> (space dim, cell types)
    "vessel (tet)": (3, {"tetra"}),
    "bodies (2D tri)": (2, {"triangle"}),
    "shell (prism)": (3, {"wedge"}),
    "shell (hex)": (3, {"hexahedron"}),
    "boundary layer (2D quad+tri)": (2, {"quad", "triangle"}),
    "hex block (graded)": (3, {"hexahedron"}),
    "mixed (hex+prism)": (3, {"hexahedron", "wedge"}),
}


@pytest.mark.parametrize("name", list(G.GMSH_FAMILY))
def test_family_member_shape_size_and_connectivity(name):
    mesh = G.GMSH_FAMILY[name](3000)
    dim, types = _EXPECT[name]
    assert mesh.points.shape[1] == dim
    assert set(mesh.cells) == types
    assert 1500 <= mesh.num_nodes <= 6000  # within a factor 2 of the target
    ei = mesh.edge_index().numpy()
    assert np.unique(ei).shape[0] == mesh.num_nodes  # every node is in a cell
    assert part_components(np.zeros(mesh.num_nodes, dtype=np.int64), ei).tolist() == [1]  # one connected body


def test_grading_and_thinness():
    bl = G.boundary_layer_mesh(3000)
    ei = bl.edge_index().numpy()
    length = np.linalg.norm(bl.points[ei[0]] - bl.points[ei[1]], axis=1)
    assert length.max() / length.min() > 100  # strongly graded
    shell = G.shell_mesh(3000)
    r = np.linalg.norm(shell.points, axis=1)
    assert r.min() >= 1.0 - 1e-6 and r.max() <= 1.01 + 1e-6  # 1% of the radius thick


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_nodes"):
        G.hex_block_mesh(10)
    with pytest.raises(ValueError, match="num_nodes"):
        G.vessel_mesh(2.5e4)
    with pytest.raises(ValueError, match="cell"):
        G.shell_mesh(2000, cell="tetra")
    with pytest.raises(ValueError, match="layers"):
        G.mixed_mesh(2000, layers=0)
