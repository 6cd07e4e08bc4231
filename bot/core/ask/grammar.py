"""The /gpu command grammar (SPEC §4.1), independent of Slack.

    /gpu help
    /gpu list [project] [page=N]
    /gpu show <project> <cluster_id>
    /gpu <verb> <project> <cluster_id> [<action>] [field=value …]
    /gpu audit [project] [limit] [page=N]
    /gpu timeline [since]
    /gpu policy [project]
    /gpu spend [project|team] [month=YYYY-MM]

Each provider has its change verb (its descriptor's: ``update`` for Together, ``action``
for E2E); a provider with several actions takes the action's name after the cluster id.
``reason="…"`` (at most 500 characters) may be added to a change: it is recorded
and shown; so may an admin's ``override="…"`` of a change freeze (SPEC §8), in 10 to 500
characters as a break glass's reason;
``at=<RFC 3339>`` or ``in=<N>m|<N>h|<N>d`` schedules the change (SPEC §9).
``step=N`` sends a size change in steps of N (GPUs or nodes), each held steady for
``soak=<N>s|<N>m|<N>h`` (SPEC §14).
``page=N`` asks for a further page of a long answer.
"""

from __future__ import annotations

import difflib
import re
import shlex
from typing import Literal

from pydantic import BaseModel, Field

from bot.core.ask.justification import justification_problem
from bot.core.ask.usage import USAGE, change_usage, usage
from bot.core.requests.schedule import Schedule, ScheduleError, parse_at, parse_in
from bot.core.staged.plan import Staging, StagingError, staging_of
from bot.errors import GpuopsError
from bot.providers.catalog import Catalog
from bot.providers.descriptor import ProviderDescriptor

MAX_AUDIT_LIMIT = 100
DEFAULT_AUDIT_LIMIT = 20
MAX_REASON = 500
MAX_PAGE = 10_000
_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")
_DIGITS = re.compile(r"^[0-9]{1,9}\Z")
_FIELD = re.compile(r"^[a-z_]{1,64}$")
# Slack turns typed quotes into typographic ones; shlex needs the plain kind.
_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})


class UsageError(GpuopsError, ValueError):
    """The command text does not fit the grammar; the message says what would."""


class HelpCommand(BaseModel):
    name: Literal["help"] = "help"


class ListCommand(BaseModel):
    name: Literal["list"] = "list"
    project: str | None = None
    page: int = 1


class ShowCommand(BaseModel):
    name: Literal["show"] = "show"
    project: str
    cluster_id: str


class ChangeCommand(BaseModel):
    """A change asked by a provider's verb; ``action`` is None when it is to be chosen in
    a form (a provider with one action has it always)."""

    name: str  # the verb: "update", "action"
    project: str
    cluster_id: str
    action: str | None = None
    fields: dict[str, str] = Field(default_factory=dict)
    reason: str | None = None
    override: str | None = None  # an admin's reason to go ahead during a freeze
    schedule: Schedule | None = None
    staging: Staging | None = None  # step= (and soak=): sent in steps (SPEC §14)


class AuditCommand(BaseModel):
    name: Literal["audit"] = "audit"
    project: str | None = None
    limit: int = DEFAULT_AUDIT_LIMIT
    page: int = 1


class TimelineCommand(BaseModel):
    name: Literal["timeline"] = "timeline"
    since: str | None = None  # read against the clock by bot.core.since


class PolicyCommand(BaseModel):
    name: Literal["policy"] = "policy"
    project: str | None = None


class TokenCommand(BaseModel):
    """A personal token for agents (SPEC §15): make one, list them, revoke one."""

    name: Literal["token"] = "token"
    verb: Literal["new", "list", "revoke"]
    ttl: str | None = None
    token_name: str | None = None


class SpendCommand(BaseModel):
    name: Literal["spend"] = "spend"
    target: str | None = None  # a project or a team
    month: str | None = None  # YYYY-MM, read by bot.core.spend.months


Command = (
    HelpCommand
    | ListCommand
    | ShowCommand
    | ChangeCommand
    | AuditCommand
    | TimelineCommand
    | PolicyCommand
    | TokenCommand
    | SpendCommand
)


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text.translate(_QUOTES))
    except ValueError as exc:
        raise UsageError(f"could not read the command: {exc} (check your quotes)") from None


def _token(value: str, what: str, usage: str) -> str:
    if not _TOKEN.match(value):
        raise UsageError(f"`{value[:40]}` is not a valid {what}. Usage: `{usage}`")
    return value


_TEXTS = ("reason", "override")  # free text, not a provider field


_STAGING = ("step", "soak")  # a staged change's step and soak, not provider fields


def _assignments(
    words: list[str], usage: str
) -> tuple[dict[str, str], dict[str, str | None], Schedule | None]:
    """The provider fields, the texts (reason, override, step, soak) and the run time."""
    fields: dict[str, str] = {}
    texts: dict[str, str | None] = dict.fromkeys(_TEXTS + _STAGING)
    schedule: Schedule | None = None
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not _FIELD.match(name):
            raise UsageError(f"`{word[:40]}` is not a `field=value` pair. Usage: `{usage}`")
        if name == "override":
            texts[name] = _override(value)
            continue
        if name in _TEXTS:
            texts[name] = _reason(value)
            continue
        if name in _STAGING:
            if texts[name] is not None:
                raise UsageError(f"`{name}=` is given twice; give it once.")
            texts[name] = value
            continue
        if name in ("at", "in"):
            if schedule is not None:
                raise UsageError("give one run time: `at=<RFC 3339>` or `in=<N>m|<N>h|<N>d`.")
            schedule = _schedule(name, value)
            continue
        if name in fields:
            raise UsageError(f"`{name}` is given twice; give each field once.")
        fields[name] = value.strip()
    return fields, texts, schedule


def _schedule(name: str, value: str) -> Schedule:
    try:
        return parse_at(value) if name == "at" else parse_in(value)
    except ScheduleError as exc:
        raise UsageError(str(exc)) from None


def _reason(value: str) -> str | None:
    reason = value.strip()
    if len(reason) > MAX_REASON:
        raise UsageError(
            f"a reason may be at most {MAX_REASON} characters; yours has {len(reason)}. "
            "Shorten it and send the command again (the full story belongs in the thread)."
        )
    return reason or None


def _override(value: str) -> str:
    """An admin's reason to go ahead during a freeze: break glass's rule (SPEC §8)."""
    problem = justification_problem(value, "an override")
    if problem is not None:
        raise UsageError(f'{problem} Send the command again with `override="why"`.')
    return value.strip()


def _page(words: list[str], usage: str) -> tuple[list[str], int]:
    """The words without ``page=N``, and N (1 when not given)."""
    given = [w for w in words if w.lower().startswith("page=")]
    rest = [w for w in words if not w.lower().startswith("page=")]
    if len(given) > 1:
        raise UsageError(f"`page=` is given {len(given)} times; give it once. Usage: `{usage}`")
    if not given:
        if any(w.lower() == "page" for w in rest):
            raise UsageError(f"write the page as `page=2` (no spaces). Usage: `{usage}`")
        return rest, 1
    value = given[0].partition("=")[2]
    if not _DIGITS.match(value) or not 1 <= int(value) <= MAX_PAGE:
        raise UsageError(
            f"`{given[0][:40]}` is not a page: give a whole number from 1, such as `page=2`. "
            f"Usage: `{usage}`"
        )
    return rest, int(value)


def parse_command(text: str, catalog: Catalog) -> Command:
    """The command ``text`` says, with the change verbs of ``catalog``'s providers (or
    UsageError saying what would fit)."""
    words = _split(text.strip())
    if not words or words[0].lower() == "help":
        return HelpCommand()
    verb, args = words[0].lower(), words[1:]
    if verb == "list":
        args, page = _page(args, USAGE["list"])
        if len(args) > 1:
            raise UsageError(f"`list` takes at most a project and a page. Usage: `{USAGE['list']}`")
        project = _token(args[0], "project", USAGE["list"]) if args else None
        return ListCommand(project=project, page=page)
    if verb == "show":
        if len(args) < 2:
            raise UsageError(f"`show` needs a project and a cluster id. Usage: `{USAGE['show']}`")
        if len(args) > 2:
            raise UsageError(f"{_extra_words(args[2:])}. Usage: `{USAGE['show']}`")
        return ShowCommand(
            project=_token(args[0], "project", USAGE["show"]),
            cluster_id=_token(args[1], "cluster id", USAGE["show"]),
        )
    provider = catalog.by_verb(verb)
    if provider is not None:
        return _parse_change(provider, args)
    if verb == "audit":
        return _parse_audit(args)
    if verb == "timeline":
        if len(args) > 1:
            raise UsageError(
                f"`timeline` takes at most one time, such as `2h`. Usage: `{USAGE['timeline']}`"
            )
        return TimelineCommand(since=args[0] if args else None)
    if verb == "policy":
        if len(args) > 1:
            raise UsageError(f"`policy` takes at most a project. Usage: `{USAGE['policy']}`")
        project = _token(args[0], "project", USAGE["policy"]) if args else None
        return PolicyCommand(project=project)
    if verb == "token":
        return _parse_token(args)
    if verb == "spend":
        return _parse_spend(args)
    raise _unknown_verb(verb, usage(catalog))


def _parse_token(args: list[str]) -> TokenCommand:
    usage = f"{USAGE['token']}`, `/gpu token list`, `/gpu token revoke <name>"
    if not args or args[0].lower() not in ("new", "list", "revoke"):
        raise UsageError(f"`token` takes `new`, `list` or `revoke`. Usage: `{usage}`")
    verb, rest = args[0].lower(), args[1:]
    if verb == "list":
        if rest:
            raise UsageError(f"`token list` takes nothing more. Usage: `{usage}`")
        return TokenCommand(verb="list")
    if verb == "revoke":
        if len(rest) != 1 or "=" in rest[0]:
            raise UsageError(f"`token revoke` takes the token's name. Usage: `{usage}`")
        return TokenCommand(verb="revoke", token_name=_token(rest[0], "token name", usage))
    given: dict[str, str] = {}
    for word in rest:
        key, sep, value = word.partition("=")
        if not sep or key not in ("ttl", "name") or key in given:
            raise UsageError(f"`token new` takes `ttl=` and `name=` once each. Usage: `{usage}`")
        given[key] = value.strip()
    return TokenCommand(verb="new", ttl=given.get("ttl"), token_name=given.get("name"))


def _parse_spend(args: list[str]) -> SpendCommand:
    usage = USAGE["spend"]
    months = [a for a in args if a.lower().startswith("month=")]
    rest = [a for a in args if not a.lower().startswith("month=")]
    if len(months) > 1 or len(rest) > 1:
        raise UsageError(f"`spend` takes at most a project or team and a month. Usage: `{usage}`")
    month = months[0].partition("=")[2] if months else None
    target = _token(rest[0], "project or team", usage) if rest else None
    return SpendCommand(target=target, month=month)


def _extra_words(extra: list[str]) -> str:
    """``unexpected extra word `x` after the cluster id`` (each word cut at 40 characters)."""
    words = ", ".join(f"`{w[:40]}`" for w in extra[:3]) + (", …" if len(extra) > 3 else "")
    plural = "s" if len(extra) > 1 else ""
    return f"unexpected extra word{plural} {words} after the cluster id"


def _unknown_verb(verb: str, usages: dict[str, str]) -> UsageError:
    """The refusal of a verb no command has, with the verb it was probably meant as (as a
    mistyped field gets one, with the same closeness) or, when none is near, every usage."""
    close = difflib.get_close_matches(verb, list(usages), n=1, cutoff=0.75)
    if close:
        meant = close[0]
        return UsageError(
            f"unknown command `{verb[:40]}` — did you mean `{meant}`? Usage: `{usages[meant]}`"
        )
    return UsageError(
        f"unknown command `{verb[:40]}`. Try one of: "
        + ", ".join(f"`{u}`" for u in usages.values())
    )


def parse_change(
    verb: str, project: str, cluster_id: str, change: str, reason: str, catalog: Catalog
) -> ChangeCommand:
    """A change given in parts (a workflow step's inputs), read as ``/gpu {verb} {project}
    {cluster_id} {change}`` is (a provider's verb); a non-empty ``reason`` is the reason."""
    provider = catalog.by_verb(verb)
    if provider is None:
        raise UsageError(f"`{verb[:40]}` is no provider's change command.")
    command = _parse_change(provider, [project, cluster_id, *_split(change.strip())])
    if reason.strip():
        command = command.model_copy(update={"reason": _reason(reason)})
    return command


def _parse_change(provider: ProviderDescriptor, args: list[str]) -> ChangeCommand:
    verb, usage = provider.verb, change_usage(provider)
    if len(args) < 2:
        raise UsageError(f"`{verb}` needs a project and a cluster id. Usage: `{usage}`")
    project = _token(args[0], "project", usage)
    cluster_id = _token(args[1], "cluster id", usage)
    rest = args[2:]
    action = provider.single_action()
    if action is None and rest and "=" not in rest[0]:
        action = _token(rest[0], "action", usage)
        rest = rest[1:]
    fields, texts, schedule = _assignments(rest, usage)
    try:
        staging = staging_of(texts.pop("step"), texts.pop("soak"))
    except StagingError as exc:
        raise UsageError(str(exc)) from None
    return ChangeCommand(
        name=verb,
        project=project,
        cluster_id=cluster_id,
        action=action,
        fields=fields,
        schedule=schedule,
        staging=staging,
        **texts,
    )


def _parse_audit(args: list[str]) -> AuditCommand:
    usage = USAGE["audit"]
    args, page = _page(args, usage)
    project: str | None = None
    limit = DEFAULT_AUDIT_LIMIT
    if len(args) > 2:
        raise UsageError(f"`audit` takes a project, a limit and a page at most. Usage: `{usage}`")
    for arg in args:
        if _DIGITS.match(arg):
            limit = int(arg)
            if not 1 <= limit <= MAX_AUDIT_LIMIT:
                raise UsageError(f"limit must be between 1 and {MAX_AUDIT_LIMIT} (got {limit}).")
        elif project is None:
            project = _token(arg, "project", usage)
        else:
            raise UsageError(f"`audit` takes one project. Usage: `{usage}`")
    return AuditCommand(project=project, limit=limit, page=page)
