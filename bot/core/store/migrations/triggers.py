"""Migration 11: SQLite's triggers that make opening, starting and finishing a change one
statement each (bot.core.store.trigger_work)."""

from __future__ import annotations

from sqlalchemy import (
    Connection,
    text,
)

_V11_AUDIT_APPEND = """
  SELECT RAISE(ABORT, 'gpuops: the audit chain head moved')
   WHERE json_extract(NEW.last_transition, '$.audit') IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM gpuops_audit_chain WHERE name = 'audit'
       AND last_hash = json_extract(NEW.last_transition, '$.audit.prev_hash'));
  INSERT INTO gpuops_audit
    (at, actor, event, project, cluster_id, request_id, outcome, detail, prev_hash, hash)
  SELECT NEW.updated_at,
    json_extract(NEW.last_transition, '$.audit.actor'),
    json_extract(NEW.last_transition, '$.audit.event'),
    json_extract(NEW.last_transition, '$.audit.project'),
    json_extract(NEW.last_transition, '$.audit.cluster_id'),
    json_extract(NEW.last_transition, '$.audit.request_id'),
    json_extract(NEW.last_transition, '$.audit.outcome'),
    json_extract(NEW.last_transition, '$.audit.detail'),
    json_extract(NEW.last_transition, '$.audit.prev_hash'),
    json_extract(NEW.last_transition, '$.audit.hash')
   WHERE json_extract(NEW.last_transition, '$.audit') IS NOT NULL;
  UPDATE gpuops_audit_chain
     SET entries = entries + 1, last_id = last_insert_rowid(),
         last_hash = json_extract(NEW.last_transition, '$.audit.hash')
   WHERE name = 'audit' AND json_extract(NEW.last_transition, '$.audit') IS NOT NULL;
"""

_V11_SQLITE_TRIGGERS = (
    # A request opened with its audit entry in one INSERT.
    "".join(
        (
            "CREATE TRIGGER gpuops_request_opened AFTER INSERT ON gpuops_change_requests",
            " WHEN NEW.last_transition IS NOT NULL BEGIN",
            _V11_AUDIT_APPEND,
            "END",
        )
    ),
    # An execution's start: its lease taken (unless already held), its cluster locked with
    # the call deadline; the row is left as it was (RAISE(IGNORE)) unless both are this
    # request's now. What was taken stays, as in the store's own statements (BUSY keeps
    # the lease), and the store then finds out why with statements of its own.
    """CREATE TRIGGER gpuops_request_starting BEFORE UPDATE ON gpuops_change_requests
 WHEN NEW.last_transition IS NOT OLD.last_transition
  AND json_extract(NEW.last_transition, '$.lock') IS NOT NULL BEGIN
  INSERT INTO gpuops_leases (name, holder, expires_at, token)
  SELECT json_extract(NEW.last_transition, '$.lease.name'),
         json_extract(NEW.last_transition, '$.lease.holder'),
         json_extract(NEW.last_transition, '$.lease.until'), 1
   WHERE json_extract(NEW.last_transition, '$.lease') IS NOT NULL
  ON CONFLICT (name) DO UPDATE SET
    holder = excluded.holder,
    expires_at = excluded.expires_at,
    token = CASE WHEN gpuops_leases.holder = excluded.holder
                  AND gpuops_leases.expires_at > NEW.updated_at
            THEN gpuops_leases.token ELSE gpuops_leases.token + 1 END
   WHERE gpuops_leases.holder = excluded.holder OR gpuops_leases.expires_at <= NEW.updated_at;
  SELECT RAISE(IGNORE)
   WHERE json_extract(NEW.last_transition, '$.lease') IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM gpuops_leases
       WHERE name = json_extract(NEW.last_transition, '$.lease.name')
         AND holder = json_extract(NEW.last_transition, '$.lease.holder')
         AND expires_at > NEW.updated_at);
  INSERT INTO gpuops_cluster_locks
    (provider, project, cluster_id, request_id, locked_at, lease_name, calls_until)
  SELECT NEW.provider, NEW.project, NEW.cluster_id, NEW.id, NEW.updated_at,
         json_extract(NEW.last_transition, '$.lock.lease_name'),
         json_extract(NEW.last_transition, '$.lock.calls_until')
   WHERE true
  ON CONFLICT (provider, project, cluster_id) DO UPDATE SET
    request_id = excluded.request_id,
    locked_at = CASE WHEN gpuops_cluster_locks.request_id = excluded.request_id
                THEN gpuops_cluster_locks.locked_at ELSE excluded.locked_at END,
    lease_name = excluded.lease_name,
    calls_until = excluded.calls_until
   WHERE gpuops_cluster_locks.request_id = excluded.request_id
      OR (gpuops_cluster_locks.lease_name IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM gpuops_leases live
            WHERE live.name = gpuops_cluster_locks.lease_name
              AND live.expires_at > NEW.updated_at)
          AND (gpuops_cluster_locks.calls_until IS NULL
               OR gpuops_cluster_locks.calls_until <= NEW.updated_at));
  SELECT RAISE(IGNORE)
   WHERE NOT EXISTS (SELECT 1 FROM gpuops_cluster_locks
     WHERE provider = NEW.provider AND project = NEW.project
       AND cluster_id = NEW.cluster_id AND request_id = NEW.id);
END""",
    # Every single-statement move: the cluster freed, the lease released, the audit entry.
    "".join(
        (
            """CREATE TRIGGER gpuops_request_moved AFTER UPDATE ON gpuops_change_requests
 WHEN NEW.last_transition IS NOT OLD.last_transition BEGIN
  DELETE FROM gpuops_cluster_locks
   WHERE json_extract(NEW.last_transition, '$.unlock')
     AND provider = NEW.provider AND project = NEW.project
     AND cluster_id = NEW.cluster_id AND request_id = NEW.id;
  UPDATE gpuops_leases
     SET expires_at = json_extract(NEW.last_transition, '$.release.released')
   WHERE json_extract(NEW.last_transition, '$.release') IS NOT NULL
     AND name = json_extract(NEW.last_transition, '$.release.name')
     AND holder = json_extract(NEW.last_transition, '$.release.holder');
""",
            _V11_AUDIT_APPEND,
            "END",
        )
    ),
)


def v11_single_statement_transitions(conn: Connection) -> None:
    # What a transition asks of the other tables, carried by the request row it writes
    # (bot.core.store.trigger_work), so that on SQLite, which has no data-modifying WITH,
    # opening, starting and finishing a change are one statement each. The triggers fire
    # only when a statement sets last_transition: an older replica's writes, which never
    # do, write those tables themselves as before. They call no function of gpuops's own,
    # so the table can still be edited by hand with any SQLite client. PostgreSQL has the
    # column and no triggers: the store writes each table itself there.
    conn.execute(text("ALTER TABLE gpuops_change_requests ADD COLUMN last_transition TEXT"))
    if conn.dialect.name == "sqlite":
        for trigger in _V11_SQLITE_TRIGGERS:
            conn.execute(text(trigger))
