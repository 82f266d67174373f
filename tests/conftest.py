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
