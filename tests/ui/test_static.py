"""The dashboard's files as a node serves them: the right content types (ES modules load only with a
JavaScript type), revalidated caching, and nothing fetched from outside the node (it must work offline)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from controller.dashboard import UI_DIR
from deploy.launcher import LocalQuorum

CONTENT_TYPES = {
    ".html": ("text/html",),
    ".css": ("text/css",),
    ".js": ("text/javascript", "application/javascript"),
}
# An absolute URL anywhere (http://, https://, ws://, wss://) or a protocol-relative one in a
# src/href/import/url() position: either would make the page depend on another host.
EXTERNAL = re.compile(r"\b(?:https?|wss?)://|[\"'(]//\w")


def assets() -> list[Path]:
    return sorted(p for p in UI_DIR.rglob("*") if p.is_file())


def test_ui_redirects_to_the_index_page(single_node: LocalQuorum) -> None:
    base = single_node.url(1)
    r = httpx.get(base + "/ui")
    assert r.status_code in (307, 308) and r.headers["location"] == "/ui/"
    page = httpx.get(base + "/ui/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'type="module"' in page.text


def test_every_asset_is_served_with_its_content_type(single_node: LocalQuorum) -> None:
    base = single_node.url(1)
    files = assets()
    assert {p.suffix for p in files} <= set(CONTENT_TYPES), f"an asset type this test does not know: {files}"
    assert any(p.suffix == ".js" for p in files) and any(p.suffix == ".css" for p in files)
    for path in files:
        url = f"{base}/ui/{path.relative_to(UI_DIR).as_posix()}"
        r = httpx.get(url)
        assert r.status_code == 200, url
        media_type = r.headers["content-type"].split(";")[0].strip()
        assert media_type in CONTENT_TYPES[path.suffix], f"{url}: {media_type}"
        assert r.headers.get("cache-control") == "no-cache", url
        assert r.content == path.read_bytes(), url


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
