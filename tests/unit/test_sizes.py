"""Size limits of the product packages, so a module or a function stays readable in one sitting: no module
over 700 lines, no function over 120 lines (decorators and docstring included). The product packages are
those the distribution ships (pyproject's package list); ``bench`` and ``tests`` are not."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.test_errors import ROOT, product_packages

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 120


def product_modules() -> list[Path]:
    return sorted(path for package in product_packages() for path in (ROOT / package).rglob("*.py"))


def test_the_product_packages_are_found() -> None:
    assert {"metadata_log", "controller", "gateway", "kfed", "sdk"} <= set(product_packages())


def test_no_module_is_over_the_limit() -> None:
    long = {
        str(p.relative_to(ROOT)): n
        for p in product_modules()
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_the_limit() -> None:
    long = {}
    for path in product_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                assert node.end_lineno is not None
                if (lines := node.end_lineno - first + 1) > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = lines
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
