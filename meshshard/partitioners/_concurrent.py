"""Run compiled computations beside the calling thread.

The refinement's kernels are compiled with ``nogil=True``, so a :class:`Concurrent` computation runs
them on another CPU while the caller goes on (a geometric start, say); a :class:`Handoff` passes a value
between them. The worker threads stay, waiting, between computations (a forked child starts its own).
Results do not depend on the timing: a computation works on its own arrays and the caller waits for
them. With one usable CPU, or with ``MESHSHARD_THREADS=1`` in the environment, the computation runs in
the caller, when its result is first asked for.
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Any, Callable

__all__ = ["Concurrent", "Handoff", "HelpedHandoff", "deliver", "second_cpu", "busy_workers"]


def second_cpu() -> bool:
    """Whether a second thread can run beside this one: two usable CPUs, and ``MESHSHARD_THREADS``
    (if set) above 1."""
    limit = os.environ.get("MESHSHARD_THREADS", "").strip()
    if limit:
        try:
            if int(limit) < 2:
                return False
        except ValueError:
            raise ValueError(f"MESHSHARD_THREADS must be an integer, got {limit!r}") from None
    try:
        return len(os.sched_getaffinity(0)) > 1
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) > 1


class _Worker:
    """A daemon thread that runs :class:`Concurrent` computations one after another and waits, idle, in
    between: starting a thread costs far more than handing a computation to a waiting one, and a small
    partition is short enough for that difference to show."""

    def __init__(self) -> None:
        self._jobs: "queue.SimpleQueue[Concurrent]" = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name="meshshard-refine", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            job._run()
            del job  # its inputs and result belong to the caller now
            with _POOL_LOCK:
                _IDLE.append(self)

    def submit(self, job: "Concurrent") -> None:
        self._jobs.put(job)


_POOL_LOCK = threading.Lock()
_IDLE: "list[_Worker]" = []  # workers waiting for a computation


def _forget_workers() -> None:
    """After a fork the child has none of the parent's threads: its workers start afresh."""
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()
    _IDLE.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


def busy_workers() -> int:
    """How many computations are running (or waiting) on worker threads now."""
    with _POOL_LOCK:
        idle = len(_IDLE)
    alive = sum(1 for t in threading.enumerate() if t.name == "meshshard-refine")
    return alive - idle


class Concurrent:
    """``fn(*args)`` started on a worker thread now (see :func:`second_cpu`); :meth:`result` waits for it.

    An exception in ``fn`` is raised again by :meth:`result`. If the caller never asks, the computation
    still finishes on its own (its thread is a daemon, holds nothing the caller needs, and then waits for
    the next computation).
    """

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fn, self._args = fn, args
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = None
        if second_cpu():
            with _POOL_LOCK:
                worker = _IDLE.pop() if _IDLE else None
            if worker is None:
                worker = _Worker()
            self._thread = worker.thread
            worker.submit(self)

    @property
    def threaded(self) -> bool:
        """Whether ``fn`` runs on a thread (else it runs in :meth:`result`)."""
        return self._thread is not None

    def _run(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as err:  # handed to the caller by result()
            self._error = err
        self._fn = self._args = None  # free the inputs
        self._done.set()

    def result(self) -> Any:
        """The value of ``fn(*args)``, computed here if no thread was started."""
        if self._thread is None and not self._done.is_set():
            self._run()
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


class Handoff:
    """A value put once and waited for (:meth:`get`), between the caller and a :class:`Concurrent` computation.

    Put it on every path (a value, ``None`` to say "stop", or an error with :meth:`fail`, which :meth:`get` raises):
    a thread waiting in :meth:`get` would otherwise wait forever. With no thread the computation runs when its
    result is asked for, after the put.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._put = False
        self._value: Any = None
        self._error: BaseException | None = None

    def put(self, value: Any) -> None:
        """Hand ``value`` over (once) and wake whoever waits in :meth:`get`."""
        with self._cond:
            self._value, self._put = value, True
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """Hand an error over instead of a value: :meth:`get` raises it."""
        with self._cond:
            self._error, self._put = error, True
            self._cond.notify_all()

    def ready(self) -> bool:
        """Whether a value (or an error) was put: :meth:`get` would not wait."""
        return self._put

    def get(self) -> Any:
        """The value put, waiting for it; an error handed over with :meth:`fail` is raised."""
        with self._cond:
            while not self._put:
                self._cond.wait()
        return self._received()

    def _received(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


def deliver(handoff: Handoff, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, put on ``handoff`` and returned; if it raises, the error is handed over (:meth:`Handoff.fail`)
    and raised here too."""
    try:
        value = fn(*args)
    except BaseException as err:
        handoff.fail(err)
        raise
    handoff.put(value)
    return value


class _Piece:
    """A piece of work offered on a :class:`HelpedHandoff`: ``fn(*args)``, who runs it, and its outcome."""

    __slots__ = ("fn", "args", "state", "value", "error")

    def __init__(self, fn: Callable[..., Any], args: tuple) -> None:
        self.fn, self.args = fn, args
        self.state = "offered"  # -> "here" (run by the computation) or "running" -> "done" (by the waiter)
        self.value: Any = None
        self.error: BaseException | None = None


class HelpedHandoff(Handoff):
    """A :class:`Handoff` whose waiter works meanwhile: the computation that will put the value may :meth:`offer`
    pieces of its work on the way, which a caller waiting in :meth:`get` runs, the last offered first (two CPUs on
    one computation); a piece nobody took, the computation takes back (:meth:`collect`) and runs itself, so with
    several offered and collected in order, the two meet in the middle.

    The value and every piece's result are what they would be without help: only who runs a piece changes.

    Args:
        helped: whether a thread will wait in :meth:`get` while the computation runs (pieces are worth offering
            only then; with one CPU the computation runs before anyone waits).
    """

    def __init__(self, helped: bool) -> None:
        super().__init__()
        self.helped = bool(helped)
        self._offered: "list[_Piece]" = []  # pieces not taken yet

    def offer(self, fn: Callable[..., Any], *args: Any) -> _Piece:
        """Offer ``fn(*args)`` to a waiter; returns the piece for :meth:`collect`."""
        piece = _Piece(fn, args)
        with self._cond:
            self._offered.append(piece)
            self._cond.notify_all()
        return piece

    def collect(self, piece: _Piece) -> Any:
        """The result of an offered piece: run here if no waiter took it, else waited for."""
        with self._cond:
            if piece.state == "offered":
                self._offered.remove(piece)
                piece.state = "here"
            else:
                while piece.state != "done":
                    self._cond.wait()
        if piece.state == "here":
            return piece.fn(*piece.args)
        if piece.error is not None:
            raise piece.error
        return piece.value

    def get(self) -> Any:
        """The value put, running the pieces offered until then; an error handed over is raised."""
        while self._run_one():
            pass
        return self._received()

    def _run_one(self) -> bool:
        """Wait for a piece and run the last one offered -> True; False (having run nothing) once the value (or an
        error) is put."""
        with self._cond:
            while not self._put and not self._offered:
                self._cond.wait()
            if self._put:
                return False
            piece = self._offered.pop()  # the last offered: the computation takes them back from the first
            piece.state = "running"
        try:
            piece.value = piece.fn(*piece.args)
        except BaseException as err:  # raised again where the piece is collected
            piece.error = err
        with self._cond:
            piece.state = "done"
            self._cond.notify_all()
        return True
