import threading

import numpy as np
import pytest

from meshshard.partitioners import _concurrent
from meshshard.partitioners._concurrent import Concurrent, Handoff, second_cpu


def _which_thread():
    return threading.current_thread().name


def test_runs_beside_the_caller_when_a_second_cpu_is_there(monkeypatch):
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    assert Concurrent(_which_thread).result() == "meshshard-refine"
    assert Concurrent(np.add, 2, 3).result() == 5


def test_runs_in_the_caller_with_one_cpu(monkeypatch):
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: False)
    calls = []
    job = Concurrent(lambda: calls.append(_which_thread()) or len(calls))
    assert calls == []  # nothing runs until the result is asked for
    assert job.result() == 1 and calls == [threading.current_thread().name]


@pytest.mark.parametrize("threaded", [True, False])
def test_an_error_reaches_the_caller(monkeypatch, threaded):
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: threaded)

    def fails():
        raise ValueError("bad graph")

    job = Concurrent(fails)
    with pytest.raises(ValueError, match="bad graph"):
        job.result()


def test_meshshard_threads_limits_it(monkeypatch):
    monkeypatch.setenv("MESHSHARD_THREADS", "1")
    assert not second_cpu()
    monkeypatch.setenv("MESHSHARD_THREADS", "two")
    with pytest.raises(ValueError, match="MESHSHARD_THREADS must be an integer"):
        second_cpu()
    monkeypatch.delenv("MESHSHARD_THREADS")
    monkeypatch.setattr(_concurrent.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert not second_cpu()
    monkeypatch.setattr(_concurrent.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert second_cpu()


@pytest.mark.parametrize("threaded", [True, False])
def test_a_handoff_brings_the_callers_value_to_the_computation(monkeypatch, threaded):
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: threaded)
    handoff = Handoff()
    job = Concurrent(lambda: (handoff.get(), _which_thread()))
    handoff.put(41)  # the thread, if any, waits until here
    value, where = job.result()
    assert value == 41 and where == ("meshshard-refine" if threaded else threading.current_thread().name)
