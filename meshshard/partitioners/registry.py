"""The partitioner classes, their registry and the :func:`partition` front door."""
from __future__ import annotations

from typing import Dict, Optional, Type

import numpy as np
import torch

from meshshard.partitioners._runs import balanced_runs
from meshshard.partitioners._csr import graph_csr
from meshshard.partitioners._validate import (
    as_edge_index,
    as_edge_weights,
    as_node_weights,
    as_points,
    check_num_parts,
    to_numpy,
)
from meshshard.partitioners.graph_engines import GRAPH_ENGINES, graph_assignment
from meshshard.partitioners.inertial import rib_assignment
from meshshard.partitioners.kdtree import rcb_assignment
from meshshard.partitioners.result import Partition
from meshshard.partitioners.multilevel import multilevel_refine
from meshshard.partitioners.sfc import hilbert_keys, morton_keys

__all__ = [
    "BasePartitioner",
    "KDTreePartitioner",
    "InertialPartitioner",
    "MortonPartitioner",
    "HilbertPartitioner",
    "GraphPartitioner",
    "PARTITIONERS",
    "DEFAULT_IMBALANCE",
    "partition",
]

#: default bound on max part weight / mean part weight (refinement and METIS)
DEFAULT_IMBALANCE = 1.01


class BasePartitioner:
    r"""Common options and input checks of every partitioner.

    Args:
        imbalance: bound on max part weight / mean part weight kept by boundary refinement
            (geometric methods) or passed to METIS as ``ufactor`` (graph method); ``>= 1``;
            default :data:`DEFAULT_IMBALANCE` (1.01).
        seed: tie-break / METIS seed; the same input and seed give the same partition.
        refine: geometric methods only: when an ``edge_index`` is given, move boundary nodes to
            lower the edge cut (default True): compiled k-way Fiduccia-Mattheyses passes on the
            geometric partition and on a hierarchy of coarsened graphs, the lower cut kept, then
            merging of parts' disconnected pieces
            (:func:`~meshshard.partitioners.multilevel.multilevel_refine`). With two usable CPUs the
            graph and its coarse graphs are built on a second thread while the geometric start is
            computed and refined (the environment variable ``MESHSHARD_THREADS=1`` keeps one thread;
            same result).
        refine_tries: independent V-cycles of the refinement, the lowest cut kept (default 1; see
            ``tries`` of :func:`~meshshard.partitioners.multilevel.multilevel_refine`): 2 gives a lower
            and steadier cut for more time.
    """

    name = ""

    def __init__(self, *, imbalance: Optional[float] = None, seed: int = 0, refine: bool = True,
                 refine_tries: int = 1) -> None:
        if imbalance is None:
            imbalance = DEFAULT_IMBALANCE
        if isinstance(imbalance, bool) or not isinstance(imbalance, (int, float, np.floating, np.integer)):
            raise TypeError(f"imbalance must be a float >= 1, got {type(imbalance).__name__}")
        if not np.isfinite(imbalance) or imbalance < 1.0:
            raise ValueError(f"imbalance must be a finite float >= 1 (max part weight / mean), got {imbalance}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if isinstance(refine_tries, bool) or not isinstance(refine_tries, (int, np.integer)) or refine_tries < 1:
            raise ValueError(f"refine_tries must be an int >= 1, got {refine_tries!r}")
        self.imbalance = float(imbalance)
        self.seed = int(seed)
        self.refine = bool(refine)
        self.refine_tries = int(refine_tries)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(imbalance={self.imbalance}, seed={self.seed}, refine={self.refine}, "
                f"refine_tries={self.refine_tries})")

    # -- geometric methods override this -----------------------------------------------------------
    def _initial(self, points: np.ndarray, num_parts: int, weights: Optional[np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def partition(self, points, num_parts: int, edge_index=None, weights=None, edge_weights=None) -> Partition:
        r"""Partition ``N`` points into ``num_parts`` shards.

        Args:
            points: ``[N, 2]`` or ``[N, 3]`` finite coordinates (numpy or torch).
            num_parts: ``1 <= P <= N``.
            edge_index: optional ``[2, E]`` graph (one or both directions); enables boundary
                refinement.
            weights: optional ``[N]`` non-negative node weights to balance.
            edge_weights: optional ``[E]`` non-negative weights of the ``edge_index`` columns
                (refinement minimises the weighted cut).

        Returns:
            :class:`Partition` with ``method`` set to this partitioner's name; every part is
            non-empty.
        """
        pts = as_points(points)
        n = pts.shape[0]
        num_parts = check_num_parts(num_parts, n)
        w = as_node_weights(weights, n)
        ei = None if edge_index is None else as_edge_index(edge_index, n)
        ew = None
        if edge_weights is not None:
            if ei is None:
                raise ValueError("edge_weights given without edge_index")
            ew = as_edge_weights(edge_weights, ei.shape[1])
        if ei is not None and self.refine and num_parts > 1:
            # the start is computed while a second thread coarsens the graph (see multilevel_refine)
            assign = multilevel_refine(lambda: self._initial(pts, num_parts, w), num_parts, ei, weights=w,
                                       edge_weights=ew, imbalance=self.imbalance, seed=self.seed, num_nodes=n,
                                       tries=self.refine_tries)
        else:
            assign = self._initial(pts, num_parts, w)
        return Partition(torch.from_numpy(assign), num_parts, method=self.name,
                         node_weights=None if w is None else torch.from_numpy(w))


class KDTreePartitioner(BasePartitioner):
    r"""Recursive coordinate bisection (``"kdtree"``).

    Cuts along the axis of largest extent at the weighted position that balances the halves
    in the ratio of their part counts (7 parts: 3:4), so any ``num_parts`` balances. See
    :class:`BasePartitioner` for the options.
    """

    name = "kdtree"

    def _initial(self, points, num_parts, weights):
        return rcb_assignment(points, num_parts, weights)


class InertialPartitioner(BasePartitioner):
    r"""Recursive inertial bisection (``"inertial"``), as Zoltan's RIB.

    Each subdomain is cut across its weighted principal axis (the covariance's top eigenvector) at the
    weighted position that balances the halves in the ratio of their part counts, so any
    ``num_parts`` balances. On rotated or elongated geometry the cuts are shorter than the
    axis-aligned ones of ``"kdtree"``. See :class:`BasePartitioner` for the options.
    """

    name = "inertial"

    def _initial(self, points, num_parts, weights):
        return rib_assignment(points, num_parts, weights)


_BUCKET_BITS = 20


class _CurvePartitioner(BasePartitioner):
    _keys = None

    def _initial(self, points, num_parts, weights):
        keys = type(self)._keys(points)
        # the parts are the runs of the (key, id) order cut at even weight; no full sort needed:
        # keys are bucketed by their top 20 bits and only the buckets holding a cut are sorted
        total_bits = 64 if points.shape[1] == 2 else 63
        # about 4 points per bucket, at most 2**20 buckets: bucket bookkeeping stays O(N)
        bucket_bits = int(min(_BUCKET_BITS, max(8, np.log2(max(points.shape[0], 1)) - 2)))
        bucket = (keys >> np.uint64(total_bits - bucket_bits)).view(np.int64)
        return balanced_runs(keys, weights, np.arange(1, num_parts) / num_parts,
                             np.ones(num_parts, dtype=np.int64), bucket, 1 << bucket_bits)


class MortonPartitioner(_CurvePartitioner):
    r"""Morton (Z-order) curve (``"morton"``): sort by key, cut into contiguous runs of even weight.

    See :class:`BasePartitioner` for the options.
    """

    name = "morton"
    _keys = staticmethod(morton_keys)


class HilbertPartitioner(_CurvePartitioner):
    r"""Hilbert curve (``"hilbert"``): sort by key, cut into contiguous runs of even weight.

    Better locality than Morton (consecutive keys are grid neighbours), so fewer cut edges.
    See :class:`BasePartitioner` for the options.
    """

    name = "hilbert"
    _keys = staticmethod(hilbert_keys)


class GraphPartitioner(BasePartitioner):
    r"""k-way graph partitioning (``"graph"``): METIS through pymetis, KaMinPar or Mt-KaHyPar.

    The graph is symmetrised, deduplicated and stripped of self loops before the engine sees it
    (pymetis can crash on directed or malformed input); isolated nodes are fine;
    ``num_parts == 1`` and ``num_parts == N`` never call the engine.

    Args:
        engine: ``"metis"`` (default, pymetis), ``"kaminpar"`` or ``"mtkahypar"`` (optional
            extras: ``pip install 'meshshard[kaminpar]'`` / ``'meshshard[mtkahypar]'``; an
            ImportError names the extra when the package is missing). Every engine is
            deterministic for a seed.
        imbalance, seed, refine: as :class:`BasePartitioner`; ``imbalance`` maps to METIS's
            ``ufactor`` or to ``epsilon = imbalance - 1``; ``refine`` is unused (the engines
            refine themselves). Node and edge weights are scaled to the engines' positive integers.
    """

    name = "graph"

    def __init__(self, *, engine: str = "metis", imbalance: Optional[float] = None, seed: int = 0,
                 refine: bool = True) -> None:
        super().__init__(imbalance=imbalance, seed=seed, refine=refine)
        if not isinstance(engine, str) or engine not in GRAPH_ENGINES:
            raise ValueError(f"unknown graph engine {engine!r}; valid engines: {sorted(GRAPH_ENGINES)}")
        self.engine = engine

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(engine={self.engine!r}, imbalance={self.imbalance}, "
                f"seed={self.seed}, refine={self.refine})")

    def partition(self, points, num_parts: int, edge_index=None, weights=None, edge_weights=None,
                  num_nodes: Optional[int] = None) -> Partition:
        r"""Partition the graph ``edge_index`` into ``num_parts`` shards.

        Args:
            points: optional ``[N, d]`` coordinates (only their count ``N`` is used; may be None).
            num_parts: ``1 <= P <= N``.
            edge_index: ``[2, E]`` graph, required.
            weights: optional ``[N]`` node weights.
            edge_weights: optional ``[E]`` edge weights (duplicate / reverse edges: the largest).
            num_nodes: ``N`` when ``points`` is None (default: from ``weights``, else
                ``edge_index.max() + 1``).

        Returns:
            :class:`Partition` with ``method="graph"``.
        """
        if edge_index is None:
            raise ValueError("method 'graph' needs edge_index [2, E]; geometric methods "
                             "('kdtree', 'inertial', 'morton', 'hilbert') work from points alone")
        if points is not None:
            n = as_points(points).shape[0]
        elif num_nodes is not None:
            n = int(num_nodes)
        elif weights is not None:
            n = to_numpy(weights, "weights").reshape(-1).shape[0]
        else:
            e = to_numpy(edge_index, "edge_index")
            n = int(e.max()) + 1 if e.size else 0
        if num_nodes is not None and int(num_nodes) != n:
            raise ValueError(f"num_nodes ({num_nodes}) does not match the {n} points")
        num_parts = check_num_parts(num_parts, n)
        w = as_node_weights(weights, n)
        ei = as_edge_index(edge_index, n)
        ew = None if edge_weights is None else as_edge_weights(edge_weights, ei.shape[1])
        indptr, indices, data = graph_csr(ei, n, ew)
        assign = graph_assignment(self.engine, indptr, indices, num_parts, node_weights=w, edge_weights=data,
                                  imbalance=self.imbalance, seed=self.seed)
        return Partition(torch.from_numpy(assign), num_parts, method=self.name,
                         node_weights=None if w is None else torch.from_numpy(w))


#: method name -> partitioner class
PARTITIONERS: Dict[str, Type[BasePartitioner]] = {
    "kdtree": KDTreePartitioner,
    "inertial": InertialPartitioner,
    "morton": MortonPartitioner,
    "hilbert": HilbertPartitioner,
    "graph": GraphPartitioner,
}


def partition(
    points,
    num_parts: int,
    method: str = "kdtree",
    *,
    edge_index=None,
    weights=None,
    edge_weights=None,
    imbalance: Optional[float] = None,
    seed: int = 0,
    refine: bool = True,
    refine_tries: int = 1,
    num_nodes: Optional[int] = None,
    engine: Optional[str] = None,
) -> Partition:
    r"""Split ``N`` nodes into ``num_parts`` shards.

    Args:
        points: ``[N, 2]`` or ``[N, 3]`` coordinates (numpy or torch); may be None for
            ``method="graph"`` (then give ``num_nodes`` or ``weights``).
        num_parts: ``1 <= P <= N``.
        method: ``"kdtree"`` (recursive coordinate bisection), ``"inertial"`` (recursive
            inertial bisection), ``"morton"``, ``"hilbert"`` (space-filling curves) or
            ``"graph"`` (needs ``edge_index``).
        edge_index: ``[2, E]`` graph (one or both directions). Geometric methods use it to refine
            the boundary (unless ``refine=False``); the graph method partitions it.
        weights: ``[N]`` non-negative node weights to balance (default: counts).
        edge_weights: ``[E]`` non-negative weights of the edge_index columns.
        imbalance: bound on max part weight / mean (default 1.01).
        seed: tie-break / METIS seed; same input and seed give the same partition.
        refine: boundary refinement for geometric methods when ``edge_index`` is given.
        refine_tries: independent V-cycles of that refinement, the lowest cut kept (see
            :class:`BasePartitioner`).
        num_nodes: ``N`` for ``method="graph"`` without points.
        engine: ``method="graph"`` only: ``"metis"`` (default), ``"kaminpar"`` or
            ``"mtkahypar"`` (optional extras; see :class:`GraphPartitioner`).

    Returns:
        :class:`Partition` (``method`` recorded); every shard non-empty.

    Example:
        >>> part = partition(mesh.points, 8, method="hilbert", edge_index=mesh.edge_index())
    """
    if not isinstance(method, str) or method not in PARTITIONERS:
        raise ValueError(f"unknown partition method {method!r}; valid methods: {sorted(PARTITIONERS)}")
    if method == "graph":
        if refine_tries != 1:
            raise ValueError(f"refine_tries={refine_tries!r} applies to the geometric methods, not 'graph'")
        part = GraphPartitioner(engine="metis" if engine is None else engine, imbalance=imbalance, seed=seed,
                                refine=refine)
        return part.partition(points, num_parts, edge_index, weights, edge_weights, num_nodes=num_nodes)
    if engine is not None:
        raise ValueError(f"engine={engine!r} applies to method='graph' only, not {method!r}")
    part = PARTITIONERS[method](imbalance=imbalance, seed=seed, refine=refine, refine_tries=refine_tries)
    return part.partition(points, num_parts, edge_index, weights, edge_weights)
