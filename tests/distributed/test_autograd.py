"""Raw and differentiable variable-size collectives against single-process references (1-4 gloo
ranks, one spawned group per world size shared by the tests of this module).

Every rank builds the same global float64 data from a seed, so the expected result of any
collective is computed locally from the whole tensor. Gradients are checked with
``torch.autograd.gradcheck`` on a function of the *global* input that every rank evaluates with the
same number of calls: the global input is split into this rank's shard (backward: all-gather the
shard gradients), the collective runs, and every rank's output is all-gathered into one replicated
result (backward: keep this rank's slice). That composite has the same Jacobian on every rank, so
gradcheck's lock-step perturbations check the collective's backward against its forward.
"""
import datetime
import os

import pytest
import torch

import meshshard.distributed as msd
from meshshard.distributed.autograd import (
    all_gather_v,
    all_reduce_sum,
    all_reduce_v,
    all_to_all_v,
    gather_v,
    get_validation,
    indexed_all_to_all_v,
    reduce_scatter_v,
    scatter_v,
)
from meshshard.testing import run_distributed

# uneven shard sizes with a zero-row rank for every world size > 1
SIZES = {1: [4], 2: [3, 0], 3: [2, 0, 3], 4: [1, 3, 0, 2]}

# (dim, shape of a shard with n slices along dim)
LAYOUTS = [(0, lambda n: (n, 2)), (1, lambda n: (2, n, 2))]


def _a2a_matrix(world):
    # sizes[i][j] = slices rank i sends to rank j: uneven, with zeros
    return [[(i + 2 * j + 1) % 3 for j in range(world)] for i in range(world)]


def _indexed_plan(world, sizes, gen):
    # counts may exceed a shard's size, so rows repeat; ranks with no rows send nothing
    counts = [[0 if sizes[i] == 0 else (i + 2 * j + 2) % 4 for j in range(world)] for i in range(world)]
    idx = [[torch.randint(0, max(sizes[i], 1), (counts[i][j],), generator=gen) for j in range(world)] for i in range(world)]
    return counts, idx


def _offsets(sizes):
    out = [0]
    for s in sizes:
        out.append(out[-1] + s)
    return out


class _ShardFromReplicated(torch.autograd.Function):
    """Replicated global tensor -> this rank's slice; backward all-gathers the slice gradients."""

    @staticmethod
    def forward(ctx, full, sizes, dim):
        ctx.sizes, ctx.dim = sizes, dim
        rank = msd.get_rank()
        return full.narrow(dim, sum(sizes[:rank]), sizes[rank]).clone()

    @staticmethod
    def backward(ctx, grad):
        return all_gather_v(grad, ctx.sizes, ctx.dim), None, None


class _ReplicateFromShard(torch.autograd.Function):
    """Every rank's piece -> the replicated concatenation; backward keeps this rank's slice."""

    @staticmethod
    def forward(ctx, piece, sizes, dim):
        ctx.sizes, ctx.dim = sizes, dim
        return all_gather_v(piece, sizes, dim)

    @staticmethod
    def backward(ctx, grad):
        rank = msd.get_rank()
        return grad.narrow(ctx.dim, sum(ctx.sizes[:rank]), ctx.sizes[rank]), None, None


def _cases(world, rank, dim, shape, gen):
    """(name, global input, in_sizes, op on the shard, out_sizes or None if replicated, expected)."""
    sizes = SIZES[world]
    total = sum(sizes)
    full = torch.randn(shape(total), generator=gen, dtype=torch.float64)
    cases = []

    cases.append(("all_gather_v", full, sizes, lambda x: all_gather_v(x, sizes, dim), [total] * world, full))

    partial = torch.randn(shape(world * total), generator=gen, dtype=torch.float64)
    blocks = partial.split(total, dim)
    expected = sum(b.narrow(dim, sum(sizes[:rank]), sizes[rank]) for b in blocks)
    cases.append(("reduce_scatter_v", partial, [total] * world, lambda x: reduce_scatter_v(x, sizes, dim), sizes, expected))
    cases.append(("all_reduce_v", partial, [total] * world, lambda x: all_reduce_v(x, sizes, dim), sizes, expected))

    dst = world - 1
    gather_sizes = [total if r == dst else 0 for r in range(world)]
    expected = full if rank == dst else full.narrow(dim, 0, 0)
    cases.append(("gather_v", full, sizes, lambda x: gather_v(x, sizes, dim, dst=dst), gather_sizes, expected))

    src = world // 2
    scatter_in = [total if r == src else 0 for r in range(world)]
    expected = full.narrow(dim, sum(sizes[:rank]), sizes[rank])
    cases.append(("scatter_v", full, scatter_in, lambda x: scatter_v(x, sizes, dim, src=src), sizes, expected))

    mat = _a2a_matrix(world)
    rows = [sum(r) for r in mat]
    send_all = torch.randn(shape(sum(rows)), generator=gen, dtype=torch.float64)
    per_rank = send_all.split(rows, dim)
    received = [sum(mat[i][rank] for i in range(world)) for rank in range(world)]
    expected = torch.cat(
        [per_rank[i].narrow(dim, sum(mat[i][:rank]), mat[i][rank]) for i in range(world)], dim
    )
    cases.append(("all_to_all_v", send_all, rows, lambda x: all_to_all_v(x, mat, dim), received, expected))
    mat_t = torch.tensor(mat)  # LongTensor form of sizes
    cases.append(("all_to_all_v[LongTensor]", send_all, rows, lambda x: all_to_all_v(x, mat_t, dim), received, expected))

    counts, idx = _indexed_plan(world, sizes, gen)
    shards = full.split(sizes, dim)
    received = [sum(counts[i][j] for i in range(world)) for j in range(world)]
    expected = torch.cat([shards[i].index_select(dim, idx[i][rank]) for i in range(world)], dim)
    cases.append((
        "indexed_all_to_all_v", full, sizes,
        lambda x: indexed_all_to_all_v(x, idx[rank], counts, dim=dim), received, expected,
    ))

    partial = torch.randn(shape(world * 3), generator=gen, dtype=torch.float64)
    expected = sum(partial.split(3, dim))
    cases.append(("all_reduce_sum", partial, [3] * world, lambda x: all_reduce_sum(x), None, expected))
    return cases


def _check_collectives(rank, world_size):
    torch.manual_seed(1234 + rank)  # per-rank seeds must not matter: all data comes from `gen`
    assert get_validation()
    done = []
    for dim, shape in LAYOUTS:
        gen = torch.Generator().manual_seed(7 + dim)
        for name, full, in_sizes, op, out_sizes, expected in _cases(world_size, rank, dim, shape, gen):
            shard = full.narrow(dim, sum(in_sizes[:rank]), in_sizes[rank])
            got = op(shard)
            assert got.shape == expected.shape, f"{name} dim={dim}: shape {tuple(got.shape)} != {tuple(expected.shape)}"
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-12, msg=f"{name} dim={dim} forward")
            assert got.is_contiguous() and got.dtype == torch.float64

            # Same result with validation off (the hot-loop path).
            with msd.validation(False):
                torch.testing.assert_close(op(shard), expected, rtol=0, atol=1e-12)

            def composite(x, op=op, in_sizes=in_sizes, out_sizes=out_sizes):
                y = op(_ShardFromReplicated.apply(x, in_sizes, dim))
                return y if out_sizes is None else _ReplicateFromShard.apply(y, out_sizes, dim)

            # Full Jacobian for dim 0; a random projection (fast mode, same seed on every rank so
            # that all ranks draw the same vectors) for the 3-d dim-1 layout. Validation was shown
            # above; skipping it here halves the number of collective calls.
            x = full.clone().requires_grad_(True)
            torch.manual_seed(0)
            with msd.validation(False):
                ok = torch.autograd.gradcheck(composite, (x,), eps=1e-6, atol=1e-9, rtol=1e-7, fast_mode=dim != 0)
            assert ok, f"{name} dim={dim} gradcheck"
            done.append(f"{name}/dim{dim}")

    sizes = SIZES[world_size]
    total = sum(sizes)
    gen = torch.Generator().manual_seed(99)
    full = torch.randn(total, 3, dtype=torch.float64, generator=gen)
    off = sum(sizes[:rank])

    # Negative dim and a non-contiguous shard (a transposed view).
    shard_t = full.t().contiguous().narrow(1, off, sizes[rank])  # [3, n], sharded along dim -1
    assert torch.equal(all_gather_v(shard_t, sizes, dim=-1), full.t())
    noncontig = full.t().contiguous().t().narrow(0, off, sizes[rank])
    assert not noncontig.is_contiguous() or sizes[rank] <= 1
    assert torch.equal(all_gather_v(noncontig, sizes), full)

    # Large all-gathers go point-to-point (no W-fold send copy): force that path on tiny data.
    import meshshard.distributed.autograd as ag

    previous_min = ag._P2P_MIN_BYTES
    ag._P2P_MIN_BYTES = 0
    try:
        assert torch.equal(all_gather_v(shard_t, sizes, dim=-1), full.t())
        xp = full[off : off + sizes[rank]].clone().requires_grad_(True)
        wp = torch.arange(total * 3, dtype=torch.float64).reshape(total, 3)
        (all_gather_v(xp, sizes) * wp).sum().backward()
        torch.testing.assert_close(xp.grad, world_size * wp[off : off + sizes[rank]], rtol=0, atol=1e-12)
        composite = lambda t: _ReplicateFromShard.apply(  # noqa: E731
            all_gather_v(_ShardFromReplicated.apply(t, sizes, 0), sizes), [total] * world_size, 0
        )
        torch.manual_seed(0)
        assert torch.autograd.gradcheck(composite, (full.clone().requires_grad_(True),), fast_mode=True)
        # Near the threshold an empty shard must pick the same path as the others (it hung once:
        # it sized its rows from its own zero rows and took the all-to-all path alone).
        ag._P2P_MIN_BYTES = 1
        assert torch.equal(all_gather_v(full[off : off + sizes[rank]], sizes), full)
    finally:
        ag._P2P_MIN_BYTES = previous_min

    # scatter_v: a non-source carrier of any length is never read.
    carrier = torch.full((5, 3), float("nan"), dtype=torch.float64) if rank != 0 else full
    assert torch.equal(scatter_v(carrier, sizes, src=0), full[off : off + sizes[rank]])

    # Backward against hand-computed gradients (sum convention), incl. repeated indices.
    x = full[off : off + sizes[rank]].clone().requires_grad_(True)
    w = torch.arange(total * 3, dtype=torch.float64).reshape(total, 3)
    (all_gather_v(x, sizes) * w).sum().backward()
    torch.testing.assert_close(x.grad, world_size * w[off : off + sizes[rank]], rtol=0, atol=1e-12)

    x.grad = None
    dst = world_size - 1
    out = gather_v(x, sizes, dst=dst)
    (out * (w if rank == dst else w[:0])).sum().backward()
    torch.testing.assert_close(x.grad, w[off : off + sizes[rank]], rtol=0, atol=1e-12)

    # every rank with rows sends its row 0 three times to itself and once to the next rank
    x.grad = None
    counts = [[0] * world_size for _ in range(world_size)]
    for i in range(world_size):
        if sizes[i] > 0:
            counts[i][i] += 3
            counts[i][(i + 1) % world_size] += 1
    rep = [torch.zeros(counts[rank][j], dtype=torch.long) for j in range(world_size)]
    indexed_all_to_all_v(x, rep, counts).sum().backward()
    expected = torch.zeros_like(x)
    if sizes[rank] > 0:
        expected[0] = 4.0
    assert torch.equal(x.grad, expected)

    # Low precision: reduce-scatter sums bfloat16 in float32 with use_fp32=True.
    xb = torch.full((total, 2), 1.0 / 3.0).to(torch.bfloat16)
    got = reduce_scatter_v(xb, sizes)
    ref = (xb.float() * world_size).to(torch.bfloat16)[off : off + sizes[rank]]
    assert got.dtype == torch.bfloat16 and torch.equal(got, ref)

    # All shards empty, and integer payloads.
    empty = torch.zeros(0, 3, dtype=torch.float64, requires_grad=True)
    zeros, zero_mat = [0] * world_size, [[0] * world_size] * world_size
    outs = [
        all_gather_v(empty, zeros), gather_v(empty, zeros), scatter_v(empty, zeros), all_to_all_v(empty, zero_mat),
        indexed_all_to_all_v(empty, [torch.zeros(0, dtype=torch.long)] * world_size, zero_mat),
        reduce_scatter_v(empty, zeros),
    ]
    assert all(o.shape == (0, 3) for o in outs)
    sum(o.sum() for o in outs).backward()
    assert empty.grad.shape == (0, 3)
    ids = torch.arange(off, off + sizes[rank])
    assert torch.equal(all_gather_v(ids, sizes), torch.arange(total))

    # Results stay usable after a failed call: every error below is raised on every rank.
    errors = _check_errors(rank, world_size)
    assert torch.equal(all_gather_v(full[off : off + sizes[rank]], sizes), full)
    return done, errors


def _catch(fn):
    try:
        fn()
    except ValueError as exc:  # CollectiveMismatchError is a ValueError
        return type(exc).__name__, str(exc)
    return None


def _check_errors(rank, world_size):
    sizes = SIZES[world_size]
    n = sizes[rank]
    x = torch.zeros(n, 2, dtype=torch.float64)
    out = {}
    if world_size > 1:
        out["dtype"] = _catch(lambda: all_gather_v(x.float() if rank == 0 else x, sizes))
        out["features"] = _catch(lambda: gather_v(torch.zeros(n, 3 if rank == 0 else 2), sizes))
        other = list(sizes)
        other[-1] += 1 if rank == 0 else 0  # rank 0 believes in a different split
        out["sizes_disagree"] = _catch(lambda: all_gather_v(x, other))
        mat = _a2a_matrix(world_size)
        if rank == 0:
            mat = [list(r) for r in mat]
            mat[0][1] += 1  # rank 0 sends one more row to rank 1 than rank 1 expects
        rows = sum(mat[rank])
        out["a2a_counts"] = _catch(lambda: all_to_all_v(torch.zeros(rows, 2), mat))
        bad_len = sizes + [0] if rank == world_size - 1 else sizes
        out["len_sizes"] = _catch(lambda: scatter_v(torch.zeros(sum(sizes), 2), bad_len, src=0))
        bad_idx = [torch.tensor([5]) if (j == 0 and rank == 0) else torch.zeros(0, dtype=torch.long) for j in range(world_size)]
        counts = [[1 if (i == 0 and j == 0) else 0 for j in range(world_size)] for i in range(world_size)]
        out["index_range"] = _catch(lambda: indexed_all_to_all_v(torch.zeros(max(n, 1), 2), bad_idx, counts))
        out["ndim"] = _catch(lambda: all_reduce_sum(torch.zeros(2, 2) if rank == 0 else torch.zeros(4)))
    # sizes that do not add up (source tensor of the wrong length), also in one process
    out["sum_sizes"] = _catch(lambda: scatter_v(torch.zeros(sum(sizes) + 1, 2), sizes, src=0))
    out["bad_dim"] = _catch(lambda: all_gather_v(x, sizes, dim=2))
    out["negative"] = _catch(lambda: all_gather_v(x, [-1] + sizes[1:] if rank != 0 else sizes))
    return out


EXPECTED_ERRORS = {
    "dtype": ("all_gather_v", "dtype"),
    "features": ("gather_v", "shape without dim"),
    "sizes_disagree": ("all_gather_v", "sizes"),
    "a2a_counts": ("all_to_all_v", "rank 0 sends"),
    "len_sizes": ("scatter_v", "len(sizes)"),
    "index_range": ("indexed_all_to_all_v", "indices must lie in"),
    "ndim": ("all_reduce_sum", "ndim"),
    "sum_sizes": ("scatter_v", "sum(sizes)"),
    "bad_dim": ("all_gather_v", "out of range"),
    "negative": ("all_gather_v", "non-negative"),
}


def _primitives(rank, world_size):
    """The raw (non-differentiable) collectives of meshshard.distributed.comm."""
    sizes = msd.all_gather_sizes([rank, 2 * rank])
    # rank r sends (j + 1) copies of r to rank j: uneven both ways, rank 0 receives 1 row each
    send = torch.cat([torch.full((j + 1,), float(rank)) for j in range(world_size)])
    recv = msd.all_to_all_single(send, [rank + 1] * world_size, [j + 1 for j in range(world_size)])
    total = msd.all_reduce(torch.tensor([float(rank)]))
    b = msd.broadcast(torch.tensor([rank * 10]), src=world_size - 1)
    stacked = msd.all_gather_into_tensor(torch.full((2, 3), float(rank)))
    objs = msd.all_gather_object({"rank": rank})
    mismatch = None
    try:
        msd.check_same_across_ranks([7, rank == 0], "probe", names=["a", "first"])
    except msd.CollectiveMismatchError as exc:
        mismatch = str(exc)
    return sizes, recv, total, b, stacked, objs, mismatch, msd.get_backend(), msd.comm_device().type


def _check_primitives(world_size, results):
    for rank, (sizes, recv, total, b, stacked, objs, mismatch, backend, dev) in enumerate(results):
        assert sizes.tolist() == [[r, 2 * r] for r in range(world_size)]
        expected = torch.cat([torch.full((rank + 1,), float(j)) for j in range(world_size)])
        assert torch.equal(recv, expected)
        assert total.item() == sum(range(world_size))
        assert b.item() == (world_size - 1) * 10
        assert torch.equal(stacked, torch.arange(world_size, dtype=torch.float32).view(-1, 1, 1).expand(-1, 2, 3))
        assert objs == [{"rank": r} for r in range(world_size)]
        assert backend == "gloo" and dev == "cpu"
        if world_size > 1:
            assert mismatch is not None and "probe" in mismatch and "do not match on first (rank 0: 1; rank 1: 0" in mismatch
        else:
            assert mismatch is None


def _init_checks(rank, world_size):
    """init_distributed under the torchrun-style environment that run_distributed sets."""
    import torch.distributed as dist
    from meshshard.testing import _free_port

    assert os.environ["MASTER_ADDR"] == "127.0.0.1" and os.environ["WORLD_SIZE"] == str(world_size)
    assert msd.is_initialized() and msd.get_backend() == "gloo"
    assert msd.init_distributed(timeout=3.0) == (rank, world_size)  # a second call is harmless
    if world_size != 1:
        return None
    # A fresh group from the environment, with a timeout in seconds.
    msd.destroy_distributed()
    assert not msd.is_initialized()
    os.environ["MASTER_PORT"] = str(_free_port())
    assert msd.init_distributed(timeout=7.5) == (0, 1) and msd.get_backend() == "gloo"
    pg = dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device("cpu")).options._timeout


def _rank_main(rank, world_size):
    pg_timeout = _init_checks(rank, world_size)
    prims = _primitives(rank, world_size)
    done, errors = _check_collectives(rank, world_size)
    return {"timeout": pg_timeout, "primitives": prims, "done": done, "errors": errors}


_RESULTS = {}


def _results(world_size):
    """One spawned group per world size, shared by the tests below (run at most once)."""
    if world_size not in _RESULTS:
        try:
            _RESULTS[world_size] = (True, run_distributed(_rank_main, world_size, timeout=200))
        except Exception as exc:  # noqa: BLE001 - re-raised by every test that needs it
            _RESULTS[world_size] = (False, exc)
    ok, value = _RESULTS[world_size]
    if not ok:
        raise value
    return value


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_primitives_and_init(world_size):
    results = _results(world_size)
    _check_primitives(world_size, [r["primitives"] for r in results])
    if world_size == 1:
        assert results[0]["timeout"] == datetime.timedelta(seconds=7.5)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_collectives_forward_gradcheck_and_errors(world_size):
    results = [(r["done"], r["errors"]) for r in _results(world_size)]
    for rank, (done, errors) in enumerate(results):
        assert len(done) == 2 * 9, done
        for key, err in errors.items():
            if key == "negative" and world_size == 1:
                assert err is None  # one process: no rank has a negative size
                continue
            fn_name, needle = EXPECTED_ERRORS[key]
            assert err is not None, f"rank {rank}: {key} raised nothing"
            kind, message = err
            assert message.startswith(fn_name) and needle in message, f"rank {rank} {key}: {message}"
            if world_size > 1:
                assert kind == "CollectiveMismatchError", f"rank {rank} {key}: {kind}"
        # every rank saw the same message
        assert errors == results[0][1]


def test_without_process_group():
    assert not msd.is_initialized()
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    y = all_gather_v(x, [4])
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()
    assert torch.equal(gather_v(x, [4]), x) and torch.equal(scatter_v(x, [4]), x)
    assert torch.equal(all_to_all_v(x, [[4]]), x) and torch.equal(all_reduce_sum(x), x)
    assert torch.equal(indexed_all_to_all_v(x, [torch.tensor([2, 2, 0])], [[3]]), x[[2, 2, 0]])
    assert torch.autograd.gradcheck(lambda t: indexed_all_to_all_v(t, [torch.tensor([2, 2, 0])], [[3]]), (x,))
    assert torch.autograd.gradcheck(lambda t: all_gather_v(t, [4], dim=1 - 1), (x,))
    with pytest.raises(ValueError, match="len\\(sizes\\)=2"):
        all_gather_v(x, [2, 2])
    with pytest.raises(ValueError, match="sizes\\[0\\]=5"):
        gather_v(x, [5])
    with pytest.raises(ValueError, match="3 x 3|1 x 1"):
        all_to_all_v(x, [[4, 0]])
    with pytest.raises(TypeError):
        all_gather_v([1, 2], [2])
    with msd.validation(False):
        assert not get_validation()
        assert torch.equal(all_gather_v(x, [4]), x)
    assert get_validation()
