"""manifest.yml is valid against Slack's manifest JSON Schema and asks for what gpuops uses."""

from __future__ import annotations

import json
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


def test_manifest_scopes_are_least_privilege() -> None:
    scopes = set(_manifest()["oauth_config"]["scopes"]["bot"])
    assert scopes == {"app_mentions:read", "chat:write", "commands", "usergroups:read"}


def test_a_manifest_with_an_unknown_key_is_rejected_by_the_schema() -> None:
    schema = json.loads((SPECS_DIR / "slack-manifest.schema.json").read_text())
    broken = _manifest()
    broken["settings"]["socket_mode"] = True
    try:
        jsonschema.validate(broken, schema)
    except jsonschema.ValidationError:
        return
    raise AssertionError("the schema accepted an unknown settings key")
