"""The dependency rules between kfed's top-level packages, read from every product module's imports.

- ``kfed`` (the command, the composition root) may import every package; no other package imports it;
- ``controller`` (the server) imports neither ``spark_pipeline`` nor ``deploy``;
- no import cycle between top-level packages.

Imports are read with ``ast`` (also those inside functions), so a lazy import counts like any other.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_PRODUCT = {"tests"}
FORBIDDEN = {("controller", "spark_pipeline"), ("controller", "deploy")}

Edges = Mapping[tuple[str, str], list[str]]  # (importer, imported) -> "path:line" of each import


def top_level_packages(root: Path) -> set[str]:
    return {p.parent.name for p in root.glob("*/__init__.py")} - NOT_PRODUCT


def imported_modules(source: str, module: str, is_package: bool = False) -> Iterable[tuple[str, int]]:
    """(absolute module name, line) of each import in ``source``, the code of ``module`` (relative imports
    resolved against it; ``is_package``: it is a package's ``__init__``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.module or "", node.lineno
                continue
            parts = module.split(".")
            base = parts if is_package else parts[:-1]
            base = base[: len(base) - (node.level - 1)]
            yield ".".join([*base, *([node.module] if node.module else [])]), node.lineno


def package_edges(root: Path) -> Edges:
    packages = top_level_packages(root)
    edges: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for package in sorted(packages):
        for path in sorted((root / package).rglob("*.py")):
            relative = path.relative_to(root)
            is_package = path.name == "__init__.py"
            module = ".".join((relative.parent if is_package else relative.with_suffix("")).parts)
            for imported, line in imported_modules(path.read_text(encoding="utf-8"), module, is_package):
                target = imported.split(".")[0]
                if target in packages and target != package:
                    edges[package, target].append(f"{relative}:{line}")
    return edges


def cycles(edges: Edges) -> list[list[str]]:
    """Each strongly connected component of more than one package (Tarjan), sorted."""
    graph: defaultdict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
        graph[b]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def violations(edges: Edges) -> list[str]:
    """Every broken rule, each naming the imports that break it."""
    out = [f"{a} imports kfed (the composition root): {where}" for (a, b), where in edges.items() if b == "kfed"]
    out += [f"{a} imports {b}: {edges[a, b]}" for a, b in sorted(FORBIDDEN) if (a, b) in edges]
    for component in cycles(edges):
        inside = {pair: where for pair, where in edges.items() if pair[0] in component and pair[1] in component}
        out.append(f"import cycle between {component}: {inside}")
    return out


def test_the_packages_import_each_other_by_the_rules() -> None:
    edges = package_edges(ROOT)
    assert {"metadata_log", "controller", "kfed", "deploy", "spark_pipeline"} <= top_level_packages(ROOT)
    assert ("kfed", "controller") in edges  # the composition root is seen importing what it composes
    broken = violations(edges)
    assert not broken, "\n".join(broken)


def write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_each_rule_is_caught_with_the_import_that_breaks_it(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "kfed/__init__.py": "",
            "kfed/cli.py": "import controller.node\n",
            "controller/__init__.py": "",
            "controller/node.py": "from deploy import launcher\n\ndef f():\n    from kfed.cli import main\n",
            "deploy/__init__.py": "",
            "deploy/launcher.py": "from controller.node import f\n",
            "metadata_log/__init__.py": "",
            "metadata_log/raft/__init__.py": "",
            "metadata_log/raft/node.py": "from .. import codec\nfrom ..codec import pack\n",  # its own package
            "tests/__init__.py": "import kfed\n",  # not a product package
        },
    )
    edges = package_edges(tmp_path)
    assert dict(edges) == {
        ("controller", "deploy"): ["controller/node.py:1"],
        ("controller", "kfed"): ["controller/node.py:4"],
        ("deploy", "controller"): ["deploy/launcher.py:1"],
        ("kfed", "controller"): ["kfed/cli.py:1"],
    }
    assert cycles(edges) == [["controller", "deploy", "kfed"]]
    found = violations(edges)
    assert found[:2] == [
        "controller imports kfed (the composition root): ['controller/node.py:4']",
        "controller imports deploy: ['controller/node.py:1']",
    ]
    assert len(found) == 3 and found[2].startswith("import cycle between ['controller', 'deploy', 'kfed']: ")
    assert "'deploy/launcher.py:1'" in found[2]


def test_relative_imports_resolve_against_their_package() -> None:
    source = "from .. import codec\nfrom .topics import X\n"
    assert list(imported_modules(source, "metadata_log.image.delta")) == [
        ("metadata_log", 1),
        ("metadata_log.image.topics", 2),
    ]
    assert list(imported_modules("from . import ops\nfrom .ops import run\n", "kfed", is_package=True)) == [
        ("kfed", 1),
        ("kfed.ops", 2),
    ]
