"""One optimizer step of a model on a whole graph or, through ``DomainParallel``, on one rank's shard.

The sharded step is the one training path of the library: ``pred = DomainParallel(model)(x, g,
edge_attr)``, the ShardTensor loss ``F.mse_loss(pred, y)`` (the whole mesh's loss on every rank),
``loss.backward()`` (DomainParallel's hooks sum every gradient over the ranks once), the step.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from meshshard.distributed import Shard, get_rank, get_world_size, run_together
from meshshard.ops.domain_parallel import DomainParallel, _wrapped_for_call
from meshshard.tensor import ShardTensor

__all__ = ["train_step"]


def _local(t):
    return t.to_local() if isinstance(t, ShardTensor) else t


def _check_inputs(x, edge_attr, y, graph) -> None:
    for name, t in (("x", x), ("edge_attr", edge_attr), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or a ShardTensor, got {type(t).__name__}")
    x, edge_attr, y = _local(x), _local(edge_attr), _local(y)
    rows = {"x": (x.shape[0], graph.num_owned, "owned nodes"), "y": (y.shape[0], graph.num_owned, "owned nodes"),
            "edge_attr": (edge_attr.shape[0], int(graph.edge_index.shape[1]), "local edges")}
    bad = [f"{k} has {got} rows, expected {want} ({what})" for k, (got, want, what) in rows.items() if got != want]
    if bad:
        raise ValueError("; ".join(bad))


def _explain_non_finite(pred, y, x) -> None:
    """Raise, naming what is not finite on this rank (called once the global loss is NaN/inf)."""
    found = [f"{name} has {int((~torch.isfinite(t)).sum())} NaN/inf values"
             for name, t in (("x", _local(x)), ("y", _local(y)), ("the prediction", _local(pred).detach()))
             if not bool(torch.isfinite(t).all())]
    if found:
        raise FloatingPointError("non-finite loss: " + ", ".join(found))


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, edge_attr: torch.Tensor,
               y: torch.Tensor, *, edge_index: Optional[torch.Tensor] = None, graph=None, group=None,
               exchange: str = "auto", before_step: Optional[Callable[[torch.Tensor], None]] = None) -> float:
    """Forward, MSE loss, backward, optimizer step: sharded through ``DomainParallel``, or on a whole graph.

    Sharded (``graph=g`` or a :class:`~meshshard.DomainParallel` built with a graph): the step is
    ``pred = dp(x, g, edge_attr)`` (a ShardTensor of the owned rows), ``loss = F.mse_loss(pred, y)``
    (a ShardTensor loss: the whole mesh's, the same on every rank) and ``loss.backward()``, whose
    DomainParallel hooks sum every parameter's gradient over the ranks once. A bare model given
    with ``graph=g`` is wrapped in ``DomainParallel(model, g, exchange=exchange)`` for the step (its
    parameters are checked equal on every rank, and the hooks come off afterwards); wrap it once
    yourself to skip that check on every step. ``x`` and ``y`` go in as they are: ShardTensors (as
    ``ShardedMeshDataset.model_inputs`` hands them out) or plain owned rows.

    Whole graph (``edge_index=...``, one process): ``F.mse_loss(model(x, edge_index, edge_attr), y)``.

    On a sharded graph, bad input on one rank (row counts that do not fit ``graph``) and a
    non-finite loss raise on EVERY rank, naming the rank(s) at fault and the cause, and before
    the optimizer touches the parameters (so a checkpoint of them stays good).

    Args:
        model: a model called as ``model(x, edge_index, edge_attr)`` (e.g.
            :class:`~meshshard.models.MeshGraphNet`, parameters equal on every rank), or
            ``DomainParallel(MeshGraphNet(...))``.
        optimizer: over ``model``'s parameters.
        x, edge_attr, y: whole-graph tensors with ``edge_index``, or, sharded, ``x`` and ``y`` the
            owned rows (ShardTensors with shard sizes ``g.sizes``, or plain ``[num_owned, *]``)
            and ``edge_attr`` the local edges ``[E_local, *]`` aligned with ``graph.edge_index``.
        edge_index: ``[2, E]`` of the whole graph (one process).
        graph: a :class:`meshshard.ShardedGraph` (default: the DomainParallel model's).
        group: deprecated (DeprecationWarning): the ranks are the graph's (``graph.group``); a
            group of another size, or where this process has another rank, raises ValueError.
        exchange: for a bare model, passed to the ``DomainParallel`` wrapper; a ``DomainParallel``
            model uses the ``exchange`` it was built with (another value here raises ValueError).
        before_step: optional ``f(loss)`` called after the gradients are complete (summed over
            the ranks) and before ``optimizer.step()`` (e.g. to compare them with a reference).

    Returns:
        The loss of the WHOLE graph before the step (same value on every rank).

    Raises:
        FloatingPointError: (single process) the loss is NaN/inf; on a sharded graph, a
        :class:`~meshshard.distributed.CollectiveMismatchError` on every rank instead, naming the
        ranks whose inputs or predictions are not finite.
    """
    wrapped = isinstance(model, DomainParallel)
    if wrapped:
        graph = graph if graph is not None else model.graph
        if graph is None:
            raise TypeError("train_step with a DomainParallel model needs graph (a ShardedGraph), here or at wrap time")
        if exchange not in ("auto", model.exchange):
            raise ValueError(f"train_step: exchange={exchange!r}, but the DomainParallel model was built with "
                             f"exchange={model.exchange!r}; pass it to DomainParallel(..., exchange=...)")
    if group is not None:
        warnings.warn("train_step(group=...) is deprecated: the ranks are the graph's (graph.group), and "
                      "DomainParallel sums the gradients over them", DeprecationWarning, stacklevel=2)
        mine = getattr(graph, "group", None)
        if graph is None or (group is not mine and (get_world_size(group), get_rank(group)) !=
                             (get_world_size(mine), get_rank(mine))):
            raise ValueError("train_step: group= is not the graph's group; build the ShardedGraph on that group "
                             "(the step runs over the graph's ranks)")
    optimizer.zero_grad(set_to_none=True)
    if graph is None:
        return _whole_graph_step(model, optimizer, x, edge_attr, y, edge_index, before_step)
    group = getattr(graph, "group", None)
    run_together(lambda: _check_inputs(x, edge_attr, y, graph), "train_step", group)
    with (contextlib.nullcontext(model) if wrapped else _wrapped_for_call(model, graph, exchange)) as dp:
        pred = dp(x, graph, edge_attr)  # ShardTensor of the owned rows
        if not isinstance(y, ShardTensor):  # plain owned rows: laid out like the prediction
            y = ShardTensor.from_local(y, pred.device_mesh, [Shard(0)], sharding_shapes=list(graph.sizes))
        loss = F.mse_loss(pred, y)  # the whole mesh's loss, the same on every rank
        value = loss.to_local()
        if not bool(torch.isfinite(value.detach())):
            # The loss is the same on every rank, so every rank takes this branch and agrees.
            run_together(lambda: _explain_non_finite(pred, y, x), "train_step", group)
            raise FloatingPointError(f"train_step: the loss is {float(value)} although every input and prediction "
                                     "is finite (the sum overflowed: lower the learning rate or normalise the data)")
        loss.backward()  # DomainParallel's hooks sum the gradients over the ranks
    if before_step is not None:
        before_step(value.detach())
    optimizer.step()
    return float(value.detach())


def _whole_graph_step(model, optimizer, x, edge_attr, y, edge_index, before_step) -> float:
    """One process, the whole graph: the same loss, no reduction."""
    if edge_index is None:
        raise TypeError("train_step needs edge_index (whole graph) or graph (a ShardedGraph)")
    pred = model(x, edge_index, edge_attr)
    loss = F.mse_loss(pred, y.to(pred.dtype))
    if not bool(torch.isfinite(loss.detach())):
        _explain_non_finite(pred, y, x)
        raise FloatingPointError(f"train_step: the loss is {float(loss)} although every input and prediction is "
                                 "finite (the sum overflowed: lower the learning rate or normalise the data)")
    loss.backward()
    if before_step is not None:
        before_step(loss.detach())
    optimizer.step()
    return float(loss.detach())
