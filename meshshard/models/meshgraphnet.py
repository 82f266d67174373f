"""MeshGraphNet (Pfaff et al., "Learning Mesh-Based Simulation with Graph Networks", ICLR 2021).

The same module runs on a whole graph in one process and on one rank's shard of a
:class:`meshshard.ShardedGraph`; on a shard it returns exactly the owned rows of the whole-graph
result, and its gradients summed over ranks equal the whole-graph gradients.

How the sharded forward stays exact
-----------------------------------
The processor blocks are :class:`MeshGraphNetBlock` layers (PyG ``MessagePassing``),
so a shard runs through the same path as any PyG model under :class:`meshshard.DomainParallel`:
an edge ``j -> i`` lives on the rank that owns its target ``i``, its latent is updated there, and
only the node latents of ghost sources ``j`` come from other ranks, either by one exchange per
block (``exchange="per_layer"``) or by one exchange of the inputs on a graph built with
``halo_hops >= num_layers`` (``exchange="once"``; see :mod:`meshshard.ops.conv` for why the owned
rows are then exact).
"""
from __future__ import annotations

from typing import Optional, Type

import torch
from torch import nn
from torch_geometric.nn import MessagePassing

from meshshard.models.mlp import MLP
from meshshard.models.parallel import all_reduce_gradients, broadcast_parameters

__all__ = ["MeshGraphNet", "MeshGraphNetBlock", "ProcessorBlock"]


class MeshGraphNetBlock(MessagePassing):
    r"""The MeshGraphNet processor block as a PyG layer: residual edge update, sum aggregation,
    residual node update (Pfaff et al., 2021).

    .. math::
        e'_{ji} = e_{ji} + f_e([e_{ji}, x_j, x_i]), \qquad
        x'_i = x_i + f_v\big([x_i, \textstyle\sum_{j} e'_{ji}]\big)

    with ``j`` the sources of edges into ``i``; ``f_e``, ``f_v`` are :class:`MLP`\ s. It is the
    block of :class:`meshshard.models.MeshGraphNet` and runs sharded like any PyG layer
    (:class:`meshshard.ops.ShardedConv`, :class:`meshshard.DomainParallel`).

    Args:
        node_dim: node feature size ``F``.
        edge_dim: edge feature size ``D`` (default ``node_dim``).
        hidden: hidden width of both MLPs (default ``node_dim``).
        mlp_layers: hidden layers of each MLP.
        activation: activation class.
        layer_norm: end each MLP with a ``LayerNorm``.
        checkpoint: recompute the MLPs in backward (activation checkpointing) to save memory;
            the result is unchanged. Only the block's own computation is recomputed, after any
            halo exchange, so recomputation never talks to other ranks.

    Shapes:
        ``forward(x [N, F], edge_index [2, E], edge_attr [E, D]) -> (x' [N, F], e' [E, D])``.
    """

    def __init__(self, node_dim: int, edge_dim: Optional[int] = None, hidden: Optional[int] = None,
                 mlp_layers: int = 2, activation: Type[nn.Module] = nn.ReLU, layer_norm: bool = True,
                 checkpoint: bool = False) -> None:
        super().__init__(aggr="sum")
        self.checkpoint = bool(checkpoint)
        edge_dim = node_dim if edge_dim is None else edge_dim
        hidden = node_dim if hidden is None else hidden
        self.edge_mlp = MLP(2 * node_dim + edge_dim, hidden, edge_dim, mlp_layers, layer_norm, activation)
        self.node_mlp = MLP(node_dim + edge_dim, hidden, node_dim, mlp_layers, layer_norm, activation)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor):
        """Args:
            x: ``[N, F]`` node features.
            edge_index: ``[2, E]`` (row 0 source ``j``, row 1 target ``i``).
            edge_attr: ``[E, D]`` edge features.

        Returns:
            ``(x' [N, F], e' [E, D])``.
        """
        if self.checkpoint and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(self._update, x, edge_index, edge_attr, use_reentrant=False)
        return self._update(x, edge_index, edge_attr)

    def _update(self, x: torch.Tensor, edge_index: torch.Tensor, edge_attr: torch.Tensor):
        e = self.edge_updater(edge_index, x=x, edge_attr=edge_attr)
        agg = self.propagate(edge_index, e=e, size=(x.shape[0], x.shape[0]))
        return x + self.node_mlp(torch.cat([x, agg], -1)), e

    def edge_update(self, x_i: torch.Tensor, x_j: torch.Tensor, edge_attr: torch.Tensor) -> torch.Tensor:
        return edge_attr + self.edge_mlp(torch.cat([edge_attr, x_j, x_i], -1))

    def message(self, e: torch.Tensor) -> torch.Tensor:
        return e

    def aggregate(self, inputs: torch.Tensor, index: torch.Tensor, ptr: Optional[torch.Tensor] = None,
                  dim_size: Optional[int] = None) -> torch.Tensor:
        # index_add_ rather than PyG's scatter over an index expanded to [E, D]: the same sums, and
        # its backward is an index_select instead of a gather (benchmarks/bench_scale.py).
        return inputs.new_zeros((dim_size, inputs.shape[1])).index_add_(0, index, inputs)


# The model's processor block under the name the model gives it.
ProcessorBlock = MeshGraphNetBlock


class MeshGraphNet(nn.Module):
    r"""Encode-process-decode graph network of Pfaff et al. (2021).

    Node and edge features are encoded to ``hidden`` by MLPs with LayerNorm, updated by
    ``num_layers`` :class:`MeshGraphNetBlock`\ s (residual, sum aggregation), and decoded per node by
    an MLP without LayerNorm.

    Args:
        node_in: input node feature width.
        edge_in: input edge feature width (e.g. ``d + 1``: relative position and its norm).
        node_out: output width per node.
        hidden: latent width (paper: 128).
        num_layers: number of processor blocks (paper: 15).
        mlp_layers: hidden layers in every MLP (paper: 2).
        activation: activation class (paper: ReLU).
        checkpoint: recompute each processor block in backward (activation checkpointing) to save
            memory; the result is unchanged.

    Calling it:
        * ``model(x, edge_index, edge_attr)`` or ``model(data)`` (a PyG ``Data`` with ``x``,
          ``edge_index``, ``edge_attr``): whole graph, returns ``[N, node_out]``.
        * Sharded, to train: ``meshshard.DomainParallel(model)(x, g, edge_attr)`` on one rank's
          shard of a :class:`meshshard.ShardedGraph` ``g`` returns a ShardTensor of the owned
          rows; ``F.mse_loss(pred, y)`` of ShardTensors is the whole mesh's loss and backward
          sums the gradients over the ranks (:func:`meshshard.models.train_step` does one such step).
        * ``model(x_owned, edge_attr_local, graph=g)``: the same sharded forward (it runs
          DomainParallel's graph path, :func:`meshshard.ops.sharded_forward`) on plain tensors
          and without gradient hooks, a low-level form: ``x_owned`` is ``[g.num_owned, node_in]``
          (or a ShardTensor of those rows), ``edge_attr_local`` is ``[g.edge_index.shape[1],
          edge_in]`` aligned with ``g.edge_index``. Returns the plain ``[g.num_owned, node_out]``
          owned rows of the whole-graph result; a loop on them takes
          :func:`meshshard.models.global_mse_loss` and calls :meth:`all_reduce_gradients` after
          backward. ``exchange="auto"`` uses ``"once"`` when the graph's ``halo_hops`` covers
          the propagations, else ``"per_layer"`` (see the module docstring). Every rank of the
          graph's group must call it (the exchange is collective).
    """

    def __init__(
        self,
        node_in: int,
        edge_in: int,
        node_out: int,
        hidden: int = 128,
        num_layers: int = 15,
        mlp_layers: int = 2,
        activation: Type[nn.Module] = nn.ReLU,
        checkpoint: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(num_layers, int) or num_layers < 0:
            raise ValueError(f"num_layers must be an int >= 0, got {num_layers!r}")
        self.node_in, self.edge_in, self.node_out = node_in, edge_in, node_out
        self.hidden, self.num_layers, self.mlp_layers = hidden, num_layers, mlp_layers
        self.checkpoint = bool(checkpoint)
        self.node_encoder = MLP(node_in, hidden, hidden, mlp_layers, layer_norm=True, activation=activation)
        self.edge_encoder = MLP(edge_in, hidden, hidden, mlp_layers, layer_norm=True, activation=activation)
        self.processor = nn.ModuleList(MeshGraphNetBlock(hidden, hidden, hidden, mlp_layers, activation,
                                                         checkpoint=checkpoint) for _ in range(num_layers))
        self.decoder = MLP(hidden, hidden, node_out, mlp_layers, layer_norm=False, activation=activation)

    # ------------------------------------------------------------------ helpers
    def _check_inputs(self, x: torch.Tensor, edge_attr: torch.Tensor, num_edges: int) -> None:
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.node_in:
            raise ValueError(f"MeshGraphNet: x must be [num_nodes, {self.node_in}], got "
                             f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
        if not isinstance(edge_attr, torch.Tensor) or edge_attr.dim() != 2 or edge_attr.shape[1] != self.edge_in:
            raise ValueError(f"MeshGraphNet: edge_attr must be [num_edges, {self.edge_in}], got "
                             f"{tuple(edge_attr.shape) if isinstance(edge_attr, torch.Tensor) else type(edge_attr).__name__}")
        if edge_attr.shape[0] != num_edges:
            raise ValueError(f"MeshGraphNet: edge_attr has {edge_attr.shape[0]} rows but the graph has {num_edges} edges")

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        x,
        edge_index: Optional[torch.Tensor] = None,
        edge_attr: Optional[torch.Tensor] = None,
        *,
        graph=None,
        exchange: str = "auto",
    ) -> torch.Tensor:
        """Run the model on a whole graph or on one rank's shard (see the class docstring).

        Args:
            x: node features ``[N, node_in]`` (whole graph), a PyG ``Data``, or the owned rows
                ``[g.num_owned, node_in]`` with ``graph=g``.
            edge_index: ``[2, E]`` (whole graph; row 0 source, row 1 target); with ``graph=``
                this position holds ``edge_attr``.
            edge_attr: ``[E, edge_in]`` (whole graph), or ``[g.edge_index.shape[1], edge_in]``.
            graph: a :class:`meshshard.ShardedGraph` (collective: every rank must call).
            exchange: ``"auto"``, ``"per_layer"`` or ``"once"`` (sharded only).

        Returns:
            ``[N, node_out]`` (whole graph) or ``[g.num_owned, node_out]`` (shard).
        """
        if graph is not None:
            if edge_attr is None:  # model(x_owned, edge_attr_local, graph=g)
                edge_attr, edge_index = edge_index, None
            if edge_index is not None:
                raise TypeError("MeshGraphNet(x_owned, edge_attr, graph=g): the edges come from the graph; "
                                "do not pass edge_index too")
            return self._forward_sharded(x, edge_attr, graph, exchange)
        if hasattr(x, "edge_index") and hasattr(x, "x"):  # a PyG Data / Batch
            data = x
            x, edge_index, edge_attr = data.x, data.edge_index, data.edge_attr
        if edge_index is None or edge_attr is None:
            raise TypeError("MeshGraphNet needs (x, edge_index, edge_attr), a Data object, or (x_owned, edge_attr, graph=g)")
        return self._forward_full(x, edge_index, edge_attr)

    def _forward_full(self, x, edge_index, edge_attr):
        if edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise ValueError(f"edge_index must be [2, E], got {tuple(edge_index.shape)}")
        self._check_inputs(x, edge_attr, edge_index.shape[1])
        n = x.shape[0]
        # Targets only: on a shard (DomainParallel, one exchange per block) sources index the
        # owned + ghost rows the block receives, which x here does not hold yet.
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index[1].max()) >= n):
            raise ValueError(f"edge_index refers to nodes outside [0, {n})")
        h = self.node_encoder(x)
        e = self.edge_encoder(edge_attr)
        for block in self.processor:
            h, e = block(h, edge_index, e)
        return self.decoder(h)

    def _forward_sharded(self, x_owned, edge_attr, graph, exchange):
        # One implementation of the sharded forward: DomainParallel's graph path.
        from meshshard.ops.domain_parallel import sharded_forward

        if exchange == "once" and graph.halo_hops < self.num_layers:
            raise ValueError(
                f"exchange='once' needs a graph with halo_hops >= num_layers ({self.num_layers}), "
                f"this one has halo_hops={graph.halo_hops}; rebuild it with halo_hops={self.num_layers} or use "
                "exchange='per_layer'")
        self._check_inputs(x_owned.to_local() if hasattr(x_owned, "to_local") else x_owned,
                           edge_attr.to_local() if hasattr(edge_attr, "to_local") else edge_attr,
                           graph.edge_index.shape[1])
        return sharded_forward(self, x_owned, graph, (edge_attr,), {}, exchange=exchange)

    # ------------------------------------------------------------------ replicas
    def all_reduce_gradients(self, group=None) -> None:
        """Sum parameter gradients over ranks (after ``backward`` of a
        :func:`meshshard.models.global_mse_loss`), so one optimizer step keeps replicas equal.

        Low-level: for a loop on ``model(x_owned, edge_attr, graph=g)``. Under
        :class:`meshshard.DomainParallel` (and :func:`meshshard.models.train_step`) backward
        already sums the gradients; calling this as well would sum them twice.

        Args:
            group: process group (default: the world).
        """
        all_reduce_gradients(self, group)

    def broadcast_parameters(self, src: int = 0, group=None) -> None:
        """Make every rank's parameters equal to rank ``src``'s.

        Args:
            src: the rank whose parameters (and buffers) are copied.
            group: process group (default: the world).
        """
        broadcast_parameters(self, src, group)

    def extra_repr(self) -> str:
        return (f"node_in={self.node_in}, edge_in={self.edge_in}, node_out={self.node_out}, hidden={self.hidden}, "
                f"num_layers={self.num_layers}, mlp_layers={self.mlp_layers}")

    @property
    def config(self) -> dict:
        """The constructor arguments: ``MeshGraphNet(**net.config)`` builds the same architecture
        (:mod:`meshshard.models.checkpoint` stores it with the weights)."""
        # The activation class is not kept as an attribute; the decoder holds instances of it
        # (none when mlp_layers == 0, where it does not matter).
        act = next((type(m) for m in self.decoder if not isinstance(m, (nn.Linear, nn.LayerNorm))), nn.ReLU)
        return dict(node_in=self.node_in, edge_in=self.edge_in, node_out=self.node_out, hidden=self.hidden,
                    num_layers=self.num_layers, mlp_layers=self.mlp_layers, activation=act,
                    checkpoint=self.checkpoint)
