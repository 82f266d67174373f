"""Every benchmark runs in its --quick mode and prints its tables (so the scripts cannot rot).

Speed and memory are not asserted here (benchmarks measure them; tests do not); only that each
script finishes, prints the ratio tables it documents, and that its exactness columns say exact.
"""
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(name, timeout, *extra):
    proc = subprocess.run([sys.executable, str(BENCH / name), "--quick", *extra], capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def _table_rows(out, first_cell):
    return [line for line in out.splitlines() if line.startswith(f"| {first_cell}")]


@pytest.mark.timeout(250)
def test_bench_partition():
    out = _run("bench_partition.py", 240, "--only", "speed,quality,memory,cli")
    assert len(_table_rows(out, "1e+05")) == 2 and len(_table_rows(out, "1e+06")) == 2
    for mesh in ("naca0012_inviscid.su2", "brick_tets.su2", "cylinder_crossflow_re35.vtu"):
        assert _table_rows(out, mesh), mesh
    assert "peak memory" in out and "targets of issue 2" in out
    assert len(_table_rows(out, "27,000")) == 2  # `meshshard partition` end to end: time and memory rows


@pytest.mark.timeout(250)
def test_bench_partition_engines_distributed_family():
    out = _run("bench_partition.py", 240, "--only", "engines,distributed,family")
    for mesh in ("vessel (tet)", "bodies (2D tri)", "shell (prism)", "boundary layer", "mixed (hex+prism)"):
        assert any(line.startswith(f"| {mesh}") for line in out.splitlines()), mesh
    assert "with one thread (MESHSHARD_THREADS=1, seed 0): kdtree" in out  # the family table's one-thread column
    assert "time / METIS's, paired" in out  # ... and its paired-timing column, which the time target checks
    assert "(paired, median over seeds and rounds), worst unseen mesh" in out
    for label in ("graph engine=kaminpar", "graph engine=mtkahypar", "inertial plain", "inertial refined"):
        assert any(f"| {label} |" in line for line in out.splitlines()), label
    rows = [line for line in out.splitlines() if line.startswith(("| hilbert |", "| kdtree |"))]
    assert len(rows) == 4 and all(line.rstrip().endswith("| yes |") for line in rows), rows


@pytest.mark.timeout(250)
def test_bench_partition_heldout():
    out = _run("bench_partition.py", 240, "--only", "heldout", "--heldout-nodes", "4000")
    rows = [line for line in out.splitlines() if line.startswith(("| hex block with a cylindrical hole", "| NACA 0012"))]
    assert [line.split(" | ")[2] for line in rows] == ["16", "16", "7"], rows  # the part counts of the three cases
    checks = [line for line in out.splitlines() if "worst held-out mesh" in line]
    assert len(checks) == 6, checks  # cut and time of kdtree, hilbert and inertial feed the targets table


def test_paired_timing_divides_each_run_by_the_baseline_beside_it(monkeypatch):
    # a fake clock that only the runs advance: fn takes 3 ticks, its baseline 1, whichever goes first, so every
    # ratio is 3 (1/3 if the two were swapped); each key gets one ratio per round
    sys.path.insert(0, str(BENCH))
    import bench_partition

    clock = [0.0]
    monkeypatch.setattr(bench_partition, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    calls = []

    def ticking(name, ticks):
        def run():
            calls.append(name)
            clock[0] += ticks
        return run

    pairs = {k: (ticking(f"fn{k}", 3.0), ticking(f"base{k}", 1.0)) for k in range(3)}
    ratios = bench_partition._paired(pairs, 4)
    assert sorted(ratios) == [0, 1, 2] and all(r == [3.0] * 4 for r in ratios.values())
    firsts = [calls[i] for i in range(0, len(calls), 2)]
    assert any(f.startswith("fn") for f in firsts) and any(f.startswith("base") for f in firsts)  # the order alternates


@pytest.mark.timeout(150)
def test_bench_gpu_runs_on_the_cpu_as_a_smoke_test():
    """CI has no GPU: the script runs its code on the CPU (gloo), labelled as no GPU figure; the
    sharded model's first loss equals the plain one's and every backend gives the same kNN graph."""
    out = _run("bench_gpu.py", 140, "--device", "cpu")
    assert "CPU (smoke test: no GPU figures)" in out
    rows = [line for line in out.splitlines() if re.match(r"\| [\d.]+ \|", line)]
    mgn = [r for r in rows if "n/a" in r]
    knn = [r for r in rows if r.rstrip().endswith("| True |")]
    assert len(mgn) == 1 and mgn[0].rstrip().endswith("| 0.0e+00 |"), out
    assert len(knn) == 2 and len(rows) == 3, out


@pytest.mark.timeout(180)
def test_bench_collectives():
    out = _run("bench_collectives.py", 170)
    for op in ("all_gather_v", "gather_v", "scatter_v", "all_to_all_v", "indexed_all_to_all_v", "ShardTensor rebalance"):
        rows = _table_rows(out, op)
        assert len(rows) >= 2, op  # world sizes 2 and 4
        for row in rows:
            ratios = [float(c) for c in row.strip("|").split("|")[4:]]
            assert ratios and all(r > 0 for r in ratios), row


@pytest.mark.timeout(240)
def test_bench_graph_ops():
    out = _run("bench_graph_ops.py", 230)
    for method in ("kdtree", "morton", "hilbert", "graph"):
        assert _table_rows(out, method), method
    assert _table_rows(out, "1 process (whole mesh)") and _table_rows(out, "4 ranks")
    knn = [r for r in out.splitlines() if re.match(r"\| \d \| (kdtree|random) \|", r)]
    assert knn and all(r.rstrip(" |").endswith("yes") for r in knn), knn  # sharded kNN exact


@pytest.mark.timeout(180)
def test_bench_meshgraphnet():
    out = _run("bench_meshgraphnet.py", 170)
    lines = [r for r in out.splitlines() if re.match(r"\| [124] \| \d", r)]
    rows = {int(r.split("|")[1]): r for r in lines if r.count("|") == 10}
    assert sorted(rows) == [1, 2, 4], out
    fraction = {p: float(rows[p].split("|")[5]) for p in rows}
    assert fraction[1] == 1.0 and all(f > 0 for f in fraction.values())  # a ratio to P=1 was measured
    hooks = [r for r in lines if r.count("|") == 5]  # DomainParallel's hooks vs the explicit all-reduce
    assert [int(r.split("|")[1]) for r in hooks] == [2] and float(hooks[0].split("|")[4]) > 0, out


@pytest.mark.timeout(400)
def test_bench_models():
    out = _run("bench_models.py", 390)
    rows = [[c.strip() for c in r.strip().strip("|").split("|")] for r in out.splitlines()
            if r.startswith(("| U-Net |", "| Transolver |"))]
    got = sorted((r[0], r[1], r[2]) for r in rows)
    want = [("U-Net", "one process (whole input)", "1"), ("U-Net", "height", "2"), ("U-Net", "height", "4"),
            ("U-Net", "height x width (2 x 2)", "4"), ("Transolver", "one process (whole input)", "1"),
            ("Transolver", "k-d tree", "2"), ("Transolver", "k-d tree", "4")]
    assert got == sorted(want), out
    for r in rows:
        assert float(r[4]) > 0 and float(r[8]) > 0, r  # memory and time measured against one process
        if r[2] != "1":
            assert r[6] in ("yes", "no") and float(r[9]) <= 1e-5, r  # the one-process loss (float32)


@pytest.mark.timeout(420)
def test_bench_shard_ops():
    out = _run("bench_shard_ops.py", 400)
    for world in (2, 4):
        rows = _table_rows(out, str(world))
        assert len(rows) == 1, out
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        assert float(cells[1]) > 0 and float(cells[2]) > 0 and float(cells[3]) > 0, rows
        # exactly the halo: forward, once more in backward (the window is not kept), and the gradients back
        assert int(cells[4].replace(",", "")) * 2 == int(cells[5].replace(",", "")) * 3 and cells[6] == "1.50", rows
    for op in ("attention", "group_norm"):
        rows = _table_rows(out, op)
        assert len(rows) == 2, op  # world sizes 2 and 4
        for row in rows:
            cells = [c.strip() for c in row.strip("|").split("|")]
            assert float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[4]) > 0, row
    for row in _table_rows(out, "attention"):  # the ring sends (3W - 2) / (3W - 3) of the minimum
        ratio = float(row.strip("|").split("|")[6].split()[0])
        assert 1.0 < ratio < 1.4, row


@pytest.mark.timeout(600)
def test_bench_scale():
    out = _run("bench_scale.py", 590)
    rows = [r.split("|") for r in _table_rows(out, "2,000")]
    preprocess = [r for r in rows if len(r) == 17 and "MiB" in r[2]]
    assert len(preprocess) == 1 and float(preprocess[0][14]) > 1, out  # peak / mesh arrays measured
    assert float(preprocess[0][12]) > 0 and float(preprocess[0][11].split()[0]) > 0, out  # total / (read + edges + METIS)
    steps = {int(r[2]): r for r in rows if len(r) == 11}
    assert sorted(steps) == [1, 2], out
    assert float(steps[1][6]) == 1.0 and float(steps[2][6]) > 0, out  # peak memory as a fraction of P=1
    plain = [r for r in rows if len(r) == 9 and "MiB" not in r[2]]
    assert len(plain) == 1 and float(plain[0][2]) <= 1e-5, out  # the plain PyTorch model gave the same output
    assert float(plain[0][5]) > 0, out  # meshshard / plain time ratio measured


@pytest.mark.timeout(400)
def test_bench_rollout():
    out = _run("bench_rollout.py", 390)
    assert "float64 check after 3 steps: meshshard P = 1 vs plain PyTorch, max |difference|" in out
    m = re.search(r"meshshard P = 1 vs plain PyTorch, max \|difference\| ([0-9.e+-]+)", out)
    assert float(m.group(1)) < 1e-10, out  # the baseline computes the same rollout
    rows = [line for line in out.splitlines() if re.match(r"\| [124] \| \d+ \|", line)]
    assert len(rows) == 3, out
    assert all(float(r.strip().strip("|").split("|")[-1]) < 1e-10 for r in rows), rows  # sharded = one process
    assert rows[0].split("|")[6].strip() not in ("", "-")  # the ratio to plain PyTorch at P = 1
    steps = [line for line in out.splitlines() if re.match(r"\| \d+ \| [0-9.e+-]+ \| [0-9.e+-]+ \|$", line)]
    assert len(steps) == 8, out  # the error of the example's 7 rollout steps and its start
