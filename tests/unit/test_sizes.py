"""Size limits of the product packages, so a module or a function stays readable in one sitting: no module
over 600 lines, no function over 80 lines (decorators and docstring included). The formatter decides layout:
at most 30 ``# fmt: skip`` and 300 lines fenced by ``# fmt: off`` / ``# fmt: on`` (true tables only). The
product packages are those the distribution ships (pyproject's package list); ``bench`` and ``tests`` are
not."""

from __future__ import annotations

import ast
from pathlib import Path

from .test_errors import ROOT, product_packages

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_FMT_SKIPS = 30
MAX_FMT_OFF_LINES = 300


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


def fenced_lines(text: str) -> int:
    """Lines between each ``# fmt: off`` and its ``# fmt: on`` (to the end of the file when it has none)."""
    count, off = 0, False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "# fmt: off":
            off = True
        elif stripped == "# fmt: on":
            off = False
        elif off:
            count += 1
    return count


def test_the_formatter_decides_layout_but_for_a_few_tables() -> None:
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in product_modules()}
    skips = {name: n for name, text in texts.items() if (n := text.count("# fmt: skip"))}
    assert sum(skips.values()) <= MAX_FMT_SKIPS, f"{sum(skips.values())} '# fmt: skip' over {MAX_FMT_SKIPS}: {skips}"
    fenced = {name: n for name, text in texts.items() if (n := fenced_lines(text))}
    assert sum(fenced.values()) <= MAX_FMT_OFF_LINES, f"lines under '# fmt: off': {fenced}"


def test_fenced_lines_are_counted_to_their_fmt_on() -> None:
    assert fenced_lines("a\n# fmt: off\nb\nc\n    # fmt: on\nd\n# fmt: off\ne\n") == 3
