"""meshshard/_fileutil.py: written files and folders get the permissions plain ``open()`` /
``os.mkdir`` give under the caller's umask, and folders appear whole or not at all."""
import os
import stat

import pytest

from meshshard._fileutil import atomic_dir, atomic_path, atomic_torch_save, remove_stale_temps


@pytest.fixture(params=[0o022, 0o027])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_and_folders_get_plain_permissions(tmp_path, umask):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    (tmp_path / "plain_dir").mkdir()
    with atomic_path(tmp_path / "a.json") as tmp:
        tmp.write_text("{}")
    atomic_torch_save({"a": 1}, tmp_path / "b.pt")
    with atomic_dir(tmp_path / "folder") as d:
        (d / "inside.txt").write_text("y")
    assert _mode(plain) == 0o666 & ~umask
    assert _mode(tmp_path / "a.json") == _mode(tmp_path / "b.pt") == _mode(plain)
    assert _mode(tmp_path / "folder") == _mode(tmp_path / "plain_dir") == 0o777 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.pt", "folder", "plain.txt", "plain_dir"]


def test_atomic_dir_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as d:
        (d / "one").write_text("1")
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(target) as d:
            (d / "two").write_text("2")
            raise KeyboardInterrupt
    assert [p.name for p in target.iterdir()] == ["one"], "a failed write must leave the old folder as it was"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "no temporary folder left behind"
    with atomic_dir(target) as d:
        (d / "three").write_text("3")
    assert [p.name for p in target.iterdir()] == ["three"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_remove_stale_temps(tmp_path):
    (tmp_path / ".out.1234abcd.tmp").mkdir()
    (tmp_path / ".out.1234abcd.tmp" / "part_0000.pt").write_text("partial")
    (tmp_path / ".meta.json.5678.tmp").write_text("partial")
    (tmp_path / ".outer.99.tmp").mkdir()  # another name's temporary: not ours to remove
    remove_stale_temps(tmp_path / "out")
    remove_stale_temps(tmp_path / "meta.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".outer.99.tmp"]


def test_failed_writes_remove_only_the_folders_they_created(tmp_path):
    from meshshard._fileutil import created_dir

    for write in (lambda p: atomic_path(p / "f.txt"), lambda p: atomic_dir(p / "d"), created_dir):
        with pytest.raises(KeyboardInterrupt):
            with write(tmp_path / "new" / "deeper"):
                raise KeyboardInterrupt
        assert list(tmp_path.iterdir()) == []
    (tmp_path / "old").mkdir()
    with pytest.raises(ValueError):
        with created_dir(tmp_path / "old" / "new") as d:
            (d / "x").mkdir()
            (d / "keep.txt").write_text("written before the failure")
            raise ValueError
    assert (tmp_path / "old" / "new" / "keep.txt").exists(), "a folder that is not empty is kept"
    with pytest.raises(ValueError):
        with created_dir(tmp_path / "old"):
            raise ValueError
    assert (tmp_path / "old").is_dir(), "a folder that existed before is never removed"


def test_atomic_dir_through_a_symlink_keeps_the_link(tmp_path):
    real = tmp_path / "real"
    with atomic_dir(real) as d:
        (d / "one").write_text("1")
    (tmp_path / "link").symlink_to(real)
    with atomic_dir(tmp_path / "link") as d:
        (d / "two").write_text("2")
    assert (tmp_path / "link").is_symlink() and [p.name for p in (tmp_path / "link").iterdir()] == ["two"]


def test_release_free_heap_runs_where_there_is_no_glibc_too(monkeypatch):
    import ctypes

    from meshshard._fileutil import release_free_heap

    assert release_free_heap(min_free_bytes=0)  # glibc here: malloc_trim
    # a heap with less free memory than asked for stays as it is (the next computation would fault it back in)
    assert not release_free_heap(min_free_bytes=1 << 60)

    def no_libc(name):
        raise OSError("no C library")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert not release_free_heap()  # a no-op, not an error
