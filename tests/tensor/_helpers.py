"""Checks shared by the ShardTensor tests (run inside spawned ranks too)."""
from __future__ import annotations


def expect_raises(exc, fn, *words) -> None:
    """Call ``fn`` and require it to raise ``exc`` whose message contains every one of ``words``."""
    try:
        fn()
    except exc as e:  # noqa: PERF203
        for w in words:
            assert w in str(e), f"message {str(e)!r} lacks {w!r}"
        return
    raise AssertionError(f"expected {exc.__name__}")
