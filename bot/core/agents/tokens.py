"""Personal tokens (SPEC §15): ``/gpu token new|list|revoke`` and the check of a token at
every agent call.

A token is shown once, to its person; only its SHA-256 is stored. It stands for its person
alone: what it may do is read from their grants at each call, so a grant taken away holds
at once. Tokens live at most 30 days and count their calls in a per-minute window."""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bot.core.access import Access, Refusal
from bot.core.answers import Reply, notice
from bot.core.policy import Role
from bot.core.store.tokens import TokenRecord, TokenStore
from bot.errors import GpuopsError

TOKEN_PREFIX = "gpo_"  # noqa: S105 - the prefix that marks a token, not a secret
DEFAULT_TTL = "7d"
MAX_TTL = timedelta(days=30)
MIN_TTL = timedelta(minutes=5)
RATE_WINDOW = timedelta(minutes=1)
DEFAULT_CALLS_PER_MINUTE = 60
_TTL = re.compile(r"^([0-9]{1,5})([mhd])$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,39}$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def token_hash(token: str) -> str:
    """The stored form of a token (a token has 256 random bits: no salt or stretching is
    needed for a hash nobody can invert)."""
    return hashlib.sha256(token.encode()).hexdigest()


def parse_ttl(text: str) -> timedelta:
    """``30m``, ``12h``, ``7d``: at least 5 minutes, at most 30 days; Refusal otherwise."""
    found = _TTL.match(text.strip().lower())
    if found is None:
        raise Refusal(
            f"`ttl={text[:20]}` is not a lifetime: give minutes, hours or days such as "
            "`ttl=12h` or `ttl=7d` (at most 30d).",
            kind="usage",
        )
    ttl = timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})
    if ttl > MAX_TTL:
        raise Refusal("a token lives at most 30 days: give `ttl=30d` or less.", kind="usage")
    if ttl < MIN_TTL:
        raise Refusal("a token lives at least 5 minutes: give `ttl=5m` or more.", kind="usage")
    return ttl


class TokenRefused(GpuopsError):
    """An agent call refused for its token: ``kind`` is unknown, expired, revoked or
    rate_limited; the text says what to do."""

    def __init__(self, kind: str, message: str, *, user: str | None = None) -> None:
        self.kind = kind
        self.message = message
        self.user = user
        super().__init__(message)


@dataclass(frozen=True)
class Caller:
    """Who an agent call is made for: the token's person, the token's name, and the name
    the client gave (what the audit and the request's root show)."""

    user: str
    token: str
    client: str


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


class Tokens:
    """Issue, list, revoke and check personal tokens."""

    def __init__(
        self,
        access: Access,
        store: TokenStore,
        *,
        calls_per_minute: int = DEFAULT_CALLS_PER_MINUTE,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.access = access
        self.store = store
        self.calls_per_minute = calls_per_minute
        self.clock = clock

    async def issue(self, user: str, ttl: str | None, name: str | None) -> Reply:
        """A new token for ``user``, shown once in the answer (which the surface shows to
        them alone)."""
        lifetime = parse_ttl(ttl or DEFAULT_TTL)
        if name is not None and not NAME.match(name):
            raise Refusal(
                f"`name={name[:40]}` is not a token name: letters, digits, `_`, `.` and `-`, "
                "at most 40, starting with a letter or digit.",
                kind="usage",
            )
        if not await self.access.authorizer.projects_granted(user, Role.viewer, anywhere=True):
            raise Refusal(
                "you hold no grant on any project, so a token could do nothing; ask a gpuops "
                "admin for a grant first.",
                kind="not_authorized",
            )
        chosen = name or f"agent-{secrets.token_hex(2)}"
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        now = self.clock()
        record = await self.store.add(
            hash=token_hash(token),
            user_id=user,
            name=chosen,
            expires_at=now + lifetime,
            now=now,
        )
        if record is None:
            raise Refusal(
                f"you already have a live token named `{chosen}`: revoke it first "
                f"(`/gpu token revoke {chosen}`) or choose another `name=`.",
                kind="duplicate",
            )
        await self.access.audit(
            user,
            "token_created",
            outcome=chosen,
            name=chosen,
            expires_at=record.expires_at.isoformat(),
        )
        return notice(
            f"New token `{chosen}`, valid until {_when(record.expires_at)}:\n"
            f"`{token}`\n"
            "It is shown this once and only its hash is kept: copy it into your MCP client "
            "now (as `Authorization: Bearer …`). It acts as you, with your grants at each "
            f"call, and every change it proposes waits for you to confirm it in Slack. "
            f"Revoke it with `/gpu token revoke {chosen}`."
        )

    async def listing(self, user: str) -> list[TokenRecord]:
        return await self.store.of_user(user)

    async def list_reply(self, user: str) -> Reply:
        now = self.clock()
        found = await self.listing(user)
        if not found:
            return notice("You have no tokens. Make one with `/gpu token new [ttl=7d] [name=…]`.")
        lines = [f"• {_token_line(t, now)}" for t in found]
        return notice("Your tokens:\n" + "\n".join(lines))

    async def revoke(self, user: str, name: str) -> Reply:
        revoked = await self.store.revoke(user, name, by=user, now=self.clock())
        if revoked is None:
            raise Refusal(
                f"you have no live token named `{name[:40]}` (see `/gpu token list`).",
                kind="not_found",
            )
        await self.access.audit(user, "token_revoked", outcome=name, name=name)
        return notice(f"Token `{name}` is revoked: calls made with it are refused from now on.")

    async def check(self, token: str, client: str) -> Caller:
        """The caller a token stands for, this call counted; TokenRefused saying why not."""
        digest = token_hash(token.strip())
        now = self.clock()
        used = await self.store.use(digest, client=client[:100], now=now, window=RATE_WINDOW)
        if used is None:
            raise await self._why_refused(digest, now)
        if used.window_calls > self.calls_per_minute:
            assert used.window_start is not None
            wait = max(int((used.window_start + RATE_WINDOW - now).total_seconds()) + 1, 1)
            raise TokenRefused(
                "rate_limited",
                f"token `{used.name}` made more than {self.calls_per_minute} calls this minute; "
                f"try again in {wait} s.",
                user=used.user_id,
            )
        return Caller(user=used.user_id, token=used.name, client=client[:100] or "unnamed")

    async def _why_refused(self, digest: str, now: datetime) -> TokenRefused:
        found = await self.store.by_hash(digest)
        if found is None:
            return TokenRefused(
                "unknown",
                "this token is not known to gpuops: make one with `/gpu token new` in Slack.",
            )
        if found.revoked_at is not None:
            return TokenRefused(
                "revoked",
                f"token `{found.name}` was revoked on {_when(found.revoked_at)}: make a new one "
                "with `/gpu token new` in Slack.",
                user=found.user_id,
            )
        return TokenRefused(
            "expired",
            f"token `{found.name}` expired on {_when(found.expires_at)}: make a new one with "
            "`/gpu token new` in Slack.",
            user=found.user_id,
        )


def _token_line(token: TokenRecord, now: datetime) -> str:
    if token.revoked_at is not None:
        state = f"revoked {_when(token.revoked_at)}"
    elif token.expires_at <= now:
        state = f"expired {_when(token.expires_at)}"
    else:
        state = f"valid until {_when(token.expires_at)}"
    used = f", last used {_when(token.last_used_at)}" if token.last_used_at else ", never used"
    client = f" by {token.last_client}" if token.last_client and token.last_used_at else ""
    return f"`{token.name}` — {state}{used}{client}"
