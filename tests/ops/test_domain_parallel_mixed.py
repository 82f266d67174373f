"""Graph layers and whole-graph layers in ONE model through ONE ``DomainParallel``: GraphSAGE then
a global token (a mean over all nodes), and GraphSAGE then a Transolver block (slice tokens:
contractions and sums over all nodes). Between the layers the graph guard runs the ops over the
node axis on ShardTensors of the owned rows, so the model equals one process on the whole graph:
output, loss, every gradient and the parameters after one Adam step, float64 1e-10, at 1-4 gloo
ranks. With one exchange per call (``exchange="once"``) such an op is refused, naming the fix."""
import pytest
import torch

from meshshard.testing import run_distributed

TIMEOUT = 300


def _check(rank, world, data_dir):
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.ops.graph_guard import GraphGuardError
    from meshshard.tensor import ShardTensor
    from tests.ops import _models
    from tests.ops.test_domain_parallel_models_more import _after_step, _compare, _graph, _optimizers

    g, ei, x, _, y = _graph(data_dir, world, 1)
    done = []
    for name in ("GnnThenToken", "GnnThenSlices"):
        torch.manual_seed(0)
        model = getattr(_models, name)(4, 2).double()
        ref = copy.deepcopy(model)
        opt, opt_ref = _optimizers(model, ref, torch.float64)
        out_ref = ref(x, ei)
        loss_ref = F.mse_loss(out_ref, y)
        loss_ref.backward()
        out = ms.DomainParallel(model, exchange="per_layer")(x[g.owned_ids], g)
        loss = F.mse_loss(out, ShardTensor.from_local(y[g.owned_ids], sharding_shapes=list(g.sizes)))
        loss.backward()
        what = f"{name} in one DomainParallel at {world} ranks"
        _compare(model, ref, out.to_local(), out_ref[g.owned_ids], loss, loss_ref, 1e-10, what)
        opt.step()
        opt_ref.step()
        _after_step(model, ref, 1e-10, what)
        done.append(name)
    g2, *_ = _graph(data_dir, world, 2)
    with pytest.raises(GraphGuardError, match="exchange='per_layer'"):
        ms.DomainParallel(_models.GnnThenToken(4, 2).double(), exchange="once")(x[g2.owned_ids], g2)
    return done


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_graph_and_whole_graph_layers_in_one_wrapper(world, data_dir):
    assert run_distributed(_check, world_size=world, args=(data_dir,), timeout=TIMEOUT) == \
        [["GnnThenToken", "GnnThenSlices"]] * world
