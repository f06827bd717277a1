"""The core modules' public surface is what their ``__all__`` says: a new public name is added on purpose."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from metadata_log import codec, heap, image, publisher, snapshot


def _defined_here(module: ModuleType) -> set[str]:
    """Public functions and classes a module defines itself (not what it imports)."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isfunction(value) or inspect.isclass(value))
        and value.__module__ == module.__name__
    }


@pytest.mark.parametrize("module", [codec, heap, publisher, snapshot], ids=lambda m: m.__name__)
def test_every_public_function_and_class_of_a_core_module_is_in_its_all(module: ModuleType) -> None:
    assert _defined_here(module) <= set(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)


def test_the_codec_shows_the_few_functions_its_callers_use() -> None:
    functions = {name for name in codec.__all__ if inspect.isfunction(getattr(codec, name))}
    assert len(functions) <= 20, sorted(functions)


def test_the_image_package_exports_what_it_lists() -> None:
    assert all(hasattr(image, name) for name in image.__all__)
