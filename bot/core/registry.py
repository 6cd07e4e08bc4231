"""Provider adapters per policy project, with one HTTP client per credential (SPEC §1.3)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

from bot.core.policy import Policy, PolicyHolder, ProjectCommon
from bot.errors import GpuopsError
from bot.providers.base import ProviderAdapter, RemediationDecisions, SupportsRemediations
from bot.providers.descriptor import Connection
from bot.providers.http import ClientSettings, ProviderTransport


class MissingCredential(GpuopsError, LookupError):
    def __init__(self, project: str, variable: str) -> None:
        self.project = project
        self.variable = variable
        super().__init__(f"project {project}: environment variable {variable} is not set")


class AdapterRegistry:
    """One adapter per project of the policy in force (read from its holder at each use);
    a project whose settings a reload changed gets a new one on next use."""

    def __init__(
        self,
        holder: PolicyHolder,
        *,
        env: Mapping[str, str],
        base_urls: Mapping[str, str],
        client_settings: ClientSettings,
        http_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.holder = holder
        self.env = env
        self.base_urls = dict(base_urls)  # provider → its base URL (settings or default)
        self.client_settings = client_settings
        self.http_transport = http_transport
        self._transports: dict[tuple[str, ...], ProviderTransport] = {}
        # project → its adapter and the project settings it was built from
        self._adapters: dict[str, tuple[ProjectCommon, ProviderAdapter]] = {}

    @property
    def policy(self) -> Policy:
        """The policy in force (its holder's)."""
        return self.holder.current

    def missing_credentials(self) -> list[MissingCredential]:
        """The credentials the policy in force names that the environment lacks."""
        return self.missing_for(self.policy)

    def missing_for(self, policy: Policy) -> list[MissingCredential]:
        """The credentials ``policy`` names that the environment lacks."""
        missing = []
        for name, project in policy.projects.items():
            needed = project.section.credential_variables()
            missing += [MissingCredential(name, v) for v in needed if not self.env.get(v)]
        return missing

    def _secret(self, project: str, variable: str) -> str:
        value = self.env.get(variable)
        if not value:
            raise MissingCredential(project, variable)
        return value

    def __call__(self, project: str) -> ProviderAdapter:
        return self.get(project)

    def get(self, project: str) -> ProviderAdapter:
        """The project's adapter, built again when a reload changed its settings (its HTTP
        clients stay shared by key)."""
        config = self.policy.projects[project]
        built = self._adapters.get(project)
        if built is not None and built[0] == config:
            return built[1]
        adapter = self._build(project, config)
        self._adapters[project] = (config, adapter)
        return adapter

    def remediations(self, project: str) -> RemediationDecisions:
        """The node remediations of a project whose provider has them (its adapter's)."""
        adapter = self.get(project)
        if not isinstance(adapter, SupportsRemediations):
            raise ValueError(f"project {project}: its provider has no remediations")
        return adapter.remediations()

    def _build(self, name: str, project: ProjectCommon) -> ProviderAdapter:
        provider = project.descriptor
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
        default = project.descriptor.default_base_url
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
