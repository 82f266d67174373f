"""Small file helpers shared by every layer: atomic writes and checksums (no torch.distributed)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Iterator, Optional, Union

__all__ = ["atomic_path", "atomic_torch_save", "sha256_file", "read_json_dict"]

PathLike = Union[str, os.PathLike]


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``.

    An exception (or a killed process) leaves ``path`` untouched and no partial file under its
    name; the temporary file is removed on exceptions.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_torch_save(obj, path: PathLike) -> None:
    """``torch.save`` through :func:`atomic_path`."""
    import torch

    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


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
