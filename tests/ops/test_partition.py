"""partition_distributed: equal to ms.partition(concatenated slices, refine=False) at 1-4 ranks."""
from pathlib import Path

import numpy as np
import pytest
import torch

from meshshard.testing import run_distributed

TIMEOUT = 240.0
METHODS = ["hilbert", "morton", "kdtree"]


def _clouds(data_dir: str):
    import meshshard as ms

    rng = np.random.default_rng(0)
    grid = np.stack(np.meshgrid(np.arange(24.0), np.arange(17.0), indexing="ij"), -1).reshape(-1, 2)
    mesh = ms.read_mesh(Path(data_dir) / "naca0012_inviscid.su2")
    return {
        "cloud3d": rng.random((2500, 3)) * [4.0, 1.0, 0.5],       # elongated: curves tile with cubes
        "grid": grid[rng.permutation(grid.shape[0])],              # many equal coordinates: ties by id
        "float32": rng.random((700, 2)).astype(np.float32),
        "naca0012": np.asarray(mesh.points, dtype=np.float64),     # a real mesh, 2D
    }


def _bounds(n: int, world: int, rank: int):
    """Uneven slices; rank 1 holds nothing when there are 3 or more ranks."""
    cuts = (np.sqrt(np.arange(world + 1) / world) * n).astype(int)  # front ranks get more
    if world >= 3:
        cuts[2] = cuts[1]
    return int(cuts[rank]), int(cuts[rank + 1])


def _owned_ids(ref, num_parts: int, world: int, rank: int) -> torch.Tensor:
    """The global ids rank ``rank`` receives from ``partition_distributed``: its parts' nodes, part by part."""
    mine = [p for p in range(num_parts) if p * world // num_parts == rank]
    return torch.cat([ref.part_nodes(p) for p in mine]) if mine else torch.zeros(0, dtype=torch.long)


def _cases(clouds):
    rng = np.random.default_rng(1)
    for name, pts in clouds.items():
        int_w = rng.integers(0, 6, pts.shape[0]).astype(np.float64)  # integer-valued, zeros included
        for method in METHODS:
            for parts, w in (("world", None), (7, int_w)):
                yield (name, method, parts), pts, w


def _check_world(rank, world, data_dir):
    from meshshard.ops.partition import partition_distributed

    clouds = _clouds(data_dir)
    out = {}
    for case, pts, w in _cases(clouds):
        num_parts = world if case[2] == "world" else case[2]
        lo, hi = _bounds(pts.shape[0], world, rank)
        local = torch.from_numpy(pts[lo:hi]) if case[0] == "float32" else pts[lo:hi]
        out[case] = partition_distributed(local, num_parts, case[1], weights=None if w is None else w[lo:hi])
    # default num_parts is the world size; bad input raises on every rank, naming the rank
    part = partition_distributed(clouds["grid"][rank::world])
    assert part.num_parts == world and part.method == "hilbert"
    bad = clouds["grid"][rank::world].copy()
    if rank == world - 1:
        bad[0, 0] = np.nan
    named = rf"invalid input on rank\(s\) \[{world - 1}\] \(rank {world - 1}: ValueError: " if world > 1 else ""
    with pytest.raises(ValueError, match=named + "points hold NaN"):
        partition_distributed(bad)
    with pytest.raises(ValueError, match="unknown method 'graph'"):
        partition_distributed(clouds["grid"], method="graph")
    with pytest.raises(ValueError, match="must not exceed the number of nodes"):
        partition_distributed(clouds["grid"][:1], num_parts=world + 1)
    if world > 1:
        with pytest.raises(ValueError, match="weights given on some ranks but not on others"):
            partition_distributed(clouds["grid"][:5], weights=np.ones(5) if rank == 0 else None)
        with pytest.raises(ValueError, match="different dimensions"):
            partition_distributed(clouds["cloud3d"][:5, : 2 + (rank == 0)])
    with pytest.raises(ValueError, match="weights sum to zero"):
        partition_distributed(clouds["grid"][:5], weights=np.zeros(5))
    return out


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_partition_distributed_equals_single_process(world, data_dir):
    import meshshard as ms

    results = run_distributed(_check_world, world, args=(str(data_dir),), timeout=TIMEOUT)
    for case, pts, w in _cases(_clouds(str(data_dir))):
        name, method, num_parts = case
        num_parts = world if num_parts == "world" else num_parts
        ref = ms.partition(pts, num_parts, method, weights=w, refine=False)
        for rank in range(world):
            got = results[rank][case]
            lo, hi = _bounds(pts.shape[0], world, rank)
            at = (case, rank)
            assert torch.equal(got.assignment, ref.assignment[lo:hi]), at
            assert got.sizes == ref.sizes and got.num_parts == num_parts and got.method == method, at
            ids = _owned_ids(ref, num_parts, world, rank)
            assert torch.equal(got.global_ids, ids), at
            assert torch.equal(got.parts, ref.assignment[ids]), at
            assert torch.equal(got.points, torch.from_numpy(pts)[ids]), at  # dtype kept (float32 too)
            if w is not None:
                assert torch.equal(got.weights, torch.from_numpy(w)[ids]), at


def test_partition_distributed_without_process_group():
    from meshshard.ops.partition import partition_distributed
    import meshshard as ms

    rng = np.random.default_rng(2)
    pts = rng.random((300, 3))
    for method in METHODS:
        got = partition_distributed(pts, 4, method)
        ref = ms.partition(pts, 4, method, refine=False)
        assert torch.equal(got.assignment, ref.assignment)
        assert torch.equal(got.global_ids, ref.perm) and torch.equal(got.points, torch.from_numpy(pts)[ref.perm])
    # above 2**14 points the single-process curve cut sorts only the buckets holding a cut
    big = rng.random((20000, 3)) ** 3
    w = rng.integers(0, 9, big.shape[0]).astype(np.float64)
    for method in METHODS:
        ref = ms.partition(big, 9, method, weights=w, refine=False)
        assert torch.equal(partition_distributed(big, 9, method, weights=w).assignment, ref.assignment), method


def test_distributed_partition_moves_every_tensor():
    # CUDA input returns its results through .to(points' device); CI has no GPU, so the move is
    # checked here onto the meta device (tests/test_cuda.py runs the CUDA path itself)
    from meshshard.ops.partition import partition_distributed

    pts = np.random.default_rng(3).random((50, 2))
    for w in (None, np.arange(50.0)):
        got = partition_distributed(pts, 3, "kdtree", weights=w)
        moved = got.to("meta")
        tensors = [moved.points, moved.global_ids, moved.parts, moved.assignment]
        assert all(t.device.type == "meta" for t in tensors + ([] if w is None else [moved.weights]))
        assert [t.shape for t in tensors] == [t.shape for t in (got.points, got.global_ids, got.parts, got.assignment)]
        assert (moved.weights is None) == (w is None)
        assert (moved.num_parts, moved.sizes, moved.method) == (got.num_parts, got.sizes, got.method)
        assert got.points.device.type == "cpu"  # numpy input stays on the host
