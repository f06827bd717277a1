"""The dependency rules between kfed's packages and modules, read from every product module's imports.

- ``kfed`` (the command, the composition root) may import every package; no other package imports it;
- a server imports no other server: ``controller`` imports neither ``gateway``, ``spark_pipeline`` nor
  ``deploy``; the gateway imports neither ``controller`` nor the SDK;
- the pure core (``metadata_log``) imports no other package of kfed;
- no import cycle between top-level packages, nor between the modules of one package;
- a package's ``__init__.py`` is its face: a docstring that says what belongs there, imports and ``__all__``;
- the archive shipped to Spark executors holds every package the ``kfed`` source imports.

Imports are read with ``ast`` (also those inside functions and under ``TYPE_CHECKING``), so a lazy or a
type-only import counts like any other.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOT_PRODUCT = {"tests"}
FORBIDDEN = {
    ("controller", "gateway"),
    ("controller", "spark_pipeline"),
    ("controller", "deploy"),
    ("gateway", "controller"),
    ("gateway", "sdk"),
}
CORE = "metadata_log"

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
            yield imported_from(node, module, is_package), node.lineno


def imported_from(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name of the module a ``from ... import`` in ``module`` imports from."""
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def package_edges(root: Path) -> Edges:
    packages = top_level_packages(root)
    edges: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for module, (path, is_package) in modules_of(root).items():
        if path.suffix != ".py":
            continue
        package = module.split(".")[0]
        for imported, line in imported_modules(path.read_text(encoding="utf-8"), module, is_package):
            target = imported.split(".")[0]
            if target in packages and target != package:
                edges[package, target].append(f"{path.relative_to(root)}:{line}")
    return edges


def modules_of(root: Path) -> dict[str, tuple[Path, bool]]:
    """Every module of the product packages under ``root``, in path order: name -> (file, is a package's
    ``__init__``). A C extension built from ``<module>.c`` counts as a module (it imports nothing of kfed)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for package in sorted(top_level_packages(root)):
        for path in sorted((root / package).rglob("*.py")):
            is_package = path.name == "__init__.py"
            relative = path.relative_to(root)
            modules[".".join((relative.parent if is_package else relative.with_suffix("")).parts)] = (path, is_package)
        for path in sorted((root / package).rglob("*.c")):
            modules[".".join(path.relative_to(root).with_suffix("").parts)] = (path, False)
    return modules


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
    out += [f"the core imports {b}: {where}" for (a, b), where in sorted(edges.items()) if a == CORE]
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


# -- modules ------------------------------------------------------------------------------------------------


def module_edges(root: Path) -> Edges:
    """(importer, imported) of modules of one top-level package; ``from package import name`` is an import of
    the module ``package.name`` when there is one, else of the package's face."""
    modules = modules_of(root)
    edges: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    for module, (path, is_package) in modules.items():
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = imported_from(node, module, is_package)
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for name in names:
                parts = name.split(".")
                target = next(
                    (".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules), None
                )
                if target is not None and target != module and target.split(".")[0] == module.split(".")[0]:
                    edges[module, target].append(f"{path.relative_to(root)}:{node.lineno}")
    return edges


def test_no_module_imports_a_module_that_imports_it_back() -> None:
    edges = module_edges(ROOT)
    assert ("metadata_log.commands.topics", "metadata_log.commands.common") in edges  # the scan sees modules
    found = []
    for component in cycles(edges):
        inside = {f"{a} -> {b}": where for (a, b), where in edges.items() if a in component and b in component}
        found.append(f"import cycle between {component}: {inside}")
    assert not found, "\n".join(found)


def test_a_module_cycle_is_found_through_a_type_only_import(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "pkg/__init__.py": '"""A package."""\n\nfrom .a import A\n',
            "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n",
            "pkg/b.py": "from . import a\nB = 2\n",
            "pkg/c.py": "from pkg import a\n",
        },
    )
    edges = module_edges(tmp_path)
    assert set(edges) == {("pkg", "pkg.a"), ("pkg.a", "pkg.b"), ("pkg.b", "pkg.a"), ("pkg.c", "pkg.a")}
    assert cycles(edges) == [["pkg.a", "pkg.b"]]


def face_problems(path: Path) -> list[str]:
    """What a package's ``__init__.py`` holds besides its docstring, imports and ``__all__``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    problems = [] if ast.get_docstring(tree) else ["no docstring"]
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            continue
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            continue
        problems.append(f"{type(node).__name__} at line {node.lineno}")
    return problems


def test_every_package_face_holds_only_its_docstring_imports_and_all() -> None:
    faces = [p for package in top_level_packages(ROOT) for p in sorted((ROOT / package).rglob("__init__.py"))]
    assert len(faces) >= 10
    found = {str(p.relative_to(ROOT)): problems for p in faces if (problems := face_problems(p))}
    assert not found, found


def test_a_face_with_logic_is_told_apart(tmp_path: Path) -> None:
    write(tmp_path, {"ok/__init__.py": '"""Doc."""\n\nfrom .x import y\n\n__all__ = ["y"]\n'})
    write(tmp_path, {"bad/__init__.py": "from .x import y\n\nLIMIT = 3\n\ndef f():\n    pass\n"})
    assert face_problems(tmp_path / "ok/__init__.py") == []
    assert face_problems(tmp_path / "bad/__init__.py") == ["no docstring", "Assign at line 3", "FunctionDef at line 5"]


def test_the_executors_archive_holds_every_package_the_kfed_source_imports() -> None:
    from spark_pipeline.archive import ARCHIVE_PACKAGES

    edges = package_edges(ROOT)
    needed, todo = {"spark_pipeline"}, ["spark_pipeline"]
    while todo:
        package = todo.pop()
        for a, b in edges:
            if a == package and b not in needed:
                needed.add(b)
                todo.append(b)
    assert needed <= set(ARCHIVE_PACKAGES), f"executors would lack {sorted(needed - set(ARCHIVE_PACKAGES))}"
