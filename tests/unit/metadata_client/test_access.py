"""How clients reach the controllers: TLS contexts are built once per CA bundle and bad bundles are named."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from metadata_client.access import Access, AccessError, tls_context


def test_every_client_shares_one_tls_context_per_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    create = ssl.create_default_context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        built.append(kwargs)
        return create(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    tls_context.cache_clear()
    try:
        for token in (None, "t" * 16, None):
            with Access(token).http_client(1.0):
                pass
        assert len(built) == 1, "parsing the CA bundle again for each client costs 38-70 ms"
        assert Access().verify() is True  # no CA file: the HTTP library's default verification
    finally:
        tls_context.cache_clear()


def test_a_ca_file_that_is_not_a_pem_bundle_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    access = Access(ca_file=str(bad))
    for make in (access.verify, lambda: access.http_client(1.0)):
        with pytest.raises(AccessError, match=r"ca\.pem: not a PEM certificate bundle"):
            make()
    with pytest.raises(AccessError, match="no such file"):
        Access.from_files(ca_file=tmp_path / "missing.pem")
