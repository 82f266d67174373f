"""examples/train_simulator.py: data x domain at 4 ranks equals one process at every step (loss and
gradients, float64 1e-10, the same pairs and noise), --resume continues with the losses of an
uninterrupted run, the checkpoint holds the simulator spec, bad arguments."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.datasets._diffusion_case import load_train_simulator, write_diffusion_pvd

COMMON = ["--hidden", "8", "--layers", "2", "--mlp-layers", "1", "--dtype", "float64", "--lr", "1e-3",
          "--noise-std", "0.02", "--check"]


@pytest.fixture(scope="module")
def two_cases(tmp_path_factory):
    """Two diffusion trajectories of different sizes, preprocessed into 1, 2 and 4 parts."""
    from meshshard.datasets import preprocess_trajectories

    tmp = tmp_path_factory.mktemp("train_simulator")
    pvds = [write_diffusion_pvd(tmp / f"case{i}", name=f"heat{i}", nx=nx, ny=7, steps=12)
            for i, nx in enumerate((8, 11))]
    roots = {}
    for k in (1, 2, 4):
        roots[k] = tmp / f"parts{k}"
        preprocess_trajectories(pvds, roots[k], k, state=["temperature"], features=["pos"], node_type="node_type",
                                method="hilbert", halo_hops=2, dtype="float64")
    return roots


RUNS = [(2, 2), (4, 1)]  # (domain size, pairs per data group per step) at 4 ranks: data x domain, domain only


def _data_x_domain(rank, world, roots):
    example = load_train_simulator()
    out = []
    for domain, batch in RUNS:
        args = example.parse_args(["--data", str(roots[domain]), "--domain-size", str(domain), "--batch-size",
                                   str(batch), "--steps", "2", *COMMON])
        out.append(example.train(args))
    return out


@pytest.mark.timeout(300)
def test_data_x_domain_four_ranks_match_one_process(two_cases):
    results = run_distributed(_data_x_domain, 4, args=(two_cases,), timeout=280)
    for (domain, batch), ranks in zip(RUNS, zip(*results)):
        assert len({r["loss"] for r in ranks}) == 1, (domain, batch)
        ref = ranks[0]
        assert ref["checked"] == [0, 1] and ref["failed"] == [], (domain, batch, ref)
        assert ref["worst"]["loss"] <= 1e-10 and ref["worst"]["grad"] <= 1e-10, (domain, batch, ref)


@pytest.fixture
def example(monkeypatch):
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    return load_train_simulator()


@pytest.mark.timeout(200)
def test_resume_gives_the_uninterrupted_losses_and_a_simulator_checkpoint(two_cases, example, tmp_path, capsys):
    from meshshard.models import load_checkpoint

    data = ["--data", str(two_cases[1]), *COMMON[:-1], "--save-every", "2"]  # no --check: losses compared here
    ckpt = tmp_path / "sim.pt"
    first = example.train(example.parse_args([*data, "--steps", "3", "--save", str(ckpt)]))
    rest = example.train(example.parse_args([*data, "--steps", "5", "--save", str(ckpt), "--resume"]))
    whole = example.train(example.parse_args([*data, "--steps", "5", "--save", str(tmp_path / "whole.pt")]))
    out = capsys.readouterr().out
    assert "steps 3..5" in out and f"saved checkpoint {ckpt} (step 5)" in out
    assert sorted(rest["losses"]) == [3, 4]
    assert {**first["losses"], **rest["losses"]} == whole["losses"]  # the same pairs, noise and weights
    net, info = load_checkpoint(ckpt)
    spec = info.simulator
    assert info.kind == "simulator" and info.step == 5
    assert spec.state == ["temperature"] and spec.feature_columns == ["pos[0]", "pos[1]"]
    assert spec.node_type_codes == [0, 1] and spec.evolving_types == [0] and spec.noise_std == 0.02
    assert net.config["hidden"] == 8 and spec.num_node_inputs == 1 + 2 + 2
    from meshshard.datasets import read_trajectory_dataset_meta

    meta = read_trajectory_dataset_meta(two_cases[1])
    assert spec.stats["increment"].mean.tolist() == meta["stats"]["increment"]["mean"]
    saved = torch.load(ckpt, weights_only=True)["model"]
    assert all(torch.equal(saved[k], v) for k, v in net.state_dict().items())


@pytest.mark.timeout(200)
def test_check_failure_and_loss_node_types(two_cases, example, monkeypatch, capsys):
    monkeypatch.setitem(example.TOLERANCE, "float64", {"loss": -1.0, "grad": -1.0})
    code = example.main(["--data", str(two_cases[1]), *COMMON, "--steps", "1", "--loss-node-types", "0", "1"])
    out = capsys.readouterr().out
    assert code == 1 and "evolving node types [0, 1]" in out and "1 steps: FAIL at steps [0]" in out, out
    from meshshard.datasets import ShardedTrajectoryDataset
    from meshshard.models import SimulatorSpec

    ds = ShardedTrajectoryDataset(two_cases[1])
    with pytest.raises(ValueError, match=r"node types \[7\] do not occur in the dataset \(its codes: \[0, 1\]\)"):
        SimulatorSpec.from_dataset(ds, evolving_types=[7])


def test_bad_arguments_exit_with_a_message(example, capsys):
    for argv, message in ((["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
                          (["--noise-std", "-1"], "--noise-std must be >= 0, got -1.0"),
                          (["--amp", "bf16", "--dtype", "float64"], "--amp bf16 needs --dtype float32")):
        with pytest.raises(SystemExit):
            example.parse_args(["--data", "d", *argv])
        assert message in capsys.readouterr().err
