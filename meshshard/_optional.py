"""Optional dependencies: probe without importing, import with a clear message when missing.

meshshard's core needs only its declared dependencies; a few features use extras (gmsh to
generate meshes, h5py for HDF5-backed XDMF files read through meshio, KaMinPar and Mt-KaHyPar as
graph partitioning engines, vtk for VTK's own formats, OpenFOAM / EnSight cases and CGNS files).
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

__all__ = ["has_module", "require", "require_gmsh", "OPTIONAL_DEPENDENCIES"]

#: import name -> (pip requirement, what meshshard uses it for)
OPTIONAL_DEPENDENCIES = {
    "gmsh": ("gmsh>=4.11", "generating meshes (pip install 'meshshard[gmsh]')"),
    "h5py": ("h5py", "reading HDF5-backed .xdmf / .h5m files through meshio"),
    "kaminpar": ("meshshard[kaminpar]", "partition(..., method='graph', engine='kaminpar')"),
    "mtkahypar": ("meshshard[mtkahypar]", "partition(..., method='graph', engine='mtkahypar')"),
    "vtk": ("meshshard[vtk]", "reading VTK formats (.vtp .pvtu .pvtp .vtm, legacy polydata), OpenFOAM and EnSight cases, "
                          "CGNS files"),
}


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def require(name: str, purpose: str = "") -> ModuleType:
    """Import an optional dependency or raise ImportError that says how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pip, use = OPTIONAL_DEPENDENCIES.get(name, (name, ""))
        why = purpose or use
        raise ImportError(
            f"meshshard needs the optional package {name!r}{' for ' + why if why else ''}; "
            f"install it with: pip install '{pip}'"
        ) from exc


def require_gmsh() -> ModuleType:
    """The ``gmsh`` module (ImportError with install instructions when it is missing)."""
    return require("gmsh")
