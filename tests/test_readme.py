"""The README stays true: its quick start is the CI's command, its python blocks run as written and
print what it shows, and every `meshshard` command line it shows parses."""
import re
from pathlib import Path

import pytest

from tests import _docblocks

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", README, flags=re.M | re.S)
    assert m, f"README has no section {title!r}"
    return m.group(1)


def test_readme_is_short():
    assert len(README.splitlines()) <= 300


def test_quick_start_is_two_commands_and_ci_runs_the_second():
    install, test = [b.code.strip() for b in _docblocks.blocks(_section("Quick start")) if b.lang == "bash"]
    assert "\n" not in install and "\n" not in test
    # torch pinned and installed before the package, so pip never picks a CUDA build here
    assert install.index("pip install torch==2.13.0") < install.index("pip install -e")
    assert install.endswith("meshshard demo")
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^{re.escape(test)}$", ci, flags=re.M), f"{test!r} is not the command .ci/run runs"
    assert "pip install -q torch==2.13.0" in ci


def test_no_dates_or_load_averages():
    assert not re.search(r"\b(19|20)\d\d-\d\d-\d\d\b|\b\d{1,2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\w* (19|20)\d\d\b",
                         README)
    assert "load average" not in README


@pytest.mark.timeout(420)
def test_python_blocks_run_as_written(tmp_path, data_dir):
    work = _docblocks.workdir(tmp_path, data_dir)
    blocks = _docblocks.python_blocks(README)
    assert len(blocks) >= 2 and any(b.ranks > 1 for b in blocks)
    for b in blocks:
        _docblocks.run_block(b, work, "README.md")


def test_shown_commands_parse():
    lines = _docblocks.command_lines(README)
    assert {"preprocess", "predict", "plot", "demo"} <= {line[0] for line in lines}
    for argv in lines:
        _docblocks.parse_command(argv)
