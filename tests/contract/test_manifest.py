"""manifest.yml is valid against Slack's manifest JSON Schema and asks for what gpuops uses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.support.openapi_contract import SPECS_DIR

ROOT = Path(__file__).resolve().parents[2]


def _manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "manifest.yml").read_text())
    return loaded


def test_manifest_validates_against_slack_schema() -> None:
    schema = json.loads((SPECS_DIR / "slack-manifest.schema.json").read_text())
    jsonschema.validate(_manifest(), schema)


def test_manifest_declares_command_events_interactivity_and_socket_mode() -> None:
    m = _manifest()
    features = m["features"]
    settings = m["settings"]
    assert isinstance(features, dict) and isinstance(settings, dict)
    assert [c["command"] for c in features["slash_commands"]] == ["/gpu"]
    assert settings["event_subscriptions"]["bot_events"] == ["app_mention", "app_home_opened"]
    assert features["app_home"]["home_tab_enabled"] is True
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["socket_mode_enabled"] is True


# The bot scope each Web API method the bot calls needs, as Slack documents it (None: the
# method needs no scope). A method missing here fails the test below until it is added.
METHOD_SCOPES: dict[str, str | None] = {
    "chat.postMessage": "chat:write",
    "chat.update": "chat:write",
    "chat.postEphemeral": "chat:write",
    "views.open": None,
    "views.update": None,
    "views.publish": None,
    "usergroups.users.list": "usergroups:read",
    "files.getUploadURLExternal": "files:write",
    "files.completeUploadExternal": "files:write",
}
# What the manifest's features need besides Web API calls.
FEATURE_SCOPES = {"app_mentions:read", "commands"}  # the app_mention event, /gpu
_CALLED = re.compile(r'_call\(\s*"([a-z]+\.[A-Za-z.]+)"')
_SDK_CALLED = re.compile(r"client\.(usergroups_users_list|[a-z]+_[a-z]+_[A-Za-z]+)\(")


def called_methods() -> set[str]:
    """Every Web API method named in the bot's Slack layer (Messenger._call and the
    slack_sdk client methods called directly)."""
    methods: set[str] = set()
    for path in (ROOT / "bot" / "slack").glob("*.py"):
        source = path.read_text()
        methods |= set(_CALLED.findall(source))
        methods |= {m.replace("_", ".") for m in _SDK_CALLED.findall(source)}
    return methods


def test_manifest_scopes_are_least_privilege() -> None:
    """Exactly the scopes the called methods and the features need: no more, no fewer."""
    methods = called_methods()
    assert {"files.getUploadURLExternal", "files.completeUploadExternal"} <= methods
    unknown = sorted(m for m in methods if m not in METHOD_SCOPES)
    assert unknown == [], f"add the scope these methods need to METHOD_SCOPES: {unknown}"
    needed = {scope for m in methods if (scope := METHOD_SCOPES[m]) is not None}
    scopes = set(_manifest()["oauth_config"]["scopes"]["bot"])
    assert scopes == needed | FEATURE_SCOPES


def test_a_manifest_with_an_unknown_key_is_rejected_by_the_schema() -> None:
    schema = json.loads((SPECS_DIR / "slack-manifest.schema.json").read_text())
    broken = _manifest()
    broken["settings"]["socket_mode"] = True
    try:
        jsonschema.validate(broken, schema)
    except jsonschema.ValidationError:
        return
    raise AssertionError("the schema accepted an unknown settings key")
