"""Self-contained checkpoints: training_checkpoint stores what predicting needs, load_checkpoint
rebuilds the model from it, and old or damaged files get an error that says what is wrong."""
import pytest
import torch
from torch import nn

from meshshard._fileutil import atomic_torch_save
from meshshard.datasets import MeshDataset
from meshshard.models import CheckpointInfo, MeshGraphNet, load_checkpoint, training_checkpoint
from meshshard.models.checkpoint import CHECKPOINT_FORMAT_VERSION

NODE_TYPES = ["farfield", "airfoil", "inlet"]  # not sorted, one absent from the mesh: kept as given


@pytest.fixture(scope="module")
def naca(data_dir):
    ds = MeshDataset([data_dir / "naca0012_inviscid.su2"], ["pos"], ["pos[1]"], node_types=NODE_TYPES)
    torch.manual_seed(0)
    net = MeshGraphNet(ds.num_node_features, 3, 1, hidden=8, num_layers=2, mlp_layers=1, activation=nn.GELU)
    return ds, net


def _save(tmp_path, ckpt, name="ck.pt"):
    path = tmp_path / name
    atomic_torch_save(ckpt, path)
    return path


def test_round_trip_rebuilds_the_model_and_its_data_spec(tmp_path, naca):
    ds, net = naca
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    data = ds[0]
    x, e, y = ds.model_inputs(data)
    torch.nn.functional.mse_loss(net(x, data.edge_index, e), y).backward()
    opt.step()
    path = _save(tmp_path, training_checkpoint(net, ds, optimizer=opt, step=3, rng=torch.get_rng_state(),
                                               args={"lr": 1e-3}))

    model, info = load_checkpoint(path)
    assert isinstance(info, CheckpointInfo) and type(model) is MeshGraphNet and not model.training
    assert model.config == net.config and model.config["activation"] is nn.GELU
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), net.state_dict().values()))
    assert torch.equal(model(x, data.edge_index, e), net(x, data.edge_index, e))
    assert (info.features, info.targets) == (["pos"], ["pos[1]"])
    assert (info.feature_columns, info.target_columns) == (["pos_0", "pos_1"], ["pos_1"])
    assert info.node_types == NODE_TYPES and info.knn == ds.knn and info.dtype == torch.float32
    assert info.stats.equal(ds.stats) and info.step == 3
    assert set(info.extra) == {"optimizer", "rng", "args"} and info.extra["args"] == {"lr": 1e-3}

    # float64 weights come back float64; map_location moves them
    model64, info64 = load_checkpoint(_save(tmp_path, training_checkpoint(net.double(), ds), "ck64.pt"), "cpu")
    net.float()
    assert info64.dtype == torch.float64 and next(model64.parameters()).dtype == torch.float64


def test_old_damaged_and_foreign_checkpoints_raise_clear_errors(tmp_path, naca):
    ds, net = naca
    good = training_checkpoint(net, ds)

    # what examples/train_meshgraphnet.py --save wrote before this format
    old = _save(tmp_path, {"model": net.state_dict(), "optimizer": {}, "step": 5, "rng": torch.get_rng_state()}, "old.pt")
    with pytest.raises(ValueError, match=r"no 'meshshard' entry.*model class.*normalisation statistics.*older"):
        load_checkpoint(old)
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable torch checkpoint"):
        load_checkpoint(tmp_path / "junk.pt")

    def altered(**changes):
        entry = {**good["meshshard"], **changes}
        return {**good, "meshshard": {k: v for k, v in entry.items() if v is not None}}

    cases = [
        (altered(format_version=CHECKPOINT_FORMAT_VERSION + 1), "newer than this meshshard reads"),
        (altered(model_class="Transolver"), "unknown model class 'Transolver'"),
        (altered(knn=None), r"lacks \['knn'\]"),
        (altered(model_config={**good["meshshard"]["model_config"], "activation": "system"}),
         "'system' is not a torch.nn module class"),
        (altered(model_config={**good["meshshard"]["model_config"], "hidden": 16}), "weights do not fit MeshGraphNet"),
    ]
    for i, (ckpt, message) in enumerate(cases):
        with pytest.raises(ValueError, match=message):
            load_checkpoint(_save(tmp_path, ckpt, f"bad{i}.pt"))
    with pytest.raises(TypeError, match="not a model class a checkpoint can rebuild"):
        training_checkpoint(nn.Linear(2, 2), ds)
