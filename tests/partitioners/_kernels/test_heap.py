"""meshshard.partitioners._kernels.heap: the gain heap."""
import numpy as np

from meshshard.partitioners._kernels.heap import heap_pop, heap_push
from meshshard.partitioners._kernels.tiebreak import mix


def test_gain_heap_pops_by_gain_then_hash_with_interleaved_pushes():
    # the FM and rebalancing heap: entries pop in descending (gain, hash) order whatever the pushes and pops
    # before (stale duplicates of a node included); checked against a sorted reference

    rng = np.random.default_rng(0)
    hk, ht, hn = np.empty(400), np.empty(400, dtype=np.uint64), np.empty(400, dtype=np.int64)
    size, ref, popped, expected = 0, [], [], []
    for step in range(600):
        if size and (step % 3 == 2 or size == 400):
            k, u, size = heap_pop(hk, ht, hn, size)
            top = max(ref)
            ref.remove(top)
            popped.append((k, u))
            expected.append((top[0], top[2]))
        else:
            k, u = float(rng.integers(-4, 5)), int(rng.integers(0, 50))  # few gains: many ties
            t = np.uint64(mix(u, 7))
            size = heap_push(hk, ht, hn, size, k, t, u)
            ref.append((k, int(t), u))
    while size:
        k, u, size = heap_pop(hk, ht, hn, size)
        top = max(ref)
        ref.remove(top)
        popped.append((k, u))
        expected.append((top[0], top[2]))
    assert popped == expected and len(popped) == 400
