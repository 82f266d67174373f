"""Resident-memory probes shared by the benchmarks (Linux ``/proc``; harmless elsewhere).

A step's peak is measured as ``VmHWM`` after :func:`reset_hwm` minus ``VmRSS`` before the step;
:func:`malloc_trim` first gives memory glibc keeps after ``free()`` back to the OS, so the RSS counts
live memory only (otherwise a warm-up step's freed activations stay resident and hide the next
step's peak).
"""
from __future__ import annotations

__all__ = ["status_kb", "rss_kb", "hwm_kb", "malloc_trim", "reset_hwm"]


def status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``"VmRSS"``, ``"VmHWM"``); 0 when absent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_kb() -> int:
    """The resident set size now, kB."""
    return status_kb("VmRSS")


def hwm_kb() -> int:
    """The peak resident set size since the process started or :func:`reset_hwm`, kB."""
    return status_kb("VmHWM")


def malloc_trim() -> None:
    """Return memory glibc keeps after ``free()`` to the OS."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def reset_hwm() -> bool:
    """Reset the peak resident set size (Linux >= 4.0); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
