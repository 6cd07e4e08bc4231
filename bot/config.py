"""Process settings from the environment and a ``.env`` file (SPEC §2).

Secrets are SecretStr so that no repr, log line or traceback shows them. ``load_settings``
turns pydantic's errors into a ConfigError naming the environment variable, without the
offending value (a database URL may hold a password).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from dotenv import dotenv_values
from pydantic import Field, PrivateAttr, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.errors import GpuopsError
from bot.providers.catalog import Catalog
from bot.providers.http import ClientSettings

Mode = Literal["serve", "socket", "demo", "check", "mcp"]

_DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres")


class ConfigError(GpuopsError):
    """The environment cannot run the requested mode; ``problems`` lists each reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def check_http_url(value: str) -> str:
    """Accept an absolute http(s) URL; the message never echoes the URL itself."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https"):
        shown = f"scheme '{parts.scheme}'" if parts.scheme else "no scheme"
        raise ValueError(f"must start with http:// or https:// (got {shown})")
    if not parts.netloc:
        raise ValueError("must name a host, as in https://host/path")
    return value


def _mask_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class Settings(BaseSettings):
    """Every environment variable of SPEC §2 plus the GPUOPS_* implementation knobs."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    gpuops_policy: Path = Path("policy.yml")
    gpuops_database_url: str = "sqlite:///gpuops.db"
    gpuops_poll_seconds: float = 15

    gpuops_followup_minutes: float = 30
    gpuops_connect_timeout: float = 5
    gpuops_total_timeout: float = 30
    gpuops_provider_attempts: int = 4
    # Backoff between provider retries (seconds) and the cap on a honoured Retry-After.
    gpuops_retry_wait_initial: float = 0.2
    gpuops_retry_wait_max: float = 5.0
    gpuops_retry_after_cap: float = 10.0
    gpuops_log_level: str = "INFO"
    # text, or one JSON object per line (SPEC §12); the CLI reads it before anything logs.
    gpuops_log_format: Literal["text", "json"] = "text"
    gpuops_usergroup_cache_seconds: float = 300
    gpuops_sweep_seconds: float = 30
    # A person's App Home tab is republished at most once per this many seconds.
    gpuops_home_refresh_seconds: float = 5
    # Agents (SPEC §15): the calls a personal token may make a minute (across replicas),
    # and the token `gpuops mcp` uses over stdio.
    gpuops_mcp_calls_per_minute: int = Field(default=60, ge=1, le=10_000)
    gpuops_mcp_token: SecretStr | None = None
    # The state store: how long to wait for a connection and for one transaction, and how
    # long a change's execution lease lasts without a heartbeat (its fencing period).
    gpuops_db_connect_timeout: float = 5
    gpuops_db_operation_timeout: float = 10
    gpuops_exec_lease_seconds: float = 30
    # A watch alert claimed but never posted (its claimer died, or the claim's commit
    # answer was lost) is taken over by a later poll after this long. Keep it well above
    # a post's own time (10 s a Slack call, three tries, plus Retry-After waits).
    gpuops_claim_takeover_seconds: float = 300
    # How often the policy file is looked at for a change (SPEC §8: at least every 30 s).
    gpuops_policy_check_seconds: float = Field(default=10, gt=0, le=30)
    # A changed policy file is read once it has had no write for this long (an editor's or
    # a ConfigMap's update in several writes is read whole).
    gpuops_policy_quiet_seconds: float = Field(default=2, gt=0, le=60)
    # Scheduled changes (SPEC §9): sent only this long after their time, else expired; and
    # how often each replica looks for due ones (one indexed query).
    gpuops_schedule_grace_seconds: float = 600
    gpuops_schedule_tick_seconds: float = 5
    # How often each replica looks whether the weekly spend digest is due (SPEC §13).
    gpuops_digest_check_seconds: float = Field(default=60, gt=0)

    # Tests and the demo only: poll watched projects this often instead of their policy's
    # watch.every_seconds (which is never below 15).
    gpuops_watch_every_seconds: float | None = Field(default=None, gt=0)
    # Tests and the demo only: provider base URLs by provider name, over each provider's
    # <NAME>_BASE_URL variable (TOGETHER_BASE_URL, E2E_BASE_URL; see base_urls).
    gpuops_provider_base_urls: dict[str, str] = Field(default_factory=dict)
    # On-call approvers (SPEC §16): each on-call tool's read has this deadline (inside the
    # 3 s of a click), and its answer is kept this long (at most 60 s).
    gpuops_oncall_deadline: float = Field(default=1.5, gt=0, le=2.5)
    gpuops_oncall_cache_seconds: float = Field(default=60, ge=0, le=60)
    # Tests and the demo only: on-call tool base URLs by tool (pagerduty, opsgenie), over
    # the policy's oncall.<tool>.base_url.
    gpuops_oncall_base_urls: dict[str, str] = Field(default_factory=dict)
    # Identifies this replica for leases (one executor / poller per request). A restarted
    # process with the same id reclaims its own interrupted work at once; default hostname.
    gpuops_instance_id: str | None = None

    _dotenv: dict[str, str] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: object, /) -> None:
        env_file = self.model_config.get("env_file")
        if isinstance(env_file, str | Path) and Path(env_file).is_file():
            self._dotenv = {k: v for k, v in dotenv_values(env_file).items() if v is not None}

    @field_validator("slack_bot_token", "slack_signing_secret", "slack_app_token")
    @classmethod
    def _blank_secret_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        return SecretStr(value.get_secret_value().strip())

    @field_validator("slack_api_url")
    @classmethod
    def _slack_url(cls, value: str) -> str:
        # slack_sdk joins method names onto the base, so it must end with a slash.
        return check_http_url(value).rstrip("/") + "/"

    @field_validator("gpuops_database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        scheme = urlsplit(value).scheme.split("+", 1)[0]
        if scheme not in _DATABASE_SCHEMES:
            raise ValueError("must be a sqlite:///… or postgresql://… URL")
        return value

    @field_validator("gpuops_poll_seconds")
    @classmethod
    def _poll_seconds(cls, value: float) -> float:
        if value < 0:
            raise ValueError("must be 0 (follow-up off) or a positive number of seconds")
        return value

    @field_validator(
        "gpuops_followup_minutes",
        "gpuops_usergroup_cache_seconds",
        "gpuops_retry_wait_initial",
        "gpuops_retry_wait_max",
        "gpuops_retry_after_cap",
        "gpuops_home_refresh_seconds",
    )
    @classmethod
    def _not_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError("must not be negative")
        return value

    @field_validator(
        "gpuops_connect_timeout",
        "gpuops_total_timeout",
        "gpuops_sweep_seconds",
        "gpuops_db_connect_timeout",
        "gpuops_db_operation_timeout",
        "gpuops_exec_lease_seconds",
        "gpuops_claim_takeover_seconds",
        "gpuops_schedule_grace_seconds",
        "gpuops_schedule_tick_seconds",
    )
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be a positive number of seconds")
        return value

    @field_validator("gpuops_provider_attempts")
    @classmethod
    def _attempts(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator("gpuops_log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("gpuops_log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in logging.getLevelNamesMapping():
            raise ValueError("must be one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return level

    def __repr_args__(self) -> Iterator[tuple[str | None, object]]:
        for name, value in super().__repr_args__():
            if name == "gpuops_database_url" and isinstance(value, str):
                yield name, _mask_password(value)
            else:
                yield name, value

    def require_for(self, mode: Mode) -> None:
        """Raise ConfigError naming each variable ``gpuops <mode>`` needs but lacks."""
        problems: list[str] = []
        if mode == "demo":
            return
        problems += _token_problems(self.slack_bot_token, "SLACK_BOT_TOKEN", "xoxb-", mode)
        if mode == "serve":
            if self.slack_signing_secret is None:
                problems.append(f"SLACK_SIGNING_SECRET is not set; `gpuops {mode}` needs it")
        elif mode == "socket":
            problems += _token_problems(self.slack_app_token, "SLACK_APP_TOKEN", "xapp-", mode)
        elif mode == "mcp":
            pass  # it posts proposals with the bot token and takes no Slack request
        else:
            if self.slack_signing_secret is None and self.slack_app_token is None:
                problems.append(
                    "neither SLACK_SIGNING_SECRET (for `gpuops serve`) nor "
                    "SLACK_APP_TOKEN (for `gpuops socket`) is set"
                )
            if self.slack_app_token is not None:
                problems += _token_problems(self.slack_app_token, "SLACK_APP_TOKEN", "xapp-", mode)
        if problems:
            raise ConfigError(problems)

    def base_urls(self, catalog: Catalog) -> dict[str, str]:
        """Each provider's base URL, by provider name: the one given here, else its
        ``<NAME>_BASE_URL`` variable (environment, then ``.env``), else its default. A URL
        that is not http(s) raises ConfigError naming the variable (never the value)."""
        urls: dict[str, str] = {}
        problems: list[str] = []
        for provider in catalog:
            variable = provider.base_url_variable
            raw = self.gpuops_provider_base_urls.get(provider.name) or self.credential(variable)
            try:
                urls[provider.name] = check_http_url(raw) if raw else provider.default_base_url
            except ValueError as exc:
                problems.append(f"{variable}: {exc}")
        if problems:
            raise ConfigError(problems)
        return urls

    def client_settings(self) -> ClientSettings:
        return ClientSettings(
            connect_timeout=self.gpuops_connect_timeout,
            total_timeout=self.gpuops_total_timeout,
            attempts=self.gpuops_provider_attempts,
            wait_initial=self.gpuops_retry_wait_initial,
            wait_max=self.gpuops_retry_wait_max,
            retry_after_cap=self.gpuops_retry_after_cap,
        )

    def secret_values(self) -> list[str]:
        """Every secret this object holds, for bot.redact.register_secret."""
        secrets = [
            s.get_secret_value()
            for s in (
                self.slack_bot_token,
                self.slack_signing_secret,
                self.slack_app_token,
                self.gpuops_mcp_token,
            )
            if s is not None
        ]
        password = urlsplit(self.gpuops_database_url).password
        if password:
            secrets.append(password)
        return secrets

    def environment(self) -> dict[str, str]:
        """The process environment over the ``.env`` file's values: where provider
        credentials named by the policy are looked up (e.g. AdapterRegistry's ``env``)."""
        return {**self._dotenv, **os.environ}

    def credential(self, name: str) -> str | None:
        """The value of the environment variable ``name`` (a provider credential named by
        the policy), from the process environment or else the ``.env`` file; blank = unset."""
        value = (os.environ.get(name) or self._dotenv.get(name) or "").strip()
        return value or None


def _token_problems(token: SecretStr | None, variable: str, prefix: str, mode: Mode) -> list[str]:
    if token is None:
        command = "check-config" if mode == "check" else mode
        return [f"{variable} is not set; `gpuops {command}` needs it ({prefix}…)"]
    if not token.get_secret_value().startswith(prefix):
        return [f"{variable} must start with {prefix} (the value set does not)"]
    return []


def load_settings(catalog: Catalog, **overrides: Any) -> Settings:
    """Build Settings, turning validation errors into a ConfigError that names each
    environment variable and never repeats the value it holds (the base URL of each of
    ``catalog``'s providers included)."""
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for error in exc.errors(include_input=False, include_url=False):
            variable = ".".join(str(part) for part in error["loc"]).upper() or "settings"
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{variable}: {message}")
        raise ConfigError(problems) from None
    settings.base_urls(catalog)  # a bad provider URL is refused at start, like any setting
    return settings
