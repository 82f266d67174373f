"""LazyRows: rows computed on demand give the same part files as the whole array; bad rows are refused."""
import pytest
import torch

from meshshard.graph import LazyRows, read_meta, save_parts
from tests.graph.graph_data import load_graph, make_partition


@pytest.fixture(scope="module")
def brick(data_dir):
    pts, ei = load_graph(data_dir, "brick_tets.su2")
    return pts, ei, make_partition(pts, ei, 3, "kdtree")


def _features(pts, ei, ids):
    rel = pts[ei[0, ids]] - pts[ei[1, ids]]
    return torch.cat([rel, rel.norm(dim=1, keepdim=True)], 1).to(torch.float32)


def test_lazy_rows_give_the_same_files_as_the_array(tmp_path, brick):
    pts, ei, part = brick
    pts = pts.to(torch.float64)
    everything = torch.arange(ei.shape[1])
    asked = []

    def fn(ids):
        asked.append(ids.numel())
        return _features(pts, ei, ids)

    lazy = LazyRows(ei.shape[1], (pts.shape[1] + 1,), torch.float32, fn)
    assert lazy.shape == (ei.shape[1], pts.shape[1] + 1) and lazy.dim() == 2
    a = save_parts(tmp_path / "a", ei, part, node_data={"pos": pts}, edge_data={"ea": _features(pts, ei, everything)},
                   progress=False)
    b = save_parts(tmp_path / "b", ei, part, node_data={"pos": pts}, edge_data={"ea": lazy}, progress=False)
    ma, mb = read_meta(a), read_meta(b)
    assert ma["files"] == mb["files"]  # sha256 of every file: byte-identical parts
    assert ma["edge_features"] == mb["edge_features"] == {"ea": {"shape": [pts.shape[1] + 1], "dtype": "float32"}}
    assert len(asked) == 3 and sum(asked) < 3 * ei.shape[1]  # one call per part, never the whole array


def test_bad_lazy_rows(tmp_path, brick):
    pts, ei, part = brick
    with pytest.raises(ValueError, match="expected"):  # wrong number of rows for the graph
        save_parts(tmp_path / "n", ei, part, edge_data={"w": LazyRows(ei.shape[1] - 1, (), torch.float32, len)},
                   progress=False)
    wrong = LazyRows(ei.shape[1], (2,), torch.float32, lambda ids: torch.zeros(ids.numel(), 3))
    with pytest.raises(ValueError, match=r"fn returned \(\d+, 3\)"):
        save_parts(tmp_path / "w", ei, part, edge_data={"w": wrong}, progress=False)
    with pytest.raises(ValueError, match="float64"):
        LazyRows(5, (), torch.float64, lambda ids: torch.zeros(ids.numel()))[torch.arange(2)]
    with pytest.raises(TypeError, match="callable"):
        LazyRows(5, (), torch.float32, None)
    with pytest.raises(ValueError, match=">= 0"):
        LazyRows(-1, (), torch.float32, len)
