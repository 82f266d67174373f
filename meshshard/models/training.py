"""One optimizer step of a model on a whole graph or on one rank's shard (the same code for both)."""
from __future__ import annotations

from typing import Optional

import torch

from meshshard.models.parallel import all_reduce_gradients, global_mse_loss

__all__ = ["train_step"]


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, edge_attr: torch.Tensor,
               y: torch.Tensor, *, edge_index: Optional[torch.Tensor] = None, graph=None, group=None,
               exchange: str = "auto") -> float:
    """Forward, global MSE loss, backward, gradient all-reduce (sharded only), optimizer step.

    Args:
        model: e.g. :class:`~meshshard.models.MeshGraphNet` (parameters equal on every rank).
        optimizer: over ``model``'s parameters.
        x, edge_attr, y: whole-graph tensors with ``edge_index``, or owned rows / local edges of
            ``graph`` (a :class:`meshshard.ShardedGraph`).
        group: process group (default: ``graph.group``).
        exchange: passed to the model on a sharded graph.

    Returns:
        The loss of the WHOLE graph before the step (same value on every rank).
    """
    optimizer.zero_grad(set_to_none=True)
    if graph is not None:
        group = group if group is not None else getattr(graph, "group", None)
        pred = model(x, edge_attr, graph=graph, exchange=exchange)
    else:
        if edge_index is None:
            raise TypeError("train_step needs edge_index (whole graph) or graph (a ShardedGraph)")
        pred = model(x, edge_index, edge_attr)
    loss = global_mse_loss(pred, y, group=group if graph is not None else None)
    loss.backward()
    if graph is not None:
        all_reduce_gradients(model, group)
    optimizer.step()
    return float(loss.detach())
