"""`meshshard --help`, `meshshard COMMAND --help` and the options every command shares (meshshard/cli/__init__.py)."""
import re
import subprocess
import sys

import pytest

from meshshard.cli import COMMANDS, main


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert out.startswith(f"usage: meshshard {command}") and "options:" in out


def test_top_level_help_lists_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in COMMANDS)
    with pytest.raises(SystemExit) as e:
        main(["bogus"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_console_entry_point_runs():
    """`python -m meshshard` is the same program as the `meshshard` script."""
    proc = subprocess.run([sys.executable, "-m", "meshshard", "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "preprocess" in proc.stdout


def test_quiet_is_accepted_by_every_command_and_keeps_the_result_line(tmp_path, data_dir, capsys, monkeypatch):
    """`-q` / `--quiet`, defined once for all commands: no progress on stderr, and the line that says
    what was written (or the result) is still printed."""
    src = str(data_dir / "naca0012_inviscid.su2")
    shards, ds, png = tmp_path / "shards", tmp_path / "ds", tmp_path / "p.png"
    runs = {
        "partition": ([src, "-k", "2", "--no-refine", "-o", str(shards)], f"wrote {shards}/"),
        "info": ([str(shards)], f"{shards}: 2 parts of 5,233 nodes"),
        "plot": ([str(shards), "-o", str(png), "--dpi", "30", "--no-zoom"], f"wrote {png}"),
        "preprocess": ([src, "-k", "2", "-o", str(ds), "--features", "pos"], f"1 samples in {ds}: "),
    }
    assert set(runs) | {"demo", "predict", "rollout"} == set(COMMANDS)  # predict, rollout -q: tests/cli/test_predict.py, test_rollout.py
    for flag in ("-q", "--quiet"):
        for command, (argv, line) in runs.items():
            assert main([command, *argv, flag]) == 0, command
            out, err = capsys.readouterr()
            assert line in out and err == "", (command, out, err)

    import meshshard.datasets

    class Stop(Exception):
        pass

    def fake_preprocess(*args, progress=True, **kwargs):
        raise Stop(progress)

    monkeypatch.setattr(meshshard.datasets, "preprocess_dataset", fake_preprocess)
    for argv, shown in ((["-q"], False), (["--quiet"], False), ([], True)):
        with pytest.raises(Stop) as stop:
            main(["demo", "--quick", "--out", str(tmp_path / "demo"), "--data", src, *argv])
        assert stop.value.args == (shown,)


def test_every_partitioning_command_offers_every_partitioner(capsys):
    """Every command with -m/--method takes its choices from the one partitioner registry."""
    from meshshard.partitioners.registry import PARTITIONERS

    for argv in (["partition", "--help"], ["demo", "--help"], ["preprocess", "--help"], ["predict", "--help"],
                 ["plot", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = " ".join(capsys.readouterr().out.split())  # argparse wraps the choices list
        assert all(m in out for m in PARTITIONERS), (argv, out)
    assert "inertial" in PARTITIONERS


def test_a_logged_line_starts_on_its_own_line_above_a_progress_bar(tmp_path, capsys, monkeypatch):
    # the numba compilation notice is logged while `preprocess` or `demo` shows a bar
    import logging

    from tqdm import tqdm

    from meshshard import cli
    from meshshard.cli import info

    def run(args):
        with tqdm(total=2, desc="work", file=sys.stderr, ascii=True) as bar:
            bar.update(1)
            logging.getLogger("meshshard").warning("a notice")
            bar.update(1)
        return 0

    monkeypatch.setattr(info, "run", run)
    handlers = list(logging.getLogger("meshshard").handlers)
    assert cli.main(["info", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    # on a line of its own: tqdm clears the bar's line ("\r" + spaces + "\r") and writes it there
    assert re.search(r"(^|[\r\n])a notice\n", err), repr(err)
    assert err.count("a notice") == 1, repr(err)
    assert logging.getLogger("meshshard").handlers == handlers  # restored after the command


def test_commands_write_only_to_their_output(tmp_path, data_dir, monkeypatch, capsys):
    """Run from another folder, partition and plot write their -o and nothing in the clone; the
    demo takes -o too, and its default folder (in the current folder) is ignored by git."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]

    def clone_state():
        out = subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=root,
                             capture_output=True, text=True, timeout=60).stdout.splitlines()
        return {line for line in out if "__pycache__" not in line and ".pytest_cache" not in line}

    before = clone_state()
    monkeypatch.chdir(tmp_path)
    mesh = str(data_dir / "naca0012_inviscid.su2")
    assert main(["partition", "-q", mesh, "-k", "2", "-o", "shards"]) == 0
    assert main(["plot", "-q", "shards", "-o", "p.png", "--dpi", "30"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.png", "shards"]
    out = capsys.readouterr().out
    assert "wrote shards/" in out and "wrote p.png" in out  # each says what it wrote
    assert clone_state() == before
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "-o OUT, --out OUT" in capsys.readouterr().out
    ignored = subprocess.run(["git", "check-ignore", "-q", "meshshard_demo/prediction.vtu"], cwd=root, timeout=60)
    assert ignored.returncode == 0, "meshshard_demo/ is not in .gitignore"
