"""The names gpuops's interface is made of, read from the code that defines them (the command
grammar, the CLI parser, the settings, the policy models, the provider descriptors, the
handlers' registrations and manifest.yml), so that a docs test can find each in
docs/INTERFACE.md without a hand-kept list."""

from __future__ import annotations

import argparse
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from bot import cli
from bot.config import Settings
from bot.core.ask import grammar
from bot.core.ask.usage import usage
from bot.core.policy import Policy, policy_schema
from handlers import register_all
from tests.support.catalog import CATALOG

ROOT = Path(__file__).resolve().parents[2]


class _Registrations:
    """Stands in for Bolt's app in ``register_all``: records what each listener is for."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __getattr__(self, kind: str) -> Callable[..., Callable[[Any], Any]]:
        def register(name: object = None, **_: object) -> Callable[[Any], Any]:
            if isinstance(name, str):
                self.seen.append((kind, name))
            return lambda listener: listener

        return register


def registrations() -> list[tuple[str, str]]:
    """(``action``|``view``|``command``|``event``|``function``, its id) of every listener."""
    recorder = _Registrations()
    register_all(recorder)  # type: ignore[arg-type]
    return recorder.seen


def commands() -> list[str]:
    """Each /gpu command's usage line and each keyword of the grammar (``reason=``, ``at=``…)."""
    usages = list(usage(CATALOG).values())
    keywords = {f"{name}=" for name in grammar._TEXTS}
    keywords |= set(re.findall(r"``([a-z_]+=)", grammar.__doc__ or ""))
    return usages + sorted(keywords)


def cli_words() -> list[str]:
    """``gpuops <command>`` (and ``gpuops audit <verb>``) and every option each takes."""
    found: list[str] = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            found.extend(o for o in action.option_strings if o.startswith("--") and o != "--help")
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    found.append(f"{prefix} {name}")
                    walk(sub, f"{prefix} {name}")

    walk(cli._parser(), "gpuops")
    return found


def settings() -> list[str]:
    """Every environment variable: the settings' and each provider's own."""
    names = [name.upper() for name in Settings.model_fields]
    for descriptor in CATALOG:
        names.append(descriptor.base_url_variable)
        for field in descriptor.section.model_fields.values():
            if isinstance(field.default, str) and field.default.isupper():
                names.append(field.default)  # a default credential variable: E2E_API_KEY
    return names


def _models(annotation: object) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for argument in typing.get_args(annotation):
        yield from _models(argument)


def _keys(model: type[BaseModel], seen: set[type[BaseModel]]) -> Iterator[str]:
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        yield field.alias or name
        for inner in _models(field.annotation):
            yield from _keys(inner, seen)


def policy_keys() -> set[str]:
    """Every key a policy file may have, at any depth, for every provider's projects."""
    seen: set[type[BaseModel]] = set()
    keys = set(_keys(Policy, seen))
    for descriptor in CATALOG:
        keys |= set(_keys(policy_schema(CATALOG).project_model(descriptor.name), seen))
    return keys


def provider_words() -> set[str]:
    """Each provider's actions, change kinds and fields (the forms' block and action ids)."""
    words: set[str] = set()
    for descriptor in CATALOG:
        words |= set(descriptor.changes.actions) | set(descriptor.kinds)
        words |= set(descriptor.changes.field_names())
    return words


def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "manifest.yml").read_text(encoding="utf-8"))
    return loaded


def slack_words() -> set[str]:
    """The manifest's scopes, events, slash commands, functions and their parameters."""
    found = manifest()
    words = set(found["oauth_config"]["scopes"]["bot"])
    words |= set(found["settings"]["event_subscriptions"]["bot_events"])
    words |= {c["command"] for c in found["features"]["slash_commands"]}
    for name, function in found.get("functions", {}).items():
        words.add(name)
        for side in ("input_parameters", "output_parameters"):
            words |= set(function[side]["properties"])
    return words
