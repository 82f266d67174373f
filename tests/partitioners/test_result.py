"""meshshard.partitioners.result: the Partition value."""
import numpy as np
import pytest
import torch

from meshshard.partitioners import Partition


def test_partition_value_perm_offsets_sizes():
    assign = torch.tensor([2, 0, 2, 1, 0, 2, 2, 0])
    part = Partition(assign, 4, method="x")
    assert part.assignment.dtype == torch.long and part.num_nodes == 8
    assert part.sizes == [3, 1, 4, 0]  # uneven, an empty part allowed
    assert part.perm.tolist() == [1, 4, 7, 3, 0, 2, 5, 6]  # grouped by part, increasing inside
    assert part.offsets.tolist() == [0, 3, 4, 8, 8]
    for r in range(4):
        assert part.part_nodes(r).tolist() == [i for i in range(8) if assign[i] == r]
    assert part.local_index().tolist() == [0, 0, 1, 0, 1, 2, 3, 2]
    assert part.part_weights().tolist() == [3.0, 1.0, 4.0, 0.0]
    with pytest.raises(ValueError, match="part must be in"):
        part.part_nodes(4)


def test_partition_value_random_against_reference():
    rng = np.random.default_rng(0)
    for num_parts in (1, 5, 40_000):  # the last one takes the torch.sort path (> int16)
        assign = rng.integers(0, num_parts, 3000)
        part = Partition(assign, num_parts)
        order = sorted(range(3000), key=lambda i: (assign[i], i))
        assert part.perm.tolist() == order
        assert part.sizes == np.bincount(assign, minlength=num_parts).tolist()
        assert part.offsets.tolist() == [0] + np.cumsum(part.sizes).tolist()
        assert torch.equal(part.perm[part.local_index() + part.offsets[part.assignment]], torch.arange(3000))


def test_partition_value_rejects_bad_assignments():
    with pytest.raises(ValueError, match="outside"):
        Partition([0, 3], 3)
    with pytest.raises(ValueError, match="outside"):
        Partition([0, -1], 3)
    with pytest.raises(TypeError, match="integer"):
        Partition([0.0, 1.0], 2)
    with pytest.raises(ValueError, match="1-D"):
        Partition([[0, 1]], 2)
    with pytest.raises(ValueError, match="num_parts"):
        Partition([0, 0], 0)
    with pytest.raises(ValueError, match="node_weights"):
        Partition([0, 1], 2, node_weights=[1.0])


def test_partition_save_load(tmp_path):
    part = Partition([1, 0, 1, 2], 3, method="morton", node_weights=[1.0, 2.0, 3.0, 4.0])
    part.save(tmp_path / "sub" / "p.pt")
    back = Partition.load(tmp_path / "sub" / "p.pt")
    assert back == part and back.method == "morton" and back.sizes == [1, 2, 1]
    assert torch.equal(back.perm, part.perm) and torch.equal(back.offsets, part.offsets)
    assert torch.equal(back.node_weights, part.node_weights)
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["p.pt"]  # no temporary left behind
    assert back != Partition([1, 0, 1, 1], 3)
    with pytest.raises(FileNotFoundError):
        Partition.load(tmp_path / "none.pt")
    (tmp_path / "junk.pt").write_bytes(b"junk")
    with pytest.raises(ValueError, match="junk.pt"):
        Partition.load(tmp_path / "junk.pt")
    torch.save({"something": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a meshshard partition"):
        Partition.load(tmp_path / "other.pt")
