"""Slack users by e-mail address for the on-call roster (SPEC §16, ``match_by_email``):
``users.lookupByEmail``, which needs the bot scope ``users:read.email``. Slack's
``users_not_found`` is "no such user"; any other failure (a missing scope, a rate limit, a
fault) is a DirectoryError, and the on-call person stays unmapped and named."""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.core.api import DirectoryError

logger = logging.getLogger(__name__)
LOOKUP_SECONDS = 1.0  # inside the click's 3 s, beside the on-call tool's own deadline


class SlackEmailDirectory:
    """``users.lookupByEmail`` behind the core's EmailDirectory port."""

    def __init__(self, client: AsyncWebClient, *, deadline: float = LOOKUP_SECONDS) -> None:
        self.client = client
        self.deadline = deadline

    async def user_by_email(self, email: str) -> str | None:
        try:
            async with asyncio.timeout(self.deadline):
                answer = await self.client.users_lookupByEmail(email=email)
        except SlackApiError as exc:
            code = str(exc.response.get("error", "unknown"))
            if code == "users_not_found":
                return None
            if code == "missing_scope":
                logger.warning(
                    "oncall.match_by_email needs the bot scope users:read.email: add it to "
                    "the app's manifest and reinstall"
                )
            raise DirectoryError(f"users.lookupByEmail failed: {code}") from None
        except (TimeoutError, OSError) as exc:
            raise DirectoryError(f"users.lookupByEmail failed: {type(exc).__name__}") from None
        user = answer.get("user")
        found = user.get("id") if isinstance(user, dict) else None
        return str(found) if found else None
