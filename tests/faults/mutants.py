"""Mutation check of the checkers and the SDK's decisions: ``make mutants`` (``python -m tests.faults.mutants``).

A checker whose branches can be deleted without a test noticing proves nothing, nor does code whose decisions
can be. For each of ``TARGETS`` (the control plane's ``tests/faults/checker.py``, the data plane's
``tests/dataplane/checker.py``, and the SDK's routing and hold-back decisions, ``sdk/routes.py`` and
``sdk/key_order.py``, against their fast tests), this makes one mutant at a time:

- an ``if`` (statement or expression): its test made ``False`` (the branch deleted) and ``not (test)``;
- a filter of a comprehension: dropped, and negated;
- an operand of ``and`` / ``or``: dropped;
- a statement that records an anomaly (``out.append``, ``out +=``) and a ``return [Anomaly(...)]``: deleted;
- a comparison: its boundary moved (``<`` and ``<=``, ``>`` and ``>=`` swapped), its operands swapped, a
  membership test flipped (``in`` and ``not in``);
- arithmetic: ``+`` and ``-`` swapped, the operands of ``-`` swapped;
- an index or a slice bound: shifted by one (``x[i]`` to ``x[i + 1]``).

Messages (f-strings) are not mutated. Each mutant is loaded in place of its module; the target's test
module is imported again against it and every test in it is run. A mutant is *caught* when a test fails on
an assertion (or a ``pytest.raises`` that did not raise); one that only makes the checker raise (a crash:
the ``IndexError`` of a shifted index) is not, since a checker that crashes on some histories and passes
others proves nothing about those others: such mutants are counted apart (``-v`` lists them). A mutant no
test fails *survives*; the run lists the survivors and exits 1. Each target's ``equivalent`` names the few
mutants that cannot change any answer, with the reason.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
MUTANT_TIMEOUT_S = 20  # a mutant that loops forever counts as caught (its tests would hang)
CRASHED = "<crashed>"
"""What ``killer`` says of a mutant that tests make raise but none fails on an assertion."""

FAULTS_EQUIVALENT: dict[str, str] = {
    # Site.name -> why no history can tell the mutant apart
    "check_metadata: drop filter `body.get(k) != expected.get(k)`": "it only names the fields in the message",
    "check_metadata: negate filter `body.get(k) != expected.get(k)`": "it only names the fields in the message",
    "at: move boundary of Lt `o < offset`": "``offset`` is not among the images computed when it is reached",
    "retried_after_unknown: shift slice lower bound `unknown[0]`": "the try at ``unknown[0]`` is itself unknown",
    "_check_ack: move boundary of LtE `offset <= known`": (
        "a write with effects was acknowledged at an effect's end, which ``could_make`` put beyond ``known``"
    ),
    "check_tails: move boundary of Lt `offset < expected`": "reached only when ``offset != expected``",
}


@dataclass(frozen=True)
class Target:
    """A module mutated, and the test module whose tests must catch its mutants."""

    module: str  # dotted, e.g. "tests.faults.checker"
    tests: str
    equivalent: Mapping[str, str]  # Site.name -> why no input can tell the mutant apart

    @property
    def path(self) -> Path:
        return PROJECT / (self.module.replace(".", "/") + ".py")

    @property
    def package(self) -> str:
        return self.module.rpartition(".")[0]


TARGETS: tuple[Target, ...] = (
    Target("sdk.routes", "tests.unit.sdk.test_routes", {}),
    Target(
        "sdk.key_order",
        "tests.unit.sdk.test_key_order_member",
        {
            "strict: drop operand of and `topic in image.key_orders`": "a fast path: strict_history is None then",
            "offer: delete branch (if False) `not image.key_orders and (not self._holds)`": "a fast path: no topic is "
            "strict then, and a hold's records pass",
            "offer: drop operand of and `not self._holds`": "a fast path: without key orders every record passes",
            "offer: drop operand of or `topic is None`": "strict(image, None) is False",
            "observe: delete branch (if False) `not self._holds`": "a fast path: with no hold the rest does the same",
            "observe: shift index `self._observed[0]`": "a cache: never hitting it observes the same again",
            "commit_position: drop operand of and `offset is not None`": "a record placed in a partition has an offset",
        },
    ),
    Target("tests.faults.checker", "tests.faults.test_checker", FAULTS_EQUIVALENT),
    Target(
        "tests.dataplane.checker",
        "tests.dataplane.test_checker",
        {
            "_duplicates: shift slice upper bound `i`": "a read cannot excuse itself: its member ends after it",
            "_key_order: move boundary of Gt `seq > highest`": "a key's messages have distinct sequence numbers",
            "_key_order: shift slice upper bound `2`": "distinct sequence numbers: no tie to break",
            "_lost_aborted_torn: drop operand of and `txn is not None`": "``txns`` has no None key: the last operand "
            "leaves out the same messages",
            "_lost_aborted_torn: negate filter `m.reads.get(group)`": "a transaction read in part is read in part "
            "either way round",
        },
    ),
)


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

    _BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE,
                                                          ast.GtE: ast.Gt}  # fmt: skip
    _MEMBERSHIP: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.In: ast.NotIn, ast.NotIn: ast.In}

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        for i, op in enumerate(list(node.ops)):
            moved = self._BOUNDARY.get(type(op)) or self._MEMBERSHIP.get(type(op))
            what = "move boundary" if type(op) in self._BOUNDARY else "flip membership"
            if moved is not None and self._site(node, f"{what} of {type(op).__name__}"):
                node.ops = [*node.ops[:i], moved(), *node.ops[i + 1 :]]
        if len(node.ops) == 1 and type(node.ops[0]) in self._BOUNDARY and self._site(node, "swap operands"):
            node.left, node.comparators = node.comparators[0], [node.left]
        self.generic_visit(node)
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        if isinstance(node.op, (ast.Add, ast.Sub)) and not _is_text(node):
            if self._site(node, "swap + and -"):
                node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
            elif isinstance(node.op, ast.Sub) and self._site(node, "swap operands of -"):
                node.left, node.right = node.right, node.left
        self.generic_visit(node)
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        index = node.slice
        if isinstance(index, ast.Slice):
            for bound in ("lower", "upper"):
                value = getattr(index, bound)
                if value is not None and self._site(value, f"shift slice {bound} bound"):
                    setattr(index, bound, ast.BinOp(value, ast.Add(), ast.Constant(1)))
        elif _is_position(index) and self._site(node, "shift index"):
            node.slice = ast.BinOp(index, ast.Add(), ast.Constant(1))
        self.generic_visit(node)
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
        return node  # a message: what it says is not a verdict

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


def _is_text(node: ast.BinOp) -> bool:
    """Joined strings or f-strings: messages, not arithmetic."""
    return any(isinstance(side, (ast.JoinedStr, ast.Constant)) and isinstance(getattr(side, "value", ""), str)
               for side in (node.left, node.right))  # fmt: skip


def _is_position(index: ast.expr) -> bool:
    """An index that is a position (an int, or arithmetic with one), not a key of a mapping."""
    if isinstance(index, ast.Constant):
        return isinstance(index.value, int) and not isinstance(index.value, bool)
    if isinstance(index, ast.UnaryOp):
        return _is_position(index.operand)
    if isinstance(index, ast.BinOp):
        return _is_position(index.left) or _is_position(index.right)
    return False


def sites(tree: ast.Module) -> list[Site]:
    mutator = _Mutator()
    mutator.visit(copy.deepcopy(tree))
    return mutator.sites


def mutant_source(tree: ast.Module, index: int) -> str:
    mutated = _Mutator(index).visit(copy.deepcopy(tree))
    return ast.unparse(ast.fix_missing_locations(mutated))


def _tests_against(target: Target, module: types.ModuleType) -> Iterator[tuple[str, Callable[[], None]]]:
    """The test functions of ``target.tests`` imported anew with ``module`` as the target, the ones that
    caught recent mutants first (a mutant is mostly caught by the test that caught its neighbour)."""
    sys.modules[target.module] = module
    setattr(sys.modules[target.package], target.module.rpartition(".")[2], module)
    tests = importlib.reload(importlib.import_module(target.tests))
    names = sorted(name for name in dir(tests) if name.startswith("test_"))
    for name in sorted(names, key=lambda n: _CAUGHT_LATELY.index(n) if n in _CAUGHT_LATELY else len(names)):
        yield name, getattr(tests, name)


_CAUGHT_LATELY: list[str] = []  # test names, the one that caught the last mutant first


def _alarm(signum: int, frame: object) -> None:
    raise TimeoutError("mutant ran too long")


def killer(target: Target, source: str) -> str | None:
    """The first test that fails on an assertion against the target built from ``source``; ``CRASHED`` when
    tests only make it raise; None when every test passes."""
    module = types.ModuleType(target.module)
    module.__file__ = str(target.path)
    module.__package__ = target.package
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(MUTANT_TIMEOUT_S)
    try:
        exec(compile(source, str(target.path), "exec"), module.__dict__)
        crashed = False
        for name, test in _tests_against(target, module):
            try:
                test()
            except (AssertionError, pytest.fail.Exception):  # an assert, or pytest.raises that did not raise
                if name in _CAUGHT_LATELY:
                    _CAUGHT_LATELY.remove(name)
                _CAUGHT_LATELY.insert(0, name)
                return name
            except Exception:  # the mutant crashed on this test's history: not caught by it
                crashed = True
        return CRASHED if crashed else None
    except Exception as e:  # the mutant does not even load
        return f"<load: {type(e).__name__}>"
    finally:
        signal.alarm(0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.mutants", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true", help="print every mutant and the test that caught it")
    args = parser.parse_args(argv)
    worst = 0
    for target in TARGETS:
        worst = max(worst, mutate(target, args.verbose))
    return worst


def mutate(target: Target, verbose: bool) -> int:
    """Every mutant of ``target`` against its tests: 0 when none survives, 1 when one does, 2 when the
    unmutated module already fails them."""
    started = time.monotonic()
    tree = ast.parse(target.path.read_text(), str(target.path))
    original = importlib.import_module(target.module)
    if (first := killer(target, ast.unparse(tree))) is not None:
        print(f"{target.module} unmutated fails {first}: fix that first")
        return 2
    survivors, equivalent, crashed = [], [], []
    all_sites = sites(tree)
    for site in all_sites:
        caught_by = killer(target, mutant_source(tree, site.index))
        if verbose:
            print(f"  line {site.line:4} {site.name} -> {caught_by or 'SURVIVED'}")
        if caught_by == CRASHED:
            crashed.append(site)
        elif caught_by is None:
            (equivalent if site.name in target.equivalent else survivors).append(site)
    list(_tests_against(target, original))  # leave the real module in place for whoever imported it
    caught = len(all_sites) - len(survivors) - len(equivalent) - len(crashed)
    print(f"{len(all_sites)} mutants of {target.module}: {caught} caught, {len(crashed)} only crashed, "
          f"{len(equivalent)} equivalent, {len(survivors)} survived ({time.monotonic() - started:.1f} s)")  # fmt: skip
    for site in equivalent:
        print(f"  equivalent, line {site.line}: {site.name}: {target.equivalent[site.name]}")
    if verbose:
        for site in crashed:
            print(f"  only crashed, line {site.line}: {site.name}")
    for site in survivors:
        print(f"  SURVIVED line {site.line}: {site.name}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
