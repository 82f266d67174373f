"""meshshard.cli._report: a failure is reported once, not once per rank, with one exit status on
every rank; under torchrun for real with `meshshard predict` on 3 ranks."""
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from meshshard.cli import report_failure, run_and_report
from meshshard.distributed import CollectiveMismatchError, RankLostError

ROOT = Path(__file__).resolve().parents[2]


def _report(exc, rank, world):
    buf = io.StringIO()
    status = report_failure(exc, "prog", file=buf, rank=rank, world=world)
    return status, buf.getvalue()


def test_an_error_of_every_rank_is_printed_by_rank_0_only():
    agreed = CollectiveMismatchError("load: invalid input on rank(s) [0, 1, 2] (ranks 0, 1, 2: ValueError: 2 parts)")
    status, text = _report(agreed, 0, 3)
    assert status == 2 and text.startswith(f"prog: error: {agreed}\n")
    assert "printed once, by rank 0" in text and text.count("2 parts") == 1 and "Traceback" not in text
    for rank in (1, 2):
        assert _report(agreed, rank, 3) == (2, "")
    # wrapped by the command in an error of its own: still told once
    try:
        raise ValueError("predict: reading ck.pt") from agreed
    except ValueError as wrapped:
        assert _report(wrapped, 1, 3) == (2, "")


def test_an_error_of_one_rank_is_printed_by_that_rank_and_a_lost_peer_once():
    status, text = _report(FileNotFoundError("part_0002.pt"), 2, 3)
    assert (status, text) == (2, "prog: rank 2 of 3: error: part_0002.pt\n")
    try:
        raise RuntimeError("bug")
    except RuntimeError as bug:
        status, text = _report(bug, 1, 3)
    assert status == 1 and "Traceback" in text and text.endswith("prog: rank 1 of 3: failed: RuntimeError: bug\n")
    lost = RankLostError.__new__(RankLostError)
    RuntimeError.__init__(lost, "rank(s) [2] left")
    status, text = _report(lost, 0, 3)
    assert status == 1 and "the failing rank's own error is printed above" in text
    assert _report(lost, 1, 3) == (1, "")


def test_one_process_reports_as_before():
    assert _report(ValueError("bad"), 0, 1) == (2, "prog: error: bad\n")
    assert _report(KeyboardInterrupt(), 0, 1) == (130, "prog: interrupted\n")
    assert run_and_report(lambda: None, "prog") == 0 and run_and_report(lambda: 3, "prog") == 3


@pytest.mark.timeout(300)
def test_torchrun_three_ranks_print_an_input_error_once(tmp_path, data_dir):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3", "-m", "meshshard",
           "predict", "-q", "--device", "cpu", "--checkpoint", str(tmp_path / "missing.pt"),
           str(data_dir / "naca0012_inviscid.su2"), "-o", str(tmp_path / "out")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=280, env=env, cwd=tmp_path)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text
    assert text.count("meshshard predict: error:") == 1, text
    assert text.count("no such checkpoint file") == 1, text  # one cause, told once for the 3 ranks
    assert "printed once, by rank 0" in text and "exit status 2" in text, text
    assert 'meshshard/cli/' not in text, text  # no traceback of ours on any rank
    assert not (tmp_path / "out").exists()
