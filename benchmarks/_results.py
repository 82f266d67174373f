"""Results of a benchmark run as JSON, for ``benchmarks/render.py`` to turn into docs/benchmarks.md.

Every script prints its results as markdown tables. :func:`run` calls a script's ``main`` with its
printed output teed into a buffer; when the command line holds ``--json PATH`` (``--json`` alone:
``benchmarks/results/<script>[__<options>].json``), it then writes one JSON object:

``{"script", "argv", "command", "machine", "date", "exit_status", "tables": [{"caption", "header", "rows",
"notes"}], "output"}``

where each table's ``caption`` and ``notes`` are the paragraphs printed around it (see
:func:`parse_tables`), ``header`` its column names, ``rows`` its cells as printed, and ``output``
the whole printed text. The machine is described by :func:`machine`. Without ``--json`` nothing
is written, so the test suite's ``--quick`` runs leave the committed results alone.
"""
from __future__ import annotations

import datetime as _dt
import io
import json
import os
import platform
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


class _Tee(io.TextIOBase):
    def __init__(self, stream):
        self.stream, self.buffer_ = stream, io.StringIO()

    def write(self, s):
        self.buffer_.write(s)
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return self.stream.isatty()

    def fileno(self):
        return self.stream.fileno()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            kib = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1))
        return round(kib / 2**20)
    except (OSError, AttributeError):
        return None


def machine() -> str:
    """One line naming the machine a run measured: CPU cores, memory, GPU, Python and torch."""
    import torch

    cpu = platform.processor() or platform.machine()
    parts = [f"{os.cpu_count()} CPU cores ({cpu})"]
    mem = _memory_gib()
    if mem is not None:
        parts.append(f"{mem} GiB")
    if torch.cuda.is_available():
        parts.append(f"GPU {torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}")
    else:
        parts.append("no GPU")
    parts.append(f"Python {platform.python_version()}, torch {torch.__version__}")
    extra = os.environ.get("MESHSHARD_BENCH_MACHINE")  # e.g. "shared with other jobs"
    if extra:
        parts.append(extra)
    return ", ".join(parts)


def parse_tables(text: str) -> list[dict]:
    """Every markdown table in ``text`` with the text printed around it.

    The paragraphs (runs of non-blank lines) between two tables are the second one's caption, except
    that where there are several, the first is the first table's notes; the paragraphs after the last
    table are its notes, and those before the first table its caption.

    Args:
        text: a script's printed output.

    Returns:
        One dict per table: ``caption`` and ``notes`` (lists of lines), ``header`` (list of cells),
        ``rows`` (list of lists of cells; the ``|---|`` separator is dropped).
    """
    chunks, text_lines, table = [], [], []  # alternating: list of paragraphs, table lines, ...
    paragraphs: list[list[str]] = [[]]
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            if not table:
                chunks.append([p for p in paragraphs if p])
                paragraphs = [[]]
            table.append(line)
            continue
        if table:
            chunks.append(table)
            table = []
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])
    chunks.append([p for p in paragraphs if p])
    texts, tables_raw = chunks[0::2], chunks[1::2]
    tables = []
    for i, raw in enumerate(tables_raw):
        block = [_cells(line) for line in raw]
        rows = [r for r in block[1:] if not all(re.fullmatch(r":?-{3,}:?", c) for c in r)]
        before, after = texts[i], texts[i + 1]
        last = i == len(tables_raw) - 1
        caption = before[1:] if (i > 0 and len(before) > 1) else before
        notes = after if last else (after[:1] if len(after) > 1 else [])
        tables.append({"caption": [line for p in caption for line in p], "header": block[0], "rows": rows,
                       "notes": [line for p in notes for line in p]})
    return tables


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _default_path(script: str, argv: list[str]) -> Path:
    slug = re.sub(r"[^A-Za-z0-9,.=]+", "-", " ".join(argv)).strip("-")
    return RESULTS / (f"{script}__{slug}.json" if slug else f"{script}.json")


def _pop_json(argv: list[str]) -> tuple[list[str], str | None]:
    out, path, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a == "--json":
            if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                path, i = argv[i + 1], i + 2
            else:
                path, i = "", i + 1
        elif a.startswith("--json="):
            path, i = a.split("=", 1)[1], i + 1
        else:
            out.append(a)
            i += 1
    return out, path


def run(main, script_file: str) -> int:
    """Run a benchmark's ``main()`` and, given ``--json [PATH]``, write its tables as JSON.

    Args:
        main: the script's entry point; it reads ``sys.argv`` (``--json`` is removed first).
        script_file: the script's ``__file__``.

    Returns:
        ``main``'s exit status (0 for ``None``).
    """
    script = Path(script_file).stem
    argv, path = _pop_json(sys.argv[1:])
    sys.argv[1:] = argv
    if path is None:
        return main() or 0
    tee = _Tee(sys.stdout)
    sys.stdout = tee
    try:
        rc = main() or 0
    finally:
        sys.stdout = tee.stream
    target = Path(path) if path else _default_path(script, argv)
    record = {
        "script": script,
        "argv": argv,
        "command": " ".join(["python", f"benchmarks/{script}.py", *argv]),
        "machine": machine(),
        "date": _dt.date.today().isoformat(),
        "exit_status": rc,
        "tables": parse_tables(tee.buffer_.getvalue()),
        "output": tee.buffer_.getvalue(),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(record, indent=1) + "\n")
    print(f"results: {target}", file=sys.stderr)
    return rc
