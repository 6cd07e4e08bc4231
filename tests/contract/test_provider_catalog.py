"""The provider catalogue: what each provider can change, the same as its adapter says;
each descriptor's parts agree with each other, the built-ins are registered through the
entry point group too, and the optional features are capabilities the adapters have."""

from __future__ import annotations

import tomllib
from importlib import import_module
from pathlib import Path
from typing import get_args

import pytest

from bot.providers.base import (
    ProviderAdapter,
    SupportsProbe,
    SupportsRemediations,
    SupportsReservations,
)
from bot.providers.descriptor import ProviderDescriptor
from bot.providers.e2e import ACTIONS, E2EAdapter, E2EClient, build_e2e_transport
from bot.providers.http import ClientSettings
from bot.providers.installed import BUILT_IN, ENTRY_POINT_GROUP, load_catalog
from bot.providers.together import (
    UPDATE_FIELDS,
    TogetherAdapter,
    TogetherClient,
    build_together_transport,
)
from tests.support.catalog import CATALOG, project_model

# No call is made: the base URLs are never contacted.
_UNUSED = "http://127.0.0.1:9/x"


def _adapters() -> dict[str, ProviderAdapter]:
    together = TogetherAdapter(
        TogetherClient(build_together_transport("unused", _UNUSED, ClientSettings())), "p1"
    )
    e2e = E2EAdapter(E2EClient(build_e2e_transport("unused", "unused", _UNUSED), 1, "Delhi"), "p2")
    return {"together": together, "e2e": e2e}


def test_the_catalogue_says_what_each_adapter_does() -> None:
    adapters = _adapters()
    assert set(CATALOG.provider_changes()) == set(adapters) == {"together", "e2e"}
    for provider, changes in CATALOG.provider_changes().items():
        adapter = adapters[provider]
        assert changes.provider == adapter.provider == provider
        assert list(changes.actions) == adapter.actions()
        for action in changes.actions:
            # the same fields; a hint may carry an example computed from now (a time)
            said = [s.model_copy(update={"hint": ""}) for s in changes.fields[action]]
            done = [s.model_copy(update={"hint": ""}) for s in adapter.fields_for(action)]
            assert said == done


def test_command_words_titles_and_field_names() -> None:
    together, e2e = CATALOG.provider_changes()["together"], CATALOG.provider_changes()["e2e"]
    assert (together.title, together.command) == ("Together", "update")
    assert (e2e.title, e2e.command) == ("E2E", "action")
    assert tuple(together.field_names()) == UPDATE_FIELDS
    assert e2e.actions == ACTIONS
    assert e2e.field_names() == [
        "ssh_key_ids",
        "image_version_id",
        "additional_nodes",
        "reserved_ip_id",
        "security_group_id",
        "security_groups_ids",
    ]


@pytest.mark.parametrize("descriptor", BUILT_IN, ids=lambda d: d.name)
def test_each_descriptor_agrees_with_itself(descriptor: ProviderDescriptor) -> None:
    assert descriptor.changes.provider == descriptor.name
    assert descriptor.approval_by_default <= set(descriptor.kinds)
    assert all(status == status.lower() for status in descriptor.healthy_statuses)
    model = project_model(descriptor.name)
    assert issubclass(model, descriptor.section)
    kinds = get_args(get_args(model.model_fields["require_approval"].annotation)[0])[0]
    assert get_args(kinds) == descriptor.kinds  # require_approval takes its kinds alone
    assert ("prices" in model.model_fields) == descriptor.price_table


def test_the_built_ins_are_registered_through_the_entry_point_group_too() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    group = pyproject["project"]["entry-points"][ENTRY_POINT_GROUP]
    loaded = {}
    for name, value in group.items():
        module, attribute = value.split(":")
        loaded[name] = getattr(import_module(module), attribute)
    assert loaded == {d.name: d for d in BUILT_IN}
    assert load_catalog().descriptors[: len(BUILT_IN)] == BUILT_IN


def test_remediations_and_reservations_are_capabilities_of_the_together_adapter() -> None:
    adapters = _adapters()
    assert isinstance(adapters["together"], SupportsRemediations)
    assert isinstance(adapters["together"], SupportsReservations)
    assert not isinstance(adapters["e2e"], SupportsRemediations)
    assert not isinstance(adapters["e2e"], SupportsReservations)


def _capabilities(adapter: ProviderAdapter) -> set[str]:
    """The optional features an adapter really has."""
    has = {
        "remediations": isinstance(adapter, SupportsRemediations),
        "reservations": isinstance(adapter, SupportsReservations),
        "probe": isinstance(adapter, SupportsProbe),
    }
    return {name for name, present in has.items() if present}


@pytest.mark.parametrize("descriptor", BUILT_IN, ids=lambda d: d.name)
def test_each_descriptor_declares_the_capabilities_its_adapter_has(
    descriptor: ProviderDescriptor,
) -> None:
    assert set(descriptor.capabilities) == _capabilities(_adapters()[descriptor.name])
