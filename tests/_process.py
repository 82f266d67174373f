"""Whether a process still exists: tests/test_testing.py and tests/distributed/test_comm.py check
that run_distributed's ranks are gone after a failure, a timeout or a killed parent."""
import os

__all__ = ["alive"]


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 is checked, not sent).

    Args:
        pid: a process id.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
