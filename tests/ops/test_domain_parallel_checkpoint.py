"""Distributed checkpoint (``torch.distributed.checkpoint``) of a ``DomainParallel`` model and its
optimizer, with the plain DCP API (no meshshard helper needed): train two steps, save, train one
more step (loss L); a fresh model and optimizer load the checkpoint, train one step and get the
same L (1e-12), at 1 and 2 gloo ranks, a Transolver on an uneven split of a point cloud. FSDP2 models:
``test_domain_parallel_fsdp.py``."""
import pytest
import torch

from meshshard.testing import run_distributed

TIMEOUT = 300


def check_resume(make_dp, xs, ys, path, whole=lambda t: t):
    """Train ``make_dp()`` two Adam steps, save model and optimizer with plain DCP, train one more
    step (loss L); a fresh ``make_dp()`` with other weights loads the checkpoint, trains one step and
    must get L (1e-12) and the same parameters (``whole`` turns a parameter into a comparable tensor)."""
    import torch.distributed.checkpoint as dcp
    import torch.nn.functional as F
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    def step(dp, opt, scale):
        opt.zero_grad()
        loss = F.mse_loss(dp(xs * scale), ys)
        loss.backward()
        opt.step()
        return float(loss.full_tensor())

    torch.manual_seed(0)
    dp = make_dp()
    opt = torch.optim.Adam(dp.parameters(), lr=1e-2)
    step(dp, opt, 1.0)
    step(dp, opt, 1.1)
    model_sd, optim_sd = get_state_dict(dp, opt)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    loss = step(dp, opt, 1.2)

    torch.manual_seed(5)  # a fresh model with other weights: the checkpoint must restore everything
    fresh = make_dp()
    fresh_opt = torch.optim.Adam(fresh.parameters(), lr=1e-2)
    model_sd, optim_sd = get_state_dict(fresh, fresh_opt)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    resumed = step(fresh, fresh_opt, 1.2)
    assert abs(resumed - loss) <= 1e-12 * max(1.0, abs(loss)), (resumed, loss)
    for (name, p), (_, q) in zip(dp.named_parameters(), fresh.named_parameters()):
        assert torch.equal(whole(p), whole(q)), f"{name} differs after the resumed step"


def _rank_main(rank, world, path):
    import meshshard as ms
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.tensor import ShardTensor
    from tests.ops._models import Transolver

    mesh = default_device_mesh()
    torch.manual_seed(0)
    x, y = torch.randn(1, 29, 3, dtype=torch.float64), torch.randn(1, 29, 2, dtype=torch.float64)
    sizes = [20, 9] if world == 2 else [29]
    lo, n = sum(sizes[:rank]), sizes[rank]
    xs = ShardTensor.from_local(x[:, lo:lo + n].clone(), mesh, (Shard(1),), sharding_shapes="infer")
    ys = ShardTensor.from_local(y[:, lo:lo + n].clone(), mesh, (Shard(1),), sharding_shapes="infer")
    check_resume(lambda: ms.DomainParallel(Transolver(3, 2).double()), xs, ys, path)
    return True


@pytest.mark.parametrize("world", [1, 2])
def test_dcp_round_trip_resumes_to_the_same_loss(world, tmp_path):
    assert run_distributed(_rank_main, world_size=world, args=(str(tmp_path / "ckpt"),),
                           timeout=TIMEOUT) == [True] * world

