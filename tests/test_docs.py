"""The docs stay true: every python block of the guide runs as written and prints what it shows, every
`meshshard` command line shown parses, the PyG porting diff gives the loss of the loop it ports,
every example script is listed, and docs/benchmarks.md is the render of the committed results."""
import sys
from pathlib import Path

import pytest
import torch

from tests import _docblocks

ROOT = Path(__file__).resolve().parent.parent
GUIDE = sorted((ROOT / "docs" / "guide").glob("*.md"))


def test_guide_pages_exist():
    names = {p.stem for p in GUIDE}
    assert {"meshes", "shardtensor", "domain_parallel", "cli", "training", "gpus"} <= names


@pytest.mark.timeout(420)
@pytest.mark.parametrize("page", GUIDE, ids=lambda p: p.name)
def test_python_blocks_run_as_written(page, tmp_path, data_dir):
    work = _docblocks.workdir(tmp_path, data_dir)
    for b in _docblocks.python_blocks(page.read_text()):
        _docblocks.run_block(b, work, f"docs/guide/{page.name}")


def test_python_blocks_are_whole_programs_with_output_where_it_matters():
    blocks = [b for p in GUIDE for b in _docblocks.python_blocks(p.read_text())]
    assert len(blocks) >= 6
    assert sum(b.ranks > 1 for b in blocks) >= 4
    assert sum(b.output is not None for b in blocks) >= 5


def test_shown_commands_parse():
    lines = [argv for p in GUIDE for argv in _docblocks.command_lines(p.read_text())]
    assert {"partition", "preprocess", "info", "plot", "predict", "demo"} <= {argv[0] for argv in lines}
    for argv in lines:
        _docblocks.parse_command(argv)


def test_every_example_script_is_documented():
    table = (ROOT / "docs" / "guide" / "training.md").read_text().split("## Example scripts", 1)[1]
    for script in sorted((ROOT / "examples").glob("*.py")):
        assert f"examples/{script.name}" in table, f"the Example scripts table misses {script.name}"


def _port_diff(side: str) -> str:
    """The porting diff as the script before (``side="-"``) or after (``"+"``)."""
    (diff,) = [b.code for b in _docblocks.blocks((ROOT / "docs" / "guide" / "domain_parallel.md").read_text())
               if b.lang == "diff"]
    other = "+" if side == "-" else "-"
    return "".join(line[1:] + "\n" for line in diff.splitlines() if not line.startswith(other))


def _run_port(rank, world, code, cwd):
    import os

    os.chdir(cwd)
    torch.set_default_dtype(torch.float64)
    scope = {"__name__": "__main__"}
    exec(compile(code, "<porting diff>", "exec"), scope)
    return float(scope["loss"].to_local().detach())


@pytest.mark.timeout(200)
def test_porting_diff_gives_the_single_process_loss(tmp_path, data_dir):
    """The ported loop on 2 ranks ends at the loss of the original loop on the whole mesh in one process
    (float64 on both sides, so 20 Adam steps on the raw pressure leave only rounding)."""
    from meshshard.datasets import MeshDataset, preprocess_dataset
    from meshshard.testing import run_distributed

    cyl = data_dir / "cylinder_crossflow_re35.vtu"
    preprocess_dataset([cyl], tmp_path / "cyl_data", 2, ["velocity[0,1]"], ["pressure"], dtype="float64",
                       progress=False)
    losses = set(run_distributed(_run_port, 2, args=(_port_diff("+"), str(tmp_path)), timeout=180))
    assert len(losses) == 1, losses  # replicated
    single = {"dataset": MeshDataset([cyl], ["velocity[0,1]"], ["pressure"], dtype=torch.float64)}
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        exec(_port_diff("-"), single)
    finally:
        torch.set_default_dtype(default)
    ref = float(single["loss"].detach())
    (sharded,) = losses
    assert abs(sharded - ref) <= 1e-9 * abs(ref), (sharded, ref)


def test_benchmarks_page_is_the_render_of_the_committed_results():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import render
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert list(render.RESULTS.glob("*.json")), "no committed benchmark results"
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert page == render.render(), "docs/benchmarks.md is stale: run python benchmarks/render.py"
