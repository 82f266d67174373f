"""benchmarks/_results.py: the printed tables become JSON, and --json is the only thing that writes."""
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))
import _results  # noqa: E402

OUT = """# a run
Ratios = time / baseline.
two lines of caption

| op | ratio |
|---|---|
| a | 1.5 |
| b | 0.9 |

target met by every row

| x | y |
|---|---|
| 1 | 2 |
"""


def test_tables_keep_their_caption_rows_and_notes():
    first, second = _results.parse_tables(OUT)
    assert first == {"caption": ["# a run", "Ratios = time / baseline.", "two lines of caption"], "header": ["op", "ratio"],
                     "rows": [["a", "1.5"], ["b", "0.9"]], "notes": []}
    # the one paragraph between the tables is the second one's caption, not the first one's notes
    assert second["caption"] == ["target met by every row"] and second["rows"] == [["1", "2"]]


def test_json_only_when_asked(tmp_path, monkeypatch, capsys):
    def main():
        print(OUT)

    monkeypatch.setattr(sys, "argv", ["bench_x.py", "--quick"])
    assert _results.run(main, "bench_x.py") == 0
    monkeypatch.setattr(_results, "RESULTS", tmp_path)
    monkeypatch.setattr(sys, "argv", ["bench_x.py", "--quick", "--json"])
    assert _results.run(main, "bench_x.py") == 0
    (written,) = tmp_path.glob("*.json")
    assert written.name == "bench_x__quick.json"
    rec = json.loads(written.read_text())
    assert rec["argv"] == ["--quick"] and rec["command"] == "python benchmarks/bench_x.py --quick"
    assert len(rec["tables"]) == 2 and rec["machine"] and rec["date"]
    monkeypatch.setattr(sys, "argv", ["bench_x.py", "--json", str(tmp_path / "named.json")])
    _results.run(main, "bench_x.py")
    assert json.loads((tmp_path / "named.json").read_text())["argv"] == []
