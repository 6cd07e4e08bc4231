"""Validate requests and responses against the provider specs in tests/specs/ (copied into
the repository with their sources: tests/specs/SOURCES.md).

    spec = load_spec("together-compute-clusters.DERIVED-from-sdk.yaml")
    spec.validate_request("PUT", "/compute/clusters/{cluster_id}", query={}, body={...})
    spec.validate_response("GET", "/compute/clusters", 200, body)

Request bodies are checked strictly: besides the schema, every top-level key must be a
declared property (the specs leave additionalProperties open; a client must not send
fields the API does not define).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import yaml
from openapi_schema_validator import OAS30Validator, OAS31Validator

SPECS_DIR = Path(__file__).resolve().parents[1] / "specs"


class ContractError(AssertionError):
    pass


class Spec:
    def __init__(self, document: dict[str, Any]) -> None:
        self.doc = document
        version = str(document.get("openapi", "3.0"))
        self.validator_cls = OAS31Validator if version.startswith("3.1") else OAS30Validator

    # -- lookup -----------------------------------------------------------------------
    def operation(self, method: str, path: str) -> dict[str, Any]:
        item = self.doc["paths"].get(path)
        if item is None:
            raise ContractError(f"path {path} is not in the spec")
        op = item.get(method.lower())
        if op is None:
            raise ContractError(f"{method} {path} is not in the spec")
        return dict(op, _path_parameters=item.get("parameters", []))

    def match_path(self, concrete: str, prefix: str = "") -> str:
        """The spec's path template that a concrete request path matches."""
        if prefix and concrete.startswith(prefix):
            concrete = concrete[len(prefix) :]
        for template in self.doc["paths"]:
            pattern = (
                "^"
                + re.sub(
                    r"\{[^/]+\}",
                    "[^/]+",
                    re.escape(template).replace(r"\{", "{").replace(r"\}", "}"),
                )
                + "$"
            )
            if re.match(pattern, concrete):
                return str(template)
        raise ContractError(f"no spec path matches {concrete}")

    def resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node and len(node) == 1:
            ref = node["$ref"]
            assert ref.startswith("#/")
            target: Any = self.doc
            for part in ref[2:].split("/"):
                target = target[part]
            node = target
        return node

    def _validate(self, schema: dict[str, Any], value: Any, what: str) -> None:
        root = dict(schema)
        root["components"] = self.doc.get("components", {})
        validator = self.validator_cls(root)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
        if errors:
            detail = "; ".join(f"{list(e.path)}: {e.message}" for e in errors[:5])
            raise ContractError(f"{what} does not match the spec: {detail}")

    def _properties(self, schema: Any) -> set[str] | None:
        schema = self.resolve(schema)
        if not isinstance(schema, dict):
            return None
        if "allOf" in schema:
            props: set[str] = set()
            for part in schema["allOf"]:
                got = self._properties(part)
                if got is None:
                    return None
                props |= got
            return props
        if "properties" in schema:
            return set(schema["properties"])
        return None

    # -- checks -----------------------------------------------------------------------
    def validate_request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        ignore_query: tuple[str, ...] = (),
    ) -> None:
        op = self.operation(method, path)
        params = [self.resolve(p) for p in op["_path_parameters"] + op.get("parameters", [])]
        query_params = {p["name"]: p for p in params if p.get("in") == "query"}
        security = self.doc.get("components", {}).get("securitySchemes", {})
        auth_query = {s["name"] for s in security.values() if s.get("in") == "query"}
        query = dict(query or {})
        for name in query:
            if name not in query_params and name not in auth_query and name not in ignore_query:
                raise ContractError(f"{method} {path}: query parameter {name!r} is not in the spec")
        for name, param in query_params.items():
            if param.get("required") and name not in query:
                raise ContractError(f"{method} {path}: required query parameter {name!r} missing")
            if name in query:
                self._validate_param(param, query[name], f"{method} {path} query {name}")
        request_body = op.get("requestBody")
        if request_body is None:
            if body not in (None, b"", ""):
                raise ContractError(f"{method} {path} takes no body")
            return
        schema = request_body["content"]["application/json"]["schema"]
        if body is None:
            if request_body.get("required"):
                raise ContractError(f"{method} {path}: body required")
            return
        self._validate(schema, body, f"{method} {path} request body")
        allowed = self._properties(schema)
        if allowed is not None and isinstance(body, dict):
            extra = set(body) - allowed
            if extra:
                raise ContractError(f"{method} {path}: body has undeclared fields {sorted(extra)}")

    def _validate_param(self, param: dict[str, Any], raw: Any, what: str) -> None:
        schema = self.resolve(param.get("schema", {}))
        value: Any = raw
        if schema.get("type") == "array" and isinstance(raw, str):
            value = raw.split(",")  # the official SDKs' array format for query parameters
        elif schema.get("type") == "integer":
            try:
                value = int(str(raw))
            except ValueError:
                raise ContractError(f"{what}: {raw!r} is not an integer") from None
        self._validate(schema, value, what)

    def validate_response(self, method: str, path: str, status: int, body: Any) -> None:
        op = self.operation(method, path)
        responses = op.get("responses", {})
        spec_response = responses.get(str(status)) or responses.get("default")
        if spec_response is None:
            # The specs document only some statuses; the 2xx ones must exist.
            if 200 <= status < 300:
                raise ContractError(f"{method} {path}: status {status} is not documented")
            return
        content = spec_response.get("content", {}).get("application/json")
        if content is None:
            return
        self._validate(content["schema"], body, f"{method} {path} {status} response")


@functools.cache
def load_spec(name: str) -> Spec:
    with open(SPECS_DIR / name, encoding="utf-8") as fh:
        return Spec(yaml.safe_load(fh))


TOGETHER_SPEC = "together-compute-clusters.DERIVED-from-sdk.yaml"
TOGETHER_OFFICIAL_SPEC = "together-openapi.yaml"
E2E_SPEC = "e2e-tir-training-cluster.reconstructed.openapi.yaml"
