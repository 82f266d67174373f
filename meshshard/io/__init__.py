"""meshshard.io: read meshes, point clouds and time series, build their node graphs, and
write them back (layer 1, single process).

- :func:`read_mesh` reads any meshio format (.vtu .vtk .msh .su2 .xdmf ...) and .npz/.npy clouds;
  :func:`read_vtk` reads VTK's formats, OpenFOAM and EnSight cases and CGNS files through the
  ``vtk`` extra.
- :class:`Mesh` holds points, volume cells, boundary cells, named node sets and point data;
  :meth:`Mesh.edge_index` turns mixed-element connectivity into an undirected graph;
  :class:`Polyhedra` holds its polyhedral cells (OpenFOAM's) as flat face arrays.
- :func:`cells_as_nodes` (``read_mesh(path, nodes="cells")``) gives cell-centred data its nodes:
  cell centres joined through shared faces (:func:`cell_adjacency`).
- :func:`knn_graph` builds a deterministic k-nearest-neighbour graph for point clouds;
  :func:`mesh_graph` picks a mesh's graph (element edges, or kNN for a point cloud).
- :func:`node_type_from_field` takes integer node types from a point or cell field.
- :func:`parse_field`, :func:`select_fields`, :func:`field_columns`, :func:`check_fields`: point
  fields by name (``"velocity[0,1]"``).
- :func:`write_vtu`, :func:`write_prediction`: atomic .vtu writes of a mesh with more point fields;
  :func:`write_pvd`: a ParaView collection of step files; :func:`write_trajectory`: a
  :class:`Trajectory` as such a collection.
- :class:`Trajectory`, :func:`read_trajectory`: one mesh with fields over time steps (.pvd, XDMF
  time series, numbered step files, the MeshGraphNets TFRecord layout).
"""
from meshshard.io.cell_edges import CELL_EDGES, edge_index_from_cells
from meshshard.io.cell_graph import cell_adjacency, cell_centroids
from meshshard.io.cells_as_nodes import cells_as_nodes
from meshshard.io.fields import POSITION_FIELD, check_fields, field_columns, parse_field, select_fields
from meshshard.io.graph import DEFAULT_KNN, mesh_graph, mesh_graph_info
from meshshard.io.knn import knn_graph
from meshshard.io.mesh import Mesh
from meshshard.io.meshgraphnets import (MESHGRAPHNETS_NODE_TYPES, count_meshgraphnets, iter_meshgraphnets,
                                        read_meshgraphnets, read_meshgraphnets_meta)
from meshshard.io.node_types import node_type_from_field
from meshshard.io.polyhedra import Polyhedra
from meshshard.io.read import is_reader_field, point_field_names, read_mesh, supported_suffixes
from meshshard.io.read_trajectory import (iter_trajectories, list_step_files, read_pvd, read_step_files,
                                          read_trajectory, read_xdmf_series)
from meshshard.io.tfrecord import TFRecordError, crc32c, iter_tfrecord, parse_example
from meshshard.io.trajectory import Trajectory
from meshshard.io.vtk_formats import read_vtk
from meshshard.io.write import ERROR_SUFFIX, PRED_SUFFIX, write_prediction, write_pvd, write_vtu
from meshshard.io.write_trajectory import write_trajectory

__all__ = [
    # meshes and graphs
    "Mesh", "Polyhedra", "read_mesh", "knn_graph", "mesh_graph", "mesh_graph_info", "DEFAULT_KNN", "supported_suffixes",
    "point_field_names", "is_reader_field", "edge_index_from_cells", "CELL_EDGES",
    # fields by name, and writing
    "parse_field", "select_fields", "field_columns", "check_fields", "POSITION_FIELD", "write_vtu",
    "write_prediction", "write_pvd", "PRED_SUFFIX", "ERROR_SUFFIX",
    # cell-centred data, VTK's formats, node types from fields
    "cells_as_nodes", "cell_adjacency", "cell_centroids", "node_type_from_field", "read_vtk",
    # transient cases: one mesh, fields over time steps
    "Trajectory", "read_trajectory", "iter_trajectories", "read_pvd", "read_xdmf_series", "read_step_files",
    "list_step_files", "write_trajectory", "MESHGRAPHNETS_NODE_TYPES", "read_meshgraphnets", "iter_meshgraphnets",
    "count_meshgraphnets", "read_meshgraphnets_meta", "TFRecordError", "crc32c", "iter_tfrecord", "parse_example",
]
