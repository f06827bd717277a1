"""Security of a real quorum: bearer tokens on the HTTP API, the Raft secret, TLS.

Each test starts its own controller processes on loopback; the attack tests show the attack works first (on an
unprotected node, or through plain pickle in the test's own process), so they cannot pass by accident.
"""

from __future__ import annotations

import datetime
import ipaddress
import pickle
import socket
import struct
import zlib
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from deploy.launcher import LocalQuorum
from kfed.cli import main as kfed
from metadata_client.access import Access, write_secret
from metadata_client.client import ControllerClient
from metadata_client.follower import FollowerError, LogFollower
from metadata_log.errors import Forbidden, Unauthorized
from sdk import FederatedProducer

CLUSTER = {"cluster_id": "c1", "region": "r1", "bootstrap_servers": "127.0.0.1:19092"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalQuorum, str]:
    """A secured quorum (admin token, Raft secret) that also requires a read token; (quorum, read token)."""
    data = tmp_path_factory.mktemp("guarded")
    read_token = write_secret(data / "read.token")
    with LocalQuorum(data, extra_args=["--read-token-file", str(data / "read.token")]) as q:
        q.wait_ready()
        yield q, read_token


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_writes_need_the_admin_token_and_reads_the_read_token(guarded: tuple[LocalQuorum, str]) -> None:
    q, read_token = guarded
    url = q.url(q.leader())
    with httpx.Client(timeout=10) as anonymous:
        refused = anonymous.post(url + "/v1/clusters", json=CLUSTER)
        assert refused.status_code == 401
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert anonymous.post(url + "/v1/clusters", json=CLUSTER, headers=bearer("x" * 32)).status_code == 401
        forbidden = anonymous.post(url + "/v1/clusters", json=CLUSTER, headers=bearer(read_token))
        assert forbidden.status_code == 403
        assert "read token" in forbidden.json()["detail"]
        admin = bearer(q.admin_token or "")
        assert anonymous.post(url + "/v1/clusters", json=CLUSTER, headers=admin).status_code == 201

        assert anonymous.get(url + "/v1/metadata").status_code == 401
        assert anonymous.get(url + "/v1/metadata", headers=bearer(read_token)).status_code == 200
        assert anonymous.get(url + "/v1/metadata", headers=admin).status_code == 200
        for open_path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/ui/"):
            assert anonymous.get(url + open_path).status_code == 200, open_path
        # consumer-group calls are reads: a consumer needs no admin rights
        join = {"topics": [], "owned": []}
        assert anonymous.post(url + "/v1/groups/g/heartbeat", json=join).status_code == 401
        assert anonymous.post(url + "/v1/groups/g/heartbeat", json=join, headers=bearer(read_token)).status_code == 200


def test_a_follower_checks_the_token_before_forwarding(guarded: tuple[LocalQuorum, str]) -> None:
    q, _ = guarded
    follower = next(v.id for v in q.voters if v.id != q.leader())
    body = {**CLUSTER, "cluster_id": "c2"}
    with httpx.Client(timeout=10) as anonymous:
        assert anonymous.post(q.url(follower) + "/v1/clusters", json=body).status_code == 401
    with ControllerClient([q.url(follower)], access=q.access) as admin:
        assert admin.post("/v1/clusters", body)["cluster_id"] == "c2"
    with ControllerClient([q.url(follower)], access=Access("y" * 32)) as stranger, pytest.raises(Unauthorized):
        stranger.post("/v1/clusters", body)


def test_the_openapi_schema_declares_the_bearer_scheme(guarded: tuple[LocalQuorum, str]) -> None:
    q, _ = guarded
    schema = httpx.get(q.url(1) + "/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert schema["paths"]["/v1/clusters"]["post"]["security"] == [{"bearer": []}]
    assert "security" not in schema["paths"]["/healthz"]["get"]


def test_clients_take_their_token_from_a_file(
    guarded: tuple[LocalQuorum, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    q, read_token = guarded
    monkeypatch.chdir(tmp_path)  # no var/local/admin.token here: nothing is picked up by default
    monkeypatch.delenv("KFED_TOKEN_FILE", raising=False)
    urls = ",".join(q.urls)
    create = ["topic", "create", "T", "--region", "r1", "--partitions-per-cluster", "1", "--controller", urls]
    assert kfed(create) == 1
    assert "Bearer" in capsys.readouterr().err
    assert kfed([*create, *q.token_args]) == 0
    monkeypatch.setenv("KFED_TOKEN_FILE", str(q.token_file))
    assert kfed(["topic", "status", "T", "--controller", urls]) == 0
    assert kfed(["topic", "status", "T", "--controller", urls, "--token-file", str(tmp_path / "missing")]) == 2

    (tmp_path / "read.token").write_text(read_token)
    with FederatedProducer({"kfed.controllers": urls, "kfed.token.file": str(tmp_path / "read.token")}) as p:
        assert p.metadata_offset >= 0  # followed the log with the read token
    with pytest.raises(FollowerError, match="401"), LogFollower(q.urls) as anonymous:
        anonymous.poll(0)
    with ControllerClient(q.urls, access=Access(read_token)) as reader, pytest.raises(Forbidden):
        reader.delete("/v1/topics/T")


def test_a_weak_or_missing_token_file_stops_the_node(tmp_path: Path) -> None:
    (tmp_path / "weak.token").write_text("short\n")
    q = LocalQuorum(tmp_path, size=1, secure=False, extra_args=["--admin-token-file", str(tmp_path / "weak.token")])
    q.start()
    try:
        assert q.procs[1].wait(30) == 2
    finally:
        q.stop()
    assert "at least 16 characters" in (tmp_path / "node-1.log").read_text()


# -- Raft traffic ------------------------------------------------------------------------------------
class _Touch:
    """Unpickling this creates ``path``: proof that a node ran code sent by a stranger."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.path), "w")


def _inject(raft_address: str, payload: object) -> socket.socket:
    """Send one pysyncobj frame (length, zlib(pickle)) to a Raft port, as a stranger would; the open connection."""
    host, port = raft_address.rsplit(":", 1)
    data = zlib.compress(pickle.dumps(payload), 3)
    s = socket.create_connection((host, int(port)), timeout=5)
    s.sendall(struct.pack("i", len(data)) + data)
    return s


@pytest.mark.parametrize("secure", [False, True], ids=["plain", "secret"])
def test_a_stranger_on_the_raft_port_cannot_inject(tmp_path: Path, secure: bool) -> None:
    marker = tmp_path / "injected"
    pickle.loads(pickle.dumps(_Touch(marker)))  # the attack is real: plain pickle runs it
    assert marker.exists()
    marker.unlink()
    with LocalQuorum(tmp_path / "q", secure=secure) as q:
        q.wait_ready()
        leader = q.leader()
        with _inject(q.voters[leader - 1].raft, _Touch(marker)) as stranger:
            # The negative check waits as long as a positive control may (10 s), and ends on proof that the
            # frame was handled: the node read it, refused it (no secret: the restricted unpickler; with the
            # secret: it cannot be authenticated), and dropped the connection.
            stranger.settimeout(10)
            assert stranger.recv(1) == b"", "the node neither refused nor ran the frame within 10 s"
        assert not marker.exists(), "a node ran a stranger's pickle"
        assert q.leader() == leader, "the injection disturbed the quorum"
        with q.controller_client() as admin:
            assert admin.post("/v1/clusters", CLUSTER)["cluster_id"] == "c1"


def test_raft_utility_commands_need_the_secret(tmp_path: Path) -> None:
    from pysyncobj.utility import TcpUtility, UtilityException

    with LocalQuorum(tmp_path) as q:
        q.wait_ready()
        address = q.voters[0].raft
        with pytest.raises(UtilityException):
            TcpUtility(timeout=3).executeCommand(address, ["status"])
        with pytest.raises(UtilityException):
            TcpUtility(password="z" * 32, timeout=3).executeCommand(address, ["status"])
        assert q.raft_secret_file is not None
        secret = q.raft_secret_file.read_text().strip()
        status = TcpUtility(password=secret, timeout=5).executeCommand(address, ["status"])
        assert status["self"] is not None


# -- TLS ---------------------------------------------------------------------------------------------
def _certificates(where: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it: (cert, key, ca) PEM files."""
    now = datetime.datetime.now(datetime.UTC)

    Key = ec.EllipticCurvePrivateKey

    def build(subject: str, issuer: x509.Name | None, key: Key, signer: Key, ca: bool) -> x509.Certificate:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            builder = builder.add_extension(san, critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = build("kfed test CA", None, ca_key, ca_key, ca=True)
    cert = build("127.0.0.1", ca_cert.subject, key, ca_key, ca=False)
    paths = where / "node.pem", where / "node.key", where / "ca.pem"
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    paths[2].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return paths


def test_the_api_over_tls_is_verified_by_every_client(tmp_path: Path) -> None:
    tls = _certificates(tmp_path)
    with LocalQuorum(tmp_path / "q", tls=tls) as q:
        q.wait_ready()
        assert all(u.startswith("https://") for u in q.urls)
        follower = next(v.id for v in q.voters if v.id != q.leader())
        # a write to a follower is forwarded to the leader over verified HTTPS
        with ControllerClient([q.url(follower)], access=q.access) as admin:
            assert admin.post("/v1/clusters", CLUSTER)["cluster_id"] == "c1"
        quorum = q.client.get(q.url(follower) + "/v1/quorum").json()
        assert sorted(v["role"] for v in quorum["voters"]) == ["follower", "follower", "leader"]
        with LogFollower(q.urls, access=Access(ca_file=str(tls[2]))) as tailer:
            tailer.poll(0)
            assert "c1" in tailer.image.clusters
        with FederatedProducer({"kfed.controllers": ",".join(q.urls), "kfed.ssl.ca.location": str(tls[2])}):
            pass
        with pytest.raises(FollowerError, match="CERTIFICATE_VERIFY_FAILED"), LogFollower(q.urls) as untrusting:
            untrusting.poll(0)
        with pytest.raises(httpx.HTTPError):
            httpx.get(q.url(1).replace("https://", "http://") + "/healthz", timeout=3)
