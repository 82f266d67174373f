"""The README stays true: its quick start is the CI's command, and its code blocks run as written."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, flags=re.M | re.S)
    assert m, f"README has no section {title!r}"
    return m.group(1)


def _blocks(text: str, lang: str):
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    install, test = [b.strip() for b in _blocks(_section("Quick start"), "bash")]
    assert "\n" not in install and "\n" not in test
    # torch pinned and installed before the package, so pip never picks a CUDA build here
    assert install.index("pip install torch==2.13.0") < install.index("pip install -e")
    assert install.endswith("meshshard demo")
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(test)}$", ci, flags=re.M), f"{test!r} is not the command .ci/run runs"
    assert "pip install -q torch==2.13.0" in ci


@pytest.mark.timeout(180)
def test_single_process_example_runs(tmp_path, data_dir):
    (code,) = _blocks(_section("Meshes and partitions (single process)"), "python")
    code = code.replace("../shared/data/", f"{data_dir}/")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr
    assert "Mesh(num_nodes=14831, dim=2" in proc.stdout
    sizes = eval(proc.stdout.splitlines()[1])  # the part sizes line
    assert len(sizes) == 4 and sum(sizes) == 14831
    assert (tmp_path / "drivaer_parts.pt").exists()


def test_every_example_script_is_documented():
    table = _section("Examples")
    for script in sorted((ROOT / "examples").glob("*.py")):
        assert f"examples/{script.name}" in table, f"README's Examples table misses {script.name}"


def _port_diff(side: str) -> str:
    """The README's PyG porting diff as the script before (``side="-"``) or after (``"+"``)."""
    (diff,) = _blocks(_section("DomainParallel"), "diff")
    other = "+" if side == "-" else "-"
    return "".join(line[1:] + "\n" for line in diff.splitlines() if not line.startswith(other))


@pytest.mark.timeout(200)
def test_distributed_example_runs_under_torchrun(tmp_path, data_dir):
    """The distributed core block, then (in the same 3-rank group) the ported PyG loop, whose final
    loss must equal the original loop's on the whole mesh in one process (float64 on both sides, so
    20 Adam steps on the raw pressure, a loss near 4e4, leave only rounding)."""
    from meshshard.datasets import MeshDataset, preprocess_dataset

    cyl = data_dir / "cylinder_crossflow_re35.vtu"
    preprocess_dataset([cyl], tmp_path / "cyl_data", 3, ["velocity[0,1]"], ["pressure"],
                       dtype="float64", progress=False)
    (code,) = _blocks(_section("Distributed core: uneven collectives and ShardTensor"), "python")
    destroy = "ms.destroy_distributed()\n"
    assert code.endswith(destroy)
    script = tmp_path / "readme_distributed.py"
    # one file per rank: the ranks' prints to the shared stdout interleave
    script.write_text(code[: -len(destroy)] + "\nopen(f'rank{rank}.txt', 'w').write(f'{world} {st.shard_sizes()}')\n"
                      + "torch.set_default_dtype(torch.float64)\n" + _port_diff("+") + "open(f'port{rank}.txt', 'w').write(repr(float(loss.to_local())))\n" + destroy)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
                           str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for r in range(3):
        assert (tmp_path / f"rank{r}.txt").read_text() == "3 [1, 2, 3]"
    losses = {float((tmp_path / f"port{r}.txt").read_text()) for r in range(3)}
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


@pytest.mark.timeout(330)
def test_cli_walkthrough_runs(tmp_path, data_dir):
    # the walkthrough; the "Predicting" block after it trains first, too slow for the suite
    script = _blocks(_section("The `meshshard` command"), "bash")[0]
    script = script.replace("../shared/data/", f"{data_dir}/")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=320,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "rae_parts" / "meta.json").exists() and (tmp_path / "rae_parts.png").stat().st_size > 10_000
    assert (tmp_path / "cyl_data" / "meta.json").exists()
    assert "largest loss difference" in proc.stdout
    for image in ("pred.png", "cmp.png"):  # the field plots of the demo's prediction
        assert (tmp_path / image).stat().st_size > 10_000, image
