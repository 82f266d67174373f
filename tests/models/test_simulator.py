"""SimulatorSpec (inputs, targets, steps, round trip), the pairs and noise of a training step
(functions of seed and step), simulator checkpoints, and rollout_states on a whole mesh."""
import pytest
import torch

from meshshard.datasets import FieldStats
from meshshard.models import (MeshGraphNet, SimulatorSpec, draw_training_steps, load_checkpoint, rollout_states,
                              simulator_checkpoint, training_noise)


def _spec(evolving=(0,)):
    st = lambda mean, std: FieldStats(torch.tensor(mean, dtype=torch.float64), torch.tensor(std, dtype=torch.float64))
    return SimulatorSpec(state=["u"], state_columns=["u"], features=["pos"], feature_columns=["pos[0]", "pos[1]"],
                         node_type="node_type", node_type_codes=[0, 3], evolving_types=list(evolving),
                         stats={"state": st([1.0], [2.0]), "increment": st([0.5], [0.25]),
                                "features": st([0.0, 1.0], [1.0, 4.0]), "edge_attr": st([0.0] * 3, [1.0] * 3)},
                         noise_std=0.1)


def test_inputs_targets_and_steps():
    spec = _spec()
    state = torch.tensor([[3.0], [1.0]], dtype=torch.float64)
    feats = torch.tensor([[1.0, 5.0], [2.0, 1.0]], dtype=torch.float64)
    types = torch.tensor([3, 0])
    x = spec.node_inputs(state, feats, types)
    assert x.tolist() == [[1.0, 1.0, 1.0, 0.0, 1.0], [0.0, 2.0, 0.0, 1.0, 0.0]]
    assert spec.num_node_inputs == 5 and spec.num_edge_features == 3
    nxt = torch.tensor([[3.5], [2.0]], dtype=torch.float64)
    y = spec.target(nxt, state)
    assert y.tolist() == [[0.0], [2.0]]
    assert torch.equal(spec.advance(state, y), nxt)  # advance undoes target
    assert spec.evolving(types).tolist() == [False, True]
    assert _spec(evolving=()).evolving(types).tolist() == [True, True]
    with pytest.raises(ValueError, match=r"node type codes \[5\] were not in the training data"):
        spec.one_hot(torch.tensor([0, 5]), torch.float64)
    back = SimulatorSpec.from_dict(spec.to_dict())
    assert back.to_dict() == spec.to_dict()
    with pytest.raises(ValueError, match=r"simulator spec lacks \['state_columns'\]"):
        SimulatorSpec.from_dict({k: v for k, v in spec.to_dict().items() if k != "state_columns"})


def test_pairs_and_noise_are_functions_of_seed_and_step():
    a = draw_training_steps(3, 7, 20, [5, 9, 2])
    assert a == draw_training_steps(3, 7, 20, [5, 9, 2]) != draw_training_steps(3, 8, 20, [5, 9, 2])
    assert all(0 <= t < [5, 9, 2][i] - 1 for i, t in a) and {i for i, _ in a} == {0, 1, 2}
    n = training_noise(1, 2, 0, 1000, 2, 0.5)
    assert torch.equal(n, training_noise(1, 2, 0, 1000, 2, 0.5)) and not torch.equal(n, training_noise(1, 2, 1, 1000, 2, 0.5))
    assert abs(float(n.std()) - 0.5) < 0.05 and n.dtype == torch.float64
    assert training_noise(1, 2, 0, 4, 2, 0.0).abs().sum() == 0


def test_checkpoint_round_trip_and_whole_mesh_rollout(tmp_path):
    spec = _spec()
    torch.manual_seed(0)
    net = MeshGraphNet(spec.num_node_inputs, 3, 1, hidden=4, num_layers=1).double()
    path = tmp_path / "sim.pt"
    torch.save(simulator_checkpoint(net, spec, step=3), path)
    model, info = load_checkpoint(path)
    assert info.kind == "simulator" and info.step == 3 and info.simulator.to_dict() == spec.to_dict()
    assert info.targets == ["u"] and info.node_types == ["0", "3"]
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    pos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]], dtype=torch.float64)
    rel = pos[ei[0]] - pos[ei[1]]
    ea = torch.cat([rel, rel.norm(dim=1, keepdim=True)], 1)
    types = torch.tensor([3, 0, 3])
    truth = lambda k: torch.full((3, 1), float(k), dtype=torch.float64)
    seen = []
    final = rollout_states(model, spec, truth(0), pos, types, ea, truth, 4, edge_index=ei,
                           on_step=lambda k, s: seen.append(s.clone()))
    assert len(seen) == 4 and torch.equal(final, seen[-1])
    assert [s[[0, 2], 0].tolist() for s in seen] == [[float(k)] * 2 for k in range(1, 5)]  # boundaries = truth
    with torch.no_grad():
        x = spec.node_inputs(truth(0), pos, types)
        first = spec.advance(truth(0), model(x, ei, spec.edge_inputs(ea)))
    assert seen[0][1, 0] == first[1, 0]
    with pytest.raises(TypeError, match="exactly one of edge_index"):
        rollout_states(model, spec, truth(0), pos, types, ea, truth, 1)
