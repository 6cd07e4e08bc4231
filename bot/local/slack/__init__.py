"""A local stand-in for Slack: a fake Web API (``FakeSlack``) the bot talks to through
``SLACK_API_URL``, and a sender (``SlackSender``) that posts signed requests to the bot's
``/slack/events`` as Slack does. Used by ``gpuops demo``, the integration tests and the
benchmarks."""

from bot.local.slack.models import (
    Ephemeral,
    EphemeralPosted,
    FakeEvent,
    HomePublished,
    Message,
    MessageDeleted,
    MessageEdited,
    MessagePosted,
    MessageVersion,
    ResponsePost,
    SlackCall,
    UserActed,
    View,
    ViewClosed,
    ViewOpened,
    ViewUpdated,
)
from bot.local.slack.sender import SenderInputError, SenderResult, SlackSender, Tamper
from bot.local.slack.server import FakeSlack, SlackFault

__all__ = [
    "Ephemeral",
    "EphemeralPosted",
    "FakeEvent",
    "FakeSlack",
    "HomePublished",
    "Message",
    "MessageDeleted",
    "MessageEdited",
    "MessagePosted",
    "MessageVersion",
    "ResponsePost",
    "SenderInputError",
    "SenderResult",
    "SlackCall",
    "SlackFault",
    "SlackSender",
    "Tamper",
    "UserActed",
    "View",
    "ViewClosed",
    "ViewOpened",
    "ViewUpdated",
]
