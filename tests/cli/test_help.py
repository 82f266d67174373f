"""`meshshard --help` and `meshshard COMMAND --help` for every command."""
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
