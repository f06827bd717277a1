"""The configuration the federated clients share: confluent-kafka's, with controllers instead of brokers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from metadata_client.access import Access
from metadata_client.retry import controller_urls

KFED_KEYS_HELP = """\
kfed.controllers       controller URLs, comma-separated or a list (required)
kfed.token.file        file holding the token sent to the controllers (a read token is enough)
kfed.token             the token itself (instead of kfed.token.file)
kfed.ssl.ca.location   CA bundle that verifies the controllers' HTTPS certificates (default: the system's)
kfed.topics            logical topics whose metadata to hold from the start, comma-separated or a list
                       (default: none; a topic is added when first produced to or subscribed, which loads
                       its snapshot); "*" holds the whole federation's
"""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    controllers: list[str]
    access: Access
    kafka: dict[str, Any]  # passed through to the confluent-kafka clients
    topics: frozenset[str] | None = frozenset()  # the metadata followed (``LogFollower``'s); None: all of it


def split_config(config: Mapping[str, Any]) -> ClientConfig:
    """The ``kfed.*`` keys (see ``KFED_KEYS_HELP``) and the rest. ``bootstrap.servers`` is refused because
    each physical cluster's comes from the metadata."""
    rest = dict(config)
    controllers = rest.pop("kfed.controllers", None)
    if not controllers:
        raise ValueError("config needs 'kfed.controllers': the controller URLs (comma-separated or a list)")
    if "bootstrap.servers" in rest:
        raise ValueError("do not set 'bootstrap.servers': each physical cluster's comes from the metadata")
    token, token_file = rest.pop("kfed.token", None), rest.pop("kfed.token.file", None)
    ca_file = rest.pop("kfed.ssl.ca.location", None)
    if token and token_file:
        raise ValueError("set 'kfed.token' or 'kfed.token.file', not both")
    access = Access.from_files(token_file, ca_file)  # AccessError, a ValueError like the checks above
    if token:
        access = Access(str(token), access.ca_file)
    return ClientConfig(controller_urls(controllers), access, rest, _topics(rest.pop("kfed.topics", ())))


def _topics(value: Any) -> frozenset[str] | None:
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, list | tuple | set | frozenset) or not all(isinstance(n, str) for n in names):
        raise ValueError("'kfed.topics' is a comma-separated string or a list of topic names")
    names = {n.strip() for n in names if n.strip()}
    return None if "*" in names else frozenset(names)


def ms_setting(config: dict[str, Any], key: str, default: int, *, keep: bool = False, minimum: int = 0) -> int:
    """The integer setting ``key`` (milliseconds or a count) of ``config``, popped unless ``keep``; a
    ``ValueError`` naming the key when it is not an integer >= ``minimum`` (in the constructor, as
    confluent-kafka checks its own settings)."""
    value = config.get(key, default) if keep else config.pop(key, default)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"invalid value {value!r} for configuration property {key!r}: an integer is needed") from None
    if number < minimum or isinstance(value, bool):
        raise ValueError(f"invalid value {value!r} for configuration property {key!r}: must be >= {minimum}")
    return number


def check_kafka_settings(client: Callable[[dict[str, Any]], Any], config: Mapping[str, Any]) -> None:
    """Make (and drop) one confluent-kafka ``client`` with ``config`` so that librdkafka checks every
    setting now, as confluent-kafka's constructors do: an invalid one raises its ``KafkaException``
    (``_INVALID_ARG``, naming the property). No broker is contacted (no ``bootstrap.servers``); logging is
    off for the probe, which would only warn about that."""
    probe = client({**config, "log_level": 0})
    del probe
