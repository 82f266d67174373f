"""Small helpers shared by every layer: atomic writes, checksums, handing freed heap memory back
(no torch.distributed)."""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import secrets
import shutil
from glob import escape as glob_escape
from pathlib import Path
from typing import Iterator, Optional, Union

__all__ = ["atomic_path", "atomic_dir", "created_dir", "replace_dir", "remove_stale_temps", "atomic_torch_save", "sha256_file",
           "read_json_dict", "release_free_heap"]

PathLike = Union[str, os.PathLike]


def _temp_name(path: Path) -> Path:
    """A fresh hidden name beside ``path`` (``.name.<random>.tmp``), so a reader never sees it as ``path``."""
    return path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"


def _create_file(path: Path) -> Path:
    """Create an empty file beside ``path`` with the mode ``open()`` would give (0666 less the umask)."""
    while True:
        tmp = _temp_name(path)
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


def _create_dir(path: Path) -> Path:
    """Create an empty folder beside ``path`` with the mode ``os.mkdir`` gives (0777 less the umask)."""
    while True:
        tmp = _temp_name(path)
        try:
            tmp.mkdir()
            return tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``.

    Every file meshshard writes goes through here (or :func:`atomic_torch_save`). An exception
    (or a killed process) leaves ``path`` untouched and no partial file under its name; the
    temporary file is removed on exceptions. The file gets the permissions a plain ``open()``
    would give (``0666`` less the umask), not ``tempfile``'s ``0600``.

    Args:
        path: the file to write (its parent folders are created).

    Yields:
        the temporary ``Path`` to write to (it exists, empty).
    """
    path = Path(path)
    with created_dir(path.parent):
        tmp = _create_file(path)
        try:
            yield tmp
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise


@contextlib.contextmanager
def atomic_dir(path: PathLike) -> Iterator[Path]:
    """Yield a new empty folder beside ``path``; on success it replaces ``path`` as a whole.

    A reader sees either the old ``path`` (or none) or the complete new one, never a half-written
    folder: an exception removes the temporary folder and leaves ``path`` as it was. The folder
    gets the permissions ``os.mkdir`` gives (``0777`` less the umask), not ``mkdtemp``'s ``0700``.

    Args:
        path: the folder to produce (its parent folders are created).

    Yields:
        the temporary folder's ``Path`` to fill.
    """
    path = Path(path)
    if path.is_symlink():  # replace the folder the link points to; the link stays
        path = path.resolve()
    with created_dir(path.parent):
        tmp = _create_dir(path)
        try:
            yield tmp
            replace_dir(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise


@contextlib.contextmanager
def created_dir(path: PathLike) -> Iterator[Path]:
    """Create folder ``path`` and missing parents; if the block raises, remove those of them that
    this call created and that are empty again (never a folder that existed before).

    Args:
        path: the folder.

    Yields:
        ``path`` as a ``Path``.
    """
    path = Path(path)
    created = []
    p = path
    while not p.exists() and p != p.parent:
        created.append(p)
        p = p.parent
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for d in created:  # deepest first
            try:
                d.rmdir()
            except OSError:  # not empty (or gone): it holds something worth keeping
                break
        raise


def replace_dir(src: PathLike, dst: PathLike) -> None:
    """Rename folder ``src`` onto ``dst``, deleting what ``dst`` held (a file or folder) only after.

    ``os.replace`` cannot rename onto a non-empty folder, so an old ``dst`` is first renamed to
    a hidden name beside it; between the two renames ``dst`` is briefly absent, never partial.

    Args:
        src: a complete folder.
        dst: where it goes.
    """
    src, dst = Path(src), Path(dst)
    old = None
    if dst.is_dir() and not dst.is_symlink():
        old = _temp_name(dst)
        os.replace(dst, old)
    try:
        os.replace(src, dst)
    except BaseException:
        if old is not None:
            os.replace(old, dst)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def remove_stale_temps(path: PathLike) -> None:
    """Remove the temporary files and folders a killed writer of ``path`` left beside it.

    Args:
        path: a file or folder written with :func:`atomic_path` / :func:`atomic_dir`.
    """
    path = Path(path)
    if not path.parent.is_dir():
        return
    for p in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


class _HashingWriter:
    """A file object for ``torch.save`` that hashes the bytes on their way to the file."""

    def __init__(self, f) -> None:
        self.f = f
        self.sha = hashlib.sha256()

    def write(self, b) -> int:
        self.sha.update(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()


def atomic_torch_save(obj, path: PathLike) -> str:
    """``torch.save`` through :func:`atomic_path`; returns the sha256 of the bytes written.

    Saving through a stream hashes without reading the file back, and names the archive's records
    ``archive/...`` instead of after the random temporary file, so equal objects give
    byte-identical files (and checksums) on every run.

    Args:
        obj: anything ``torch.save`` takes.
        path: the file to write.

    Returns:
        hex sha256 of the file's bytes.
    """
    import torch

    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            writer = _HashingWriter(f)
            torch.save(obj, writer)
    return writer.sha.hexdigest()


def sha256_file(path: PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def read_json_dict(path: PathLike) -> Optional[dict]:
    """The JSON object in ``path``, or ``None`` when the file is not valid JSON or not an object.

    Args:
        path: a file that exists (e.g. a folder's ``meta.json``, to tell which kind of folder it is).
    """
    try:
        d = json.loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return d if isinstance(d, dict) else None


#: release_free_heap trims only when the heap holds at least this much free memory: a few MiB are not worth it,
#: since the next computation faults the trimmed pages back in and so runs slower; small meshes leave less than
#: this free after METIS, large ones much more
_TRIM_MIN_FREE_BYTES = 16 << 20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def release_free_heap(min_free_bytes: int = _TRIM_MIN_FREE_BYTES) -> bool:
    """Hand the C heap's free pages back to the OS (glibc's ``malloc_trim``; a no-op elsewhere) when at
    least ``min_free_bytes`` of it are free (glibc's ``mallinfo2``, main heap; without it, always).

    Called after steps that free many arrays of a few MiB (METIS's work arrays, meshio's read):
    glibc keeps freed blocks below its mmap threshold in the heap, so without it the process stays
    that much larger for the rest of the run.

    Returns:
        Whether it trimmed.
    """
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    info = getattr(libc, "mallinfo2", None)  # glibc >= 2.33
    if info is not None:
        info.restype = _MallInfo2
        if info().fordblks < min_free_bytes:
            return False
    trim(0)
    return True
