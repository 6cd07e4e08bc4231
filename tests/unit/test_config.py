"""Settings from the environment and .env: defaults, validation, secrets kept secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import ConfigError, Settings, load_settings
from bot.providers.http import ClientSettings
from tests.support.catalog import CATALOG

ENV_VARS = (
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_APP_TOKEN",
    "SLACK_API_URL",
    "GPUOPS_POLICY",
    "GPUOPS_DATABASE_URL",
    "TOGETHER_BASE_URL",
    "E2E_BASE_URL",
    "GPUOPS_POLL_SECONDS",
    "GPUOPS_FOLLOWUP_MINUTES",
    "GPUOPS_CONNECT_TIMEOUT",
    "GPUOPS_TOTAL_TIMEOUT",
    "GPUOPS_PROVIDER_ATTEMPTS",
    "GPUOPS_LOG_LEVEL",
    "GPUOPS_USERGROUP_CACHE_SECONDS",
    "GPUOPS_SWEEP_SECONDS",
    "TOGETHER_API_KEY",
)

BOT = "xoxb-1111-2222-bottokenvalue"
APP = "xapp-1-A111-3333-apptokenvalue"
SIGNING = "8f14e45fceea167a5a36dedd4bea2543"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_match_the_spec() -> None:
    s = Settings()
    assert s.slack_bot_token is None
    assert s.slack_api_url == "https://slack.com/api/"
    assert s.gpuops_policy == Path("policy.yml")
    assert s.gpuops_database_url == "sqlite:///gpuops.db"
    assert s.base_urls(CATALOG) == {
        "together": "https://api.together.ai/v1",
        "e2e": "https://api.e2enetworks.com/myaccount/api/v1/gpu",
    }
    assert s.gpuops_poll_seconds == 15
    assert s.gpuops_followup_minutes == 30
    assert s.gpuops_provider_attempts == 4
    assert s.gpuops_log_level == "INFO"


def test_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT)
    monkeypatch.setenv("GPUOPS_POLICY", "/etc/gpuops/policy.yml")
    monkeypatch.setenv("GPUOPS_POLL_SECONDS", "0")
    monkeypatch.setenv("SLACK_API_URL", "http://127.0.0.1:8080/api")
    monkeypatch.setenv("GPUOPS_LOG_LEVEL", "debug")
    s = Settings()
    assert s.slack_bot_token is not None
    assert s.slack_bot_token.get_secret_value() == BOT
    assert s.gpuops_policy == Path("/etc/gpuops/policy.yml")
    assert s.gpuops_poll_seconds == 0
    assert s.slack_api_url == "http://127.0.0.1:8080/api/"
    assert s.gpuops_log_level == "DEBUG"


def test_reads_a_dotenv_file_and_the_environment_wins(
    monkeypatch: pytest.MonkeyPatch, clean_env: Path
) -> None:
    (clean_env / ".env").write_text(
        f"SLACK_BOT_TOKEN={BOT}\nGPUOPS_POLL_SECONDS=5\nTOGETHER_API_KEY=tk-from-dotenv\n"
        "UNRELATED=1\n"
    )
    monkeypatch.setenv("GPUOPS_POLL_SECONDS", "7")
    s = Settings()
    assert s.slack_bot_token is not None
    assert s.slack_bot_token.get_secret_value() == BOT
    assert s.gpuops_poll_seconds == 7
    assert s.credential("TOGETHER_API_KEY") == "tk-from-dotenv"
    monkeypatch.setenv("TOGETHER_API_KEY", "tk-from-env")
    assert s.credential("TOGETHER_API_KEY") == "tk-from-env"
    assert s.credential("E2E_API_KEY") is None
    assert s.environment()["TOGETHER_API_KEY"] == "tk-from-env"
    assert s.environment()["UNRELATED"] == "1"


def test_blank_secret_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "  ")
    assert Settings().slack_signing_secret is None


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("GPUOPS_POLL_SECONDS", "-1", "GPUOPS_POLL_SECONDS: must be 0 (follow-up off)"),
        ("GPUOPS_POLL_SECONDS", "soon", "GPUOPS_POLL_SECONDS: Input should be a valid number"),
        ("TOGETHER_BASE_URL", "ftp://files.example/v1", "TOGETHER_BASE_URL: must start with http"),
        ("E2E_BASE_URL", "api/v1/gpu", "E2E_BASE_URL: must start with http"),
        ("SLACK_API_URL", "https://", "SLACK_API_URL: must name a host"),
        ("GPUOPS_DATABASE_URL", "mysql://u:hunter22@db/x", "GPUOPS_DATABASE_URL: must be a sqlite"),
        ("GPUOPS_CONNECT_TIMEOUT", "0", "GPUOPS_CONNECT_TIMEOUT: must be a positive"),
        ("GPUOPS_PROVIDER_ATTEMPTS", "0", "GPUOPS_PROVIDER_ATTEMPTS: must be at least 1"),
        ("GPUOPS_LOG_LEVEL", "LOUD", "GPUOPS_LOG_LEVEL: must be one of"),
    ],
)
def test_invalid_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as caught:
        load_settings(CATALOG)
    assert expected in str(caught.value)
    assert "hunter22" not in str(caught.value)


def test_postgres_url_is_accepted_and_its_password_is_masked_and_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPUOPS_DATABASE_URL", "postgresql+asyncpg://gpuops:hunter22@db:5432/gpuops")
    s = load_settings(CATALOG)
    assert "hunter22" not in repr(s)
    assert "gpuops:***@db" in repr(s)
    assert "hunter22" in s.secret_values()


def test_secrets_never_appear_in_repr_or_str(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SIGNING)
    s = Settings()
    for text in (repr(s), str(s), f"{s}", str(s.model_dump())):
        for secret in (BOT, APP, SIGNING):
            assert secret not in text


def test_secret_values_lists_every_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().secret_values() == []
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP)
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SIGNING)
    assert sorted(Settings().secret_values()) == sorted([BOT, APP, SIGNING])


def test_client_settings_carry_timeouts_and_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUOPS_CONNECT_TIMEOUT", "1.5")
    monkeypatch.setenv("GPUOPS_TOTAL_TIMEOUT", "12")
    monkeypatch.setenv("GPUOPS_PROVIDER_ATTEMPTS", "2")
    cs = Settings().client_settings()
    assert isinstance(cs, ClientSettings)
    assert (cs.connect_timeout, cs.total_timeout, cs.attempts) == (1.5, 12, 2)


def _problems(settings: Settings, mode: str) -> str:
    with pytest.raises(ConfigError) as caught:
        settings.require_for(mode)  # type: ignore[arg-type]
    return str(caught.value)


def test_serve_needs_bot_token_and_signing_secret() -> None:
    text = _problems(Settings(), "serve")
    assert "SLACK_BOT_TOKEN is not set" in text
    assert "SLACK_SIGNING_SECRET is not set" in text
    text = _problems(Settings(slack_bot_token=BOT), "serve")
    assert "SLACK_BOT_TOKEN" not in text
    assert "SLACK_SIGNING_SECRET is not set" in text
    Settings(slack_bot_token=BOT, slack_signing_secret=SIGNING).require_for("serve")


def test_socket_needs_bot_token_and_app_token() -> None:
    text = _problems(Settings(slack_bot_token=BOT), "socket")
    assert "SLACK_APP_TOKEN is not set" in text
    assert "SLACK_SIGNING_SECRET" not in text
    Settings(slack_bot_token=BOT, slack_app_token=APP).require_for("socket")


def test_tokens_with_the_wrong_prefix_are_refused_without_echoing_them() -> None:
    swapped = Settings(slack_bot_token=APP, slack_app_token=BOT)
    text = _problems(swapped, "socket")
    assert "SLACK_BOT_TOKEN must start with xoxb-" in text
    assert "SLACK_APP_TOKEN must start with xapp-" in text
    assert APP not in text
    assert BOT not in text
    text = _problems(
        Settings(slack_bot_token="xoxp-user-token", slack_signing_secret=SIGNING), "serve"
    )
    assert "SLACK_BOT_TOKEN must start with xoxb-" in text


def test_demo_needs_nothing() -> None:
    Settings().require_for("demo")


def test_check_needs_a_bot_token_and_one_way_to_receive_events() -> None:
    text = _problems(Settings(), "check")
    assert "SLACK_BOT_TOKEN is not set" in text
    assert "neither SLACK_SIGNING_SECRET" in text
    Settings(slack_bot_token=BOT, slack_signing_secret=SIGNING).require_for("check")
    Settings(slack_bot_token=BOT, slack_app_token=APP).require_for("check")
    text = _problems(Settings(slack_bot_token=BOT, slack_app_token="wrong"), "check")
    assert "SLACK_APP_TOKEN must start with xapp-" in text
