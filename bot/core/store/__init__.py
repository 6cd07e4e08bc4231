"""The state store: ``Store`` and its records, errors and schema; import them from here."""

from bot.core.store.db import Store as Store
from bot.core.store.engine import normalize_database_url as normalize_database_url
from bot.core.store.errors import StoreNotReady as StoreNotReady
from bot.core.store.errors import StoreUnavailable as StoreUnavailable
from bot.core.store.oncall import ApprovalCopy as ApprovalCopy
from bot.core.store.records import KNOWN_OUTCOMES as KNOWN_OUTCOMES
from bot.core.store.records import REQUEST_ID_ALPHABET as REQUEST_ID_ALPHABET
from bot.core.store.records import REQUEST_ID_PREFIX as REQUEST_ID_PREFIX
from bot.core.store.records import TERMINAL_STATES as TERMINAL_STATES
from bot.core.store.records import AuditEntry as AuditEntry
from bot.core.store.records import AuditRow as AuditRow
from bot.core.store.records import ChangeRequestRecord as ChangeRequestRecord
from bot.core.store.records import ClusterRef as ClusterRef
from bot.core.store.records import Lease as Lease
from bot.core.store.records import OpenBeside as OpenBeside
from bot.core.store.records import OutcomeRecorded as OutcomeRecorded
from bot.core.store.records import RequestState as RequestState
from bot.core.store.records import new_request_id as new_request_id
from bot.core.store.records import normalize_request_id as normalize_request_id
from bot.core.store.requests import RevertTaken as RevertTaken
from bot.core.store.requests import Started as Started
from bot.core.store.requests import StartedHow as StartedHow
from bot.core.store.requests import StepTaken as StepTaken
from bot.core.store.tables import change_requests as change_requests
from bot.core.store.tables import metadata as metadata
