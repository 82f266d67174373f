"""meshshard.distributed.agree: every kind of disagreement raises the same error on every rank,
naming the rank, the field and the values; agreement passes; a rank-local exception reaches every
rank; the validation switch is a per-thread context manager that restores its state."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch

import meshshard.distributed as msd
from meshshard.distributed import CollectiveMismatchError, CollectiveTypeError, Field, validation
from meshshard.distributed.agree import set_validation
from meshshard.testing import run_distributed

WORLD = 3


def _outcome(fn):
    """``("ok", result)`` or ``(type name, message, is TypeError, type of __cause__)``."""
    try:
        return "ok", fn()
    except Exception as exc:  # noqa: BLE001 - the test compares what every rank raised
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else None
        return type(exc).__name__, str(exc), isinstance(exc, TypeError), cause


def _fail_on(rank, which, exc):
    def fn():
        if rank == which:
            raise exc
        return rank * 10
    return fn


def _rank_main(rank, world):
    dt = torch.float32 if rank == world - 1 else torch.float64
    out = {}
    out["dtype"] = _outcome(lambda: msd.agree("op", fields=[Field("dtype", [msd.dtype_code(dt)],
                                                                  lambda v: msd.dtype_name(v[0]))]))
    out["sizes"] = _outcome(lambda: msd.agree("op", fields=lambda: [Field("ndim", [2]), Field("sizes", [rank == 1, 3])]))
    out["local"] = _outcome(lambda: msd.agree("op", errors=["sizes must be non-negative"] if rank == 1 else []))
    out["cross"] = _outcome(lambda: msd.agree("op", fields=[Field("count", [rank], must_match=False)],
                                              cross_check=lambda per: f"counts {[p[0][0] for p in per]} do not pair"))
    out["agreed"] = _outcome(lambda: msd.agree("op", fields=[Field("dtype", [1]), Field("shape", [4, 5])]))
    with validation(False):  # the same on every rank: nothing is exchanged, nothing compared
        out["off"] = _outcome(lambda: msd.agree("op", fields=[Field("rank", [rank])]))
        out["forced"] = _outcome(lambda: msd.agree("op", fields=[Field("rank", [rank])], validate=True))
        out["still_raises"] = _outcome(lambda: msd.raise_together(ValueError("x") if rank == 0 else None, "op"))
    out["value_error"] = _outcome(lambda: msd.raise_together(ValueError("k must be >= 1") if rank == 1 else None, "knn"))
    out["type_error"] = _outcome(lambda: msd.raise_together(TypeError("k must be an int") if rank == 0 else None, "knn"))
    out["none"] = _outcome(lambda: msd.raise_together(None, "knn"))
    out["all_alike"] = _outcome(lambda: msd.raise_together(ValueError("2 parts, 3 ranks"), "load"))
    out["two_causes"] = _outcome(lambda: msd.raise_together(ValueError("b" if rank == 1 else "a"), "load"))
    out["run_ok"] = _outcome(lambda: msd.run_together(lambda: rank * 10, "load"))
    out["run_missing"] = _outcome(lambda: msd.run_together(_fail_on(rank, world - 1, FileNotFoundError("part_2.pt")),
                                                           "load"))
    out["same"] = _outcome(lambda: msd.check_same_across_ranks([7, 4 + (rank == 1)], "knn", ["dim", "k"]).tolist())
    out["same_ok"] = _outcome(lambda: msd.check_same_across_ranks([7, 4], "knn", ["dim", "k"]).tolist())
    # the group is still in step after every failure above
    out["after"] = msd.all_gather_sizes([rank]).view(-1).tolist()
    return out


def _ranks(*values):
    return "; ".join(f"rank {r}: {v}" for r, v in enumerate(values))


def test_agree_on_every_rank():
    results = run_distributed(_rank_main, WORLD, timeout=120)
    mismatch = "CollectiveMismatchError"
    expected = {
        "dtype": (mismatch, f"op: ranks do not match on dtype ({_ranks('float64', 'float64', 'float32')})"),
        "sizes": (mismatch, f"op: ranks do not match on sizes ({_ranks([0, 3], [1, 3], [0, 3])})"),
        "local": (mismatch, "op: invalid input on rank(s) [1] (rank 1: sizes must be non-negative)"),
        "cross": (mismatch, "op: counts [0, 1, 2] do not pair"),
        "forced": (mismatch, f"op: ranks do not match on rank ({_ranks(0, 1, 2)})"),
        "still_raises": (mismatch, "op: invalid input on rank(s) [0] (rank 0: ValueError: x)"),
        "value_error": (mismatch, "knn: invalid input on rank(s) [1] (rank 1: ValueError: k must be >= 1)"),
        "type_error": ("CollectiveTypeError", "knn: invalid input on rank(s) [0] (rank 0: TypeError: k must be an int)"),
        "run_missing": (mismatch, "load: invalid input on rank(s) [2] (rank 2: FileNotFoundError: part_2.pt)"),
        "same": (mismatch, f"knn: ranks do not match on k ({_ranks(4, 5, 4)})"),
        # one cause on several ranks is told once, naming its ranks
        "all_alike": (mismatch, "load: invalid input on rank(s) [0, 1, 2] (ranks 0, 1, 2: ValueError: 2 parts, 3 ranks)"),
        "two_causes": (mismatch, "load: invalid input on rank(s) [0, 1, 2] (ranks 0, 2: ValueError: a; rank 1: ValueError: b)"),
    }
    for rank, out in enumerate(results):
        for key, (kind, message) in expected.items():
            got = out[key]
            assert got[:2] == (kind, message), f"rank {rank} {key}: {got}"
            assert got[2] == (kind == "CollectiveTypeError"), f"rank {rank} {key}: TypeError flavour"
        # the failing rank's own exception is chained; the other ranks have none to chain
        assert out["value_error"][3] == ("ValueError" if rank == 1 else None)
        assert out["run_missing"][3] == ("FileNotFoundError" if rank == WORLD - 1 else None)
        assert out["agreed"] == ("ok", [[1, 4, 5]] * WORLD)
        assert out["off"] == ("ok", None)
        assert out["none"] == ("ok", None)
        assert out["run_ok"] == ("ok", rank * 10)
        assert out["same_ok"] == ("ok", [[7, 4]] * WORLD)
        assert out["after"] == list(range(WORLD))


def test_without_process_group():
    assert not msd.is_initialized()
    err = KeyError("missing")
    with pytest.raises(KeyError) as info:  # the original exception, unchanged
        msd.raise_together(err, "op")
    assert info.value is err
    assert msd.run_together(lambda: 5, "op") == 5
    with pytest.raises(ValueError, match=r"^op: bad$"):
        msd.agree("op", errors=["bad"])
    assert msd.agree("op", fields=[Field("x", [1])]) is None
    assert msd.check_same_across_ranks([3, 4], "op").tolist() == [[3, 4]]
    assert msd.dtype_name(msd.dtype_code(torch.bfloat16)) == "bfloat16"
    assert msd.dtype_code(torch.float8_e4m3fn) >= 1000 and msd.dtype_name(1000).startswith("dtype#")
    assert issubclass(CollectiveTypeError, TypeError) and issubclass(CollectiveTypeError, CollectiveMismatchError)


def test_validation_switch_restores_and_is_per_thread():
    assert msd.get_validation()
    with pytest.raises(RuntimeError):
        with validation(False):
            assert not msd.get_validation()
            with validation(True):
                assert msd.get_validation()
            assert not msd.get_validation()
            raise RuntimeError("boom")
    assert msd.get_validation()

    # Another thread's switch is its own: both threads hold their setting across a barrier.
    barrier = threading.Barrier(2, timeout=10)
    seen = {}

    def worker():
        with validation(False):
            barrier.wait()  # the main thread is inside validation(True) now
            seen["worker"] = msd.get_validation()
            barrier.wait()

    t = threading.Thread(target=worker)
    t.start()
    with validation(True):
        barrier.wait()
        seen["main"] = msd.get_validation()
        barrier.wait()
    t.join()
    assert seen == {"worker": False, "main": True}

    with pytest.warns(DeprecationWarning, match="validation"):
        assert set_validation(False) is True
    try:
        assert not msd.get_validation()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            set_validation(True)
    assert msd.get_validation()
