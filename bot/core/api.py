"""The core's front door for what stands above it: the listeners (``handlers``) and the Slack
layer (``bot.slack``) import the core only from here, never from its rooms (import-linter
contracts and ``tests/unit/test_import_graph.py``). It hands on the services the listeners
call, the records, answers and errors those hand out, and what the Slack layer renders and
implements: the answers' shapes, request views and their words, the Home's data, the
notifier ports and their events, the watcher's events."""

from bot.core.answers import AuditListing as AuditListing
from bot.core.answers import ClusterCard as ClusterCard
from bot.core.answers import ClusterListing as ClusterListing
from bot.core.answers import HelpCard as HelpCard
from bot.core.answers import Notice as Notice
from bot.core.answers import PolicyCard as PolicyCard
from bot.core.answers import Reply as Reply
from bot.core.answers import error as error
from bot.core.answers import store_unavailable as store_unavailable
from bot.core.ask.change import ChangeAsk as ChangeAsk
from bot.core.ask.forms import FormKind as FormKind
from bot.core.ask.forms import FormMessage as FormMessage
from bot.core.ask.forms import FormRequest as FormRequest
from bot.core.ask.forms import FormView as FormView
from bot.core.ask.forms import SubmissionErrors as SubmissionErrors
from bot.core.ask.justification import MAX_JUSTIFICATION as MAX_JUSTIFICATION
from bot.core.ask.justification import MIN_JUSTIFICATION as MIN_JUSTIFICATION
from bot.core.builder_steps.completer import CompletionFailed as CompletionFailed
from bot.core.builder_steps.runner import BuilderSteps as BuilderSteps
from bot.core.builder_steps.start import StepStart as StepStart
from bot.core.fleet import age_text as age_text
from bot.core.home import HomeActions as HomeActions
from bot.core.home import HomeBuilder as HomeBuilder
from bot.core.home import HomeCluster as HomeCluster
from bot.core.home import HomeData as HomeData
from bot.core.home import HomeProject as HomeProject
from bot.core.home import HomeRequest as HomeRequest
from bot.core.home_refresh import HomeRefresher as HomeRefresher
from bot.core.notifier import EventKind as EventKind
from bot.core.notifier import NotDelivered as NotDelivered
from bot.core.notifier import RequestEvent as RequestEvent
from bot.core.notifier import Tone as Tone
from bot.core.paging import Page as Page
from bot.core.policy import PolicyHolder as PolicyHolder
from bot.core.policy import Role as Role
from bot.core.requests.deciders import Decision as Decision
from bot.core.requests.decisions import NeedsBreakGlass as NeedsBreakGlass
from bot.core.requests.schedule import example_run_at as example_run_at
from bot.core.requests.schedule import utc_text as utc_text
from bot.core.requests.schedule import when_text as when_text
from bot.core.requests.view import STATE_WORDS as STATE_WORDS
from bot.core.requests.view import RequestView as RequestView
from bot.core.requests.view import revertible as revertible
from bot.core.requests.view import view_of as view_of
from bot.core.service import CommandService as CommandService
from bot.core.store import TERMINAL_STATES as TERMINAL_STATES
from bot.core.store import ChangeRequestRecord as ChangeRequestRecord
from bot.core.store import RequestState as RequestState
from bot.core.store import StoreUnavailable as StoreUnavailable
from bot.core.store.builder_steps import StepOutcome as StepOutcome
from bot.core.store.builder_steps import StepRecord as StepRecord
from bot.core.store.watch import RemediationDecision as RemediationDecision
from bot.core.store.watch import RemediationRecord as RemediationRecord
from bot.core.timeline import Timeline as Timeline
from bot.core.timeline import TimelineRequest as TimelineRequest
from bot.core.timeline import building as building
from bot.core.timeline import nothing_to_list as nothing_to_list
from bot.core.timeline import shared_comment as shared_comment
from bot.core.watch.health import GONE as GONE
from bot.core.watch.health import HealthEvent as HealthEvent
from bot.core.watch.notifier import DecisionOutcome as DecisionOutcome
from bot.core.watch.notifier import ReservationReminder as ReservationReminder
from bot.core.watch.remediations import RemediationDesk as RemediationDesk
