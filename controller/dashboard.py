"""The live dashboard at ``/ui``: static files (``controller/ui/``) fed only by the public HTTP API."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from fastapi import FastAPI
from starlette.responses import RedirectResponse
from starlette.staticfiles import StaticFiles

UI_DIR: Final = Path(__file__).parent / "ui"


def mount(app: FastAPI) -> None:
    @app.get("/ui", include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    app.mount("/ui/", StaticFiles(directory=UI_DIR, html=True), name="ui")
