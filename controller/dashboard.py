"""The live dashboard at ``/ui``: static files (``controller/ui/``) fed only by the public HTTP API."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from fastapi import FastAPI
from starlette.responses import RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

UI_DIR: Final = Path(__file__).parent / "ui"


class _Revalidated(StaticFiles):
    """Static files a browser revalidates (ETag, a cheap 304) before each use: after a node is upgraded,
    a page never runs a mix of old and new modules from its heuristic cache."""

    def file_response(
        self, full_path: str | os.PathLike[str], stat_result: os.stat_result, scope: Scope, status_code: int = 200
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "no-cache"
        return response


def mount(app: FastAPI) -> None:
    @app.get("/ui", include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    app.mount("/ui/", _Revalidated(directory=UI_DIR, html=True), name="ui")
