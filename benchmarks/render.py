"""Render every benchmark result in benchmarks/results/*.json into docs/benchmarks.md.

Each script writes its tables with ``--json`` (see ``benchmarks/_results.py``); this script turns
them into one page: per script its docstring's first paragraph (what it measures), then per table
one header line with the machine, the date and the command that produced it, the script's caption,
the table and its notes, all as the script printed them.

Usage::

    python benchmarks/bench_partition.py --quick --json    # writes benchmarks/results/...json
    python benchmarks/render.py                            # rewrites docs/benchmarks.md
    python benchmarks/render.py --check                    # exit 1 if docs/benchmarks.md is stale
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAGE = HERE.parent / "docs" / "benchmarks.md"

INTRO = """# Benchmarks

This page is generated: `python benchmarks/render.py` renders every JSON file in
`benchmarks/results/`, each written by one benchmark script run with `--json`. Do not edit it by
hand; rerun a script with `--json` and render again.

Every figure is a ratio against a baseline measured in the same run, on the machine named in the
line above its table. Multi-rank runs put all ranks on that machine's cores, so on a machine with
fewer cores than ranks they are oversubscribed and show overheads, not speed-ups. `--quick` runs
use small inputs: they show that a script works and the rough shape of its numbers, not the
figures at scale. Re-run any table with the command shown above it (without `--quick` for the
full sizes; see each script's `--help`).
"""


def _purpose(script: str) -> str:
    path = HERE / f"{script}.py"
    if not path.exists():
        return ""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


def _table(t: dict) -> list[str]:
    header = t["header"]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in t["rows"]]
    return out


def render(results: Path = RESULTS) -> str:
    """The page for every ``*.json`` under ``results``, in file-name order.

    Args:
        results: the folder of JSON files written by the benchmark scripts.

    Returns:
        The markdown text of docs/benchmarks.md.
    """
    records = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    lines = [INTRO]
    seen = set()
    for rec in records:
        script = rec["script"]
        if script not in seen:
            seen.add(script)
            lines += [f"## `{script}.py`", ""]
            purpose = _purpose(script)
            if purpose:
                lines += [purpose, ""]
        for i, t in enumerate(rec["tables"], 1):
            lines += [f"**Table {i} of `{rec['command']}`**: {rec['machine']}; {rec['date']}.", ""]
            if t["caption"]:  # a script's own '### title' line is text here, under the header line
                lines += [line.lstrip("#").strip() for line in t["caption"]] + [""]
            lines += [*_table(t), ""]
            if t["notes"]:
                lines += [line.lstrip("#").strip() for line in t["notes"]] + [""]
        if not rec["tables"]:
            lines += [f"`{rec['command']}` printed no table ({rec['machine']}; {rec['date']}).", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md differs from the render")
    p.add_argument("--out", type=Path, default=PAGE, help="page to write (default docs/benchmarks.md)")
    args = p.parse_args(argv)
    text = render()
    if args.check:
        if not args.out.exists() or args.out.read_text() != text:
            print(f"{args.out} is not the render of {RESULTS}: run python benchmarks/render.py", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
