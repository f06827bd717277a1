"""Mutation check of the history checker: ``python -m tests.faults.mutants`` (``make mutants``).

A checker whose branches can be deleted without a test noticing proves nothing. This deletes or negates
each branch of ``tests/faults/checker.py`` in turn, one mutant at a time:

- an ``if`` (statement or expression): its test made ``False`` (the branch deleted) and ``not (test)``;
- a filter of a comprehension: dropped, and negated;
- an operand of ``and`` / ``or``: dropped;
- a statement that records an anomaly (``out.append``, ``out +=``) and a ``return [Anomaly(...)]``: deleted.

Each mutant is loaded as ``tests.faults.checker``; ``tests/faults/test_checker.py`` is imported again
against it and every test in it is run. A mutant that no test fails *survives*; the run lists them and
exits 1. ``EQUIVALENT`` names the few mutants that cannot change any answer, with the reason.
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import signal
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "tests.faults"
TARGET = Path(__file__).with_name("checker.py")
TESTS = f"{PACKAGE}.test_checker"
MUTANT_TIMEOUT_S = 20  # a mutant that loops forever counts as caught (its tests would hang)

EQUIVALENT: dict[str, str] = {
    # Site.name -> why no history can tell the mutant apart
    "check_metadata: drop filter `body.get(k) != expected.get(k)`": "it only names the fields in the message",
    "check_metadata: negate filter `body.get(k) != expected.get(k)`": "it only names the fields in the message",
}


@dataclass(frozen=True)
class Site:
    index: int
    function: str
    line: int
    operator: str
    source: str

    @property
    def name(self) -> str:
        return f"{self.function}: {self.operator} `{self.source}`"


class _Mutator(ast.NodeTransformer):
    """Walks the module; at site ``target`` (counted in walk order) applies its mutation, elsewhere only
    counts. ``sites`` lists every site seen."""

    def __init__(self, target: int | None = None) -> None:
        self.target = target
        self.sites: list[Site] = []
        self._function = "<module>"

    def _site(self, node: ast.AST, operator: str) -> bool:
        self.sites.append(Site(len(self.sites), self._function, getattr(node, "lineno", 0), operator,
                               ast.unparse(node).splitlines()[0][:90]))  # fmt: skip
        return self.sites[-1].index == self.target

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        outer, self._function = self._function, node.name
        self.generic_visit(node)
        self._function = outer
        return node

    def _branch(self, node: ast.If | ast.IfExp) -> ast.AST:
        test = node.test
        if self._site(test, "delete branch (if False)"):
            node.test = ast.Constant(False)
        elif self._site(test, "negate"):
            node.test = ast.UnaryOp(ast.Not(), test)
        self.generic_visit(node)
        return node

    visit_If = _branch
    visit_IfExp = _branch

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        for i, condition in enumerate(list(node.ifs)):
            if self._site(condition, "drop filter"):
                node.ifs = node.ifs[:i] + node.ifs[i + 1 :]
            elif self._site(condition, "negate filter"):
                node.ifs[i] = ast.UnaryOp(ast.Not(), condition)
        self.generic_visit(node)
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        for i, operand in enumerate(list(node.values)):
            if self._site(operand, f"drop operand of {type(node.op).__name__.lower()}"):
                rest = node.values[:i] + node.values[i + 1 :]
                return self.visit(rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest))
        self.generic_visit(node)
        return node

    def _records_anomaly(self, node: ast.stmt) -> bool:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            func = node.value.func
            return isinstance(func, ast.Attribute) and func.attr == "append" and ast.unparse(func.value) == "out"
        if isinstance(node, ast.AugAssign):
            return ast.unparse(node.target) in ("out", "anomalies")
        if isinstance(node, ast.Return) and isinstance(node.value, ast.List) and node.value.elts:
            return "Anomaly(" in ast.unparse(node.value)
        return False

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                for i, statement in enumerate(value):
                    if self._records_anomaly(statement) and self._site(statement, "delete statement"):
                        value[i] = (
                            ast.Return(ast.List([], ast.Load())) if isinstance(statement, ast.Return) else ast.Pass()
                        )
        return super().generic_visit(node)


def sites(tree: ast.Module) -> list[Site]:
    mutator = _Mutator()
    mutator.visit(copy.deepcopy(tree))
    return mutator.sites


def mutant_source(tree: ast.Module, index: int) -> str:
    mutated = _Mutator(index).visit(copy.deepcopy(tree))
    return ast.unparse(ast.fix_missing_locations(mutated))


def _tests_against(module: types.ModuleType) -> Iterator[tuple[str, Callable[[], None]]]:
    """The test functions of ``test_checker`` imported anew with ``module`` as the checker, the ones that
    caught recent mutants first (a mutant is mostly caught by the test that caught its neighbour)."""
    sys.modules[f"{PACKAGE}.checker"] = module
    sys.modules[PACKAGE].checker = module  # type: ignore[attr-defined]
    tests = importlib.reload(importlib.import_module(TESTS))
    names = sorted(name for name in dir(tests) if name.startswith("test_"))
    for name in sorted(names, key=lambda n: _CAUGHT_LATELY.index(n) if n in _CAUGHT_LATELY else len(names)):
        yield name, getattr(tests, name)


_CAUGHT_LATELY: list[str] = []  # test names, the one that caught the last mutant first


def _alarm(signum: int, frame: object) -> None:
    raise TimeoutError("mutant ran too long")


def killer(source: str) -> str | None:
    """The first test that fails against the checker built from ``source``; None when every test passes."""
    module = types.ModuleType(f"{PACKAGE}.checker")
    module.__file__ = str(TARGET)
    module.__package__ = PACKAGE
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(MUTANT_TIMEOUT_S)
    try:
        exec(compile(source, str(TARGET), "exec"), module.__dict__)
        for name, test in _tests_against(module):
            try:
                test()
            except Exception:  # an assertion, or the mutant crashing on a history: either way caught
                if name in _CAUGHT_LATELY:
                    _CAUGHT_LATELY.remove(name)
                _CAUGHT_LATELY.insert(0, name)
                return name
        return None
    except Exception as e:  # the mutant does not even load
        return f"<load: {type(e).__name__}>"
    finally:
        signal.alarm(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.mutants", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true", help="print every mutant and the test that caught it")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tree = ast.parse(TARGET.read_text(), str(TARGET))
    original = importlib.import_module(f"{PACKAGE}.checker")
    if (first := killer(ast.unparse(tree))) is not None:
        print(f"the unmutated checker fails {first}: fix that first")
        return 2
    survivors, equivalent = [], []
    all_sites = sites(tree)
    for site in all_sites:
        caught_by = killer(mutant_source(tree, site.index))
        if args.verbose:
            print(f"  line {site.line:4} {site.name} -> {caught_by or 'SURVIVED'}")
        if caught_by is None:
            (equivalent if site.name in EQUIVALENT else survivors).append(site)
    _tests_against(original)  # leave the real checker in place for whoever imported this
    list(_tests_against(original))
    print(f"{len(all_sites)} mutants of {TARGET.name}: {len(all_sites) - len(survivors) - len(equivalent)} caught, "
          f"{len(equivalent)} equivalent, {len(survivors)} survived ({time.monotonic() - started:.1f} s)")  # fmt: skip
    for site in equivalent:
        print(f"  equivalent, line {site.line}: {site.name}: {EQUIVALENT[site.name]}")
    for site in survivors:
        print(f"  SURVIVED line {site.line}: {site.name}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
