"""The Dockerfile and deploy/kubernetes/ say what SPEC §12 asks (the schemas themselves are
checked by `make lint`: hadolint and kubernetes-validate; the image is built and run by
`make image-check`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from bot.core.policy import Approvals, Policy
from tests.support.catalog import load_policy

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"


def resources() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(KUBERNETES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            found[document["kind"]] = document
    return found


def container() -> dict[str, Any]:
    deployment = resources()["Deployment"]
    only: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return only


def test_two_replicas_on_postgresql_with_the_secret_and_the_policy_file() -> None:
    found = resources()
    deployment, secret = found["Deployment"], found["Secret"]
    assert deployment["spec"]["replicas"] == 2
    assert secret["stringData"]["GPUOPS_DATABASE_URL"].startswith("postgresql://")
    assert {"SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"} <= set(secret["stringData"])
    gpuops = container()
    assert gpuops["envFrom"] == [{"secretRef": {"name": secret["metadata"]["name"]}}]
    env = {item["name"]: item.get("value") for item in gpuops["env"]}
    assert env["GPUOPS_POLICY"] == "/etc/gpuops/policy.yml"
    mount = next(m for m in gpuops["volumeMounts"] if m["name"] == "policy")
    assert mount["mountPath"] == "/etc/gpuops" and "subPath" not in mount  # edits reach pods


def test_the_policy_in_the_config_map_is_valid(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yml"
    policy.write_text(resources()["ConfigMap"]["data"]["policy.yml"])
    assert load_policy(policy).projects


def test_the_config_maps_policy_is_current_with_every_guardrail(tmp_path: Path) -> None:
    """Issue 33 item 12: the ConfigMap held a policy from before the guardrails; it has every
    section the policy model knows, each approvals key, limits and prices, read by the
    product's loader."""
    text = resources()["ConfigMap"]["data"]["policy.yml"]
    path = tmp_path / "policy.yml"
    path.write_text(text)
    policy = load_policy(path)
    raw = yaml.safe_load(text)
    assert set(raw) == set(Policy.model_fields)
    assert set(raw["approvals"]) == set(Approvals.model_fields)
    assert policy.approvals.rules and policy.freezes
    assert all(project.limits is not None for project in policy.projects.values())
    assert any(project.price_table is not None for project in policy.projects.values())


def test_probes_metrics_resources_and_disruption_budget() -> None:
    found = resources()
    gpuops = container()
    for probe in ("readinessProbe", "livenessProbe"):
        assert gpuops[probe]["httpGet"]["path"] == "/healthz"
    annotations = found["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert gpuops["resources"]["requests"].keys() == {"cpu", "memory"}
    assert found["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    pod = found["Deployment"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def test_the_dockerfile_is_multi_stage_non_root_and_serves_by_default() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    assert lines.count("FROM ${BASE_IMAGE}") == 1 and "FROM ${BASE_IMAGE} AS build" in lines
    assert any(line.startswith("ARG BASE_IMAGE=") for line in lines)
    assert "USER 10001:10001" in lines
    assert any(line.startswith("HEALTHCHECK") for line in lines)
    assert 'ENTRYPOINT ["gpuops"]' in lines and 'CMD ["serve"]' in lines
    assert "GPUOPS_POLICY=/etc/gpuops/policy.yml \\" in lines


def test_the_lock_matches_pyproject_and_every_install_is_of_it(tmp_path: Path) -> None:
    """Issue 33 item 13: uv.lock is in step with pyproject.toml (checked offline, with an
    empty cache: the lock alone says it), and make and the image install exactly it."""
    uv = Path(sys.prefix) / "bin" / "uv"  # make installs it into the venv
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_NO_CONFIG": "1"}
    done = subprocess.run(  # noqa: S603 - uv of this venv
        [str(uv), "lock", "--check", "--offline"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY pyproject.toml uv.lock ./" in dockerfile
    assert "!uv.lock" in (ROOT / ".dockerignore").read_text().splitlines()  # in the context
    assert "uv export --frozen" in dockerfile and "--require-hashes --no-deps" in dockerfile
    makefile = (ROOT / "Makefile").read_text()
    assert "sync --quiet --frozen" in makefile and "lock --check --offline" in makefile
