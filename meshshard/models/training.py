"""One optimizer step of a model on a whole graph or on one rank's shard (the same code for both)."""
from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from meshshard.distributed import Shard, run_together
from meshshard.models.parallel import all_reduce_gradients, global_mse_loss
from meshshard.ops.domain_parallel import DomainParallel
from meshshard.tensor import ShardTensor

__all__ = ["train_step"]


def _check_inputs(x, edge_attr, y, graph) -> None:
    for name, t in (("x", x), ("edge_attr", edge_attr), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    rows = {"x": (x.shape[0], graph.num_owned, "owned nodes"), "y": (y.shape[0], graph.num_owned, "owned nodes"),
            "edge_attr": (edge_attr.shape[0], int(graph.edge_index.shape[1]), "local edges")}
    bad = [f"{k} has {got} rows, expected {want} ({what})" for k, (got, want, what) in rows.items() if got != want]
    if bad:
        raise ValueError("; ".join(bad))


def _explain_non_finite(pred: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> None:
    """Raise, naming what is not finite on this rank (called once the global loss is NaN/inf)."""
    found = [f"{name} has {int((~torch.isfinite(t)).sum())} NaN/inf values"
             for name, t in (("x", x), ("y", y), ("the prediction", pred.detach())) if not bool(torch.isfinite(t).all())]
    if found:
        raise FloatingPointError("non-finite loss: " + ", ".join(found))


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, edge_attr: torch.Tensor,
               y: torch.Tensor, *, edge_index: Optional[torch.Tensor] = None, graph=None, group=None,
               exchange: str = "auto", before_step: Optional[Callable[[torch.Tensor], None]] = None) -> float:
    """Forward, global MSE loss, backward, gradient all-reduce (sharded only), optimizer step.

    A :class:`~meshshard.DomainParallel`-wrapped model runs as ``pred = model(x, graph, edge_attr)``
    with the ShardTensor loss ``F.mse_loss(pred, y)``; its backward hooks sum the gradients, so no
    explicit all-reduce follows. A plain model on a sharded graph runs as
    ``model(x, edge_attr, graph=graph, exchange=exchange)`` and gets :func:`all_reduce_gradients`.

    On a sharded graph, bad input on one rank (row counts that do not fit ``graph``) and a
    non-finite loss raise on EVERY rank, naming the rank(s) at fault and the cause, and before
    the optimizer touches the parameters (so a checkpoint of them stays good).

    Args:
        model: e.g. :class:`~meshshard.models.MeshGraphNet` (parameters equal on every rank), or
            ``DomainParallel(MeshGraphNet(...))``.
        optimizer: over ``model``'s parameters.
        x, edge_attr, y: whole-graph tensors with ``edge_index``, or owned rows ``[num_owned, *]``
            / local edges ``[E_local, *]`` of ``graph`` (a :class:`meshshard.ShardedGraph`); ``x``
            and ``y`` may be ShardTensors of the owned rows, as ``ShardedMeshDataset`` hands out.
        group: process group (default: ``graph.group``).
        exchange: passed to a plain model on a sharded graph (a ``DomainParallel`` model uses the
            ``exchange`` it was built with; another value here raises ValueError).
        before_step: optional ``f(loss)`` called after the gradients are complete (all-reduced)
            and before ``optimizer.step()`` (e.g. to compare them with a reference).

    Returns:
        The loss of the WHOLE graph before the step (same value on every rank).

    Raises:
        FloatingPointError: (single process) the loss is NaN/inf; on a sharded graph, a
        :class:`~meshshard.distributed.CollectiveMismatchError` on every rank instead, naming the
        ranks whose inputs or predictions are not finite.
    """
    # ShardTensors of the owned rows (ShardedMeshDataset.model_inputs) carry the rows the model takes.
    wrapped = isinstance(model, DomainParallel)
    if wrapped:
        graph = graph if graph is not None else model.graph
        if graph is None:
            raise TypeError("train_step with a DomainParallel model needs graph (a ShardedGraph), here or at wrap time")
        if exchange not in ("auto", model.exchange):
            raise ValueError(f"train_step: exchange={exchange!r}, but the DomainParallel model was built with "
                             f"exchange={model.exchange!r}; pass it to DomainParallel(..., exchange=...)")
    x_st, y_st = x, y
    x, y = (t.to_local() if isinstance(t, ShardTensor) else t for t in (x, y))
    optimizer.zero_grad(set_to_none=True)
    if graph is not None:
        group = group if group is not None else getattr(graph, "group", None)
        run_together(lambda: _check_inputs(x, edge_attr, y, graph), "train_step", group)
    if wrapped:
        pred_st = model(x_st, graph, edge_attr)
        if not isinstance(y_st, ShardTensor):  # owned rows: laid out like the prediction
            y_st = ShardTensor.from_local(y, pred_st.device_mesh, [Shard(0)], sharding_shapes=list(graph.sizes))
        loss = F.mse_loss(pred_st, y_st).to_local()
        pred = pred_st.to_local()
    elif graph is not None:
        pred = model(x, edge_attr, graph=graph, exchange=exchange)
        loss = global_mse_loss(pred, y, group=group)
    else:
        if edge_index is None:
            raise TypeError("train_step needs edge_index (whole graph) or graph (a ShardedGraph)")
        pred = model(x, edge_index, edge_attr)
        loss = global_mse_loss(pred, y)
    if not bool(torch.isfinite(loss.detach())):
        # The loss is the same on every rank, so every rank takes this branch and agrees.
        run_together(lambda: _explain_non_finite(pred, y, x), "train_step", group if graph is not None else None)
        raise FloatingPointError(f"train_step: the loss is {float(loss)} although every input and prediction is "
                                 "finite (the sum overflowed: lower the learning rate or normalise the data)")
    loss.backward()
    if graph is not None and not wrapped:
        all_reduce_gradients(model, group)
    if before_step is not None:
        before_step(loss)
    optimizer.step()
    return float(loss.detach())
