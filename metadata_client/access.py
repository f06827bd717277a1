"""How a client reaches the controllers: the bearer token it sends and the CA bundle it verifies TLS with.

Agents, the SDK, Spark jobs and the ``kfed`` CLI all build their HTTP clients through ``Access``, so a
quorum that requires a token or serves HTTPS only needs the two settings here. Commands that call the
controllers (``kfed cluster / topic / quorum``, the Spark jobs) take them as the same two flags
(``add_access_arguments``, ``access_from``).
"""

from __future__ import annotations

import argparse
import functools
import os
import secrets
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httpx

from metadata_log.errors import InvalidSetting

MIN_SECRET_CHARS: Final = 16
LOCAL_TOKEN_FILE: Final = Path("var/local/admin.token")  # what `kfed local up` generates (its default data dir)


CA_FILE: Final = "CA file"


class AccessError(InvalidSetting, ValueError):
    """A token, secret or CA file that cannot be used. ``what``: which setting (the flag, ``CA_FILE``,
    ``"token file"``), ``path``: the file; the message names both."""

    def __init__(self, what: str, path: str | Path, problem: str) -> None:
        super().__init__(f"{what} {path}: {problem}")
        self.what, self.path = what, str(path)


def read_secret(path: str | Path, what: str) -> str:
    """A token or shared secret from a file (surrounding whitespace stripped; at least 16 characters)."""
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise AccessError(what, path, "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise AccessError(what, path, f"cannot be read: {e}") from None
    if len(text) < MIN_SECRET_CHARS or any(c.isspace() for c in text):
        raise AccessError(what, path, f"must hold one token of at least {MIN_SECRET_CHARS} characters, no spaces")
    return text


def write_secret(path: Path) -> str:
    """Create ``path`` with a fresh random token readable by its owner only, or keep the one it holds."""
    if path.exists():
        return read_secret(path, "token file")
    token = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(token + "\n", encoding="utf-8")
    return token


@dataclass(frozen=True, slots=True)
class Access:
    """``token``: sent as ``Authorization: Bearer``; ``ca_file``: CA bundle for HTTPS (None: the system's);
    ``token_file``: where the token was read from, if it was (to hand on to other processes)."""

    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    token_file: str | None = None

    @classmethod
    def from_files(cls, token_file: str | Path | None = None, ca_file: str | Path | None = None) -> Access:
        token = read_secret(token_file, "token file") if token_file else None
        if ca_file and not Path(ca_file).is_file():
            raise AccessError(CA_FILE, ca_file, "no such file")
        return cls(token, str(ca_file) if ca_file else None, str(token_file) if token_file else None)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def verify(self) -> ssl.SSLContext | bool:
        """The ``ca_file`` context, or True (the HTTP library's default verification)."""
        return True if self.ca_file is None else tls_context(self.ca_file)

    def http_client(self, timeout: httpx.Timeout | float) -> httpx.Client:
        return httpx.Client(timeout=timeout, headers=self.headers, verify=tls_context(self.ca_file))

    def async_http_client(self, timeout: httpx.Timeout | float, limits: httpx.Limits) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=timeout, headers=self.headers, verify=tls_context(self.ca_file), limits=limits)


@functools.cache
def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The context that verifies servers with ``ca_file`` (None: httpx's default, certifi's bundle or
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built once per process and shared by every client.

    Building one parses the whole CA bundle, tens of milliseconds paid by every ``httpx.Client`` left
    to make its own, even for plain-HTTP URLs. A Spark query's planner, each ``kfed`` command and every
    follower start made one. Shared by clients on any thread: they only wrap sockets with it (and set the
    same ALPN protocols on it). Read once: a CA file rewritten in place, or ``SSL_CERT_FILE`` changed, takes
    effect when the process restarts."""
    if ca_file is None:
        return httpx.create_ssl_context()
    try:
        return ssl.create_default_context(cafile=ca_file)
    except (OSError, ssl.SSLError) as e:
        raise AccessError(CA_FILE, ca_file, f"not a PEM certificate bundle: {e}") from None


NO_ACCESS: Final = Access()


# -- the flags of every command that calls the controllers (kfed's operator commands, the Spark jobs) --
def add_access_arguments(parser: argparse.ArgumentParser) -> None:
    """``--token-file`` and ``--tls-ca``, for every command that calls the controllers."""
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"file with the token sent to the controllers (default: $KFED_TOKEN_FILE, else {LOCAL_TOKEN_FILE} "
        "when it exists, i.e. the local federation's admin token)",
    )
    parser.add_argument(
        "--tls-ca", type=Path, default=None, help="CA bundle to verify the controllers' HTTPS certificates"
    )


def access_from(args: argparse.Namespace) -> Access:
    """The ``Access`` of ``add_access_arguments``' flags, with their defaults resolved."""
    token_file = args.token_file or os.environ.get("KFED_TOKEN_FILE")
    if token_file is None and LOCAL_TOKEN_FILE.is_file():
        token_file = LOCAL_TOKEN_FILE
    return Access.from_files(token_file, args.tls_ca)
