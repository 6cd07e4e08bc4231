"""Every exception gpuops defines derives from one root, ``bot.errors.GpuopsError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import bot
from bot.core.store import StoreUnavailable
from bot.errors import GpuopsError
from bot.providers.errors import ProviderError, RuleViolation

# The simulators and the Slack stand-in play the providers and Slack: their errors are
# theirs, not gpuops's.
NOT_GPUOPS = "bot.local"


def _exceptions_defined_in_bot() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(bot.__path__, prefix="bot."):
        name = module_info.name
        if name == NOT_GPUOPS or name.startswith(NOT_GPUOPS + "."):
            continue
        module = importlib.import_module(name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == name and issubclass(cls, BaseException):
                found[f"{name}.{cls.__qualname__}"] = cls
    return found


def test_every_exception_in_bot_derives_from_the_root() -> None:
    found = _exceptions_defined_in_bot()
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, GpuopsError))
    assert outside == []
    # The walk reached the layers: the providers', the core's, the Slack layer's, the config's.
    assert {
        "bot.providers.errors.ProviderError",
        "bot.core.store.errors.StoreUnavailable",
        "bot.core.policy.loading.PolicyError",
        "bot.slack.messenger.SlackDeliveryError",
        "bot.config.ConfigError",
    } <= found.keys()


def test_the_provider_root_hangs_under_the_application_root() -> None:
    assert issubclass(ProviderError, GpuopsError)
    assert issubclass(StoreUnavailable, GpuopsError)


def test_a_value_error_stays_a_value_error() -> None:
    """Callers that catch ``ValueError`` (pydantic validators among them) still do."""
    assert issubclass(RuleViolation, ValueError)
    assert issubclass(RuleViolation, GpuopsError)
