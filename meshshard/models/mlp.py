"""The multilayer perceptron of MeshGraphNet's encoders, processor blocks and decoder."""
from __future__ import annotations

from typing import Type

from torch import nn

__all__ = ["MLP"]


class MLP(nn.Sequential):
    r"""``Linear -> act -> ... -> Linear`` with an optional ``LayerNorm`` on the output.

    Args:
        in_channels: input width.
        hidden_channels: width of every hidden layer.
        out_channels: output width.
        num_hidden_layers: number of hidden layers (``>= 0``; 0 gives one ``Linear``).
        layer_norm: append ``LayerNorm(out_channels)``.
        activation: activation class, instantiated between linear layers.

    Shapes:
        input ``[*, in_channels]`` -> output ``[*, out_channels]``.
    """

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int,
        out_channels: int,
        num_hidden_layers: int = 2,
        layer_norm: bool = True,
        activation: Type[nn.Module] = nn.ReLU,
    ) -> None:
        for name, v in (("in_channels", in_channels), ("hidden_channels", hidden_channels), ("out_channels", out_channels)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"MLP {name} must be a positive int, got {v!r}")
        if not isinstance(num_hidden_layers, int) or num_hidden_layers < 0:
            raise ValueError(f"MLP num_hidden_layers must be an int >= 0, got {num_hidden_layers!r}")
        layers = []
        width = in_channels
        for _ in range(num_hidden_layers):
            layers += [nn.Linear(width, hidden_channels), activation()]
            width = hidden_channels
        layers.append(nn.Linear(width, out_channels))
        if layer_norm:
            layers.append(nn.LayerNorm(out_channels))
        super().__init__(*layers)
