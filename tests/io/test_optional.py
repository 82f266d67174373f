"""meshshard._optional: probing and clear ImportErrors for optional packages."""
import pytest

from meshshard._optional import has_module, require, require_gmsh


def test_probe_and_require():
    assert has_module("numpy") and not has_module("meshshard_no_such_package_xyz")
    with pytest.raises(ImportError, match=r"pip install 'meshshard_no_such_package_xyz'"):
        require("meshshard_no_such_package_xyz", "testing")
    assert require("numpy").__name__ == "numpy"


def test_gmsh_is_importable_here():
    # gmsh is installed in this project's environment (an extra); require_gmsh returns the module
    assert require_gmsh().__name__ == "gmsh"
