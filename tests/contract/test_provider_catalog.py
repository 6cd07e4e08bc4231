"""The provider catalogue: what each provider can change, the same as its adapter says."""

from __future__ import annotations

from bot.providers.base import ProviderAdapter
from bot.providers.catalog import provider_changes
from bot.providers.e2e import ACTIONS, E2EAdapter, E2EClient, build_e2e_transport
from bot.providers.http import ClientSettings
from bot.providers.together import (
    UPDATE_FIELDS,
    TogetherAdapter,
    TogetherClient,
    build_together_transport,
)

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
    assert set(provider_changes()) == set(adapters) == {"together", "e2e"}
    for provider, changes in provider_changes().items():
        adapter = adapters[provider]
        assert changes.provider == adapter.provider == provider
        assert list(changes.actions) == adapter.actions()
        for action in changes.actions:
            # the same fields; a hint may carry an example computed from now (a time)
            said = [s.model_copy(update={"hint": ""}) for s in changes.fields[action]]
            done = [s.model_copy(update={"hint": ""}) for s in adapter.fields_for(action)]
            assert said == done


def test_command_words_titles_and_field_names() -> None:
    together, e2e = provider_changes()["together"], provider_changes()["e2e"]
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
