"""The deployment files cannot rot: every kfed command line in them is accepted by the real CLI parser,
every controller in them starts secure (both secret files, no --insecure), and the quorum configs they
ship parse and name the node ids the commands use."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from controller.config import parse_quorum
from kfed.cli import build_parser
from kfed.controller import missing_secrets

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def parse_kfed(argv: list[str]) -> object:
    """Parse like the real ``kfed`` would; a rejected command line fails the test with argparse's message."""
    try:
        return build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"kfed rejects {shlex.join(argv)} (exit {e.code})")


def assert_secure(args: object) -> None:
    """A controller command line that ``kfed controller`` starts without --insecure."""
    assert missing_secrets(args) == []  # type: ignore[arg-type]
    assert not args.insecure  # type: ignore[attr-defined]


def env_file(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    return {k: v for k, v in pairs}


@pytest.mark.parametrize(
    "unit, instance, env",
    [
        ("kfed-controller@.service", "1", {}),
        ("kfed-agent@.service", "c1", env_file(DEPLOY / "systemd" / "agent-c1.env.example")),
    ],
)
def test_systemd_units_run_commands_kfed_accepts(unit: str, instance: str, env: dict[str, str]) -> None:
    text = (DEPLOY / "systemd" / unit).read_text()
    (exec_start,) = re.findall(r"^ExecStart=(.+)$", text, flags=re.M)
    line = exec_start.replace("%i", instance)
    line = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], line)
    binary, *argv = shlex.split(line)
    assert binary.endswith("/kfed")
    args = parse_kfed(argv)
    if args.command == "controller":  # type: ignore[attr-defined]
        assert_secure(args)
        quorum = parse_quorum(tomllib.loads((DEPLOY / "systemd" / "quorum.toml.example").read_text()))
        quorum.voter(args.node_id)  # type: ignore[attr-defined]


def k8s_containers() -> list[tuple[dict, dict]]:
    out = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") in ("StatefulSet", "Deployment"):
                for container in doc["spec"]["template"]["spec"]["containers"]:
                    out.append((doc, container))
    return out


def test_every_kubernetes_workload_runs_a_command_kfed_accepts() -> None:
    containers = k8s_containers()
    assert {doc["kind"] for doc, _ in containers} == {"StatefulSet", "Deployment"}
    configmaps = {
        doc["metadata"]["name"]: doc["data"]
        for path in (DEPLOY / "k8s").glob("*.yaml")
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc.get("kind") == "ConfigMap"
    }
    quorum = parse_quorum(tomllib.loads(configmaps["kfed-quorum"]["quorum.toml"]))
    for doc, container in containers:
        assert container["command"] == ["kfed"]
        env = {e["name"]: e for e in container.get("env", [])}
        # $(VAR) is expanded by Kubernetes; NODE_ID is the pod index: try every replica's value
        replicas = doc["spec"].get("replicas", 1)
        for index in range(replicas):
            values = {name: str(index) for name in env}
            argv = [re.sub(r"\$\((\w+)\)", lambda m, v=values: v[m.group(1)], a) for a in container["args"]]
            args = parse_kfed(argv)
            if args.command == "controller":  # type: ignore[attr-defined]
                assert_secure(args)
                mounts = [m["mountPath"] for m in container["volumeMounts"]]
                for secret in (args.raft_secret_file, args.admin_token_file):  # type: ignore[attr-defined]
                    assert any(secret.is_relative_to(m) for m in mounts), f"{secret} is on no volume"
                quorum.voter(args.node_id)  # type: ignore[attr-defined]
                assert str(args.config).startswith("/etc/kfed/")  # type: ignore[attr-defined]
                probes = {container["readinessProbe"]["httpGet"]["path"], container["livenessProbe"]["httpGet"]["path"]}
                assert probes == {"/readyz", "/healthz"}
    statefulset = next(doc for doc, _ in containers if doc["kind"] == "StatefulSet")
    assert statefulset["spec"]["replicas"] == len(quorum.voters)
    assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"


def test_a_command_line_with_a_typo_would_be_caught() -> None:
    with pytest.raises(pytest.fail.Exception):
        parse_kfed(["agent", "--cluster", "c1"])


def test_kraft_cluster_ids_are_22_url_safe_characters_never_starting_with_a_dash() -> None:
    from deploy.kafka_cluster import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]  # ~1 in 64 would start with "-" without the rule
    assert all(len(i) == 22 and not i.startswith("-") and set(i) <= set(URL_SAFE) for i in ids)


URL_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
