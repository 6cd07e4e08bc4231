"""What a chat layer uses of the core besides its services: the records, answers and errors
they hand out (import them from here, never from the store or the workflow)."""

from bot.core.ask.change import ChangeAsk as ChangeAsk
from bot.core.requests.decisions import Decision as Decision
from bot.core.requests.decisions import NeedsBreakGlass as NeedsBreakGlass
from bot.core.store import TERMINAL_STATES as TERMINAL_STATES
from bot.core.store import ChangeRequestRecord as ChangeRequestRecord
from bot.core.store import RequestState as RequestState
from bot.core.store import StoreUnavailable as StoreUnavailable
from bot.core.store.builder_steps import StepOutcome as StepOutcome
from bot.core.store.builder_steps import StepRecord as StepRecord
from bot.core.store.watch import RemediationDecision as RemediationDecision
from bot.core.store.watch import RemediationRecord as RemediationRecord
from bot.core.watch.remediations import RemediationDesk as RemediationDesk
