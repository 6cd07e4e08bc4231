"""What `gpuops --help`, `--version` and each command's help say: plain text, every option
explained with its default."""

from __future__ import annotations

import pytest

from bot.cli import main


def help_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*args, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_the_top_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(help_of(capsys).split())
    assert "``" not in text and ":mod:" not in text
    assert "Together AI and E2E Networks" in text
    for command in ("demo", "serve", "socket", "simulate", "check-config"):
        assert command in text


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpuops {version('gpuops')}"


@pytest.mark.parametrize("command", ["serve", "socket"])
def test_host_and_port_say_what_they_are_and_their_defaults(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.delenv("GPUOPS_PORT", raising=False)
    text = " ".join(help_of(capsys, command).split())
    assert "--host HOST" in text and "(default: 0.0.0.0, every interface)" in text
    assert "--port PORT its port (default: GPUOPS_PORT, else 3000)" in text


def test_gpuops_port_sets_the_default_port(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from bot.cli import _listen_arguments

    monkeypatch.setenv("GPUOPS_PORT", "8080")
    parser = argparse.ArgumentParser()
    _listen_arguments(parser, "where")
    assert parser.parse_args([]).port == 8080


def test_check_config_takes_a_policy_file_and_online(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(help_of(capsys, "check-config").split())
    assert "--policy FILE the policy file (default: GPUOPS_POLICY)" in text
    assert "--online also run auth.test" in text
