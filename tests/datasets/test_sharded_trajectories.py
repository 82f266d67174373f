"""ShardedTrajectoryDataset: each rank gets the owned rows of every trajectory at every step (1-3
ranks, uneven parts), statistics from meta.json, and a clear error for a part count that does not fit."""
import numpy as np
import pytest
import torch

from meshshard.datasets import ShardedTrajectoryDataset, preprocess_trajectories
from meshshard.testing import run_distributed
from tests.datasets._diffusion_case import write_diffusion_pvd


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sharded_traj")
    pvd = write_diffusion_pvd(tmp / "case", nx=7, ny=5, steps=4)
    roots = {}
    for k in (1, 2, 3):
        roots[k] = tmp / f"d{k}"
        preprocess_trajectories(pvd, roots[k], k, state=["temperature"], node_type="node_type", dtype="float64")
    return pvd, roots


def _rows(rank, world, root):
    ds = ShardedTrajectoryDataset(root)
    s = ds[0]
    return (s.owned_ids, s.state, s.node_type, s.features.shape, ds.num_steps(0), ds.node_type_codes,
            s.graph.sizes)


@pytest.mark.timeout(200)
def test_each_rank_holds_its_owned_rows(data):
    import meshshard as ms

    pvd, roots = data
    traj = ms.read_trajectory(pvd)
    truth = traj.fields["temperature"]
    for k in (1, 2, 3):
        results = run_distributed(_rows, k, args=(roots[k],), timeout=180) if k > 1 else [_rows(0, 1, roots[1])]
        owned = []
        for ids, state, types, fshape, steps, codes, sizes in results:
            np.testing.assert_array_equal(state.numpy(), truth[:, ids.numpy()])
            np.testing.assert_array_equal(types.numpy(), traj.static["node_type"][ids.numpy(), 0])
            assert fshape == (len(ids), 0) and steps == 4 and codes == [0, 1]
            owned.append(ids)
        assert sorted(torch.cat(owned).tolist()) == list(range(35)) and sum(results[0][6]) == 35


def test_stats_and_part_count(data):
    _, roots = data
    ds = ShardedTrajectoryDataset(roots[1])
    assert set(ds.stats) == {"state", "increment", "features", "edge_attr"} and ds.num_edge_features == 3
    assert ds.stats["state"].count == 4 * 35 and ds.stats["increment"].count == 3 * 35
    with pytest.raises(ValueError, match="was preprocessed into 2 parts but this group has 1 ranks"):
        ShardedTrajectoryDataset(roots[2])
