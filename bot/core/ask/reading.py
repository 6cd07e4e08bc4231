"""Reading a command's text once (``ReadCommand``): ``/gpu …`` as typed, or a Workflow
Builder step's inputs read as ``/gpu <verb> <project> <cluster_id> <change>`` is."""

from __future__ import annotations

from dataclasses import dataclass, field

from bot.core.ask.forms import FormRequest, Forms
from bot.core.ask.grammar import ChangeCommand, Command, UsageError, parse_change, parse_command


@dataclass(frozen=True)
class ReadCommand:
    """A command's text read once: the command, or why it does not fit the grammar; for a
    change, the fields its action does not take (refused with the command, never dropped on
    the way to a form) and the form it opens, known from the text alone (no provider call,
    no group look-up), so that a surface can open the form before doing the work."""

    text: str
    command: Command | None = None
    usage: str | None = None  # the grammar's refusal, when ``command`` is None
    unknown: dict[str, str] = field(default_factory=dict)
    form: FormRequest | None = None


class Reader:
    """Reads commands into ``ReadCommand``s: the grammar, then for a change the fields its
    action does not take and the form it opens."""

    def __init__(self, forms: Forms) -> None:
        self.forms = forms

    def read(self, channel: str, text: str) -> ReadCommand:
        """``/gpu text`` typed in ``channel``."""
        try:
            command = parse_command(text, self.forms.access.catalog)
        except UsageError as exc:
            return ReadCommand(text, usage=str(exc))
        return self._with_form(channel, text, command)

    def read_change(
        self,
        channel: str,
        verb: str,
        project: str,
        cluster_id: str,
        change: str,
        reason: str,
        *,
        source: str = "step",
    ) -> ReadCommand:
        """A change given in parts (a workflow step's inputs, an agent's proposal); its text,
        after ``source``, is how it is audited."""
        text = f"{source} {verb} {project} {cluster_id} {change}"
        try:
            command = parse_change(
                verb, project, cluster_id, change, reason, self.forms.access.catalog
            )
        except UsageError as exc:
            return ReadCommand(text, usage=str(exc))
        return self._with_form(channel, text, command)

    def _with_form(self, channel: str, text: str, command: Command) -> ReadCommand:
        if not isinstance(command, ChangeCommand):
            return ReadCommand(text, command)
        unknown = self.forms.unknown_fields(command.project, command.action, command.fields)
        if unknown:  # refused with the command: no form opens for it
            return ReadCommand(text, command, unknown=unknown)
        return ReadCommand(text, command, form=self.forms.request_for(channel, command))
