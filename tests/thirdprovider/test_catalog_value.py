"""The catalog is a value: a provider registered after every gpuops module was imported is
accepted by the policy, the grammar and the forms once the catalog they are handed
includes it, and refused by those handed the built-ins alone (nothing froze it at import);
what is said of it and what it can do are its descriptor's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core.access import Access
from bot.core.ask.forms import FormRequest, Forms
from bot.core.ask.grammar import ChangeCommand, UsageError, parse_command
from bot.core.ask.reading import Reader
from bot.core.ask.usage import usage
from bot.core.authorizer import Authorizer
from bot.core.policy import PolicyError, PolicyHolder, load_policy
from bot.core.registry import AdapterRegistry
from bot.core.store import Store
from bot.core.watch.health import EventKind, HealthEvent
from bot.providers.base import (
    ClusterSummary,
    SupportsProbe,
    SupportsRemediations,
    SupportsReservations,
)
from bot.providers.catalog import Catalog
from bot.providers.http import ClientSettings
from bot.providers.installed import BUILT_IN, built_in_catalog
from bot.slack.render.watch import incident_open
from tests.support.core_harness import StaticGroups
from tests.thirdprovider.adapter import LumenAdapter
from tests.thirdprovider.client import LumenClient, build_lumen_transport
from tests.thirdprovider.descriptor import DESCRIPTOR

POLICY = """\
projects:
  lumen-lab:
    provider: lumen
    region: north
    require_approval: [shrink]
grants:
  - users: [U04DAVE]
    projects: [lumen-lab]
    role: operator
"""


@pytest.fixture
def with_lumen() -> Catalog:
    """A catalog made now, long after import, of the built-ins and Lumen."""
    return Catalog.of([*BUILT_IN, DESCRIPTOR])


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(POLICY, encoding="utf-8")
    return path


def test_load_policy_takes_a_lumen_project_when_the_catalog_has_lumen(
    with_lumen: Catalog, policy_file: Path
) -> None:
    policy = load_policy(policy_file, with_lumen)
    project = policy.project("lumen-lab")
    assert project.provider == "lumen" and project.descriptor is DESCRIPTOR
    assert policy.catalog is with_lumen
    assert policy.requires_approval("lumen-lab", ["shrink"])
    assert not policy.requires_approval("lumen-lab", ["grow"])


def test_load_policy_refuses_lumen_with_the_built_ins_alone(policy_file: Path) -> None:
    with pytest.raises(PolicyError, match="unknown provider 'lumen'; use together or e2e"):
        load_policy(policy_file, built_in_catalog())


def test_the_grammar_reads_lumens_verb_when_the_catalog_has_lumen(with_lumen: Catalog) -> None:
    command = parse_command("resize lumen-lab lc-1 gpus=16", with_lumen)
    assert command == ChangeCommand(
        name="resize",
        project="lumen-lab",
        cluster_id="lc-1",
        action="resize",
        fields={"gpus": "16"},
    )
    assert usage(with_lumen)["resize"].startswith("/gpu resize <project> <cluster_id>")
    assert list(usage(with_lumen))[:6] == ["help", "list", "show", "update", "action", "resize"]
    with pytest.raises(UsageError, match="unknown command `resize`"):
        parse_command("resize lumen-lab lc-1 gpus=16", built_in_catalog())
    assert "resize" not in usage(built_in_catalog())


async def test_the_forms_open_lumens_form_when_the_catalog_has_lumen(
    with_lumen: Catalog, policy_file: Path, tmp_path: Path
) -> None:
    holder = PolicyHolder(load_policy(policy_file, with_lumen))
    registry = AdapterRegistry(
        holder,
        env={"LUMEN_TOKEN": "unused"},  # no call is made
        base_urls={"lumen": "http://127.0.0.1:9/v2"},
        client_settings=ClientSettings(),
    )
    store = await Store.open(f"sqlite:///{tmp_path / 'gpuops.db'}")
    try:
        access = Access(
            authorizer=Authorizer(holder, StaticGroups({})), store=store, adapter_for=registry
        )
        forms = Forms(access)
        assert access.catalog is with_lumen
        wanted = Reader(forms).read("C0GPUAUDIT", "resize lumen-lab lc-1").form
        assert wanted == FormRequest(
            kind="single", project="lumen-lab", cluster_id="lc-1", channel="C0GPUAUDIT"
        )
        assert [spec.name for spec in forms.fields_of("lumen-lab", "resize")] == ["gpus"]
        assert forms.unknown_fields("lumen-lab", "resize", {"gpu": "8"}) == {
            "gpu": "not a field of resize — did you mean gpus? (fields: gpus)"
        }
    finally:
        await store.close()
        await registry.aclose()


async def test_the_words_and_capabilities_of_lumen_are_its_descriptors() -> None:
    summary = ClusterSummary(
        provider="lumen",
        project="lumen-lab",
        cluster_id="lc-1",
        name="lab",
        status="degraded",
        steady=True,
    )
    event = HealthEvent(EventKind.OPENED, "lc-1", 1, "degraded", "active", summary)
    message = incident_open("lumen-lab", event, DESCRIPTOR)
    labels = [
        element["text"]["text"]
        for block in message.blocks
        if block["type"] == "actions"
        for element in block["elements"]
    ]
    assert labels == ["Resize cluster…"]
    assert DESCRIPTOR.capabilities == frozenset()  # and its adapter has none of them:
    transport = build_lumen_transport("unused", "http://127.0.0.1:9/v2", ClientSettings())
    lumen = LumenAdapter(LumenClient(transport, "north"), "lumen-lab")
    try:
        assert not isinstance(lumen, SupportsRemediations | SupportsReservations | SupportsProbe)
    finally:
        await lumen.aclose()
