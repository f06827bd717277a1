"""Consumer groups (placeholder until the classic group protocol lands)."""

from __future__ import annotations

from typing import Any


class GroupBridge:
    def __init__(self, gateway: Any) -> None:
        self.gateway = gateway

    async def stop(self) -> None:
        pass


def handlers() -> dict[int, Any]:
    return {}
