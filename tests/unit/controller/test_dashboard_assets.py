"""The dashboard's files (``controller/ui``, served by ``controller/dashboard.py``): every file the page
references exists, and nothing is fetched from outside the node (it must work offline). How a node serves them
is ``tests/ui/test_static.py``."""

from __future__ import annotations

import re
from pathlib import Path

from controller.dashboard import UI_DIR

# An absolute URL anywhere (http://, https://, ws://, wss://) or a protocol-relative one in a
# src/href/import/url() position: either would make the page depend on another host.
EXTERNAL = re.compile(r"\b(?:https?|wss?)://|[\"'(]//\w")


def assets() -> list[Path]:
    return sorted(p for p in UI_DIR.rglob("*") if p.is_file())


def test_every_file_the_page_references_exists() -> None:
    """href/src in the HTML and every relative ES module import resolve to a served file."""
    references: list[Path] = []
    for path in assets():
        text = path.read_text()
        if path.suffix == ".html":
            targets = re.findall(r'(?:href|src)="([^"#:]+)"', text)
        elif path.suffix == ".js":
            targets = re.findall(r'^\s*(?:import|export)\b[^"\']*?from\s+"([^"]+)"', text, re.MULTILINE)
        else:
            targets = re.findall(r'url\(\s*["\']?([^"\')]+)', text)
        references += [(path.parent / t).resolve() for t in targets if not t.startswith("data:")]
    assert references, "the index page references nothing"
    missing = [str(r) for r in references if not r.is_file() or UI_DIR.resolve() not in r.parents]
    assert not missing, f"referenced but not served: {missing}"


def test_no_asset_refers_to_another_host() -> None:
    for path in assets():
        found = EXTERNAL.findall(path.read_text())
        assert not found, f"{path.name} refers to another host: {found} (the dashboard must work offline)"
