"""MeshGraphNet on a ShardedGraph equals the single-process model on the whole mesh.

Real mesh: cylinder_crossflow_re35.vtu (14,831 nodes, a CFD solution): x = velocity, y = pressure.
Checked per world size 1..4 and both exchange modes: owned forward rows, the global loss, every
parameter gradient (after the all-reduce), and the parameters after one optimizer step; the number
of halo exchanges per forward (one per layer, or one in all); and that several Adam steps with
``train_step`` keep the replicated parameters bit-identical on every rank and equal to the
single-process ones.
"""
import pytest
import torch

from meshshard.testing import run_distributed

NUM_LAYERS = 3
HIDDEN = 12


def _mesh_data(data_dir):
    from meshshard.datasets import MeshDataset

    ds = MeshDataset([data_dir / "cylinder_crossflow_re35.vtu"], ["velocity[0,1]"], ["pressure"], dtype=torch.float64)
    data = ds[0]
    x, e, y = ds.model_inputs(data)
    return x, data.edge_index, e, y, data.pos


def _partition(pos, world_size):
    """Uneven slabs along x (sizes differ), so odd world sizes and ghost rings are exercised."""
    from meshshard.partitioners import Partition

    order = torch.argsort(pos[:, 0] + 0.1 * pos[:, 1])
    n = pos.shape[0]
    cuts = [0] + [int(n * (r + 1) * (r + 2) / (world_size * (world_size + 1))) for r in range(world_size)]
    assignment = torch.empty(n, dtype=torch.long)
    for r in range(world_size):
        assignment[order[cuts[r]:cuts[r + 1]]] = r
    return Partition(assignment, world_size, method="slabs")


def _model(dtype, seed=0):
    from meshshard.models import MeshGraphNet

    torch.manual_seed(seed)
    return MeshGraphNet(3, 3, 1, hidden=HIDDEN, num_layers=NUM_LAYERS, mlp_layers=2).to(dtype)


def _reference(x, ei, e, y, dtype):
    from meshshard.models import global_mse_loss

    model = _model(dtype)
    pred = model(x.to(dtype), ei, e.to(dtype))
    loss = torch.nn.functional.mse_loss(pred, y.to(dtype))
    assert torch.allclose(loss, global_mse_loss(pred, y.to(dtype)))  # no process group: plain MSE
    loss.backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    return pred.detach(), loss.detach(), grads, {k: p.detach().clone() for k, p in model.named_parameters()}


ADAM_STEPS = 3


def _adam_reference(x, ei, e, y):
    """Whole-mesh float64 parameters after ADAM_STEPS train_step calls, and the losses."""
    from meshshard.models import train_step

    model = _model(torch.float64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = [train_step(model, opt, x, e, y, edge_index=ei) for _ in range(ADAM_STEPS)]
    return losses, torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _counting_exchange(g):
    """Wrap g.exchange to count its calls (forward only)."""
    calls = []
    inner = g.exchange

    def exchange(t):
        calls.append(t.shape)
        return inner(t)

    g.exchange = exchange
    return calls


def _sharded_rank(rank, world_size, x, ei, e, y, pos, references, adam_ref):
    from meshshard import ShardedGraph
    from meshshard.distributed import all_gather_into_tensor
    from meshshard.models import global_mse_loss, train_step

    part = _partition(pos, world_size)
    results = {}
    for dtype in (torch.float64, torch.float32):
        ref_pred, ref_loss, ref_grads, ref_params = references[str(dtype)]
        for mode, hops in (("per_layer", 1), ("once", NUM_LAYERS), ("per_layer", NUM_LAYERS)):
            g = ShardedGraph.from_partition(ei, part, halo_hops=hops)
            owned = g.global_ids[: g.num_owned]
            model = _model(dtype, seed=0 if rank == 0 else 100 + rank)  # other ranks differ until broadcast
            model.broadcast_parameters(src=0)
            calls = _counting_exchange(g)
            pred = model(x[owned].to(dtype), e[g.edge_ids].to(dtype), graph=g, exchange=mode)
            # one exchange of the hidden latents per processor layer, or one of the raw inputs in all
            want = [(g.num_owned, HIDDEN)] * NUM_LAYERS if mode == "per_layer" else [(g.num_owned, 3)]
            assert [tuple(c) for c in calls] == want, (mode, calls)
            loss = global_mse_loss(pred, y[owned].to(dtype))
            loss.backward()
            model.all_reduce_gradients()
            grad_diff = max(float((p.grad - ref_grads[k]).abs().max()) for k, p in model.named_parameters())
            grad_scale = max(float(v.abs().max()) for v in ref_grads.values())
            torch.optim.SGD(model.parameters(), lr=0.1).step()
            param_diff = max(float((p.detach() - ref_params[k]).abs().max()) for k, p in model.named_parameters())
            results[(str(dtype), mode, hops)] = dict(
                fwd=float((pred.detach() - ref_pred[owned]).abs().max()),
                fwd_scale=float(ref_pred.abs().max()),
                loss=abs(float(loss.detach()) - float(ref_loss)) / float(ref_loss),
                grad=grad_diff / grad_scale,
                param=param_diff,
                num_ghost=g.num_ghost,
                loss_value=float(loss.detach()),
            )
    # Several Adam steps through train_step: replicas stay bit-identical and equal the reference.
    g = ShardedGraph.from_partition(ei, part, halo_hops=1)
    owned = g.global_ids[: g.num_owned]
    model = _model(torch.float64, seed=0 if rank == 0 else 7 + rank)
    model.broadcast_parameters(src=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = [train_step(model, opt, x[owned], e[g.edge_ids], y[owned], graph=g) for _ in range(ADAM_STEPS)]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    everyone = all_gather_into_tensor(flat)  # [world, P]
    assert all(torch.equal(everyone[0], row) for row in everyone), "replicated parameters drifted apart"
    ref_losses, ref_flat = adam_ref
    results["adam"] = dict(param=float((flat - ref_flat).abs().max()),
                           loss=max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)))
    # exchange="once" needs enough hops: a clear error, not a wrong answer.
    g1 = ShardedGraph.from_partition(ei, part, halo_hops=1)
    owned = g1.global_ids[: g1.num_owned]
    with pytest.raises(ValueError, match="halo_hops"):
        _model(torch.float64)(x[owned], e[g1.edge_ids], graph=g1, exchange="once")
    return results


@pytest.fixture(scope="module")
def cylinder(data_dir):
    return _mesh_data(data_dir)


@pytest.fixture(scope="module")
def adam_reference(cylinder):
    x, ei, e, y, _ = cylinder
    return _adam_reference(x, ei, e, y)


@pytest.fixture(scope="module")
def references(cylinder):
    """Whole-mesh forward, loss, gradients and parameters after one SGD step, per dtype."""
    x, ei, e, y, _ = cylinder
    return {str(dtype): _reference(x, ei, e, y, dtype) for dtype in (torch.float64, torch.float32)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_sharded_equals_single_process(cylinder, references, adam_reference, world_size):
    results = run_distributed(_sharded_rank, world_size, args=(*cylinder, references, adam_reference), timeout=280)
    for rank, res in enumerate(results):
        adam = res.pop("adam")
        assert adam["param"] <= 1e-10 and adam["loss"] <= 1e-10, f"rank {rank}: after {ADAM_STEPS} Adam steps {adam}"
        assert len(res) == 6
        for (dtype, mode, hops), r in res.items():
            tol = 1e-10 if "float64" in dtype else 1e-5
            what = f"rank {rank} {dtype} {mode} halo_hops={hops}"
            assert r["fwd"] <= tol * max(1.0, r["fwd_scale"]), f"{what}: forward differs by {r['fwd']}"
            assert r["loss"] <= tol, f"{what}: loss differs (relative {r['loss']})"
            assert r["grad"] <= tol, f"{what}: gradient differs (relative {r['grad']})"
            assert r["param"] <= tol, f"{what}: parameters after one SGD step differ by {r['param']}"
            if world_size > 1:
                assert r["num_ghost"] > 0
            # the global loss is bit-identical on every rank (one value to log and compare)
            assert r["loss_value"] == results[0][(dtype, mode, hops)]["loss_value"]


def test_single_process_paths_agree(cylinder):
    """Data object, positional call, ShardedGraph of one part and activation checkpointing agree."""
    from torch_geometric.data import Data

    from meshshard import ShardedGraph
    from meshshard.models import MeshGraphNet

    x, ei, e, y, pos = cylinder
    model = _model(torch.float64)
    out = model(x, ei, e)
    assert out.shape == (x.shape[0], 1)
    assert torch.equal(out, model(Data(x=x, edge_index=ei, edge_attr=e)))
    g = ShardedGraph.from_partition(ei, _partition(pos, 1), halo_hops=1)
    torch.testing.assert_close(model(x[g.global_ids], e[g.edge_ids], graph=g), out[g.global_ids], rtol=0, atol=1e-12)
    ck = MeshGraphNet(3, 3, 1, hidden=HIDDEN, num_layers=NUM_LAYERS, checkpoint=True).double()
    ck.load_state_dict(model.state_dict())
    out_ck = ck(x, ei, e)
    out_ck.square().sum().backward()
    out.square().sum().backward()
    torch.testing.assert_close(out_ck, out, rtol=0, atol=1e-12)
    for (k, a), (_, b) in zip(model.named_parameters(), ck.named_parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-12, msg=k)


def test_architecture_follows_the_paper():
    from meshshard.models import MeshGraphNet

    m = MeshGraphNet(5, 3, 2)  # paper defaults
    assert m.hidden == 128 and len(m.processor) == 15
    assert isinstance(m.node_encoder[-1], torch.nn.LayerNorm)
    assert isinstance(m.edge_encoder[-1], torch.nn.LayerNorm)
    assert isinstance(m.processor[0].edge_mlp[-1], torch.nn.LayerNorm)
    assert isinstance(m.decoder[-1], torch.nn.Linear)  # no LayerNorm on the output
    assert m.decoder[-1].out_features == 2
    # two hidden layers per MLP: Linear, ReLU, Linear, ReLU, Linear (+ LayerNorm)
    assert sum(isinstance(l, torch.nn.Linear) for l in m.processor[0].node_mlp) == 3


def test_bad_inputs_raise():
    from meshshard.models import MeshGraphNet, global_mse_loss

    m = MeshGraphNet(3, 3, 1, hidden=8, num_layers=1)
    x, ei, e = torch.randn(4, 3), torch.tensor([[0, 1, 2], [1, 2, 3]]), torch.randn(3, 3)
    with pytest.raises(ValueError, match="x must be"):
        m(torch.randn(4, 2), ei, e)
    with pytest.raises(ValueError, match="edge_attr has 2 rows"):
        m(x, ei, e[:2])
    with pytest.raises(ValueError, match="outside"):
        m(x, ei + 2, e)
    with pytest.raises(TypeError):
        m(x)
    with pytest.raises(ValueError, match="shape"):
        global_mse_loss(torch.zeros(3, 1), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="num_layers"):
        MeshGraphNet(3, 3, 1, num_layers=-1)
