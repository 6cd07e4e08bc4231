"""A Workflow Builder step as the chat platform starts it, and what its inputs lack."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.ask.forms import FormRequest


@dataclass(frozen=True)
class StepStart:
    """A step as the chat platform starts it: its execution and its inputs. (The platform's
    short-lived token for it is not needed: the app completes its own steps with its own
    token, so none is kept.)"""

    execution_id: str
    project: str
    cluster_id: str
    change: str
    reason: str
    requester: str
    channel: str
    not_text: tuple[str, ...] = ()  # inputs given as something else (a number, a list…)

    def missing(self) -> list[str]:
        wanted = ("project", "cluster_id", "change", "requester", "channel")
        return [name for name in wanted if not str(getattr(self, name)).strip()]

    def problem(self) -> str | None:
        """Why the inputs cannot make a request, or None."""
        if self.not_text:
            return f"The step's input `{self.not_text[0]}` is not text; give it as a string."
        missing = self.missing()
        if missing:
            return f"The step's input `{missing[0]}` is empty; give it a value."
        return None


def form_needs(form: FormRequest, required: list[str]) -> str:
    """What a step's ``change`` lacks where a command would open a form."""
    if form.kind == "single":
        return (
            "The step's `change` names no field: give `field=value …`, e.g. `num_gpus=16` "
            "(a workflow step opens no form)."
        )
    if form.action is None or not required:
        return (
            "The step's `change` names no action: give the action and its fields, e.g. "
            "`scale_cluster additional_nodes=2` (a workflow step opens no form)."
        )
    fields = ", ".join(f"`{name}`" for name in required)
    return (
        f"`{form.action}` needs {fields}: give them in the step's `change`, e.g. "
        f"`{form.action} {required[0]}=…` (a workflow step opens no form)."
    )
