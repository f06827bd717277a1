"""The configuration the federated clients share: confluent-kafka's, with controllers instead of brokers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metadata_log.client import controller_urls


def split_config(config: Mapping[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """(controller URLs, the rest): ``kfed.controllers`` is required; ``bootstrap.servers`` is refused
    because each physical cluster's comes from the metadata."""
    rest = dict(config)
    controllers = rest.pop("kfed.controllers", None)
    if not controllers:
        raise ValueError("config needs 'kfed.controllers': the controller URLs (comma-separated or a list)")
    if "bootstrap.servers" in rest:
        raise ValueError("do not set 'bootstrap.servers': each physical cluster's comes from the metadata")
    return controller_urls(controllers), rest
