"""Layer 2: a rank's view of a partitioned graph and the on-disk shard format.

* :class:`ShardedGraph`: owned + ghost (halo) nodes, local edges, and the exchange plan built once.
* :func:`save_parts` / :func:`load_part` / :func:`read_meta` / :func:`verify_parts`: one file per
  part, checksummed, written atomically.
"""
from meshshard.graph.halo import HaloLayout, build_halo
from meshshard.graph.lazy_rows import LazyRows
from meshshard.graph.parts_io import FORMAT_VERSION, load_part, read_meta, save_parts, verify_parts
from meshshard.graph.plan import ExchangePlan
from meshshard.graph.sharded_graph import ShardedGraph

__all__ = [
    "ShardedGraph",
    "ExchangePlan",
    "HaloLayout",
    "build_halo",
    "save_parts",
    "LazyRows",
    "load_part",
    "read_meta",
    "verify_parts",
    "FORMAT_VERSION",
]
