"""meshshard.partitioners.multilevel: multilevel boundary refinement on real meshes."""
import numpy as np
import pytest
import torch

from meshshard.partitioners import Partition, partition, partition_quality
from meshshard.partitioners._kernels.candidates import boundary_candidates
from meshshard.partitioners._kernels.components import label_components, repair_components
from meshshard.partitioners._kernels.csr import cut_weight
from meshshard.partitioners._kernels.fm import fm_refine
from meshshard.partitioners.multilevel import _csr, multilevel_refine, part_components
from tests.conftest import MESH_FILES
from tests.partitioners._meshes import grid_graph, load_drivaer, load_mesh, mesh_arrays, partition_of


def _cut(assign, ei):
    return partition_quality(Partition(torch.from_numpy(assign), int(assign.max()) + 1), ei)


def test_csr_ignores_direction_duplicates_and_loops_keeps_largest_weight():
    ei = np.array([[0, 1, 2, 2, 3], [1, 2, 3, 2, 0]])
    both = np.concatenate([ei, ei[::-1], ei], axis=1)
    (pa, ia, da), (pb, ib, db) = _csr(ei, 4, None), _csr(both, 4, None)
    dense = lambda p, i, d: np.add.at(z := np.zeros((4, 4)), (np.repeat(np.arange(4), np.diff(p)), i), d) or z  # noqa: E731
    a, b = dense(pa, ia, da), dense(pb, ib, db)
    assert np.array_equal(a, b) and np.array_equal(a, a.T) and a.trace() == 0 and (a > 0).sum() == 8
    w = np.array([1.0, 2.0, 3.0, 9.0, 4.0, 5.0, 6.0, 7.0, 9.0, 8.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    c = dense(*_csr(both, 4, w))
    assert c[0, 1] == 5.0 and c[1, 2] == 6.0 and c[2, 3] == 7.0 and c[3, 0] == 8.0  # the largest of each edge


def test_unweighted_graph_refines_as_unit_weights(data_dir):
    # an unweighted graph takes its own path: one 1.0 read through a zero stride as every edge's weight, and the
    # finest level's matching and contraction read no weights; it must refine exactly as explicit weights of 1
    # (the general path), for a mesh's edge_index (already a CSR) and for one direction of it in shuffled order
    pts, ei = mesh_arrays(data_dir, "rae2822_turb.su2")
    n = pts.shape[0]
    data = _csr(ei, n, None)[2]
    assert data.strides == (0,) and not data.flags.writeable and data.shape == (ei.shape[1],) and data[0] == 1.0
    plain = partition(pts, 5, "kdtree", refine=False).assignment.numpy()
    one_way = ei[:, ei[0] < ei[1]][:, np.random.default_rng(0).permutation(ei.shape[1] // 2)]
    for edges in (ei, one_way):
        got = multilevel_refine(plain, 5, edges, seed=3)
        assert np.array_equal(got, multilevel_refine(plain, 5, edges, edge_weights=np.ones(edges.shape[1]), seed=3))
        assert _cut(got, ei)["edge_cut"] < _cut(plain, ei)["edge_cut"]


@pytest.mark.parametrize("name", MESH_FILES)
@pytest.mark.parametrize("method", ["kdtree", "hilbert"])
def test_refinement_lowers_cut_within_bound(data_dir, name, method):
    pts, ei = mesh_arrays(data_dir, name)
    plain = partition_of(data_dir, name, method, refine=False).assignment.numpy()
    refined = multilevel_refine(plain, 7, ei, imbalance=1.01)
    q0, q1 = _cut(plain, ei), _cut(refined, ei)
    metis = partition_quality(partition_of(data_dir, name, "graph"), ei)["edge_cut"]
    assert q1["edge_cut"] < q0["edge_cut"] or q0["edge_cut"] <= metis
    assert q1["edge_cut"] <= 1.3 * metis  # issue 2's target; measured 0.89-1.26x on the real meshes
    assert q1["imbalance"] <= 1.01 + 1e-12
    assert np.bincount(refined, minlength=7).min() > 0
    # what the front door returns, run after run (that call is cached for test_refine.py)
    assert np.array_equal(refined, partition_of(data_dir, name, method).assignment.numpy())


def test_weighted_bound_and_one_direction_edges(data_dir):
    pts, ei = mesh_arrays(data_dir, "cylinder_crossflow_re35.vtu")
    n = pts.shape[0]
    w = 1.0 + (np.arange(n) % 5)
    plain = partition(pts, 5, "kdtree", weights=w, refine=False).assignment.numpy()
    one_dir = ei[:, ei[0] < ei[1]]
    a = multilevel_refine(plain, 5, one_dir, weights=w, imbalance=1.02)
    b = multilevel_refine(plain, 5, ei, weights=w, imbalance=1.02)
    assert np.array_equal(a, b)
    pw = np.bincount(a, weights=w, minlength=5)
    assert pw.max() / pw.mean() <= 1.02 + 1e-12
    assert _cut(a, ei)["edge_cut"] < _cut(plain, ei)["edge_cut"]


def test_an_overweight_input_is_rebalanced(data_dir):
    pts, ei = mesh_arrays(data_dir, "naca0012_inviscid.su2")
    n = pts.shape[0]
    assign = partition(pts, 4, "kdtree", refine=False).assignment.numpy()
    heavy = np.flatnonzero(assign == 1)[:200]
    assign[heavy] = 0  # part 0 now ~15% above the mean
    out = multilevel_refine(assign, 4, ei, imbalance=1.01)
    assert np.bincount(out, minlength=4).max() <= 1.01 * n / 4


def test_same_seed_same_result_other_seed_other_matching(data_dir):
    pts, ei = mesh_arrays(data_dir, "cylinder_crossflow_re35.vtu")
    plain = partition(pts, 6, "morton", refine=False).assignment.numpy()
    a, b = multilevel_refine(plain, 6, ei, seed=3), multilevel_refine(plain.copy(), 6, ei, seed=3)
    assert np.array_equal(a, b)
    c = multilevel_refine(plain, 6, ei, seed=4)
    assert not np.array_equal(a, c)  # the seed reaches the matching and tie-breaks
    for out in (a, c):
        assert np.bincount(out, minlength=6).max() <= 1.01 * pts.shape[0] / 6


def test_a_start_computed_beside_the_coarsening_gives_the_same_parts(data_dir, monkeypatch):
    # the first V-cycle's coarse graphs are built on a second thread while a start given as a function is
    # computed: the parts must equal those of the same start given as an array, and of one thread
    from meshshard.partitioners import _concurrent

    pts, ei = mesh_arrays(data_dir, "cylinder_crossflow_re35.vtu")
    n = pts.shape[0]
    plain = partition(pts, 5, "hilbert", refine=False).assignment.numpy()
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    threads = []
    orig = _concurrent.Concurrent.__init__

    def counting(self, fn, *args):
        orig(self, fn, *args)
        threads.append(self._thread)

    monkeypatch.setattr(_concurrent.Concurrent, "__init__", counting)
    beside = multilevel_refine(lambda: plain, 5, ei, seed=2, num_nodes=n)
    assert threads and all(t is not None for t in threads)  # it did run on a thread
    given = multilevel_refine(plain, 5, ei, seed=2)
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: False)
    alone = multilevel_refine(lambda: plain, 5, ei, seed=2, num_nodes=n)
    assert np.array_equal(beside, given) and np.array_equal(beside, alone)
    assert not np.array_equal(beside, plain)  # it refined
    with pytest.raises(ValueError, match="num_nodes"):
        multilevel_refine(lambda: plain, 5, ei)
    with pytest.raises(ValueError, match=r"start has shape \[10\], expected \[" + str(n)):
        multilevel_refine(lambda: plain[:10], 5, ei, num_nodes=n)
    bad = plain.copy()
    bad[7] = 5  # a part id the kernels would index past their [P] arrays with
    with pytest.raises(ValueError, match=r"integer part ids in \[0, 5\), got 0\.\.5"):
        multilevel_refine(bad, 5, ei)
    with pytest.raises(ValueError, match="got dtype float64"):
        multilevel_refine(plain.astype(float), 5, ei)
    assert beside.dtype == np.int64 and multilevel_refine(plain.astype(np.int32), 5, ei, seed=2).dtype == np.int64


@pytest.mark.parametrize("large_level", [1 << 40, 2000])
def test_a_waiting_caller_shares_the_matching_and_contraction_of_large_levels(data_dir, monkeypatch, large_level):
    # the hierarchy's thread offers pieces of each large contraction (and, on a level of _LARGE_LEVEL nodes or more,
    # of its matching) to the caller waiting for it: the levels must be the very ones built alone, and the caller
    # must have run pieces
    import threading

    import meshshard.partitioners.multilevel as ML
    from meshshard.partitioners._concurrent import HelpedHandoff

    pts, ei = mesh_arrays(data_dir, "cylinder_crossflow_re35.vtu")
    n = pts.shape[0]
    indptr, indices, data = _csr(ei, n, None)
    vw = np.ones(n)
    monkeypatch.setattr(ML, "_LARGE_LEVEL", large_level)
    monkeypatch.setattr(ML, "_MATCH_BLOCK", 512)
    alone = ML._hierarchy(indptr, indices, data, vw, None, 5, 1.1 * n / 5, 3, True)
    monkeypatch.setattr(ML, "_SPLIT_NNZ", 1000)
    ran_by, caller_ran = {"contract": [], "match": []}, threading.Event()

    def spy(real, kind):
        def run(*a):
            ran_by[kind].append(threading.current_thread().name)
            if threading.current_thread().name == "coarsening":
                caller_ran.wait(10)  # the first piece waits for the caller to take another: it always helps once
            else:
                caller_ran.set()
            return real(*a)
        return run

    monkeypatch.setattr(ML, "contract_range", spy(ML.contract_range, "contract"))
    monkeypatch.setattr(ML, "match_range", spy(ML.match_range, "match"))
    helped = HelpedHandoff(helped=True)
    worker = threading.Thread(target=lambda: helped.put(ML._hierarchy(indptr, indices, data, vw, None, 5, 1.1 * n / 5, 3,
                                                                        True, helped)), name="coarsening")
    worker.start()
    shared = helped.get()
    worker.join(30)
    assert threading.current_thread().name in ran_by["contract"] and "coarsening" in ran_by["contract"]
    if large_level < n:  # the finest level (and maybe more) matched in ML._PIECES ranges, shared
        assert len(ran_by["match"]) >= ML._PIECES and threading.current_thread().name in ran_by["match"]
    else:
        assert not ran_by["match"]
    (la, ga, aa), (ls, gs, as_) = alone, shared
    assert len(la) == len(ls) and all(np.array_equal(x, y) for x, y in zip(ga, gs)) and np.array_equal(aa, as_)
    for (ca, ga_), (cs, gs_) in zip(la, ls):
        assert np.array_equal(ca, cs) and all(np.array_equal(x, y) for x, y in zip(ga_, gs_))


def test_the_csr_is_built_beside_the_start_and_its_errors_reach_the_caller(data_dir, monkeypatch):
    # the second thread builds the CSR and hands it over while the start is computed; with one CPU the caller
    # builds it first. Bad edges are an error either way (the kernels do not check bounds), and the tries
    # waiting for the CSR stop.
    from meshshard.partitioners import _concurrent

    pts, ei = mesh_arrays(data_dir, "naca0012_inviscid.su2")
    n = pts.shape[0]
    plain = partition(pts, 4, "kdtree", refine=False).assignment.numpy()
    out = {}
    for threads in (True, False):
        monkeypatch.setattr(_concurrent, "second_cpu", lambda: threads)
        seen = []

        def start():
            seen.append(True)
            return plain

        out[threads] = multilevel_refine(start, 4, ei, num_nodes=n, tries=2)
        assert seen
        bad = ei.copy()
        bad[1, 5] = n  # past the last node; not a CSR any more, so it would be built
        with pytest.raises(ValueError, match=rf"node ids outside \[0, {n}\)"):
            multilevel_refine(start, 4, bad, num_nodes=n, tries=2)
        with pytest.raises(ValueError, match=r"edge_weights has shape \[3\]"):
            multilevel_refine(plain, 4, ei, edge_weights=np.ones(3))
        _refine_threads_finish()
    assert np.array_equal(out[True], out[False])


def _refine_threads_finish(timeout=30.0):
    import time

    from meshshard.partitioners._concurrent import busy_workers

    end = time.monotonic() + timeout
    while busy_workers() and time.monotonic() < end:  # the workers go back to waiting for work when done
        time.sleep(0.01)
    assert busy_workers() == 0, "a refinement thread is still waiting"


def test_more_tries_keep_the_lowest_cut_and_do_not_depend_on_threads(data_dir, monkeypatch):
    # tries=2: a second first V-cycle (own hierarchy, salt + _TRY_SALT) on a thread; the lower cut is kept. On
    # this mesh, seed 0, the second try wins (364 against 410), so ignoring it would fail the test.
    import meshshard.partitioners.multilevel as ML
    from meshshard.partitioners import _concurrent

    pts, ei = mesh_arrays(data_dir, "cylinder_crossflow_re35.vtu")
    n = pts.shape[0]
    plain = partition(pts, 5, "hilbert", refine=False).assignment.numpy()
    indptr, indices, data = _csr(ei, n, None)
    cycles, orig = [], ML._v_cycle

    def recording(*args, **kw):
        out = orig(*args, **kw)
        cycles.append((args[8], out[1]))
        return out

    monkeypatch.setattr(ML, "_v_cycle", recording)
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    beside = multilevel_refine(plain, 5, ei, seed=0, tries=2, repair=False)
    by_salt = dict(cycles)
    assert sorted(by_salt) == [0, ML._TRY_SALT] and by_salt[ML._TRY_SALT] < by_salt[0]
    assert cut_weight(indptr, indices, data, beside) <= min(by_salt.values()) + 1e-9
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: False)
    alone = multilevel_refine(plain, 5, ei, seed=0, tries=2, repair=False)
    assert np.array_equal(beside, alone)
    one = multilevel_refine(plain, 5, ei, seed=0, repair=False)
    assert cut_weight(indptr, indices, data, beside) < cut_weight(indptr, indices, data, one)
    # through partition(): the same option, the same parts
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    got = partition(pts, 5, "hilbert", edge_index=ei, refine_tries=2).assignment.numpy()
    assert np.array_equal(got, multilevel_refine(plain, 5, ei, tries=2))
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="tries must be an int >= 1"):
            multilevel_refine(plain, 5, ei, tries=bad)
    with pytest.raises(ValueError, match="refine_tries must be an int >= 1"):
        partition(pts, 5, "hilbert", edge_index=ei, refine_tries=0)
    with pytest.raises(ValueError, match="refine_tries=2 applies to the geometric methods"):
        partition(pts, 5, "graph", edge_index=ei, refine_tries=2)


def test_more_tries_stop_when_the_start_fails_or_cannot_be_rebalanced(data_dir, monkeypatch):
    # the other tries wait on their thread for the rebalanced start: an error in the start, or a start that
    # cannot be rebalanced, must release them (never a thread left waiting)
    from meshshard.partitioners import _concurrent

    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    pts, ei = mesh_arrays(data_dir, "naca0012_inviscid.su2")
    n = pts.shape[0]

    def fails():
        raise RuntimeError("no start")

    with pytest.raises(RuntimeError, match="no start"):
        multilevel_refine(fails, 4, ei, num_nodes=n, tries=3)
    _refine_threads_finish()
    w = np.ones(n)
    w[0] = 0.5 * n  # one node heavier than a part may be: no rebalancing fits
    plain = partition(pts, 4, "kdtree", refine=False).assignment.numpy()
    out = multilevel_refine(plain, 4, ei, weights=w, tries=2)
    _refine_threads_finish()
    assert out.shape == (n,) and np.bincount(out, minlength=4).min() > 0


@pytest.mark.parametrize("v_cycle", ["lower", "higher", "above the bound"])
def test_the_refined_start_seeds_the_v_cycle_and_competes_with_it(data_dir, monkeypatch, v_cycle):
    # FM passes refine the start first; the V-cycle starts from that refined start and the lower of the two cuts
    # is kept; a V-cycle that ends above the bound is followed by one matched inside the refined start's parts
    import meshshard.partitioners.multilevel as ML

    pts, ei = mesh_arrays(data_dir, "naca0012_inviscid.su2")
    n = pts.shape[0]
    plain = partition(pts, 4, "kdtree", refine=False).assignment.numpy()
    other = partition(pts, 4, "morton", refine=False).assignment.numpy()
    indptr, indices, data = _csr(ei, n, None)
    assert np.bincount(plain, minlength=4).max() <= 1.01 * n / 4  # no rebalancing changes the input
    fm = plain.copy()
    fm_cut = fm_refine(indptr, indices, data, np.ones(n), fm, 4, 1.01 * n / 4 * (1 + 1e-12), ML._PASSES,
                         ML._stall(n), ML._MIN_GAIN, 3, *boundary_candidates(indptr, indices, fm))
    assert fm_cut < cut_weight(indptr, indices, data, plain)  # FM did refine the start
    seen = []

    def fake(*args, free, **kw):
        seen.append((args[4].copy(), free))
        if v_cycle == "above the bound" and free:
            return args[4], np.inf
        return other.copy(), fm_cut - 1 if v_cycle == "lower" else fm_cut + 1

    monkeypatch.setattr(ML, "_v_cycle", fake)
    out = multilevel_refine(plain, 4, ei, repair=False)
    assert np.array_equal(seen[0][0], fm) and seen[0][1]
    if v_cycle == "above the bound":
        assert len(seen) == 2 and np.array_equal(seen[1][0], fm) and not seen[1][1]
    else:
        assert len(seen) == 1
    assert np.array_equal(out, other if v_cycle == "lower" else fm)
    # the second thread checks that the refined start's parts are whole while the caller uncoarsens: when that
    # start wins, repairing it is skipped (it would change nothing); with one CPU it is repaired as before
    from meshshard.partitioners import _concurrent

    assert label_components(indptr, indices, fm.astype(np.int32))[1] == 4  # whole parts
    real_repair, repaired = ML._repair, []
    monkeypatch.setattr(ML, "_repair", lambda *a: repaired.append(True) or real_repair(*a))
    for threads in (True, False):
        monkeypatch.setattr(_concurrent, "second_cpu", lambda: threads)
        repaired.clear()
        got = multilevel_refine(plain, 4, ei)
        if v_cycle != "lower":  # the refined start won: whole already
            assert np.array_equal(got, fm)
        assert len(repaired) == (0 if threads and v_cycle != "lower" else 1)
    # a refined start in pieces is repaired when it wins
    monkeypatch.setattr(_concurrent, "second_cpu", lambda: True)
    real_label = ML.label_components
    monkeypatch.setattr(ML, "label_components", lambda *a: (lambda lab, c: (lab, c + 1))(*real_label(*a)))
    repaired.clear()
    multilevel_refine(plain, 4, ei)
    assert len(repaired) == 1


def test_coarsest_level_prefers_connected_parts(monkeypatch):
    # on a ring of 8, the start's halves are connected; the regrown tries (stubbed) put each part in two
    # pieces too heavy to merge within the slack, and FM (stubbed) rates them lower: the connected try wins
    # over them; as the lowest cut is in pieces, one more try merges its pieces and rebalances, and it wins
    # where FM rates it below the connected try; when every try is in pieces, that merged try's connected parts
    # win; if it too stays in pieces, the lowest cut does
    import meshshard.partitioners.multilevel as ML

    ring = np.array([np.arange(8), (np.arange(8) + 1) % 8])
    g = (*_csr(ring, 8, None), np.ones(8))
    halves, split, split2 = (np.array(p) for p in ([0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 1, 1],
                                                    [1, 0, 0, 1, 1, 0, 0, 1]))
    fake_cut = {tuple(halves): 10.0, tuple(split): 4.0, tuple(split2): 6.0}
    merged_cut = [12.0]  # FM's rating of any other parts (the merged try's)
    monkeypatch.setattr(ML, "fm_refine", lambda *args: fake_cut.get(tuple(args[4]), merged_cut[0]))
    monkeypatch.setattr(ML, "grow_parts", lambda *args: split.copy())
    tried = []
    real_try = ML._coarsest_try
    monkeypatch.setattr(ML, "_coarsest_try", lambda g, start, *a: tried.append(start.copy()) or real_try(g, start, *a))
    got, _ = ML._coarsest(g, halves.copy(), 2, 4.04, 8.0, 0, grow=True)
    assert np.array_equal(got, halves)
    assert len(tried) == 4 and np.array_equal(tried[3], split)  # the merge starts from the lowest cut in pieces
    merged_cut[0] = 8.0
    got, _ = ML._coarsest(g, halves.copy(), 2, 4.04, 8.0, 0, grow=True)
    assert label_components(g[0], g[1], got)[1] == 2 and not np.array_equal(got, halves)  # merged, whole
    monkeypatch.setattr(ML, "_coarsest_try", real_try)
    merged_cut[0] = 12.0
    got, _ = ML._coarsest(g, split2.copy(), 2, 4.04, 8.0, 0, grow=True)  # every try in pieces
    assert label_components(g[0], g[1], got)[1] == 2 and np.bincount(got).max() <= 5  # merged, rebalanced
    assert not np.array_equal(got, split)
    monkeypatch.setattr(ML, "repair_components", lambda *args: 0)  # nothing merges: the forced try stays split
    got, _ = ML._coarsest(g, split2.copy(), 2, 4.04, 8.0, 0, grow=True)
    assert np.array_equal(got, split)


def test_first_coarsest_level_tries_recursive_bisection(monkeypatch, data_dir):
    # the first V-cycle's coarsest level tries bisect_parts (in place of the second regrow) and keeps it when it
    # cuts least; the in-part cycles do not call it
    import meshshard.partitioners.multilevel as ML

    pts, ei = mesh_arrays(data_dir, "rae2822_turb.su2")
    n = pts.shape[0]
    start = partition(pts, 7, "hilbert", refine=False).assignment.numpy()
    calls = []
    real_bisect = ML.bisect_parts

    def bisect_spy(*args):
        calls.append(args[0].shape[0] - 1)
        return real_bisect(*args)

    monkeypatch.setattr(ML, "bisect_parts", bisect_spy)
    got = multilevel_refine(start, 7, ei, cycles=2)
    assert len(calls) == 1 and calls[0] <= 2 * ML._COARSE_NODES_PER_PART * 7  # once, on the coarsest graph
    assert np.bincount(got, minlength=7).max() <= 1.01 * n / 7 + 1e-9
    # a bisection that cuts least at the coarsest level is the one kept there
    ring = np.array([np.arange(8), (np.arange(8) + 1) % 8])
    g = (*_csr(ring, 8, None), np.ones(8))
    halves, quarters = np.array([0, 0, 0, 0, 1, 1, 1, 1]), np.array([1, 1, 0, 0, 0, 0, 1, 1])
    monkeypatch.setattr(ML, "fm_refine", lambda *args: 2.0 if np.array_equal(args[4], quarters) else 5.0)
    monkeypatch.setattr(ML, "bisect_parts", lambda *args: quarters.copy())
    assert np.array_equal(ML._coarsest(g, halves.copy(), 2, 4.04, 8.0, 0, grow=True, bisect=True)[0], quarters)
    assert np.array_equal(ML._coarsest(g, halves.copy(), 2, 4.04, 8.0, 0, grow=True, bisect=False)[0], halves)


def test_trivial_inputs():
    ei = np.zeros((2, 0), dtype=np.int64)
    a = np.array([0, 1, 1, 0])
    assert np.array_equal(multilevel_refine(a, 2, ei), a)
    assert np.array_equal(multilevel_refine(np.zeros(4, dtype=np.int64), 1, np.array([[0], [1]])), np.zeros(4))


def test_part_components_rejects_bad_edges():
    a = np.array([0, 0, 1])
    with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
        part_components(a, np.array([[0, 1], [1, 3]]))
    with pytest.raises(ValueError, match="shape"):
        part_components(a, np.array([0, 1, 2]))


def _strips(cols, rows=10):
    """``cols x rows`` grid graph (both directions) and each node's column."""
    idx = np.arange(cols * rows).reshape(cols, rows)
    e = np.concatenate([np.stack([idx[:-1].ravel(), idx[1:].ravel()]), np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()])],
                       axis=1)
    return np.concatenate([e, e[::-1]], axis=1), np.repeat(np.arange(cols), rows)


def test_a_part_split_in_two_large_pieces_is_made_whole():
    from meshshard.partitioners.multilevel import _repair

    # 30 x 10 strip: part 0 holds columns 0-4 and 25-29 (two 50-node pieces), parts 1 and 2 the 10 columns between
    # each; no piece fits a neighbour within 1.01 x 100 nodes, so merging alone leaves part 0 split
    ei, col = _strips(30)
    split = np.where((col < 5) | (col >= 25), 0, np.where(col < 15, 1, 2)).astype(np.int64)
    n = split.shape[0]
    indptr, indices, data = _csr(ei, n, None)
    bound = 1.01 * n / 3
    plain = split.copy()
    assert repair_components(indptr, indices, data, np.ones(n), plain, 3, bound) == 1
    out = _repair(indptr, indices, data, np.ones(n), split.copy(), 3, bound, 0)
    q, q0 = _cut(out, ei), _cut(split, ei)
    assert q0["disconnected_parts"] == 1 and q["disconnected_parts"] == 0
    assert np.bincount(out, minlength=3).max() <= bound and (q0["edge_cut"], q["edge_cut"]) == (30, 20)  # 3 strips
    # the same through multilevel_refine
    assert _cut(multilevel_refine(split, 3, ei), ei)["disconnected_parts"] == 0


def test_forced_repair_keeps_the_input_when_the_graph_is_split_or_the_cut_grows(monkeypatch):
    import meshshard.partitioners.multilevel as ML

    ei, col = _strips(30)
    split = np.where((col < 5) | (col >= 25), 0, np.where(col < 15, 1, 2)).astype(np.int64)
    n = split.shape[0]
    indptr, indices, data = _csr(ei, n, None)
    monkeypatch.setattr(ML, "_FORCED_REPAIR_CUT", 0.5)  # the repaired cut (20 of 30) is above half the input's
    out = ML._repair(indptr, indices, data, np.ones(n), split.copy(), 3, 1.01 * n / 3, 0)
    assert np.array_equal(out, split)
    monkeypatch.undo()
    # a 10 x 10 strip (parts 0 and 1, 50 nodes each) and, apart, a 2 x 10 strip in part 0: that piece has no
    # edge to another part (the graph itself is split there), so it stays
    a_ei, _ = _strips(10)
    b_ei, _ = _strips(2)
    two = np.concatenate([a_ei, b_ei + 100], axis=1)
    assign = np.r_[np.zeros(50), np.ones(50), np.zeros(20)].astype(np.int64)
    indptr, indices, data = _csr(two, 120, None)
    assert repair_components(indptr, indices, data, np.ones(120), assign.copy(), 2, 71.0) == 1
    out = ML._repair(indptr, indices, data, np.ones(120), assign.copy(), 2, 71.0, 0)
    assert np.array_equal(out, assign)


@pytest.mark.parametrize("name", MESH_FILES)
@pytest.mark.parametrize("method", ["kdtree", "morton", "hilbert"])
def test_refinement_lowers_cut_keeps_bound(data_dir, name, method):
    pts, ei = load_mesh(data_dir, name)
    plain = partition_of(data_dir, name, method, refine=False)
    assert plain == partition(pts, 7, method)  # refine=False ignores the graph
    ref = partition_of(data_dir, name, method)
    q0, q1 = partition_quality(plain, ei), partition_quality(ref, ei)
    assert q1["edge_cut"] < q0["edge_cut"]
    assert q1["imbalance"] <= 1.01 + 1e-12
    assert min(ref.sizes) > 0


def test_refinement_weighted_and_custom_bound(data_dir):
    pts, ei = load_mesh(data_dir, "rae2822_turb.su2")
    w = 1.0 + np.random.default_rng(0).random(pts.shape[0])
    for imb in (1.001, 1.05):
        ref = partition(pts, 5, "hilbert", edge_index=ei, weights=w, imbalance=imb)
        q = partition_quality(ref, ei)
        assert q["imbalance"] <= max(imb, partition_quality(partition(pts, 5, "hilbert", weights=w), ei, w)["imbalance"]) + 1e-12
    a = partition_quality(partition(pts, 5, "hilbert", edge_index=ei, imbalance=1.05), ei)["edge_cut"]
    b = partition_quality(partition(pts, 5, "hilbert", edge_index=ei, imbalance=1.001), ei)["edge_cut"]
    assert a <= b  # a looser bound leaves more room for moves


def test_refinement_repairs_a_bad_ring_partition_and_respects_edge_weights():
    # a ring of 40 nodes split into alternating blocks of 3: refinement lowers the cut
    n = 40
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    start = (np.arange(n) // 3) % 2
    out = multilevel_refine(start, 2, ring, imbalance=1.2)
    cut = lambda a, w=None: float(((a[ring[0]] != a[ring[1]]) * (1 if w is None else w)).sum())  # noqa: E731
    assert cut(out) < cut(start)
    assert np.bincount(out, minlength=2).max() <= 1.2 * n / 2
    # with one very heavy edge, the refined partition does not cut it
    w = np.ones(n)
    w[7] = 1000.0
    out = multilevel_refine(start, 2, ring, edge_weights=w, imbalance=1.2)
    assert out[ring[0, 7]] == out[ring[1, 7]]
    assert cut(out, w) < cut(start, w)


def test_refinement_on_drivaer_knn(data_dir):
    pts, ei = load_drivaer(data_dir)
    plain = partition(pts, 7, "morton")
    ref = partition(torch.from_numpy(pts), 7, "morton", edge_index=ei)
    assert partition_quality(ref, ei)["edge_cut"] < partition_quality(plain, ei)["edge_cut"]
    assert partition_quality(ref, ei)["imbalance"] <= 1.01 + 1e-12


def test_repair_merges_a_split_part_into_its_neighbour():
    from meshshard.partitioners import Partition

    ei, xy = grid_graph(10)
    a = (xy[:, 1] >= 5).astype(np.int64)  # left half 0, right half 1
    island = np.flatnonzero((xy[:, 0] == 2) & (xy[:, 1] >= 7) & (xy[:, 1] <= 8))
    a[island] = 0  # a 2-node piece of part 0 inside part 1
    assert partition_quality(Partition(torch.from_numpy(a), 2), ei)["disconnected_parts"] == 1
    out = multilevel_refine(a, 2, ei, imbalance=1.1)
    q = partition_quality(Partition(torch.from_numpy(out), 2), ei)
    assert q["disconnected_parts"] == 0 and q["imbalance"] <= 1.1
    assert q["edge_cut"] <= 12  # the island (6 cut edges) is gone; a straight cut has 10


_FAMILY_BOUND = {"kdtree": 1.3, "hilbert": 1.4}


@pytest.mark.parametrize("name", ["hex block (graded)", "shell (prism)", "bodies (2D tri)", "mixed (hex+prism)"])
def test_refined_cut_near_metis_on_unseen_geometries(name):
    from meshshard.datasets.gmsh_meshes import GMSH_FAMILY

    mesh = GMSH_FAMILY[name](8000)
    pts, ei = mesh.points, mesh.edge_index()
    metis = partition_quality(partition(pts, 7, "graph", edge_index=ei), ei)["edge_cut"]
    for method, bound in _FAMILY_BOUND.items():
        ref = partition(pts, 7, method, edge_index=ei)
        q = partition_quality(ref, ei)
        assert q["edge_cut"] <= bound * metis, (method, q["edge_cut"] / metis)
        assert q["imbalance"] <= 1.01 + 1e-12
        assert ref == partition(pts, 7, method, edge_index=ei)  # deterministic


def test_refined_parts_are_connected_on_the_branching_vessel():
    # hilbert's refined partition of this mesh (7,489 nodes, seed 0) once kept a part in two large pieces that
    # could not merge within the bound; repairing now merges them anyway and rebalances
    from meshshard.datasets.gmsh_meshes import GMSH_FAMILY

    mesh = GMSH_FAMILY["vessel (tet)"](10000)
    pts, ei = mesh.points, mesh.edge_index()
    for method in ("kdtree", "hilbert", "morton"):
        q = partition_quality(partition(pts, 7, method, edge_index=ei), ei)
        assert q["disconnected_parts"] == 0 and q["imbalance"] <= 1.01 + 1e-12, (method, q)


def test_zero_weight_edges_list_their_part_once():
    # zero-weight edges once listed a part per edge in a scratch array of P entries (overrun when
    # a node had more than P such edges); now each part is listed once per node
    ei, xy = grid_graph(12)
    w = np.where(np.arange(ei.shape[1]) % 3 == 0, 0.0, 1.0)
    start = (xy[:, 0] >= 6).astype(np.int64)
    for seed in range(3):
        out = multilevel_refine(start, 2, ei, edge_weights=w, imbalance=1.05, seed=seed)
        assert np.bincount(out, minlength=2).max() <= 1.05 * 72
        cut = lambda a: float(w[a[ei[0]] != a[ei[1]]].sum())  # noqa: E731
        assert cut(out) <= cut(start)


def test_rebalance_passes_excess_through_full_parts():
    # a path in 7 blocks: the excess of the last part must cross 5 full parts to reach the first
    # (a rule letting parts trade weight both ways ended at loads 99, 100, 101, ...: bound missed)
    sizes = [90, 100, 100, 100, 100, 100, 110]
    n = sum(sizes)
    path = np.stack([np.arange(n - 1), np.arange(1, n)])
    out = multilevel_refine(np.repeat(np.arange(7), sizes), 7, path, imbalance=1.0)
    assert np.bincount(out, minlength=7).tolist() == [100] * 7
    assert int((out[path[0]] != out[path[1]]).sum()) == 6


def test_refined_cut_on_a_lexicographically_numbered_hex_lattice():
    # a structured grid numbered axis by axis: visiting nodes in id order matched each node with its next
    # neighbour along the sweep, and hilbert's refined cut of this lattice was 1.01-1.16x METIS's over seeds
    # 0-3 (1.22x on a 64 x 32 x 16 one); with the strided visit it is 0.94-0.99x (kdtree's planar cuts: 0.95-0.96x either way)
    nx, ny, nz = 48, 24, 12
    pts = np.stack(np.meshgrid(np.linspace(0, 4, nx), np.linspace(0, 2, ny), np.linspace(0, 1, nz),
                               indexing="ij"), -1).reshape(-1, 3)
    idx = np.arange(nx * ny * nz).reshape(nx, ny, nz)
    e = np.concatenate([np.stack([idx[:-1].ravel(), idx[1:].ravel()]), np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()]),
                        np.stack([idx[:, :, :-1].ravel(), idx[:, :, 1:].ravel()])], axis=1)
    ei = np.concatenate([e, e[::-1]], axis=1)
    metis = partition_quality(partition(pts, 7, "graph", edge_index=ei), ei)["edge_cut"]
    for method in ("kdtree", "hilbert"):
        for seed in range(4):
            q = partition_quality(partition(pts, 7, method, edge_index=ei, seed=seed), ei)
            assert q["edge_cut"] <= 1.06 * metis and q["imbalance"] <= 1.01 + 1e-12, (method, seed, q["edge_cut"] / metis)


def test_large_levels_give_the_same_parts_on_one_thread_or_two(data_dir, monkeypatch):
    # a level of _LARGE_LEVEL nodes or more is matched in blocks, in ranges two threads share: the parts must not
    # depend on who ran which range, and must refine the start as well as the stride through all ids does
    import meshshard.partitioners.multilevel as ML
    from meshshard.partitioners import _concurrent

    pts, ei = mesh_arrays(data_dir, "cylinder_crossflow_re35.vtu")
    n = pts.shape[0]
    plain = partition(pts, 6, "hilbert", refine=False).assignment.numpy()
    strided = multilevel_refine(plain, 6, ei, seed=1)
    monkeypatch.setattr(ML, "_LARGE_LEVEL", 2000)
    monkeypatch.setattr(ML, "_MATCH_BLOCK", 512)
    monkeypatch.setattr(ML, "_SPLIT_NNZ", 2000)
    got = {}
    for two in (True, False):
        monkeypatch.setattr(_concurrent, "second_cpu", lambda two=two: two)
        got[two] = multilevel_refine(lambda: plain, 6, ei, seed=1, num_nodes=n)
    assert np.array_equal(got[True], got[False])
    cuts = [partition_quality(Partition(torch.from_numpy(a), 6), ei)["edge_cut"] for a in (plain, strided, got[True])]
    assert cuts[2] < 0.9 * cuts[0] and cuts[2] <= 1.1 * cuts[1]
    assert np.bincount(got[True], minlength=6).max() <= 1.01 * n / 6 + 1
