"""The dashboard's files as a node serves them: the right content types (ES modules load only with a
JavaScript type) and revalidated caching. That they reference only each other, nothing from outside the node,
is ``tests/unit/controller/test_dashboard_assets.py``."""

from __future__ import annotations

import httpx

from controller.dashboard import UI_DIR
from deploy.launcher import LocalQuorum

from ..unit.controller.test_dashboard_assets import assets

CONTENT_TYPES = {
    ".html": ("text/html",),
    ".css": ("text/css",),
    ".js": ("text/javascript", "application/javascript"),
}


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
