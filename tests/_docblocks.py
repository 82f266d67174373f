"""Run the code blocks of a markdown page as written (used by tests/test_readme.py and tests/test_docs.py).

Conventions of the pages (each fence's info string):

- ```` ```python ````: a whole program, run as it is by ``python -c`` in one process.
- ```` ```python title="torchrun --nproc-per-node N ..." ````: a whole program for N ranks, run on N
  spawned gloo ranks by :func:`meshshard.testing.run_distributed` (the same environment torchrun gives).
- ```` ```text title="output" ```` right after a python block: what it prints (the ranks' output in
  rank order for a multi-rank block), checked line by line.
- Any other fence (``bash``, ``text``, ``diff``, ...) is not run.

The blocks of one page run in order in one folder, beside a ``shared/data`` link to the test data, so
``../shared/data/...`` paths resolve as they do from a checkout and a block may read what an
earlier block wrote.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_RANKS = re.compile(r'title="torchrun --nproc-per-node (\d+)')


@dataclass
class Block:
    lang: str
    info: str
    code: str
    line: int
    output: str | None = None  # the text block right after it, if titled "output"

    @property
    def ranks(self) -> int:
        m = _RANKS.search(self.info)
        return int(m.group(1)) if m else 1


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text``, each python block with its shown output attached."""
    found = []
    for m in _FENCE.finditer(text):
        found.append((m.start(), m.end(), Block(m.group(1), m.group(2), m.group(3), text.count("\n", 0, m.start()) + 1)))
    out = []
    for i, (start, end, b) in enumerate(found):
        if b.lang == "text" and 'title="output"' in b.info:
            prev = found[i - 1] if i else None
            assert prev and prev[2].lang == "python" and not text[prev[1]:start].strip(), (
                f"line {b.line}: an output block must follow a python block directly")
            prev[2].output = b.code
            continue
        out.append(b)
    return out


def python_blocks(text: str) -> list[Block]:
    return [b for b in blocks(text) if b.lang == "python"]


def _exec_rank(rank: int, world: int, code: str, cwd: str) -> str:
    os.chdir(cwd)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<doc block>", "exec"), {"__name__": "__main__"})
    return buf.getvalue()


def workdir(tmp_path: Path, data_dir: Path) -> Path:
    """A folder in which ``../shared/data`` is the test data."""
    (tmp_path / "shared").mkdir(exist_ok=True)
    link = tmp_path / "shared" / "data"
    if not link.exists():
        link.symlink_to(Path(data_dir).resolve(), target_is_directory=True)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return work


def run_block(b: Block, cwd: Path, where: str, timeout: float = 200) -> str:
    """Run one python block as the page says; return what it printed, checked against its output block.

    The timeout leaves room for a first partition that compiles the numba kernels (a cold cache).
    """
    if b.ranks == 1:
        proc = subprocess.run([sys.executable, "-c", b.code], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
        assert proc.returncode == 0, f"{where}:{b.line} failed:\n{proc.stderr[-4000:]}"
        printed = proc.stdout
    else:
        from meshshard.testing import run_distributed

        printed = "".join(run_distributed(_exec_rank, b.ranks, args=(b.code, str(cwd)), timeout=timeout))
    if b.output is not None:
        got = [line.rstrip() for line in printed.strip().splitlines()]
        want = [line.rstrip() for line in b.output.strip().splitlines()]
        assert got == want, f"{where}:{b.line} printed\n" + "\n".join(got) + "\nbut the page shows\n" + "\n".join(want)
    return printed


def command_lines(text: str) -> list[list[str]]:
    """The arguments after ``meshshard`` (or ``-m meshshard``) of every command line in the bash blocks."""
    import shlex

    out = []
    for b in blocks(text):
        if b.lang != "bash":
            continue
        for line in b.code.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for cmd in " ".join(words).split("&&"):
                w = cmd.split()
                if "meshshard" in w and (w[0] == "meshshard" or w[w.index("meshshard") - 1] == "-m"):
                    i = w.index("meshshard")
                    if i + 1 < len(w) and not w[i + 1].startswith("-"):
                        out.append(w[i + 1:])
    return out


def parse_command(argv: list[str]):
    """Parse ``meshshard ARGV`` as the command would (unknown commands and options raise SystemExit)."""
    import argparse
    import importlib

    from meshshard.cli import COMMANDS, common_parser

    assert argv[0] in COMMANDS, f"no command {argv[0]!r}"
    module = importlib.import_module(f"meshshard.cli.{argv[0]}")
    parser = argparse.ArgumentParser(prog=f"meshshard {argv[0]}", parents=[common_parser()], exit_on_error=False)
    module.add_arguments(parser)
    try:
        return parser.parse_args(argv[1:])
    except SystemExit as exc:
        raise AssertionError(f"`meshshard {' '.join(argv)}` does not parse") from exc
