"""Every setting and abuse limit of the broker, in one place, with units in the names.

Limits are enforced in the I/O shell (sessions, listeners, writer); the defaults follow
bunqueue's where it has one, so its clients meet the same bounds against us.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, field
from urllib.parse import urlsplit

FSYNC_POLICIES = ("interval", "always", "never")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normal_origin(text: str) -> str | None:
    """A web origin as browsers send it in ``Origin``: ``scheme://host[:port]``,
    lowercased, the scheme's default port left out; None for anything else (a path, a
    query, a user, another scheme, ``null``). One form for the settings and the header,
    so ``https://App.example:443/`` in a setting matches ``https://app.example``."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme, host = parts.scheme.lower(), parts.hostname
    if (scheme not in _DEFAULT_PORTS or not host or parts.username is not None
            or parts.password is not None or parts.path not in ("", "/") or parts.query
            or parts.fragment):
        return None
    host = f"[{host}]" if ":" in host else host
    if port is None or port == _DEFAULT_PORTS[scheme]:
        return f"{scheme}://{host}"
    return f"{scheme}://{host}:{port}"

MIB = 1024 * 1024
# The LMDB map's maximum when store_max_bytes is not set: in practice "no limit but the
# disk" (the map is virtual address space; the file grows only as pages are used).
DEFAULT_LMDB_MAX_BYTES = 1 << 40


def default_reserve_bytes(max_bytes: int) -> int:
    """The space kept for existing jobs when ``store_reserve_bytes`` is not set.

    1/32 of the store, at least 8 MiB (LMDB's copy-on-write pages of a large commit,
    results beyond the allowance), but never more than a sixteenth of a small store:
    the live jobs' claims (Storage.finish_bytes) come on top of it, and a 12 MiB store
    must still take 1,536 jobs of 1 KB.
    """
    return min(max(8 * MIB, max_bytes // 32), max_bytes // 16)


def default_disk_reserve_bytes(disk_bytes: int) -> int:
    """The disk space left to other writers when ``disk_reserve_bytes`` is not set.

    1/32 of what the store could take on its disk, at most 64 MiB: room for the logs
    beside the data directory while new jobs are refused, that does not make a small
    disk useless.
    """
    return min(64 * MIB, disk_bytes // 32)


def visible_chars(token: str) -> int:
    """How many characters of ``token`` show: not a space or separator of any script
    (Unicode's Z categories), nor a control, format (U+200B ZERO WIDTH SPACE, U+FEFF,
    U+2060 WORD JOINER), surrogate, private or unassigned one (the C categories). A
    token of nothing else looks blank in a config file, and a zero-width space was
    taken as a token."""
    return sum(1 for ch in token if unicodedata.category(ch)[0] not in "ZC")


# What --storage accepts (libpq's two URL schemes).
STORAGE_URL_SCHEMES = ("postgresql://", "postgres://")


@dataclass
class Config:
    """Broker settings; ``validate`` checks them (the Broker calls it).

    Storage limits (see docs/durability.md, "Full storage"): ``store_max_bytes`` is the
    most the store may hold (LMDB: the map's maximum, default 1 TiB; ``--memory``: the
    memory store's byte count, default unlimited). New jobs are refused with a
    retriable ``Storage full`` error once the store uses more than ``store_max_bytes -
    store_reserve_bytes``; the reserve is kept for what existing jobs still have to
    write (pulls, acks, failures, moves, deletes), so a full store never stops jobs
    already accepted from being processed. ``store_reserve_bytes`` defaults to
    :func:`default_reserve_bytes` of the maximum. Beyond that fixed reserve, the room
    every live job may still need to be pulled and finished (its record's pages again,
    and ``store_finish_allowance_bytes`` of result and error) is held back from new
    jobs as well. LMDB's data directory has a second ceiling, its file system: the
    store may not pass what its file holds plus what the disk can still give, less
    the reserve for that size and ``disk_reserve_bytes`` for other writers.
    """

    host: str = "127.0.0.1"
    tcp_port: int = 6789
    ws_port: int = 6790
    data_dir: str = "./trioqueue-data"
    memory: bool = False  # keep everything in memory (nothing survives a restart)
    # PostgreSQL instead of LMDB: a postgresql:// URL (docs/durability.md, "PostgreSQL").
    storage_url: str | None = None
    # How long a PostgreSQL store keeps retrying through an outage, acknowledging
    # nothing meanwhile, before the broker stops (storage/pg/connection.py).
    pg_outage_s: float = 30.0
    # Several brokers on one PostgreSQL database (docs/scale-out.md): on or off; this
    # broker's id among them (None: a fresh one at each start, since a restarted broker
    # has lost what it held in memory); the HOST:PORT the others reach its TCP port at
    # (None: host and tcp_port); how long a broker stays live without a heartbeat, by
    # the database's clock (failover takes this plus the rebuild of the moved queues).
    cluster: bool = False
    broker_id: str | None = None
    advertise: str | None = None
    cluster_lease_s: float = 5.0
    # How long a broker-wide read (Stats, Metrics, Prometheus, the dashboard's,
    # ListWorkers) waits for the other brokers' answers; one that has not answered by
    # then is left out, and the reply names it (cluster/fanout.py).
    cluster_read_timeout_s: float = 2.0
    auth_tokens: list[str] = field(default_factory=list)
    # The fewest visible characters ``trioqueue serve`` takes in a token (AUTH_TOKENS,
    # --auth-tokens): a short token is guessed. A broker built in code (an embedded one,
    # the tests') is trusted with its own; Config.validate refuses only invisible ones.
    auth_token_min_chars: int = 16
    # "interval": commits survive kill -9 at once and reach the disk within
    # fsync_interval_s; "always": every acknowledging reply waits for the fsync;
    # "never": the OS decides when (a power loss can take any amount of recent work).
    fsync: str = "interval"
    fsync_interval_s: float = 0.2
    log_level: str = "info"
    # Log every task step that holds the event loop this long (0: off; standalone
    # broker only; see trioqueue/actors/slow_steps.py).
    log_slow_step_ms: float = 0.0
    # Long work (Drain, a PULLB of 1,000, ...) runs in slices of at most SLICE_JOBS jobs;
    # a queue whose slices take longer than this takes fewer jobs a slice, measured as
    # it goes (actors/slice_budget.py). 0: always SLICE_JOBS. 4 ms leaves slices of
    # small jobs at SLICE_JOBS and held 50 KB jobs' PULLB slices to 5 ms of CPU (15 ms
    # fixed); 3 ms cost a PULLB at 200k jobs 10% of its rate.
    slice_budget_ms: float = 4.0
    # After each socket read the standalone broker keeps polling the sockets this long
    # before its loop may sleep, so a client's next request is read without a wake-up
    # (40-80 us a round trip here; transport/idle_spin.py). 0: sleep at once.
    idle_spin_ms: float = 0.5
    # Freed memory the standalone broker keeps for reuse (glibc's trim threshold; its
    # mmap threshold is fixed at 32 MiB and no block is mapped on its own), so a large
    # job's buffers do not fault in fresh pages each time, nor are unmapped on the loop:
    # trioqueue/server/process_heap.py. 0: the allocator's defaults.
    heap_keep_bytes: int = 64 * 1024 * 1024
    # OpenTelemetry spans for PUSH/PULL/ACK (actors/tracing.py, docs/tracing.md); needs
    # opentelemetry-api (the ``otel`` extra). Off: OpenTelemetry is never imported.
    otel_enabled: bool = False

    # --- wire limits
    max_frame_bytes: int = 64 * 1024 * 1024  # bunqueue's cap on one frame's body
    # Before Auth (tokens set) only Auth is served: a frame body over this is refused
    # and the connection closed; 0 keeps max_frame_bytes.
    max_preauth_frame_bytes: int = 16 * 1024
    # Bytes of incomplete frames buffered by all TCP connections together; past it the
    # connections holding the most are cut. 0 disables.
    max_partial_frame_total_bytes: int = 256 * 1024 * 1024
    # A frame (or WebSocket CBOR message) at least this large is decoded and validated
    # in slices of about half a millisecond, other connections served between two;
    # smaller ones are decoded at once, which is cheaper. 0: every frame at once.
    large_frame_bytes: int = 64 * 1024
    # Bytes of large frames (large_frame_bytes or more) being decoded at once, all
    # connections together: a decoded frame of small values holds many times its size
    # in memory, so past this one waits for its turn (one larger than this is decoded
    # alone). 0: no bound.
    max_decoding_total_bytes: int = 16 * 1024 * 1024
    max_inflight_per_connection: int = 50  # commands running at once per connection
    # A read's frames are decoded in steps of at most this long, other connections
    # served between two (transport/read_pacing.py); 0: a read at once.
    max_read_step_ms: float = 1.0
    # After a read with frames the session refused as malformed, unknown or sent before
    # Auth, the connection is left unread for this many times what the read cost, at
    # most bad_frame_pause_max_ms; 0: never paused.
    bad_frame_pause_ratio: float = 4.0
    bad_frame_pause_max_ms: float = 250.0
    partial_frame_timeout_s: float = 60.0  # slowloris guard; 0 disables
    max_write_queue_bytes: int = 64 * 1024 * 1024  # unsent replies before we cut a client
    # Unsent replies and events of all connections together; past it the connections
    # holding the most are cut (their jobs released as on any close). 0 disables.
    max_write_queue_total_bytes: int = 256 * 1024 * 1024
    overflow_notice_s: float = 2.0  # how long a cut client gets to read the notice
    max_data_bytes: int = 10 * 1024 * 1024  # JSON text of one job's data (UTF-16 units)
    max_connections: int = 10_000  # TCP and WebSocket together
    # Connections from one client address at once, TCP and the HTTP port together
    # (IPv6 counted per /64); one past it is refused as past max_connections. A tenth
    # of max_connections: one host (or a NAT) of a thousand workers fits, one abuser
    # cannot take the broker. 0: no cap.
    max_connections_per_address: int = 1_000
    # With tokens set: connections not yet authenticated at once (TCP and WebSocket);
    # a new one past it, or one that finds max_connections reached, takes the place of
    # the oldest of them, so sockets that never authenticate cannot keep a login out.
    # 0: no cap, and a full broker refuses as without tokens.
    max_unauthenticated_connections: int = 1_000
    auth_timeout_s: float = 10.0  # with tokens set: no successful Auth by then, closed
    # No byte from the client for this long and nothing held (no command in flight,
    # parked pull or WaitJob, job delivered over it, event subscription): closed.
    # WebSocket: pinged instead, closed if no pong. 0 disables.
    idle_timeout_s: float = 300.0
    ws_max_message_bytes: int = 1024 * 1024
    ws_handshake_timeout_s: float = 10.0
    ws_close_timeout_s: float = 5.0  # a WebSocket not answering our close frame is dropped

    # --- the HTTP port (REST, SSE, health; WebSocket shares it): transport/http_*.py
    http_header_timeout_s: float = 10.0  # a connection's first request head, whole
    http_max_header_bytes: int = 16 * 1024  # one request's head (431 past it)
    http_max_body_bytes: int = 64 * 1024 * 1024  # one request's body (413 past it)
    # A request's whole body must arrive within this long of its head (408 and close
    # past it). 0: no deadline.
    http_body_timeout_s: float = 30.0
    # Bytes of request bodies still arriving, all HTTP requests together; past it the
    # requests holding the most are cut (503 and close). 0: no bound.
    http_max_body_total_bytes: int = 256 * 1024 * 1024
    # An idle kept-alive connection is closed. 10 s, as bunqueue (Bun's server): at 5 s
    # a client that waited 5 s for something (bunqueue's scripts wait for an event that
    # long) sent its next request as the close came, and a POST on a closing connection
    # is reset (Bun's fetch keeps idle connections for minutes and does not retry it).
    http_keep_alive_timeout_s: float = 10.0
    # bunqueue's protocol limiter, per client address: requests per window, 429 past
    # it (RATE_LIMIT_WINDOW_MS / RATE_LIMIT_MAX_REQUESTS); 0 in either disables it.
    http_rate_limit_window_ms: float = 60_000.0
    http_rate_limit_max_requests: int = 10_000
    cors_allow_origins: list[str] = field(default_factory=list)  # "*" allows any
    # What a web page may do (transport/http/origin.py, docs/http.md "Browsers"): the
    # Host names answered besides IP literals, localhost and the bound host ("*": any),
    # and the origins besides the broker's own (and cors_allow_origins) whose pages may
    # change state or open a WebSocket ("*": any).
    http_allowed_hosts: list[str] = field(default_factory=list)
    http_allowed_origins: list[str] = field(default_factory=list)
    metrics_auth: bool = False  # /prometheus needs a bearer token (503 with no tokens)
    # Server-sent events (/events): clients at once (503 past it), the comment line
    # that keeps proxies from closing a quiet stream, the events kept for Last-Event-ID
    # replay, and the unsent bytes a client may fall behind before it is cut.
    sse_max_clients: int = 1000
    sse_heartbeat_s: float = 30.0
    sse_replay_events: int = 1000
    sse_max_unsent_bytes: int = 1024 * 1024
    # Periodic frames to SSE and WebSocket subscribers (0: never), and how long a
    # queue's job events are gathered into one ``queue:counts`` frame.
    stats_snapshot_interval_s: float = 5.0
    health_status_interval_s: float = 10.0
    storage_status_interval_s: float = 30.0
    queue_counts_coalesce_ms: float = 10.0

    # --- the dashboard's monitoring events (bunqueue's QUEUE_IDLE_THRESHOLD_MS,
    # QUEUE_SIZE_THRESHOLD, WORKER_OVERLOAD_THRESHOLD_MS, STORAGE_WARNING_MB,
    # MEMORY_WARNING_MB and their defaults; 0 turns each off): queue:idle once a queue
    # had no job ready or active this long; queue:threshold when its ready jobs reach
    # this many; worker:overloaded when a worker's heartbeats report it at its
    # concurrency this long; storage:size-warning and server:memory-warning when the
    # store's used bytes or the process's resident memory reach this many MiB
    # (looked at once a second).
    queue_idle_threshold_ms: float = 30_000.0
    queue_size_threshold_jobs: int = 0
    worker_overload_threshold_ms: float = 30_000.0
    storage_warning_mib: int = 0
    memory_warning_mib: int = 0
    # After server:shutdown is told, the broker waits until each WebSocket and SSE
    # client's queued frames up to the notice are sent, at most this long, before it
    # closes the connections.
    shutdown_notice_s: float = 1.0

    # --- waiting for results
    removed_result_retention_s: float = 60.0  # results of removeOnComplete jobs, for WaitJob
    max_removed_results: int = 1000
    max_wait_holds_per_connection: int = 40  # parked WaitJobs per connection and queue

    # --- broker limits
    max_queues: int = 10_000
    # Queues given per-queue series in the Prometheus text (bunqueue's
    # METRICS_MAX_QUEUES; the first by name; 0: none)
    metrics_max_queues: int = 100
    queue_inbox_batches: int = 1024  # command batches buffered per queue actor
    shutdown_grace_s: float = 10.0  # how long shutdown waits for in-flight commands
    actor_max_restarts: int = 5  # crashes tolerated per actor within the window below
    actor_restart_window_s: float = 10.0
    # Young-generation collections only, every this many allocations (standalone broker
    # only; see server.tune_gc); 0 keeps Python's own policy.
    gc_gen0_threshold: int = 2_000
    # With that policy, a collection of every generation this often, what survives it
    # then frozen, so each pass looks only at what was made since the last (standalone
    # broker only; see server/gc_passes.py): cyclic garbage is freed within this long. 0: never.
    gc_full_interval_s: float = 60.0
    # ... or sooner, once the young collections have moved about this many objects on
    # since the last pass (a burst of new jobs): it bounds a pass's pause. 0: never sooner.
    gc_full_after_young_objects: int = 20_000

    # --- leases: after a pause of the broker itself (SIGSTOP, a frozen VM) no lock
    # expires for this long, so holders can renew first; 0 disables (guarantees.md)
    lease_grace_after_pause_s: float = 10.0

    # --- webhooks (actors/webhook_delivery.py): bunqueue's WEBHOOK_MAX_RETRIES (attempts,
    # the first included) and WEBHOOK_RETRY_DELAY_MS (attempt n+1 waits n x the delay)
    webhook_max_attempts: int = 3
    webhook_retry_delay_ms: float = 1000.0
    webhook_connect_timeout_s: float = 5.0
    webhook_request_timeout_s: float = 10.0  # one whole attempt, connect included
    webhook_buffer_events: int = 1000  # per webhook; past it events are dropped, counted
    # Let webhooks reach loopback and private addresses (development only: off, the
    # SSRF guard refuses them at AddWebhook and at each delivery).
    webhook_allow_private: bool = False

    # --- broker-to-broker links in a cluster (cluster/peers/links.py): a connection to
    # another broker, its hello included, must be up within this long, or the commands
    # waiting for it fail (retriable); at most this many forwarded commands wait for one
    # broker (sent or not), more are refused (retriable).
    peer_connect_timeout_s: float = 5.0
    peer_max_in_flight: int = 10_000
    # A forwarded command that holds nothing (not a long-poll PULL/PULLB or WaitJob)
    # unanswered this long gives its link up: every command waiting on it gets a
    # retriable error (a broker that stopped reading, a cut network). A broker that
    # leaves the cluster (dead, or frozen past its lease) has its link given up at the
    # beat that sees it gone, whatever this says.
    peer_reply_timeout_s: float = 10.0
    # A broker that finds itself fenced off (its heartbeat stale, or a commit refused
    # because another broker took a queue) answers its clients' commands, and those
    # other brokers forwarded to it, with a retriable error for this long, committing
    # nothing, before it exits (status 5).
    cluster_fenced_grace_s: float = 0.5

    # --- storage limits (docs/durability.md, "Full storage")
    store_max_bytes: int | None = None  # None: 1 TiB for LMDB, unlimited for --memory
    store_reserve_bytes: int | None = None  # None: default_reserve_bytes(max)
    # What each live job may keep when it finishes (result, error, stack trace), held
    # back for it while new jobs are admitted; beyond it a finish draws on the reserve.
    store_finish_allowance_bytes: int = 1024
    # LMDB: the disk's bytes left to other writers (logs, backups) below the point where
    # new jobs are refused because the data directory's file system is nearly full;
    # the store's reserve is kept there too. None: default_disk_reserve_bytes.
    disk_reserve_bytes: int | None = None
    # How old a measure of that file system a batch far from full may reuse (one
    # nearly full measures it again); other writers may fill it this long unseen.
    disk_measure_interval_ms: float = 100.0
    # A cron firing refused (a full store, or any other refusal) is fired again this
    # much later, twice as long after each further refusal, up to cron_retry_max_ms.
    cron_full_retry_ms: int = 1000

    # --- cron schedules (core/repeating/crons.py, actors/scheduler.py): the shortest period a
    # schedule may have (repeatEvery, or the closest two firings of a cron expression;
    # bunqueue takes 1 ms, but a thousand schedules of 1 ms hold a broker's CPU, and the
    # finest cron expression fires once a second); how many schedules the broker keeps
    # (a cluster: its store; 1,000 at 1 s are a firing a millisecond, about a tenth of
    # a core, where 10,000 saturated one); and the longest a schedule whose firings
    # keep failing waits between two tries (its own period if that is longer).
    cron_min_interval_ms: int = 1000
    max_cron_schedules: int = 1000
    cron_retry_max_ms: int = 60_000

    def store_limit_bytes(self) -> int | None:
        """The store's maximum in bytes, or None for a memory store with no limit."""
        if self.store_max_bytes is not None:
            return self.store_max_bytes
        return None if self.memory or self.storage_url else DEFAULT_LMDB_MAX_BYTES

    def reserve_bytes_for(self, max_bytes: int) -> int:
        """The reserve kept below a store maximum of ``max_bytes``."""
        if self.store_reserve_bytes is not None:
            return self.store_reserve_bytes
        return default_reserve_bytes(max_bytes)

    def disk_reserve_bytes_for(self, disk_bytes: int) -> int:
        """The disk space kept for other writers when the store could take
        ``disk_bytes`` on its disk."""
        if self.disk_reserve_bytes is not None:
            return self.disk_reserve_bytes
        return default_disk_reserve_bytes(disk_bytes)

    def validate(self) -> None:
        self._validate_auth_tokens()
        self._validate_connection_limits()
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}")
        for name in ("tcp_port", "ws_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise ValueError(f"{name} must be between 0 and 65535")
        if self.fsync_interval_s <= 0:
            raise ValueError("fsync_interval_s must be positive")
        for name in ("log_slow_step_ms", "slice_budget_ms"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a finite number, 0 or more")
        self._validate_webhooks()
        self._validate_http()
        self._validate_peer_links()
        if not 0 <= self.lease_grace_after_pause_s < math.inf:
            raise ValueError("lease_grace_after_pause_s must be a finite number, 0 or more")
        self._validate_storage_url()
        self._validate_cluster()
        self._validate_store_limits()
        self._validate_monitoring()

    def _validate_monitoring(self) -> None:
        for name in ("queue_idle_threshold_ms", "worker_overload_threshold_ms",
                     "shutdown_notice_s"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a finite number, 0 or more")
        for name in ("queue_size_threshold_jobs", "storage_warning_mib",
                     "memory_warning_mib"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0")

    def _validate_store_limits(self) -> None:
        if self.store_max_bytes is not None and self.store_max_bytes <= 0:
            raise ValueError("store_max_bytes must be positive")
        if self.store_reserve_bytes is not None and self.store_reserve_bytes < 0:
            raise ValueError("store_reserve_bytes must be at least 0")
        if self.disk_reserve_bytes is not None and self.disk_reserve_bytes < 0:
            raise ValueError("disk_reserve_bytes must be at least 0")
        if not 0 <= self.disk_measure_interval_ms < math.inf:
            raise ValueError("disk_measure_interval_ms must be a finite number, 0 or more")
        if self.store_finish_allowance_bytes < 0:
            raise ValueError("store_finish_allowance_bytes must be at least 0")
        if self.cron_full_retry_ms <= 0:
            raise ValueError("cron_full_retry_ms must be positive")
        self._validate_crons()
        limit = self.store_limit_bytes()
        if limit is not None and self.reserve_bytes_for(limit) >= limit:
            # A reserve as large as the store would refuse every job forever.
            raise ValueError("store_reserve_bytes must be less than store_max_bytes")

    def _validate_crons(self) -> None:
        if not 1 <= self.cron_min_interval_ms < math.inf:
            raise ValueError("cron_min_interval_ms must be at least 1")
        if self.max_cron_schedules < 1:
            raise ValueError("max_cron_schedules must be at least 1")
        if not self.cron_full_retry_ms <= self.cron_retry_max_ms < math.inf:
            raise ValueError("cron_retry_max_ms must be at least cron_full_retry_ms")

    def _validate_storage_url(self) -> None:
        if not 0 < self.pg_outage_s < math.inf:
            raise ValueError("pg_outage_s must be a positive number")
        if self.storage_url is None:
            return
        if not self.storage_url.startswith(STORAGE_URL_SCHEMES):
            raise ValueError(f"storage must be a postgresql:// URL, not "
                             f"{self.storage_url.split(':', 1)[0]!r}")
        if self.memory:
            raise ValueError("--memory and --storage are two stores: give one")
        if self.store_max_bytes is not None or self.store_reserve_bytes is not None:
            # PostgreSQL's room is its server's; nothing here could measure it per batch
            raise ValueError("store_max_bytes and store_reserve_bytes apply to LMDB and "
                             "--memory, not to PostgreSQL")
        if self.disk_reserve_bytes is not None:
            raise ValueError("disk_reserve_bytes applies to LMDB, not to PostgreSQL")

    def _validate_cluster(self) -> None:
        if not 1 <= self.cluster_lease_s <= 300:
            raise ValueError("cluster_lease_s must be between 1 and 300 seconds")
        if not 0.01 <= self.cluster_read_timeout_s <= 60:
            raise ValueError("cluster_read_timeout_s must be between 0.01 and 60 seconds")
        if not self.cluster:
            return
        if self.storage_url is None:
            raise ValueError("--cluster needs --storage postgresql://...: the brokers "
                             "share one database")
        if self.broker_id is not None and not (
                0 < len(self.broker_id) <= 64 and self.broker_id.isprintable()):
            raise ValueError("broker_id must be 1 to 64 printable characters")
        if self.advertise is not None:  # (else host and tcp_port: the port bound)
            host, _, port = self.advertise.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) <= 65535:
                raise ValueError(f"advertise must be HOST:PORT, not {self.advertise!r}")

    def advertised(self) -> str:
        """Where the other brokers of a cluster reach this one's TCP port."""
        if self.advertise is not None:
            return self.advertise
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"{host}:{self.tcp_port}"

    def _validate_http(self) -> None:
        for name in ("http_header_timeout_s", "http_keep_alive_timeout_s",
                     "http_body_timeout_s",
                     "http_rate_limit_window_ms", "sse_heartbeat_s",
                     "stats_snapshot_interval_s", "health_status_interval_s",
                     "storage_status_interval_s", "queue_counts_coalesce_ms"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a finite number, 0 or more")
        for name in ("http_max_header_bytes", "http_max_body_bytes", "sse_max_clients",
                     "sse_replay_events", "sse_max_unsent_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.http_rate_limit_max_requests < 0:
            raise ValueError("http_rate_limit_max_requests must be at least 0")
        for host in self.http_allowed_hosts:
            if not host or any(c in host for c in "/:@[] \t"):
                raise ValueError(f"http_allowed_hosts: {host!r} is not a host name "
                                 "(a name such as broker.internal or *.corp.example, "
                                 "no port; '*' for any)")
        for origin in self.http_allowed_origins:
            if origin != "*" and normal_origin(origin) is None:
                raise ValueError(f"http_allowed_origins: {origin!r} is not an origin "
                                 "(scheme://host[:port], e.g. https://app.example; "
                                 "'*' for any)")
        total = self.http_max_body_total_bytes
        # One largest body must fit, or it could never arrive (as for partial frames).
        if total < 0 or (total and total < self.http_max_body_bytes):
            raise ValueError("http_max_body_total_bytes must be 0 or at least "
                             "http_max_body_bytes")

    def _validate_peer_links(self) -> None:
        if not 0 < self.peer_connect_timeout_s < math.inf:
            raise ValueError("peer_connect_timeout_s must be a positive finite number")
        if self.peer_max_in_flight < 1:
            raise ValueError("peer_max_in_flight must be at least 1")
        if not 0 < self.peer_reply_timeout_s < math.inf:
            raise ValueError("peer_reply_timeout_s must be a positive finite number")
        if not 0 <= self.cluster_fenced_grace_s <= 60:
            raise ValueError("cluster_fenced_grace_s must be between 0 and 60 seconds")

    def _validate_webhooks(self) -> None:
        if self.webhook_max_attempts < 1:
            raise ValueError("webhook_max_attempts must be at least 1")
        if self.webhook_buffer_events < 1:
            raise ValueError("webhook_buffer_events must be at least 1")
        if not 0 <= self.webhook_retry_delay_ms < math.inf:
            raise ValueError("webhook_retry_delay_ms must be a finite number, 0 or more")
        for name in ("webhook_connect_timeout_s", "webhook_request_timeout_s"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a positive finite number")

    def _validate_auth_tokens(self) -> None:
        # A blank token would be dropped by a trimmed comparison and could turn auth
        # off without a word: refuse it instead.
        for n, token in enumerate(self.auth_tokens, 1):
            if not isinstance(token, str) or not token.strip():
                raise ValueError(f"auth_tokens has a blank entry: {self.auth_tokens!r}")
            if not visible_chars(token):
                raise ValueError(f"auth_tokens: token {n} has no visible character (only "
                                 f"spaces, zero-width or format characters)")
        if self.auth_token_min_chars < 1:
            raise ValueError("auth_token_min_chars must be at least 1")

    def _validate_connection_limits(self) -> None:
        for name in ("max_preauth_frame_bytes", "max_partial_frame_total_bytes",
                     "large_frame_bytes", "max_decoding_total_bytes",
                     "max_read_step_ms", "bad_frame_pause_ratio",
                     "bad_frame_pause_max_ms",
                     "max_write_queue_total_bytes", "max_connections", "auth_timeout_s",
                     "max_connections_per_address", "max_unauthenticated_connections",
                     "idle_timeout_s", "max_frame_bytes", "max_write_queue_bytes",
                     "partial_frame_timeout_s", "idle_spin_ms", "heap_keep_bytes",
                     "metrics_max_queues", "gc_full_interval_s",
                     "gc_full_after_young_objects"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be at least 0")
        if self.heap_keep_bytes >= 2**31:  # mallopt takes an int
            raise ValueError("heap_keep_bytes must be under 2GiB")
        total = self.max_partial_frame_total_bytes
        # One largest frame (its 4-byte header included) must fit, or it could never
        # arrive: the connection holding it would always be the one cut.
        if total and total < self.max_frame_bytes + 4:
            raise ValueError("max_partial_frame_total_bytes must be 0 or at least "
                             "max_frame_bytes + 4")
