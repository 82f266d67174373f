"""The promotion mode for plain tensors meeting ShardTensors (``set_promotion`` / ``promotion``):
"warn" (default) gives a PromotionWarning, a UserWarning; "raise" a TypeError naming the op;
"silent" nothing; 0-d tensors and nn.Parameter never warn nor raise; the context manager restores
the previous mode (also after an error); values are the same in every mode. 1-4 gloo ranks, uneven
shards with a zero-row rank, float64 1e-10."""
import warnings

import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 120
SIZES = {1: [5], 2: [0, 5], 3: [2, 0, 3], 4: [1, 2, 0, 2]}


def test_modes_and_context_manager():
    import meshshard.tensor as mt

    assert mt.get_promotion() == "warn" and issubclass(mt.PromotionWarning, UserWarning)
    with mt.promotion("raise") as mode:
        assert mode == "raise" and mt.get_promotion() == "raise"
        with mt.promotion("silent"):
            assert mt.get_promotion() == "silent"
        assert mt.get_promotion() == "raise"
    assert mt.get_promotion() == "warn"
    with pytest.raises(KeyError):
        with mt.promotion("silent"):
            raise KeyError("inside")
    assert mt.get_promotion() == "warn"
    assert mt.set_promotion("silent") == "warn"
    assert mt.set_promotion("warn") == "silent"
    with pytest.raises(ValueError, match="one of"):
        mt.set_promotion("loud")
    assert mt.get_promotion() == "warn"


def _check(rank, world):
    from meshshard.distributed import Shard, init_device_mesh
    from meshshard.tensor import PromotionWarning, ShardTensor, promotion, set_promotion

    mesh = init_device_mesh("cpu", (world,))
    sizes = SIZES[world]
    off = sum(sizes[:rank])
    full = torch.arange(15, dtype=torch.float64).reshape(5, 3)
    plain = torch.linspace(0.0, 1.0, 15, dtype=torch.float64).reshape(5, 3)
    x = ShardTensor.from_local(full[off:off + sizes[rank]].clone(), mesh, (Shard(0),), sharding_shapes={0: sizes})
    ops = [("torch.mul", lambda: torch.mul(x, plain), full * plain),
           ("torch.cat", lambda: torch.cat([x, plain], 1), torch.cat([full, plain], 1)),
           ("torch.stack", lambda: torch.stack([x, plain]), torch.stack([full, plain])),
           ("torch.where", lambda: torch.where(plain > 0.5, x, plain), torch.where(plain > 0.5, full, plain))]
    quiet = [lambda: x + torch.tensor(2.0, dtype=torch.float64), lambda: x - torch.nn.Parameter(plain[0])]
    for mode in ("warn", "silent", "raise"):
        with promotion(mode), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for name, op, ref in ops:
                if mode == "raise":
                    _expect(TypeError, op, name, "'raise'", "Replicate")
                else:
                    assert torch.allclose(op().full_tensor(), ref, rtol=1e-10, atol=1e-10), name
            for op in quiet:  # 0-d tensors and nn.Parameter: never a warning or an error
                op()
        promoted = [w for w in caught if issubclass(w.category, PromotionWarning)]
        named = {name for name, _, _ in ops if any(name + " mixes" in str(w.message) for w in promoted)}
        assert named == ({name for name, _, _ in ops} if mode == "warn" else set()), (mode, named)
        assert len(promoted) == (len(ops) + 1 if mode == "warn" else 0)  # where promotes two plain tensors
        assert len(caught) == len(promoted), [str(w.message) for w in caught]
    set_promotion("raise")
    try:
        assert (x * 2.0).placements == (Shard(0),)  # no plain tensor: nothing to refuse
        # Python operators: torch turns the TypeError into NotImplemented, so Python raises its own
        _expect(TypeError, lambda: x * plain, "unsupported operand", "ShardTensor")
    finally:
        set_promotion("warn")
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_promotion_modes_on_ranks(world):
    assert run_distributed(_check, world, timeout=TIMEOUT) == [True] * world
