"""MLP: its layers, its argument checks, and the deprecated import paths of MLP and MeshGraphNetBlock
(meshshard.ops / meshshard.ops.conv, before they moved to meshshard.models)."""
import importlib

import pytest
import torch
from torch import nn

from meshshard.models import MLP, MeshGraphNetBlock


def test_layers_and_shapes():
    m = MLP(3, 8, 5, num_hidden_layers=2, layer_norm=True, activation=nn.Tanh)
    assert [type(l) for l in m] == [nn.Linear, nn.Tanh, nn.Linear, nn.Tanh, nn.Linear, nn.LayerNorm]
    assert m(torch.randn(4, 7, 3)).shape == (4, 7, 5)
    assert [type(l) for l in MLP(3, 8, 5, num_hidden_layers=0, layer_norm=False)] == [nn.Linear]


@pytest.mark.parametrize("args,match", [((0, 8, 5), "in_channels"), ((3, 8, True), "out_channels"),
                                        ((3, 8, 5, -1), "num_hidden_layers")])
def test_bad_arguments_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        MLP(*args)


@pytest.mark.parametrize("module", ["meshshard.ops", "meshshard.ops.conv"])
@pytest.mark.parametrize("name,obj", [("MLP", MLP), ("MeshGraphNetBlock", MeshGraphNetBlock)])
def test_the_old_import_paths_warn_and_give_the_moved_class(module, name, obj):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"moved to meshshard.models.{name}"):
        assert getattr(mod, name) is obj
    assert name not in mod.__all__
    with pytest.raises(AttributeError):
        getattr(mod, "NoSuchName")
