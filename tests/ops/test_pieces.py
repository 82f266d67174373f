"""read_pieces_distributed: a .pvtu read piece-wise at 2-4 ranks (uneven pieces, more pieces than
ranks) gives the graph and fields of the merged file, and RowFetch the owners' rows."""
import numpy as np
import pytest
import torch

from meshshard.io import read_mesh
from meshshard.testing import run_distributed
from tests.io._piece_files import delaunay_mesh, edges_by_coordinates, write_split

CASES = {  # name: (seed, points, dim, cut fractions, global ids)
    "tets": (0, 150, 3, [0.05, 0.2, 0.5, 0.6], False),  # 5 uneven pieces
    "tets_ids": (1, 120, 3, [0.1, 0.2, 0.3, 0.45, 0.7, 0.9], True),  # 7 pieces
    "triangles": (2, 90, 2, [0.3, 0.5, 0.9], False),  # 4 pieces, planar
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pieces_dist")
    out = {}
    for name, (seed, n, dim, fractions, ids) in CASES.items():
        out[name] = write_split(tmp / f"{name}.pvtu", *delaunay_mesh(seed, n, dim), fractions, ids=ids)
    out["two"] = write_split(tmp / "two.pvtu", *delaunay_mesh(3, 40, 3), [0.5], ids=False)
    return out


def _ranks(rank, world, files):
    from meshshard.distributed import new_group
    from meshshard.ops.pieces import RowFetch, read_pieces_distributed

    groups = {w: new_group(range(w)) for w in range(2, world + 1)}
    out = {}
    for w, g in groups.items():
        if rank >= w:
            continue
        for name in CASES:
            pg = read_pieces_distributed(files[name], group=g, method="hilbert" if w == 3 else "kdtree")
            gr = pg.graph
            # every point read here gets its owner's row: the owner's coordinates
            fetched = RowFetch(pg.local_ids, gr.sizes, g)(pg.points)
            local_edges = gr.global_ids[gr.owned_edge_index()]
            out[(w, name)] = dict(points=pg.points.numpy(), q=pg.point_data["q"], p=pg.point_data["p"],
                                  offsets=gr.offsets.numpy(), edges=local_edges.numpy(),
                                  fetched_ok=bool(np.array_equal(fetched.numpy(),
                                                                 pg.local.points[:, :pg.dim])),
                                  local_pieces=pg.local.pieces, keys=pg.keys)
        with pytest.raises(ValueError, match=f"has 2 pieces, fewer than the {w} ranks") if w > 2 else _null():
            read_pieces_distributed(files["two"], group=g)
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.timeout(300)
def test_piece_wise_graph_equals_the_merged_file(files):
    results = run_distributed(_ranks, 4, args=(files,), timeout=280)
    for name in CASES:
        merged = read_mesh(files[name])
        ref_edges = edges_by_coordinates(merged.points, merged.edge_index())
        by_coord = {tuple(p): i for i, p in enumerate(merged.points)}
        for w in (2, 3, 4):
            per_rank = [results[r][(w, name)] for r in range(w)]
            pts = np.concatenate([d["points"] for d in per_rank])
            assert pts.shape == merged.points.shape, (name, w)
            # each rank owns the rows offsets[r]..offsets[r + 1] - 1, every point exactly once
            assert per_rank[0]["offsets"].tolist() == [0] + np.cumsum([len(d["points"]) for d in per_rank]).tolist()
            rows = [by_coord[tuple(p)] for p in pts]
            assert sorted(rows) == list(range(merged.num_nodes))
            for field in ("q", "p"):
                np.testing.assert_array_equal(np.concatenate([d[field] for d in per_rank]),
                                              merged.point_data[field][rows])
            got = set()
            for d in per_rank:
                got |= edges_by_coordinates(pts, d["edges"])
            assert got == ref_edges, (name, w)
            assert all(d["fetched_ok"] for d in per_rank)
            # each rank read its block of pieces only
            assert sum((d["local_pieces"] for d in per_rank), []) == list(range(len(CASES[name][3]) + 1))
            if CASES[name][4]:  # keys: the global point ids the pieces carry (the original point rows)
                seed, n, dim = CASES[name][:3]
                keys = np.concatenate([d["keys"][:, 0] for d in per_rank])
                np.testing.assert_array_equal(delaunay_mesh(seed, n, dim)[0][keys], pts)

def test_single_process_reads_every_piece(files):
    from meshshard.ops.pieces import read_pieces_distributed

    pg = read_pieces_distributed(files["triangles"])
    merged = read_mesh(files["triangles"])
    assert pg.num_nodes == merged.num_nodes and pg.dim == 2 and pg.local.pieces == [0, 1, 2, 3]
    assert edges_by_coordinates(pg.points.numpy(), pg.graph.global_ids[pg.graph.edge_index]) == \
        edges_by_coordinates(merged.points, merged.edge_index())
    assert torch.equal(pg.graph.global_ids, torch.arange(merged.num_nodes))


def _push(rank, world):
    from meshshard.ops.pieces import RowPush

    sizes = [2, 5, 3]  # uneven: rank r owns ids offsets[r]..offsets[r + 1] - 1
    held = {0: [7, 0, 7, 3, 9], 1: [1, 2, 3, 4, 5, 6, 1, 8], 2: [9, 0, 2, 4, 6, 8, 7, 5]}[rank]
    ids = torch.tensor(held)
    # a row names its id and its holder: the owner keeps the lowest holder's row
    rows = torch.stack([ids.double(), torch.full((len(held),), float(rank))], dim=1)
    got = RowPush(ids, sizes, None)(rows)
    missing = None
    try:
        RowPush(torch.tensor([i for i in held if i != 5]), sizes, None)
    except ValueError as exc:
        missing = str(exc)
    return got, missing


@pytest.mark.timeout(120)
def test_row_push_sends_the_lowest_holders_rows_to_the_owners():
    results = run_distributed(_push, 3, timeout=100)
    holders = {0: [7, 0, 3, 9], 1: [1, 2, 3, 4, 5, 6, 8], 2: [9, 0, 2, 4, 6, 8, 7, 5]}
    offsets = [0, 2, 7, 10]
    for r, (got, missing) in enumerate(results):
        ids = list(range(offsets[r], offsets[r + 1]))
        expected = [[i, min(h for h, held in holders.items() if i in held)] for i in ids]
        assert got.tolist() == expected
        assert missing and "rank 1: 1 of its 5 owned nodes are held by no rank" in missing  # raised on every rank
