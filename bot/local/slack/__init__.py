"""A local stand-in for Slack: a fake Web API (``FakeSlack``) the bot talks to through
``SLACK_API_URL``, and a sender (``SlackSender``) that posts signed requests to the bot's
``/slack/events`` as Slack does (or as Socket Mode envelopes, ``SlackSender.over_socket_mode``,
through the fake's ``SocketModeHub``). Used by ``gpuops demo``, the integration tests and the
benchmarks."""

from bot.local.slack.models import (
    Ephemeral,
    EphemeralPosted,
    ErrorShown,
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
from bot.local.slack.socket_mode import SocketAck, SocketModeHub

__all__ = [
    "Ephemeral",
    "EphemeralPosted",
    "ErrorShown",
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
    "SocketAck",
    "SocketModeHub",
    "Tamper",
    "UserActed",
    "View",
    "ViewClosed",
    "ViewOpened",
    "ViewUpdated",
]
