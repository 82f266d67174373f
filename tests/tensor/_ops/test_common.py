"""Handler registration survives libraries that wrap ``torch.<name>`` before meshshard is imported."""
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import torch
    import torch_geometric  # replaces torch.select / torch.index_select with Python wrappers
    assert torch.select is not torch._C._VariableFunctions.select, "torch_geometric no longer wraps torch.select"
    import meshshard.tensor  # registers the op families after the wrapping
    from meshshard.tensor import _registry as reg
    for name in ("select", "index_select"):
        builtin = getattr(torch._C._VariableFunctions, name)
        assert builtin in reg.BUILTIN_FUNCTION_HANDLERS, name + ": no handler for the builtin the wrapper calls"
        assert getattr(torch, name) in reg.BUILTIN_FUNCTION_HANDLERS, name + ": no handler for the wrapper"
    print("ok")
""")


def test_handlers_found_when_torch_geometric_was_imported_first():
    # A fresh interpreter: the import order is the point, and this process imported both long ago.
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
