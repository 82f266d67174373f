"""No import cycles among meshshard modules.

A cycle of module-level imports makes the result depend on which module is imported first (one of
them sees the other half-initialised). The check reads every module with ``ast``: the imports that
run when the module is imported (its top level, class bodies, ``if``/``try`` blocks; not function
bodies, not ``if TYPE_CHECKING:``), resolves relative imports, and looks for strongly connected
components of the import graph. ``import a.b`` counts as an edge to ``a.b``; ``from a import b``
to ``a.b`` when that is a module, else to ``a`` (its ``__init__``).
"""
import ast
import textwrap
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "meshshard"

# Pairs of modules allowed to import each other, each with its reason: none.
ALLOWED: set = set()


def _module_names():
    """``{module name: (path, is_package)}`` of every meshshard module."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            out[".".join(parts[:-1])] = (path, True)
        else:
            out[".".join(parts)] = (path, False)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_time_nodes(body):
    """The statements of ``body`` that run on import, recursively (not function bodies)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_time_nodes(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody"):
            yield from _import_time_nodes(getattr(node, field, []) or [])
        for handler in getattr(node, "handlers", []) or []:
            yield from _import_time_nodes(handler.body)


def imports_of(source: str, module: str, is_package: bool, known) -> set:
    """The meshshard modules that ``module`` (with text ``source``) imports when it is imported.

    Args:
        source: the module's text.
        module: its dotted name.
        is_package: whether it is a package's ``__init__``.
        known: every meshshard module name (to tell ``from a import b``'s module ``b`` from a name).

    Returns:
        a set of module names.
    """
    package = module if is_package else module.rpartition(".")[0]
    out = set()
    for node in _import_time_nodes(ast.parse(source).body):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in known else mod)
    return {m for m in out if m == "meshshard" or m.startswith("meshshard.")}


def import_graph() -> dict:
    """``{module: set of modules it imports at import time}`` over the meshshard package."""
    mods = _module_names()
    graph = {}
    for name, (path, is_pkg) in mods.items():
        graph[name] = {m for m in imports_of(path.read_text(), name, is_pkg, mods) if m in mods and m != name}
    for pair in ALLOWED:
        a, b = sorted(pair)
        graph.get(a, set()).discard(b)
        graph.get(b, set()).discard(a)
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (each an import cycle), sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):  # Tarjan's algorithm, iteratively (no recursion limit)
        work = [(v, iter(sorted(graph.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on_stack:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_cycles_among_meshshard_modules():
    graph = import_graph()
    assert len(graph) >= 50 and "meshshard.graph.sharded_graph" in graph
    found = cycles(graph)
    assert not found, "import cycles (module-level imports):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_allow_list_names_existing_modules():
    mods = _module_names()
    for pair in ALLOWED:
        assert all(m in mods for m in pair), pair


def test_the_checker_finds_a_cycle_and_ignores_function_level_and_type_checking_imports():
    known = {"meshshard", "meshshard.a", "meshshard.b", "meshshard.c", "meshshard.pkg", "meshshard.pkg.x"}
    src_a = textwrap.dedent("""
        from typing import TYPE_CHECKING
        from meshshard import b
        if TYPE_CHECKING:
            from meshshard import c
        def f():
            from meshshard.c import thing
        try:
            from .pkg import x
        except ImportError:
            pass
        class K:
            import meshshard.pkg
    """)
    assert imports_of(src_a, "meshshard.a", False, known) == {"meshshard.b", "meshshard.pkg.x", "meshshard.pkg"}
    assert imports_of("from . import name_not_module\n", "meshshard.pkg", True, known) == {"meshshard.pkg"}
    assert imports_of("from .. import a\n", "meshshard.pkg.x", False, known) == {"meshshard.a"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
