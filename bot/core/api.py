"""The core's front door for the listeners (``handlers``): the services they call and the
records, answers and errors those hand out. Handlers import the core only from here (an
import-linter contract and ``tests/unit/test_import_graph.py``), never from its rooms."""

from bot.core.answers import Reply as Reply
from bot.core.answers import error as error
from bot.core.answers import store_unavailable as store_unavailable
from bot.core.ask.change import ChangeAsk as ChangeAsk
from bot.core.ask.forms import FormKind as FormKind
from bot.core.ask.forms import FormRequest as FormRequest
from bot.core.ask.forms import SubmissionErrors as SubmissionErrors
from bot.core.builder_steps.runner import BuilderSteps as BuilderSteps
from bot.core.builder_steps.start import StepStart as StepStart
from bot.core.home import HomeActions as HomeActions
from bot.core.home_refresh import HomeRefresher as HomeRefresher
from bot.core.requests.deciders import Decision as Decision
from bot.core.requests.decisions import NeedsBreakGlass as NeedsBreakGlass
from bot.core.service import CommandService as CommandService
from bot.core.store import TERMINAL_STATES as TERMINAL_STATES
from bot.core.store import ChangeRequestRecord as ChangeRequestRecord
from bot.core.store import RequestState as RequestState
from bot.core.store import StoreUnavailable as StoreUnavailable
from bot.core.store.builder_steps import StepOutcome as StepOutcome
from bot.core.store.builder_steps import StepRecord as StepRecord
from bot.core.store.watch import RemediationDecision as RemediationDecision
from bot.core.store.watch import RemediationRecord as RemediationRecord
from bot.core.timeline import TimelineRequest as TimelineRequest
from bot.core.timeline import building as building
from bot.core.watch.remediations import RemediationDesk as RemediationDesk
