"""The layering rules, enforced: README's layout table is the rule, the import graph must obey it.

Each row of the table names a room (a top-level folder), its import path and the rooms it may
import. The source's imports (every ``import`` statement, inside functions too) are checked
against it, so the table cannot drift from the code, nor the code from the table.
"""

from __future__ import annotations

import re
import tomllib

import pytest

from tests.import_graph import ROOT, Import, cycles, imports, modules, package_dirs, room

ROW = re.compile(r"^\| `(?P<folder>\w+)/` \| `(?P<package>[\w.]+)` \| (?P<owns>.+?) \| (?P<may>[^|]+) \|$")


def layout_table() -> dict[str, tuple[str, set[str]]]:
    """README's layout table: folder → (import path, the folders it may import)."""
    section = ROOT.joinpath("README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if match := ROW.match(line.strip()):
            allowed = set(re.findall(r"`(\w+)/`", match["may"]))
            rows[match["folder"]] = (match["package"], allowed)
    return rows


PART_ROW = re.compile(r"^\| `collector/(?P<part>\w+)/` \| `(?P<package>[\w.]+)` \| .+? \| (?P<may>[^|]+) \|$")


def collector_parts() -> dict[str, tuple[str, set[str]]]:
    """README's table of collector/'s parts: part → (import path, the parts it may import)."""
    section = ROOT.joinpath("README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    return {
        m["part"]: (m["package"], set(re.findall(r"`collector/(\w+)/`", m["may"])))
        for line in section.splitlines()
        if (m := PART_ROW.match(line.strip()))
    }


def collector_part(module: str) -> str | None:
    """The part of collector/ a module is in; "" for the modules composing them; None outside collector/."""
    if module != "agentlat.collector" and not module.startswith("agentlat.collector."):
        return None
    name = module.split(".")[2:3]
    return name[0] if name and name[0] in collector_parts() else ""


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return imports()


def test_the_table_lists_every_room_with_its_import_path() -> None:
    rooms = {folder.name: package for package, folder in package_dirs().items() if package.count(".") <= 1}
    assert {folder: package for folder, (package, _) in layout_table().items()} == rooms


def test_the_rules_are_layers_without_a_cycle() -> None:
    allowed = {folder: may for folder, (_, may) in layout_table().items()}
    for folder, may in allowed.items():
        assert may <= set(allowed), f"{folder}/ may import unknown rooms {may - set(allowed)}"
    order: list[str] = []
    while len(order) < len(allowed):
        ready = sorted(f for f, may in allowed.items() if f not in order and may <= set(order))
        assert ready, f"the rules between {sorted(set(allowed) - set(order))} go round in a circle"
        order.extend(ready)


def test_every_import_between_rooms_is_allowed(edges: list[Import]) -> None:
    allowed = {folder: may for folder, (_, may) in layout_table().items()}
    broken = [
        f"{e.importer} (line {e.line}) imports {e.imported}: "
        f"{room(e.importer)}/ may import {sorted(allowed[room(e.importer)])}"
        for e in edges
        if room(e.importer) != room(e.imported) and room(e.imported) not in allowed[room(e.importer)]
    ]
    assert broken == []


def test_the_parts_of_collector_are_its_packages() -> None:
    parts = {name for name, path in modules().items() if name.count(".") == 2 and path.name == "__init__.py"}
    assert {package for package, _ in collector_parts().values()} == {
        n for n in parts if n.startswith("agentlat.collector.")
    }


def test_collector_parts_import_only_what_the_table_allows(edges: list[Import]) -> None:
    """A part imports the parts its row names and never the modules that compose them."""
    allowed = {part: may for part, (_, may) in collector_parts().items()}
    broken = [
        f"{e.importer} (line {e.line}) imports {e.imported}"
        for e in edges
        if (src := collector_part(e.importer)) and (dst := collector_part(e.imported)) is not None
        and dst != src and dst not in allowed[src]
    ]  # fmt: skip
    assert broken == []


def test_no_import_cycles_between_modules(edges: list[Import]) -> None:
    assert cycles(edges) == []


@pytest.mark.parametrize("package", ["agentlat.store"])
def test_other_rooms_reach_a_room_through_its_package_only(edges: list[Import], package: str) -> None:
    """``agentlat.store`` is the store's public surface; its modules are its own business."""
    inside = room(package)
    reaching_in = [
        f"{e.importer} (line {e.line}) imports {e.imported}"
        for e in edges
        if e.imported.startswith(package + ".") and room(e.importer) != inside
    ]
    assert reaching_in == []


def test_the_graph_reader_sees_hidden_imports(tmp_path) -> None:
    """An import inside a function, a relative import and ``from package import module`` all count."""
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "agentlat" = "pkg", "agentlat.other" = "other" }\n'
    )
    (tmp_path / "pkg" / "__init__.py").write_text("from agentlat import a\n")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from agentlat.other import b\n")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("from .. import a\nfrom . import c\n")
    (tmp_path / "pkg" / "sub" / "c.py").write_text("import agentlat.other.b as b\n")
    (tmp_path / "other" / "__init__.py").write_text("")
    (tmp_path / "other" / "b.py").write_text("from agentlat.sub import c\n")
    found = {(e.importer, e.imported) for e in imports(tmp_path)}
    assert found == {
        ("agentlat", "agentlat.a"),
        ("agentlat.a", "agentlat.other.b"),
        ("agentlat.sub", "agentlat.a"),
        ("agentlat.sub", "agentlat.sub.c"),
        ("agentlat.sub.c", "agentlat.other.b"),
        ("agentlat.other.b", "agentlat.sub.c"),
    }
    assert cycles(imports(tmp_path)) == [["agentlat.other.b", "agentlat.sub.c"]]
    assert room("agentlat.sub.c", tmp_path) == "pkg" and room("agentlat.other.b", tmp_path) == "other"


def test_every_package_is_installed() -> None:
    """A package folder missing from pyproject's ``packages`` works in the editable install and
    is left out of every wheel (the Docker image's server would not start)."""
    config = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert on_disk == listed


def test_the_picture_in_docs_is_the_import_graph(edges: list[Import]) -> None:
    """docs/architecture.md draws every arrow between rooms (but those into ``sdk/`` and ``shared/``, which
    nearly every room imports), and no other."""
    doc = ROOT.joinpath("docs", "architecture.md").read_text()
    flowchart = doc.split("```mermaid\nflowchart", 1)[1].split("```", 1)[0]
    drawn = set(re.findall(r"^\s*(\w+) --> (\w+)\s*$", flowchart, re.M))
    actual = {(room(e.importer), room(e.imported)) for e in edges}
    assert drawn == {(a, b) for a, b in actual if a != b and b not in ("sdk", "shared")}
