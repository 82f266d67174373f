"""meshshard.io: read meshes and point clouds, build their node graphs, pick their point fields,
write them back (layer 1, single process).

- :func:`read_mesh` reads any meshio format (.vtu .vtk .msh .su2 .xdmf ...) and .npz/.npy clouds.
- :class:`Mesh` holds points, volume cells, boundary cells, named node sets and point data;
  :meth:`Mesh.edge_index` turns mixed-element connectivity into an undirected graph.
- :func:`knn_graph` builds a deterministic k-nearest-neighbour graph for point clouds;
  :func:`mesh_graph` picks a mesh's graph (element edges, or kNN for a point cloud).
- :func:`parse_field`, :func:`select_fields`, :func:`field_columns`, :func:`check_fields`: point
  fields by name (``"velocity[0,1]"``).
- :func:`write_vtu`, :func:`write_prediction`: atomic .vtu writes of a mesh with more point fields.
"""
from meshshard.io.cell_edges import CELL_EDGES, edge_index_from_cells
from meshshard.io.fields import POSITION_FIELD, check_fields, field_columns, parse_field, select_fields
from meshshard.io.graph import DEFAULT_KNN, mesh_graph, mesh_graph_info
from meshshard.io.knn import knn_graph
from meshshard.io.mesh import Mesh
from meshshard.io.read import is_reader_field, point_field_names, read_mesh, supported_suffixes
from meshshard.io.write import ERROR_SUFFIX, PRED_SUFFIX, write_prediction, write_vtu

__all__ = ["Mesh", "read_mesh", "knn_graph", "mesh_graph", "mesh_graph_info", "DEFAULT_KNN", "supported_suffixes",
           "point_field_names", "is_reader_field", "edge_index_from_cells", "CELL_EDGES", "parse_field",
           "select_fields", "field_columns", "check_fields", "POSITION_FIELD", "write_vtu", "write_prediction",
           "PRED_SUFFIX", "ERROR_SUFFIX"]
