"""mkdocs hook: expand ``::: meshshard.PKG`` on an API page into one entry per name of ``PKG.__all__``.

Several subpackages export their names lazily (a module ``__getattr__``), which a static reader of
the source cannot follow; importing the package and asking each name where it is defined can. So
each entry points at the name's home module, and a name that moves keeps its page without an edit.
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

_DIRECTIVE = re.compile(r"^::: (meshshard\.\w+)[ \t]*$", re.M)


def _home(pkg, name: str) -> str:
    obj = getattr(pkg, name)
    mod = getattr(obj, "__module__", None) if (inspect.isclass(obj) or inspect.isroutine(obj)) else None
    if mod is None:
        mod = getattr(pkg, "_EXPORTS", {}).get(name, pkg.__name__)
    return f"{mod}.{getattr(obj, '__qualname__', name) if mod == getattr(obj, '__module__', None) else name}"


def _expand(match: re.Match) -> str:
    pkg = importlib.import_module(match.group(1))
    lines = [f"::: {pkg.__name__}\n    options:\n      show_root_heading: false\n      members: false\n"]
    foreign = []
    for name in pkg.__all__:
        home = _home(pkg, name)
        if not home.startswith("meshshard."):  # a re-export of torch's own object: torch documents it
            foreign.append(f"`{name}` (`{home}`)")
            continue
        lines.append(f"::: {home}\n    options:\n      show_root_full_path: false\n")
    if foreign:
        lines.insert(1, "Re-exported unchanged from PyTorch: " + ", ".join(foreign) + ".\n")
    return "\n".join(lines)


def on_config(config, **kwargs):
    """Import meshshard from the checkout being documented (the one the API pages read)."""
    root = str(Path(config.config_file_path).resolve().parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    return config


def on_page_markdown(markdown, page, **kwargs):
    if not page.file.src_uri.startswith("api/") or page.file.src_uri == "api/index.md":
        return markdown
    return _DIRECTIVE.sub(_expand, markdown)
