"""A binary max-heap of ``(key, tie-break) -> node`` on three preallocated arrays, for FM and rebalancing.

``hk`` float64 keys (gains), ``ht`` uint64 tie-breaks (:func:`~meshshard.partitioners._kernels.tiebreak.mix`),
``hn`` int64 nodes; the larger key, then the larger tie-break, pops first. Entries only propose moves: the
callers re-rate a node when it pops.
"""
from __future__ import annotations

from meshshard.partitioners._kernels.jit import njit

__all__ = ["heap_push", "heap_pop"]


@njit(cache=True, inline="always")
def _rise(hk, ht, hn, i, k, t, u):
    """Put ``(k, t) -> u`` into the hole at ``i`` of a binary max-heap, moving it up past smaller parents."""
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] > k or (hk[parent] == k and ht[parent] >= t):
            break
        hk[i], ht[i], hn[i] = hk[parent], ht[parent], hn[parent]
        i = parent
    hk[i], ht[i], hn[i] = k, t, u


@njit(cache=True, inline="always")
def heap_push(hk, ht, hn, size, k, t, u):
    """Push ``(k, t) -> u`` on a binary max-heap; returns the new size.

    A full heap drops the entry: the heap only proposes moves (each is re-evaluated when popped),
    and the capacity (``n + nnz``, every push a pass can make) is never reached in practice.
    """
    if size == hk.shape[0]:
        return size
    _rise(hk, ht, hn, size, k, t, u)
    return size + 1


@njit(cache=True, inline="always")
def heap_pop(hk, ht, hn, size):
    """Remove the top of the heap; returns ``(k, u, new size)``.

    Bottom-up: the hole at the top goes down along the larger children to a leaf, then the last entry rises
    from there (one comparison per level on the way down instead of two; the same entries pop in the same
    order)."""
    k, u = hk[0], hn[0]
    size -= 1
    lk, lt, ln = hk[size], ht[size], hn[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (hk[c + 1] > hk[c] or (hk[c + 1] == hk[c] and ht[c + 1] > ht[c])):
            c += 1
        hk[i], ht[i], hn[i] = hk[c], ht[c], hn[c]
        i = c
    _rise(hk, ht, hn, i, lk, lt, ln)
    return k, u, size
