"""Provider adapters per policy project, with one HTTP client per credential (SPEC §1.3)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

from bot.core.policy import Policy, ProjectCommon
from bot.errors import GpuopsError
from bot.providers.base import (
    Connection,
    ProviderAdapter,
    RemediationDecisions,
    SupportsRemediations,
)
from bot.providers.catalog import descriptor
from bot.providers.http import ClientSettings, ProviderTransport


class MissingCredential(GpuopsError, LookupError):
    def __init__(self, project: str, variable: str) -> None:
        self.project = project
        self.variable = variable
        super().__init__(f"project {project}: environment variable {variable} is not set")


class AdapterRegistry:
    def __init__(
        self,
        policy: Policy,
        *,
        env: Mapping[str, str],
        base_urls: Mapping[str, str],
        client_settings: ClientSettings,
        http_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.policy = policy
        self.env = env
        self.base_urls = dict(base_urls)  # provider → its base URL (settings or default)
        self.client_settings = client_settings
        self.http_transport = http_transport
        self._transports: dict[tuple[str, ...], ProviderTransport] = {}
        self._adapters: dict[str, ProviderAdapter] = {}

    def missing_credentials(self) -> list[MissingCredential]:
        missing = []
        for name, project in self.policy.projects.items():
            needed = project.section.credential_variables()
            missing += [MissingCredential(name, v) for v in needed if not self.env.get(v)]
        return missing

    def missing_for(self, policy: Policy) -> list[MissingCredential]:
        """The credentials ``policy`` names that the environment lacks."""
        current, self.policy = self.policy, policy
        try:
            return self.missing_credentials()
        finally:
            self.policy = current

    def replace_policy(self, policy: Policy) -> None:
        """Serve ``policy`` from now on: adapters of projects whose settings changed (or that
        are gone) are built again on next use; their HTTP clients stay shared by key."""
        changed = [
            name
            for name in self._adapters
            if policy.projects.get(name) != self.policy.projects.get(name)
        ]
        for name in changed:
            del self._adapters[name]
        self.policy = policy

    def _secret(self, project: str, variable: str) -> str:
        value = self.env.get(variable)
        if not value:
            raise MissingCredential(project, variable)
        return value

    def __call__(self, project: str) -> ProviderAdapter:
        return self.get(project)

    def get(self, project: str) -> ProviderAdapter:
        adapter = self._adapters.get(project)
        if adapter is None:
            adapter = self._build(project)
            self._adapters[project] = adapter
        return adapter

    def remediations(self, project: str) -> RemediationDecisions:
        """The node remediations of a project whose provider has them (its adapter's)."""
        adapter = self.get(project)
        if not isinstance(adapter, SupportsRemediations):
            raise ValueError(f"project {project}: its provider has no remediations")
        return adapter.remediations()

    def _build(self, name: str) -> ProviderAdapter:
        project = self.policy.projects[name]
        provider = descriptor(project.provider)
        secrets = {v: self._secret(name, v) for v in project.section.credential_variables()}
        connection = Connection(
            project=name,
            section=project.section,
            base_url=self._base_url(project),
            secrets=secrets,
            client_settings=self.client_settings,
            shared=self._shared,
            http_transport=self.http_transport,
        )
        return provider.connect(connection)

    def _base_url(self, project: ProjectCommon) -> str:
        if project.base_url:
            return project.base_url
        default = descriptor(project.provider).default_base_url
        return self.base_urls.get(project.provider, default)

    def _shared(
        self, key: tuple[str, ...], build: Callable[[], ProviderTransport]
    ) -> ProviderTransport:
        if key not in self._transports:
            self._transports[key] = build()
        return self._transports[key]

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()
