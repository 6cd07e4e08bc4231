"""Change requests: create, read, list, and the compare-and-set transitions (optionally fenced
by an execution lease), including the idempotent recording of a provider outcome.

Every transition is one transaction: the state's compare-and-set together with its audit
entry (and the chain head), and for an execution's start and end the lease, the cluster lock
and the call deadline too. On SQLite the usual opening, start and finish are one statement
each, the request row's write, whose triggers do the rest (bot.core.store.trigger_work); a
start or a finish that finds things otherwise goes on step by step in the same transaction.

The rooms: ``reads`` (one request, counts, lists), ``opening`` (a new request),
``writes`` (transitions, fields, approvals), ``execution`` (start, claim, finish, outcome),
``fast_path`` (SQLite's single statements), with the statements they share in
``statements`` and what they answer besides a record in ``outcomes``.
"""

from bot.core.store.requests.execution import ExecutionMixin
from bot.core.store.requests.opening import OpeningMixin
from bot.core.store.requests.outcomes import RevertTaken as RevertTaken
from bot.core.store.requests.outcomes import Started as Started
from bot.core.store.requests.outcomes import StartedHow as StartedHow
from bot.core.store.requests.outcomes import StepTaken as StepTaken
from bot.core.store.requests.writes import WritesMixin


class RequestsMixin(OpeningMixin, WritesMixin, ExecutionMixin):
    """Every change-request method of the store."""
