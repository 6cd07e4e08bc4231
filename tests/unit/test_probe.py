"""bot.providers.probe: the fields a provider's reply has that its model does not know, and
the ones the model declares that the reply lacks, at any depth, each named once."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bot.providers.probe import Differences, differences


class _Node(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    ip: str | None = None


class _Cluster(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: int
    nodes: list[_Node] = Field(default_factory=list)
    owner: str | None = Field(default=None, alias="createdBy")


def test_a_reply_that_matches_its_model_has_no_differences() -> None:
    reply = _Cluster.model_validate(
        {"id": 1, "nodes": [{"name": "a", "ip": "x"}], "createdBy": "u"}
    )
    assert differences([reply]) == Differences((), ())


def test_unknown_and_missing_fields_are_named_by_path_once() -> None:
    replies = [
        _Cluster.model_validate({"id": 1, "nodes": [{"name": "a", "gpu": 8}, {"name": "b"}]}),
        _Cluster.model_validate({"id": 2, "zone": "z", "createdBy": "u", "nodes": []}),
    ]
    assert differences(replies) == Differences(
        unknown=("nodes[].gpu", "zone"), missing=("createdBy", "nodes[].ip")
    )
