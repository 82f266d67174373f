import os
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
if not DATA_DIR.exists():  # CI and developers keep shared/ beside the checkout
    DATA_DIR = Path(os.environ.get("MESHSHARD_DATA", DATA_DIR))

MESH_FILES = [
    "naca0012_inviscid.su2",
    "cylinder_laminar.su2",
    "rae2822_turb.su2",
    "brick_tets.su2",
    "cylinder_crossflow_re35.vtu",
]


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not DATA_DIR.exists():
        pytest.fail(f"real test data not found at {DATA_DIR}; set MESHSHARD_DATA")
    return DATA_DIR


def write_gmsh_square(path, mesh_size: float) -> None:
    """Mesh the unit square with gmsh (triangles of size ``mesh_size``) and write it to ``path``."""
    import gmsh  # installed by the [gmsh] extra that CI installs: missing means fail, not skip

    gmsh.initialize()
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.occ.addRectangle(0, 0, 0, 1, 1)
        gmsh.model.occ.synchronize()
        gmsh.option.setNumber("Mesh.MeshSizeMax", mesh_size)
        gmsh.model.mesh.generate(2)
        gmsh.write(str(path))
    finally:
        gmsh.finalize()


@pytest.fixture(scope="session", autouse=True)
def _kept_ranks():
    """Every run_distributed call of the session reuses the same spawned ranks (starting one costs
    seconds); they are stopped when the session ends."""
    from meshshard.testing import keep_workers

    keep_workers(True)
    yield
    keep_workers(False)


@pytest.fixture(autouse=True)
def _no_process_group_left_in_the_test_process():
    """A test that runs a ShardTensor op in this process starts a one-rank gloo group (a DeviceMesh
    needs one); end it after the test, so later tests that check the no-group path see none."""
    yield
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
