"""The core's names the listeners use besides bot.core.api (its front door, owned with the
core): answers, the form and timeline values, a Workflow step's start and the services'
types, handed on by the Slack layer so that ``handlers`` imports no other core module (an
import-linter contract)."""

from bot.core.answers import Reply as Reply
from bot.core.answers import error as error
from bot.core.answers import store_unavailable as store_unavailable
from bot.core.forms import FormKind as FormKind
from bot.core.forms import FormRequest as FormRequest
from bot.core.forms import ReadySubmission as ReadySubmission
from bot.core.forms import SubmissionErrors as SubmissionErrors
from bot.core.home import HomeActions as HomeActions
from bot.core.service import CommandService as CommandService
from bot.core.steps import StepStart as StepStart
from bot.core.timeline import TimelineRequest as TimelineRequest
from bot.core.timeline import building as building
