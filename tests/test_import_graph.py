"""No import cycles in ddtree_core or ddbench, counting every import statement (those inside functions too, which
only defer a cycle to the first call): each package's modules form a graph with an edge from a module to every
module of ours it imports, and the test fails on a strongly connected component of more than one module,
naming its members and their edges. ddtree_core imports nothing of ddbench. Types live in ddtree_core.types so
that the implementations (batched.py, the kernels) and the dispatchers (tree.py, verify.py) need not import
one another."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ddtree_core", "ddbench")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Our modules that `module` imports anywhere in its file: `from a.b import c` counts a.b.c when it is a
    module, else a.b; relative imports resolve against the module's package."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            names += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    out = set()
    for name in names:
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in known and name != module:
            out.add(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_and_package_imports_resolve(tmp_path):
    known = {"pkg": tmp_path / "__init__.py", "pkg.a": tmp_path / "a.py", "pkg.b": tmp_path / "b.py"}
    source = tmp_path / "a.py"
    source.write_text("from . import b\nfrom pkg import b as again\ndef f():\n    import pkg.b.x\n")
    assert imported("pkg.a", source, known) == {"pkg.b"}


def test_no_import_cycles():
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    found = cycles(graph)
    described = [
        "; ".join(f"{member} -> {', '.join(sorted(graph[member] & set(component)))}" for member in component)
        for component in found
    ]
    assert not found, "import cycles:\n" + "\n".join(described)


def test_the_core_imports_nothing_of_the_harness():
    """ddtree_core (algorithm, kernels, engines) stands alone; ddbench builds on it, never the reverse."""
    known = modules()
    upward = {
        name: sorted(dep for dep in imported(name, path, known) if dep.split(".")[0] == "ddbench")
        for name, path in known.items()
        if name.split(".")[0] == "ddtree_core"
    }
    assert not {name: deps for name, deps in upward.items() if deps}
