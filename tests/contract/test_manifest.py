"""manifest.yml is valid against Slack's manifest JSON Schema and asks for what gpuops uses."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from slack_sdk.web.async_client import AsyncWebClient

from bot.local.slack import FakeSlack
from bot.local.slack.functions import REQUEST_GPU_CHANGE
from bot.local.slack.server import BOT_SCOPES
from tests.support.openapi_contract import SPECS_DIR

ROOT = Path(__file__).resolve().parents[2]


def _manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "manifest.yml").read_text())
    return loaded


def _schema(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SPECS_DIR / name).read_text())
    return loaded


def test_manifest_validates_against_slack_schema() -> None:
    # Workflow steps (functions) take Slack's version-2 manifest format: the v2 schema.
    manifest = _manifest()
    assert manifest["_metadata"]["major_version"] == 2
    jsonschema.validate(manifest, _schema("slack-manifest.schema.v2.json"))


def test_manifest_without_its_functions_is_valid_version_1_too() -> None:
    # The v1 schema knows functions only in an older shape (a map of parameters, no
    # ``properties``/``required``): everything else is valid for both.
    manifest = _manifest()
    del manifest["functions"]
    jsonschema.validate(manifest, _schema("slack-manifest.schema.json"))
    with_functions = _manifest()
    try:
        jsonschema.validate(with_functions, _schema("slack-manifest.schema.json"))
    except jsonschema.ValidationError as exc:
        assert next(iter(exc.path)) == "functions"
        return
    raise AssertionError("the v1 schema accepted version-2 functions")


def test_manifest_declares_the_workflow_step_as_the_stand_in_runs_it() -> None:
    m = _manifest()
    assert m["settings"]["function_runtime"] == "remote"
    assert m["settings"]["org_deploy_enabled"] is True
    step = m["functions"]["request_gpu_change"]
    assert step["title"] == REQUEST_GPU_CHANGE.title == "Request a GPU cluster change"
    assert " ".join(step["description"].split()) == REQUEST_GPU_CHANGE.description
    for side, declared in (
        ("input_parameters", REQUEST_GPU_CHANGE.input_parameters),
        ("output_parameters", REQUEST_GPU_CHANGE.output_parameters),
    ):
        properties = step[side]["properties"]
        assert list(properties) == [p.name for p in declared]
        assert {n: (p["type"], p["title"]) for n, p in properties.items()} == {
            p.name: (p.type, p.title) for p in declared
        }
        assert step[side]["required"] == [p.name for p in declared if p.is_required]
        assert all(properties[p.name]["is_required"] is p.is_required for p in declared)
    assert step["input_parameters"]["properties"]["requester"]["type"] == "slack#/types/user_id"
    assert step["input_parameters"]["properties"]["channel"]["type"] == "slack#/types/channel_id"


def test_manifest_declares_command_events_interactivity_and_socket_mode() -> None:
    m = _manifest()
    features = m["features"]
    settings = m["settings"]
    assert isinstance(features, dict) and isinstance(settings, dict)
    assert [c["command"] for c in features["slash_commands"]] == ["/gpu"]
    assert settings["event_subscriptions"]["bot_events"] == [
        "app_mention",
        "app_home_opened",
        "function_executed",
    ]
    assert features["app_home"]["home_tab_enabled"] is True
    assert settings["interactivity"]["is_enabled"] is True
    assert settings["socket_mode_enabled"] is True


# The bot scopes each Web API method the bot calls needs, as Slack documents it (empty: the
# method needs no scope; several: one per conversation type the bot may meet). A method
# missing here fails the test below until it is added.
METHOD_SCOPES: dict[str, tuple[str, ...]] = {
    "auth.test": (),
    "chat.postMessage": ("chat:write",),
    "chat.update": ("chat:write",),
    "chat.postEphemeral": ("chat:write",),
    # An agent's proposal links to its thread (SPEC §15): chat.getPermalink needs no scope.
    "chat.getPermalink": (),
    "views.open": (),
    "views.update": (),
    "views.publish": (),
    "usergroups.users.list": ("usergroups:read",),
    # /gpu timeline names people in its file (falls back to their ids without the scope).
    "users.info": ("users:read",),
    "files.getUploadURLExternal": ("files:write",),
    "files.completeUploadExternal": ("files:write",),
    # Ending a workflow step (with the step's own token): no scope, as function_executed.
    "functions.completeSuccess": (),
    "functions.completeError": (),
    # check-config --online: a notify_channel may be public or private.
    "conversations.info": ("channels:read", "groups:read"),
    # On-call people by e-mail (SPEC §16): only with the policy's oncall.match_by_email.
    "users.lookupByEmail": ("users:read.email",),
}
# Scopes a policy option needs, which the manifest leaves out until the option is used
# (docs/INTERFACE.md says when to add each, and what happens without it).
OPTIONAL_SCOPES = {"users:read.email"}
# What the manifest's features need besides Web API calls.
FEATURE_SCOPES = {"app_mentions:read", "commands"}  # the app_mention event, /gpu
_CALLED = re.compile(r'(?:_call|api_call)\(\s*"([a-z]+\.[A-Za-z.]+)"')
_ATTRIBUTE_CALLED = re.compile(r"\.([a-z]+(?:_[A-Za-z0-9]+)+)\(")
# slack_sdk's client methods, one per Web API method (``chat_postMessage`` is chat.postMessage).
_SDK_METHODS = {
    name
    for name in dir(AsyncWebClient)
    if not name.startswith("_") and "_" in name and name not in ("api_call", "files_upload_v2")
}


def slack_modules() -> list[Path]:
    """Every production module that may call Slack: all of bot/ and handlers/ but the local
    stand-ins (bot/local), which are Slack rather than call it."""
    modules = [*(ROOT / "bot").rglob("*.py"), *(ROOT / "handlers").rglob("*.py")]
    return sorted(p for p in modules if (ROOT / "bot" / "local") not in p.parents)


def called_methods() -> set[str]:
    """Every Web API method named in those modules (Messenger._call, api_call, and the
    slack_sdk client methods called directly)."""
    methods: set[str] = set()
    for path in slack_modules():
        source = path.read_text()
        methods |= set(_CALLED.findall(source))
        called = set(_ATTRIBUTE_CALLED.findall(source)) & _SDK_METHODS
        methods |= {name.replace("_", ".") for name in called}
    return methods


def test_manifest_scopes_are_least_privilege() -> None:
    """Exactly the scopes the called methods and the features need: no more, no fewer."""
    methods = called_methods()
    assert {"files.getUploadURLExternal", "files.completeUploadExternal"} <= methods
    assert {"functions.completeSuccess", "functions.completeError"} <= methods
    assert {"auth.test", "conversations.info"} <= methods  # bot/slack/startup, check_config
    unknown = sorted(m for m in methods if m not in METHOD_SCOPES)
    assert unknown == [], f"add the scope these methods need to METHOD_SCOPES: {unknown}"
    needed = {scope for m in methods for scope in METHOD_SCOPES[m]}
    scopes = set(_manifest()["oauth_config"]["scopes"]["bot"])
    assert scopes == (needed - OPTIONAL_SCOPES) | FEATURE_SCOPES
    interface = (ROOT / "docs" / "INTERFACE.md").read_text(encoding="utf-8")
    assert all(f"`{scope}`" in interface for scope in OPTIONAL_SCOPES)


def test_the_slack_stand_in_grants_what_the_manifest_asks_for() -> None:
    assert set(_manifest()["oauth_config"]["scopes"]["bot"]) == BOT_SCOPES


def test_a_manifest_with_an_unknown_key_is_rejected_by_the_schema() -> None:
    broken = _manifest()
    broken["settings"]["socket_mode"] = True
    try:
        jsonschema.validate(broken, _schema("slack-manifest.schema.v2.json"))
    except jsonschema.ValidationError:
        return
    raise AssertionError("the schema accepted an unknown settings key")


def test_the_messages_tab_is_on_as_the_dms_need_and_the_stand_in_has_it_so() -> None:
    """gpuops answers Home clicks by DM; Slack refuses such posts (messages_tab_disabled)
    unless the app's Messages tab is on. The stand-in starts as the manifest says."""
    app_home = _manifest()["features"]["app_home"]
    assert app_home["messages_tab_enabled"] is True
    assert FakeSlack("xoxb-manifest").messages_tab_enabled is app_home["messages_tab_enabled"]
