"""agentlat's import graph, read from the source (no import runs): modules, rooms, arrows, cycles.

Every ``import`` statement counts, including those inside functions and ``TYPE_CHECKING``
blocks: an import hidden in a function is still a dependency. The package layout comes from
``pyproject.toml`` (``[tool.setuptools] package-dir``), so a room is a top-level folder.

    python -m tests.import_graph              # rooms, arrows and cycles of this checkout
    python -m tests.import_graph --root DIR   # of another checkout (e.g. an older commit)
"""

from __future__ import annotations

import argparse
import ast
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "agentlat"


@dataclass(frozen=True)
class Import:
    """``importer`` imports ``imported`` (a module of the package) at ``line``."""

    importer: str
    imported: str
    line: int


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Import path of each package folder named in pyproject.toml, e.g. ``agentlat.store`` → ``store/``."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    return {name: root / folder for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package and its file; a package is its ``__init__.py``."""
    dirs = package_dirs(root)
    found: dict[str, Path] = {}
    for package, folder in dirs.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if any(part.startswith(".") or part == "__pycache__" for part in parts):
                continue
            name = ".".join((package, *parts)).removesuffix(".__init__")
            found[name] = path
    return found


def imports(root: Path = ROOT) -> list[Import]:
    """Every import of one of the package's modules by another, resolved to the module imported."""
    known = modules(root)
    edges = []
    for importer, path in known.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, importer, is_package, known):
                if target != importer:
                    edges.append(Import(importer, target, node.lineno))
    return edges


def _targets(node: ast.AST, importer: str, is_package: bool, known: dict[str, Path]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield from _known_prefix(alias.name, known)
    elif isinstance(node, ast.ImportFrom):
        base = _absolute(node, importer, is_package)
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            yield from ([submodule] if submodule in known else _known_prefix(base, known))


def _absolute(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = importer.split(".")
    package = package if is_package else package[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _known_prefix(name: str, known: dict[str, Path]) -> Iterator[str]:
    """The longest prefix of ``name`` that is one of the package's modules (``import a.b.c`` uses ``a.b.c``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            yield candidate
            return


def room(module: str, root: Path = ROOT) -> str:
    """The top-level folder of a module: ``agentlat.store.queries`` is in ``store``, ``agentlat.semconv`` in ``sdk``."""
    packages = sorted(package_dirs(root), key=len, reverse=True)
    package = next(p for p in packages if module == p or module.startswith(p + "."))
    return package_dirs(root)[package].name


def cycles(edges: list[Import]) -> list[list[str]]:
    """The import cycles between modules: strongly connected components of more than one module."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    return [sorted(c) for c in _components(graph) if len(c) > 1]


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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
                    found.append(component)
    return found


def room_arrows(edges: list[Import], root: Path = ROOT) -> Counter[tuple[str, str]]:
    """How many imports go from one room to another (imports inside a room left out)."""
    arrows: Counter[tuple[str, str]] = Counter()
    for edge in edges:
        pair = (room(edge.importer, root), room(edge.imported, root))
        if pair[0] != pair[1]:
            arrows[pair] += 1
    return arrows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to read (default: this one)")
    root = parser.parse_args().root.resolve()
    edges = imports(root)
    arrows = room_arrows(edges, root)
    rooms = sorted({r for pair in arrows for r in pair})
    print(f"{len(modules(root))} modules, {len(edges)} imports between them, rooms: {', '.join(rooms)}")
    for (source, target), count in sorted(arrows.items()):
        back = " (both ways)" if (target, source) in arrows else ""
        print(f"  {source:>10} -> {target:<10} {count:3d} imports{back}")
    found = cycles(edges)
    print(f"{len(found)} import cycles between modules")
    for cycle in found:
        print("  " + " <-> ".join(cycle))


if __name__ == "__main__":
    main()
