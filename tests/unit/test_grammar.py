"""The /gpu grammar (SPEC §4.1)."""

from __future__ import annotations

from typing import Any

import pytest

from bot.core.ask.grammar import (
    AuditCommand,
    ChangeCommand,
    HelpCommand,
    ListCommand,
    PolicyCommand,
    ShowCommand,
    UsageError,
    parse_command,
)
from tests.support.catalog import CATALOG


def UpdateCommand(**given: Any) -> ChangeCommand:
    """``/gpu update …``: Together's verb is its one action."""
    return ChangeCommand(name="update", action="update", **given)


def ActionCommand(**given: Any) -> ChangeCommand:
    """``/gpu action …``: E2E's verb takes an action word."""
    return ChangeCommand(name="action", **given)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", HelpCommand()),
        ("help", HelpCommand()),
        ("  HELP  ", HelpCommand()),
        ("list", ListCommand()),
        ("list together-prod", ListCommand(project="together-prod")),
        ("show together-prod tc-1", ShowCommand(project="together-prod", cluster_id="tc-1")),
        (
            "update p c num_gpus=16 num_preemptible_gpus=8",
            UpdateCommand(
                project="p", cluster_id="c", fields={"num_gpus": "16", "num_preemptible_gpus": "8"}
            ),
        ),
        (
            'update p c reservation_end_time=2026-12-31T00:00:00Z reason="incident 42"',
            UpdateCommand(
                project="p",
                cluster_id="c",
                fields={"reservation_end_time": "2026-12-31T00:00:00Z"},
                reason="incident 42",
            ),
        ),
        ("update p c", UpdateCommand(project="p", cluster_id="c")),
        ("action e 101", ActionCommand(project="e", cluster_id="101")),
        (
            "action e 101 restart_cluster",
            ActionCommand(project="e", cluster_id="101", action="restart_cluster"),
        ),
        (
            "action e 101 update_ssh_keys ssh_key_ids=11,12",
            ActionCommand(
                project="e",
                cluster_id="101",
                action="update_ssh_keys",
                fields={"ssh_key_ids": "11,12"},
            ),
        ),
        (
            "action e 101 scale_cluster additional_nodes=2 reason=\u201cload spike\u201d",
            ActionCommand(
                project="e",
                cluster_id="101",
                action="scale_cluster",
                fields={"additional_nodes": "2"},
                reason="load spike",
            ),
        ),
        ("audit", AuditCommand()),
        ("audit 5", AuditCommand(limit=5)),
        ("audit p 7", AuditCommand(project="p", limit=7)),
        ("audit 7 p", AuditCommand(project="p", limit=7)),
        ("list page=2", ListCommand(page=2)),
        ("list together-prod page=3", ListCommand(project="together-prod", page=3)),
        ("list PAGE=3 together-prod", ListCommand(project="together-prod", page=3)),
        ("audit 100 page=5", AuditCommand(limit=100, page=5)),
        ("audit page=2 p 40", AuditCommand(project="p", limit=40, page=2)),
        (
            f'update p c num_gpus=1 reason="{"r" * 500}"',
            UpdateCommand(project="p", cluster_id="c", fields={"num_gpus": "1"}, reason="r" * 500),
        ),
    ],
)
def test_parses(text: str, expected: object) -> None:
    assert parse_command(text, CATALOG) == expected


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("show p", "needs a project and a cluster id"),
        (
            "show p c extra",
            "unexpected extra word `extra` after the cluster id. "
            "Usage: `/gpu show <project> <cluster_id>`",
        ),
        ("show p c a b c d", "unexpected extra words `a`, `b`, `c`, … after the cluster id"),
        ("show", "Usage: `/gpu show <project> <cluster_id>`"),
        ("list a b", "at most a project and a page"),
        ("list page=0", "`page=0` is not a page: give a whole number from 1, such as `page=2`"),
        ("list page=two", "`page=two` is not a page"),
        ("list page=", "`page=` is not a page"),
        ("list page=-1", "`page=-1` is not a page"),
        ("list page=\u00b2", "is not a page"),
        ("list page=1 page=2", "`page=` is given 2 times; give it once"),
        ("list together-prod page 2", "write the page as `page=2`"),
        ("audit 100 page=0", "Usage: `/gpu audit [project] [limit] [page=N]`"),
        ("audit \u00b2", "is not a valid project"),
        ("audit a 5 7", "a project, a limit and a page at most"),
        (
            f'update p c num_gpus=1 reason="{"r" * 501}"',
            "a reason may be at most 500 characters; yours has 501",
        ),
        (
            f'action e 101 scale_cluster additional_nodes=1 reason="{"<" * 734}"',
            "at most 500 characters; yours has 734",
        ),
        ("update p", "needs a project and a cluster id"),
        ("update p c num_gpus", "is not a `field=value` pair"),
        ("update p c num_gpus=1 num_gpus=2", "given twice"),
        ("audit 0", "between 1 and 100"),
        ("audit 101", "between 1 and 100"),
        ("audit a b", "takes one project"),
        ("reboot everything", "unknown command `reboot`. Try one of: `/gpu help`"),
        ("lsit", "unknown command `lsit` — did you mean `list`? Usage: `/gpu list"),
        ("SHWO p c", "unknown command `shwo` — did you mean `show`?"),
        ("acton e 101", "did you mean `action`? Usage: `/gpu action <project>"),
        ("show <!channel> c", "is not a valid project"),
        ('update p c reason="unterminated', "check your quotes"),
    ],
)
def test_usage_errors_say_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_command(text, CATALOG)
    assert says in str(exc.value)


def test_override_is_a_text_like_reason_not_a_field() -> None:
    command = parse_command(
        'action e2e-delhi 101 restart_cluster override="incident 7" reason="hang"', CATALOG
    )
    assert isinstance(command, ChangeCommand)
    assert (command.override, command.reason, command.fields) == ("incident 7", "hang", {})
    with pytest.raises(UsageError, match="in 10 to 500 characters; yours has 501"):
        parse_command(f'update p c num_gpus=8 override="{"x" * 501}"', CATALOG)


@pytest.mark.parametrize("given", ["x", "  short  ", ""])
def test_an_override_keeps_break_glass_rule_of_10_to_500_characters(given: str) -> None:
    with pytest.raises(UsageError) as exc:
        parse_command(f'update p c num_gpus=8 override="{given}"', CATALOG)
    assert str(exc.value) == (
        f"an override must say why it cannot wait in 10 to 500 characters; yours has "
        f'{len(given.strip())}. Send the command again with `override="why"`.'
    )


def test_policy_takes_at_most_a_project() -> None:
    assert parse_command("policy", CATALOG) == PolicyCommand()
    assert parse_command("policy e2e-delhi", CATALOG) == PolicyCommand(project="e2e-delhi")
    with pytest.raises(UsageError, match="`policy` takes at most a project"):
        parse_command("policy a b", CATALOG)
