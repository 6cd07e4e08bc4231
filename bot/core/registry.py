"""Provider adapters per policy project, with one HTTP client per credential (SPEC §1.3)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from bot.core.policy import E2EProject, Policy, TogetherProject
from bot.providers.base import ProviderAdapter
from bot.providers.e2e import E2EAdapter, E2EClient, build_e2e_transport
from bot.providers.http import ClientSettings, ProviderTransport
from bot.providers.together import TogetherAdapter, TogetherClient, build_together_transport
from bot.providers.together.remediations import RemediationClient


class MissingCredential(LookupError):
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
        together_base_url: str,
        e2e_base_url: str,
        client_settings: ClientSettings,
        http_transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.policy = policy
        self.env = env
        self.together_base_url = together_base_url
        self.e2e_base_url = e2e_base_url
        self.client_settings = client_settings
        self.http_transport = http_transport
        self._transports: dict[tuple[str, ...], ProviderTransport] = {}
        self._adapters: dict[str, ProviderAdapter] = {}

    def missing_credentials(self) -> list[MissingCredential]:
        missing = []
        for name, project in self.policy.projects.items():
            needed = [project.api_key_env]
            if isinstance(project, E2EProject):
                needed.append(project.auth_token_env)
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

    def remediations(self, project: str) -> RemediationClient:
        """Together's node remediations of a Together project (on its adapter's client)."""
        config = self.policy.projects[project]
        if not isinstance(config, TogetherProject):
            raise ValueError(f"project {project} is not a Together project")
        return RemediationClient(self._together_transport(project, config))

    def _build(self, name: str) -> ProviderAdapter:
        project = self.policy.projects[name]
        if isinstance(project, TogetherProject):
            return TogetherAdapter(
                TogetherClient(self._together_transport(name, project), project.project_id),
                name,
            )
        return E2EAdapter(
            E2EClient(
                self._e2e_transport(name, project),
                project_id=project.project_id,
                location=project.location,
                active_iam=project.active_iam,
            ),
            name,
        )

    def _together_transport(self, name: str, project: TogetherProject) -> ProviderTransport:
        key = self._secret(name, project.api_key_env)
        base_url = project.base_url or self.together_base_url
        cache_key = ("together", base_url, key)
        if cache_key not in self._transports:
            self._transports[cache_key] = build_together_transport(
                key, base_url, self.client_settings, transport=self.http_transport
            )
        return self._transports[cache_key]

    def _e2e_transport(self, name: str, project: E2EProject) -> ProviderTransport:
        key = self._secret(name, project.api_key_env)
        token = self._secret(name, project.auth_token_env)
        base_url = project.base_url or self.e2e_base_url
        cache_key = ("e2e", base_url, key, token)
        if cache_key not in self._transports:
            self._transports[cache_key] = build_e2e_transport(
                key, token, base_url, self.client_settings, transport=self.http_transport
            )
        return self._transports[cache_key]

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()
