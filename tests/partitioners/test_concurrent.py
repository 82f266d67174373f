import os
import signal
import threading
import time

import numpy as np
import pytest

from meshshard.partitioners import _concurrent
from meshshard.partitioners._concurrent import Concurrent, Handoff, HelpedHandoff, deliver, second_cpu


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


def test_workers_wait_for_the_next_computation_and_run_side_by_side(monkeypatch):
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    first = Concurrent(threading.get_ident).result()
    _wait_idle()
    assert Concurrent(threading.get_ident).result() == first  # the idle worker took it: no new thread
    gate = Handoff()
    a = Concurrent(lambda: (gate.get(), threading.get_ident())[1])
    b = Concurrent(threading.get_ident)  # a is busy waiting: b gets a worker of its own
    assert a._thread is not b._thread
    b_ident = b.result()
    gate.put(0)
    assert a.result() != b_ident
    _wait_idle()
    assert _concurrent.busy_workers() == 0


def _wait_idle(timeout=10.0):
    end = time.monotonic() + timeout
    while _concurrent.busy_workers() and time.monotonic() < end:
        time.sleep(0.005)


def test_a_forked_child_starts_its_own_workers(monkeypatch):
    # the parent's worker threads do not exist in a forked child: handing it a computation must not hang
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    assert Concurrent(np.add, 1, 1).result() == 2
    _wait_idle()
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the computation ran, killed by the alarm if it hangs
        code = 1
        try:
            signal.alarm(20)
            code = 0 if Concurrent(np.add, 2, 3).result() == 5 else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_waiter_runs_the_pieces_offered_before_the_value():
    # the computation offers two pieces and waits until they ran before collecting them, so only the caller,
    # waiting in get(), can have run them; an error in a piece is raised where it is collected
    helped = HelpedHandoff(helped=True)
    ran = [Handoff(), Handoff()]

    def fails():
        ran[1].put(True)
        raise ZeroDivisionError

    def computation():
        first = helped.offer(lambda: ran[0].put(True) or _which_thread())
        second = helped.offer(fails)
        ran[0].get(), ran[1].get()
        got = [helped.collect(first)]
        try:
            helped.collect(second)
        except ZeroDivisionError:
            got.append("raised")
        helped.put((_which_thread(), got))

    job = threading.Thread(target=computation, name="producer")
    job.start()
    mine, got = helped.get()
    job.join(10)
    assert mine == "producer" and got == [threading.current_thread().name, "raised"]


def test_a_piece_nobody_takes_runs_where_it_is_collected():
    helped = HelpedHandoff(helped=False)
    piece = helped.offer(_which_thread)
    assert helped.collect(piece) == threading.current_thread().name
    assert not helped.ready()
    helped.put(7)
    assert helped.ready() and helped.get() == 7


@pytest.mark.parametrize("kind", [Handoff, lambda: HelpedHandoff(helped=True)])
def test_deliver_hands_over_the_value_or_the_error(kind):
    # what a computation delivers reaches the waiter; an error is raised both where it was delivered and in a
    # thread already waiting for it
    ok, bad = kind(), kind()
    assert deliver(ok, np.add, 2, 3) == 5 and ok.get() == 5
    seen = []

    def wait():
        try:
            bad.get()
        except ZeroDivisionError:
            seen.append("raised")

    waiter = threading.Thread(target=wait)
    waiter.start()
    with pytest.raises(ZeroDivisionError):
        deliver(bad, lambda: 1 / 0)
    waiter.join(10)
    assert seen == ["raised"] and bad.ready()


def test_the_waiter_takes_the_last_piece_first_and_the_two_meet():
    # four pieces offered: the computation runs them from the first on and takes back those not yet taken, the
    # waiter from the last on; every result comes back in the order offered, whoever ran it
    helped = HelpedHandoff(helped=True)
    waiter_took = Handoff()
    names = {}

    def piece(k):
        names[k] = _which_thread()
        if k == 3:
            waiter_took.put(True)
        return k * k

    def computation():
        offered = [helped.offer(piece, k) for k in (1, 2, 3)]
        waiter_took.get()  # the waiter has taken the last piece first
        got = [piece(0)] + [helped.collect(p) for p in offered]
        helped.put(got)

    job = threading.Thread(target=computation, name="producer")
    job.start()
    got = helped.get()
    job.join(10)
    assert got == [0, 1, 4, 9]
    assert names[3] == threading.current_thread().name and names[0] == "producer"
