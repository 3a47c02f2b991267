"""The tables and indexes of the store as the code reads and writes them (SQLAlchemy Core), and
its version marks. The Alembic revisions make them, with the timeline's triggers
(`supervisor.record.store.revise`); a spec holds the two to each other. The control API's and the
doctor's tables are defined beside their code (`supervisor.control.tables`,
`supervisor.record.store.doctor`).

- `snapshots`: the current state of each endpoint and host, one row per (kind, name).
- `incidents`: at most one open per subject (a partial unique index); `entries` counts its
  timeline rows and is kept by a trigger, so listing incidents never counts the timeline.
- `timeline`: append-only (triggers refuse UPDATE and DELETE). Each row holds a typed record
  (`supervisor.record.timeline`): its `type` tag, its payload `version`, its JSON payload in `data`,
  its coarse `kind` and the `summary` rendered when it was written (what a reader that cannot
  type it shows).
- `samples`: raw probe results, pruned by age.
- `attempts`: one row per remediation attempt (the budget counts them; an unfinished row is a
  repair the daemon was stopped in the middle of).
- `journal_cursors`: each host's journal cursor and event-stream status (the leader's).
- `state_log`: every state each subject entered and when (milliseconds), append-only, with the
  time it had spent serving, down, silenced and unsupervised before then (running sums): what
  availability is computed from (`supervisor.record.availability`); a run of the daemon starts
  by writing each subject's state, after an `unsupervised` row where the previous run ended.
- `supervision`: one row per run of the daemon: when it started, when it was last seen alive.
- `spill_writes`: each queued write (of a store that could not take it) the store took, by its
  identity, with its result: replaying a spill file skips those (`supervisor.record.store.spill`).
- leadership's and the notifier's tables: see their comments below.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
)

from supervisor.record.store.coltypes import JSONData, UTCDateTime

SCHEMA_VERSION = 3
"""`PRAGMA user_version` of a store this code reads and writes."""

APPLICATION_ID = 0x46535550  # "FSUP"
"""`PRAGMA application_id` that marks a fleet-supervisor database."""

metadata = MetaData()

incidents = Table(
    "incidents",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("subject_kind", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("opened_at", UTCDateTime, nullable=False),
    Column("closed_at", UTCDateTime, nullable=True),
    Column("cause", Text, nullable=False),  # the symptom that opened it
    Column("diagnosis", Text, nullable=True),  # the latest matched rule, once there is one
    Column("resolution", Text, nullable=True),
    Column("last_state", Text, nullable=False),
    Column("entries", Integer, nullable=False, server_default="0"),
)
Index(
    "ux_incidents_open",
    incidents.c.subject_kind,
    incidents.c.subject,
    unique=True,
    sqlite_where=incidents.c.closed_at.is_(None),
    postgresql_where=incidents.c.closed_at.is_(None),
)
Index("ix_incidents_opened_at", incidents.c.opened_at)
Index("ix_incidents_subject", incidents.c.subject, incidents.c.opened_at)

snapshots = Table(
    "snapshots",
    metadata,
    Column("kind", Text, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("state", Text, nullable=False),
    Column("since", UTCDateTime, nullable=False),
    Column("incident_id", Integer, ForeignKey("incidents.id"), nullable=True),
    Column("fail_streak", Integer, nullable=False),
    Column("degraded_streak", Integer, nullable=False),
    Column("grace_until", UTCDateTime, nullable=True),
    Column("last_ok_at", UTCDateTime, nullable=True),
    Column("last_ttft_s", Float, nullable=True),
    Column("last_tok_s", Float, nullable=True),
    Column("last_reason", Text, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

timeline = Table(
    "timeline",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("incident_id", Integer, ForeignKey("incidents.id"), nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("kind", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("summary", Text, nullable=False),
    Column("data", JSONData, nullable=False),
    Column("type", Text, nullable=False, server_default=""),
    Column("version", Integer, nullable=False, server_default="1"),
)
Index("ix_timeline_incident", timeline.c.incident_id, timeline.c.id)

samples = Table(
    "samples",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("endpoint", Text, nullable=False),
    Column("at", UTCDateTime, nullable=False),
    Column("tier", Text, nullable=False),
    Column("check", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("latency_s", Float, nullable=False),
    Column("http_status", Integer, nullable=True),
    Column("ttft_s", Float, nullable=True),
    Column("tok_s", Float, nullable=True),
    Column("tokens", Integer, nullable=True),
)
Index("ix_samples_endpoint_at", samples.c.endpoint, samples.c.at)
Index("ix_samples_at", samples.c.at)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("endpoint", Text, nullable=False),
    Column("rule_id", Text, nullable=False),
    Column("incident_id", Integer, ForeignKey("incidents.id"), nullable=True),
    Column("started_at", UTCDateTime, nullable=False),
    Column("finished_at", UTCDateTime, nullable=True),
    Column("outcome", Text, nullable=True),
    Column("epoch", Integer, nullable=True),  # the leader's epoch it ran under (None: unfenced)
)
Index("ix_attempts_endpoint", attempts.c.endpoint, attempts.c.started_at)

state_log = Table(
    "state_log",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("subject_kind", Text, nullable=False),
    Column("subject", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("at_ms", BigInteger, nullable=False),  # Unix time in milliseconds
    # the time the subject had spent in each count before `at_ms` since its first row (so a
    # window's time is two lookups, whatever the history: `supervisor.record.availability`)
    Column("serving_ms", BigInteger, nullable=False),
    Column("down_ms", BigInteger, nullable=False),
    Column("silenced_ms", BigInteger, nullable=False),
    Column("unsupervised_ms", BigInteger, nullable=False),
)
Index(
    "ix_state_log_subject",
    state_log.c.subject_kind,
    state_log.c.subject,
    state_log.c.at_ms,
    state_log.c.id,
)
Index("ix_state_log_at", state_log.c.at_ms)

supervision = Table(
    "supervision",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("started_ms", BigInteger, nullable=False, unique=True),
    Column("seen_ms", BigInteger, nullable=False),
)

# the queued writes taken (`supervisor.record.store.resilient`): a write kept in a spill file while
# the store refused it is taken in the same transaction as its row here, so a replay of that file
# (the process died before it removed it) skips it and reads its result (the id it made, which
# later writes of the file name by a placeholder). A file's rows go when the file does.

spill_writes = Table(
    "spill_writes",
    metadata,
    Column("spill", Text, primary_key=True),  # the spill file's id (a UUID)
    Column("seq", Integer, primary_key=True),  # the write's number in it
    Column("result", JSONData, nullable=True),  # what it returned (an id, the outbox's ids)
)

# leadership (`supervisor.record.store.lease`): the one lease row, and the journal of who led when.
# Times in milliseconds of the database's clock (PostgreSQL's; the host's for a SQLite file), so
# two hosts with skewed clocks still agree on when a lease ran out.

leader_lease = Table(
    "leader_lease",
    metadata,
    Column("id", Integer, primary_key=True),  # always 1
    Column("epoch", Integer, nullable=False),  # +1 at every new holder
    Column("holder", Text, nullable=False),  # the instance's name
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False, server_default="0"),  # the holder's process
    Column("acquired_ms", BigInteger, nullable=False),
    Column("renewed_ms", BigInteger, nullable=False),
    Column("expires_ms", BigInteger, nullable=False),
    Column("released", Integer, nullable=False, server_default="0"),  # 1: stepped down cleanly
)

leader_journal = Table(
    "leader_journal",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("epoch", Integer, nullable=False),
    Column("holder", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("event", Text, nullable=False),  # took_over, released, lost, refused
    Column("detail", Text, nullable=False, server_default=""),
)

# host events (`supervisor.record.store.cursors`): each host's journal cursor and stream status,
# written by the leader under the fence, read by the next leader (it resumes there) and by `status`.

journal_cursors = Table(
    "journal_cursors",
    metadata,
    Column("host", Text, primary_key=True),
    Column("cursor", Text, nullable=True),  # None: the stream has not read an entry yet
    Column("status", Text, nullable=False, server_default=""),
    Column("updated_at", UTCDateTime, nullable=False),
)

# notify (Telegram, `supervisor.record.store.outbox`): the composer's cursor, the outbox, one
# thread per incident and chat, what the composer knows about each incident, and refused chat users.

notify_cursor = Table(
    "notify_cursor",
    metadata,
    Column("name", Text, primary_key=True),
    Column("last_id", Integer, nullable=False),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("created_at", UTCDateTime, nullable=False),
    Column("chat_id", BigInteger, nullable=False),
    Column("incident_id", Integer, nullable=True),
    Column("kind", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("parts_sent", Integer, nullable=False, server_default="0"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text, nullable=False, server_default=""),
    Column("sent_at", UTCDateTime, nullable=True),
    Column("message_id", BigInteger, nullable=True),
    Column("given_up", Integer, nullable=False, server_default="0"),
    Column("epoch", Integer, nullable=True),  # the leader's epoch it was composed under
)
Index("ix_outbox_pending", outbox.c.sent_at, outbox.c.id)

notify_threads = Table(
    "notify_threads",
    metadata,
    Column("incident_id", Integer, primary_key=True),
    Column("chat_id", BigInteger, primary_key=True),
    Column("message_id", BigInteger, nullable=False),
)

notify_incidents = Table(
    "notify_incidents",
    metadata,
    Column("incident_id", Integer, primary_key=True),
    Column("state", JSONData, nullable=False),
    Column("active", Integer, nullable=False, server_default="0"),
)

notify_refusals = Table(
    "notify_refusals",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at", UTCDateTime, nullable=False),
    Column("user_id", BigInteger, nullable=True),
    Column("chat_id", BigInteger, nullable=True),
    Column("username", Text, nullable=False),
    Column("text", Text, nullable=False),
)
