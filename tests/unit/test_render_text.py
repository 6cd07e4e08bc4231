"""The demo console reads Slack markup as a person would in a Slack client."""

from __future__ import annotations

from bot.local.demo.render_text import TextRenderer
from bot.local.demo.stack import CHANNELS, USERGROUP_HANDLES, USERS

RENDER = TextRenderer(USERS, CHANNELS, USERGROUP_HANDLES)


def test_a_user_group_mention_reads_as_its_handle() -> None:
    assert RENDER.mrkdwn("approvers: <!subteam^S0PLATFORM>") == "approvers: @platform"


def test_an_unknown_user_group_keeps_its_label_or_id() -> None:
    assert RENDER.mrkdwn("<!subteam^S9OTHER|@gpu-oncall>") == "@gpu-oncall"
    assert RENDER.mrkdwn("<!subteam^S9OTHER>") == "@S9OTHER"


def test_people_links_and_channels_read_as_names() -> None:
    text = "<@U04DAVE> asked in <#C0INCIDENT>: <https://example.com/x|the runbook>"
    assert RENDER.mrkdwn(text) == "@dave asked in #incident: the runbook"


def test_every_shortcode_the_bot_uses_is_an_emoji() -> None:
    assert RENDER.mrkdwn(":scroll: Policy") == "📜 Policy"
    assert RENDER.mrkdwn(":wastebasket: :leftwards_arrow_with_hook:") == "🗑 ↩"


def test_an_unknown_shortcode_reads_as_its_words_but_times_stay() -> None:
    assert RENDER.mrkdwn(":mag_right: look") == "[mag right] look"
    assert RENDER.mrkdwn("at 09:21:04, key a:b:c") == "at 09:21:04, key a:b:c"
