"""MeshGraphNet (Pfaff et al., "Learning Mesh-Based Simulation with Graph Networks", ICLR 2021).

The same module runs on a whole graph in one process and on one rank's shard of a
:class:`meshshard.ShardedGraph`; on a shard it returns exactly the owned rows of the whole-graph
result, and its gradients summed over ranks equal the whole-graph gradients.

How the sharded forward stays exact
-----------------------------------
An edge ``j -> i`` lives on the rank that owns its target ``i`` (a ShardedGraph holds every edge
whose target is owned). Its latent ``e_ji`` is updated there from ``e_ji``, ``h_j`` and ``h_i``;
only the node latents of ghost sources ``j`` come from other ranks. Two ways to get them:

* ``exchange="per_layer"``: one ``graph.exchange`` of the node latents before every processor
  block (``num_layers`` exchanges of width ``hidden``). Works with any ``halo_hops``.
* ``exchange="once"``: with a graph built with ``halo_hops >= num_layers``, exchange the raw input
  features once, then run every block on owned + ghost nodes without talking to other ranks.
  Write ``d(v)`` for the hop distance of node ``v`` from the owned nodes. After block ``l``, node
  latents with ``d(v) <= halo_hops - l`` and edge latents whose endpoints both have
  ``d <= halo_hops - l + 1`` are exact (their whole receptive field of ``l`` hops is present);
  rows farther out are wrong and never reach an owned node within ``num_layers`` blocks. So the
  owned outputs (``d = 0``) are exact when ``halo_hops >= num_layers``; ``"once"`` refuses a
  graph with fewer hops.
"""
from __future__ import annotations

from typing import Optional, Type

import torch
from torch import nn

from meshshard.models.mlp import MLP
from meshshard.models.parallel import all_reduce_gradients, broadcast_parameters

__all__ = ["MeshGraphNet", "ProcessorBlock"]


class ProcessorBlock(nn.Module):
    r"""One message-passing block: residual edge update, sum aggregation, residual node update.

    .. math::
        e'_{ji} = e_{ji} + f_e([e_{ji}, h_j, h_i]), \qquad
        h'_i = h_i + f_v\big([h_i, \textstyle\sum_{j} e'_{ji}]\big)

    Args:
        hidden: latent width.
        mlp_layers: hidden layers of ``f_e`` and ``f_v``.
        activation: activation class.
    """

    def __init__(self, hidden: int, mlp_layers: int = 2, activation: Type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.edge_mlp = MLP(3 * hidden, hidden, hidden, mlp_layers, layer_norm=True, activation=activation)
        self.node_mlp = MLP(2 * hidden, hidden, hidden, mlp_layers, layer_norm=True, activation=activation)

    def forward(self, h: torch.Tensor, e: torch.Tensor, edge_index: torch.Tensor, num_targets: int):
        """
        Args:
            h: node latents ``[n, hidden]`` (sources and targets).
            e: edge latents ``[E, hidden]``.
            edge_index: ``[2, E]``, row 0 source ``j``, row 1 target ``i`` (PyG's flow);
                every target must be ``< num_targets``.
            num_targets: the first ``num_targets`` rows of ``h`` are updated and returned.

        Returns:
            ``(h' [num_targets, hidden], e' [E, hidden])``.
        """
        src, dst = edge_index[0], edge_index[1]
        e_new = e + self.edge_mlp(torch.cat([e, h[src], h[dst]], dim=-1))
        agg = torch.zeros(num_targets, e_new.shape[1], dtype=e_new.dtype, device=e_new.device)
        agg = agg.index_add(0, dst, e_new)
        h_t = h[:num_targets]
        h_new = h_t + self.node_mlp(torch.cat([h_t, agg], dim=-1))
        return h_new, e_new


class MeshGraphNet(nn.Module):
    r"""Encode-process-decode graph network of Pfaff et al. (2021).

    Node and edge features are encoded to ``hidden`` by MLPs with LayerNorm, updated by
    ``num_layers`` :class:`ProcessorBlock`\ s (residual, sum aggregation), and decoded per node by
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
        * ``model(x_owned, edge_attr_local, graph=g)``: one rank's shard of a
          :class:`meshshard.ShardedGraph` ``g``; ``x_owned`` is ``[g.num_owned, node_in]``,
          ``edge_attr_local`` is ``[g.edge_index.shape[1], edge_in]`` aligned with
          ``g.edge_index``. Returns ``[g.num_owned, node_out]``, equal to the owned rows of the
          whole-graph result. ``exchange="auto"`` uses ``"once"`` when
          ``g.halo_hops >= num_layers``, else ``"per_layer"`` (see the module docstring).
          Every rank of the graph's group must call it (the exchange is collective).
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
        self.processor = nn.ModuleList(ProcessorBlock(hidden, mlp_layers, activation) for _ in range(num_layers))
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

    def _block(self, block: ProcessorBlock, h, e, edge_index, num_targets):
        if self.checkpoint and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint

            return checkpoint(block, h, e, edge_index, num_targets, use_reentrant=False)
        return block(h, e, edge_index, num_targets)

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
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
            raise ValueError(f"edge_index refers to nodes outside [0, {n})")
        h = self.node_encoder(x)
        e = self.edge_encoder(edge_attr)
        for block in self.processor:
            h, e = self._block(block, h, e, edge_index, n)
        return self.decoder(h)

    def _forward_sharded(self, x_owned, edge_attr, graph, exchange):
        n_own = int(graph.num_owned)
        n_ext = n_own + int(graph.num_ghost)
        edge_index = graph.edge_index
        self._check_inputs(x_owned, edge_attr, edge_index.shape[1])
        if x_owned.shape[0] != n_own:
            raise ValueError(f"MeshGraphNet: x_owned has {x_owned.shape[0]} rows but the graph owns {n_own} nodes")
        hops = int(getattr(graph, "halo_hops", 1))
        if exchange == "auto":
            exchange = "once" if hops >= self.num_layers else "per_layer"
        if exchange == "once":
            if hops < self.num_layers:
                raise ValueError(
                    f"exchange='once' needs a graph with halo_hops >= num_layers ({self.num_layers}), "
                    f"this one has halo_hops={hops}; rebuild it with halo_hops={self.num_layers} or use "
                    "exchange='per_layer'")
            # One exchange of the (narrow) inputs; then every block runs on owned + ghost rows.
            h = self.node_encoder(graph.exchange(x_owned))
            e = self.edge_encoder(edge_attr)
            ptr = getattr(graph, "edge_hop_ptr", None)
            for l, block in enumerate(self.processor, start=1):
                if ptr is not None:
                    # Edges are sorted by the ring of their target: block l only needs the edges
                    # into rings 0..L-l (outer rows are never read again), a prefix.
                    keep = int(ptr[self.num_layers - l + 1])
                    e, ei = e[:keep], edge_index[:, :keep]
                else:
                    ei = edge_index
                h, e = self._block(block, h, e, ei, n_ext)
            return self.decoder(h[:n_own])
        if exchange != "per_layer":
            raise ValueError(f"exchange must be 'auto', 'once' or 'per_layer', got {exchange!r}")
        # Only edges into owned nodes matter per layer (a k-hop graph also has edges into ghosts).
        ptr = getattr(graph, "edge_hop_ptr", None)
        if ptr is not None:
            keep = int(ptr[1])
            edge_index, edge_attr = edge_index[:, :keep], edge_attr[:keep]
        elif edge_index.numel() and int(edge_index[1].max()) >= n_own:
            keep = edge_index[1] < n_own
            edge_index, edge_attr = edge_index[:, keep], edge_attr[keep]
        h = self.node_encoder(x_owned)
        e = self.edge_encoder(edge_attr)
        for block in self.processor:
            h_ext = graph.exchange(h)
            h, e = self._block(block, h_ext, e, edge_index, n_own)
        return self.decoder(h)

    # ------------------------------------------------------------------ replicas
    def all_reduce_gradients(self, group=None) -> None:
        """Sum parameter gradients over ranks (after ``backward`` of a
        :func:`meshshard.models.global_mse_loss`), so one optimizer step keeps replicas equal.

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
