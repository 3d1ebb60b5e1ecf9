"""``trioqueue serve``: flags, ``TRIOQUEUE_*`` variables, and bunqueue's own variable names.
(``trioqueue worker`` runs a Worker; its flags are in :mod:`trioqueue.client.runner`.)

Precedence: flags > ``TRIOQUEUE_*`` > bunqueue's names (``TCP_PORT``, ``HTTP_PORT``,
``HOST``, ``AUTH_TOKENS``, ``BUNQUEUE_DATA_PATH``...) > defaults, so a deployment or a
test harness written for bunqueue starts us unchanged.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .cluster.flags import add_cluster_flags, cluster_settings
from .config import FSYNC_POLICIES, Config, visible_chars
from .environment import SHARED_ENV_NAMES, first_set, parse_port, parse_tokens
from .server.serve_exit import (  # (re-exported: how serve ends)
    EXIT_CANNOT_LISTEN,
    EXIT_CANNOT_OPEN_STORAGE,
    EXIT_LOST_OWNERSHIP,
    EXIT_STORAGE_FAILURE,
    EXIT_STORE_IN_USE,
    run_serve,
)

# setting -> environment names, most specific first
ENV_NAMES: dict[str, tuple[str, ...]] = {
    **SHARED_ENV_NAMES,  # host, tcp_port, auth_tokens
    "ws_port": ("TRIOQUEUE_WS_PORT", "HTTP_PORT"),
    "data_dir": ("TRIOQUEUE_DATA_DIR", "BUNQUEUE_DATA_PATH", "BQ_DATA_PATH", "DATA_PATH"),
    "auth_token_min_chars": ("TRIOQUEUE_AUTH_TOKEN_MIN_CHARS",),
    "fsync": ("TRIOQUEUE_FSYNC",),
    "log_level": ("TRIOQUEUE_LOG_LEVEL", "LOG_LEVEL"),
    "memory": ("TRIOQUEUE_MEMORY",),
    "storage_url": ("TRIOQUEUE_STORAGE",),
    "pg_outage_s": ("TRIOQUEUE_PG_OUTAGE_S",),
    "store_max_bytes": ("TRIOQUEUE_STORE_MAX_BYTES",),
    "store_reserve_bytes": ("TRIOQUEUE_STORE_RESERVE_BYTES",),
    "store_finish_allowance_bytes": ("TRIOQUEUE_STORE_FINISH_ALLOWANCE_BYTES",),
    "disk_reserve_bytes": ("TRIOQUEUE_DISK_RESERVE_BYTES",),
    "lease_grace_after_pause_s": ("TRIOQUEUE_LEASE_GRACE_AFTER_PAUSE_S",),
    "log_slow_step_ms": ("TRIOQUEUE_LOG_SLOW_STEP_MS",),
    "slice_budget_ms": ("TRIOQUEUE_SLICE_BUDGET_MS",),
}

# The connection limits of Config (and two tunings of the standalone broker), each a
# flag (--max-connections) and a TRIOQUEUE_* variable (TRIOQUEUE_MAX_CONNECTIONS):
# setting -> (kind, help). docs/architecture.md
# ("Where each limit of Config is enforced") says what each does.
LIMIT_FLAGS: dict[str, tuple[str, str]] = {
    "max_connections": ("count", "connections at once, TCP and WebSocket (default 10000)"),
    "max_connections_per_address": (
        "count", "connections at once from one client address, TCP and the HTTP port "
                 "together, IPv6 per /64 (default 1000; 0: no cap)"),
    "max_unauthenticated_connections": (
        "count", "with tokens set, connections not yet authenticated at once; a new one "
                 "past it, or at max-connections, replaces the oldest (default 1000; 0: "
                 "no cap)"),
    "max_frame_bytes": ("bytes", "largest frame body (default 64MiB)"),
    "max_preauth_frame_bytes": (
        "bytes", "largest frame before Auth when tokens are set (default 16KiB; 0: the "
                 "max-frame-bytes)"),
    "large_frame_bytes": (
        "bytes", "frames at least this large are decoded in slices, other connections "
                 "served between two (default 64KiB; 0: every frame at once)"),
    "max_decoding_total_bytes": (
        "bytes", "large frames being decoded at once, all connections together; past "
                 "it a frame waits for its turn (default 16MiB; 0: no bound)"),
    "max_read_step_ms": (
        "ms", "a read's frames are decoded in steps of at most this long, other "
              "connections served between two (default 1; 0: a read at once)"),
    "bad_frame_pause_ratio": (
        "ratio", "after a read with malformed, unknown or pre-Auth frames, leave the "
                 "connection unread this many times what the read cost (default 4; 0: "
                 "never)"),
    "bad_frame_pause_max_ms": (
        "ms", "the longest such pause (default 250)"),
    "max_partial_frame_total_bytes": (
        "bytes", "incomplete frames of all connections together; past it the largest "
                 "holders are cut (default 256MiB; 0: no bound)"),
    "partial_frame_timeout_s": (
        "seconds", "a frame not complete this long after its first byte closes the "
                   "connection (default 60; 0: never)"),
    "max_write_queue_bytes": (
        "bytes", "unsent replies of one connection before it is cut (default 64MiB; 0: "
                 "no bound)"),
    "max_write_queue_total_bytes": (
        "bytes", "unsent replies of all connections together; past it the largest "
                 "holders are cut (default 256MiB; 0: no bound)"),
    "auth_timeout_s": (
        "seconds", "with tokens set, a connection not authenticated by then is closed "
                   "(default 10; 0: never)"),
    "idle_timeout_s": (
        "seconds", "a connection that sends nothing this long and holds nothing is closed "
                   "(default 300; 0: never)"),
    "idle_spin_ms": (
        "ms", "after each read, keep polling the sockets this long before sleeping, so a "
              "client's next request needs no wake-up; costs CPU while traffic lasts "
              "(default 0.5; 0: never)"),
    "metrics_max_queues": (
        "count", "queues given per-queue series in the Prometheus text, the first by "
                 "name (default 100; 0: none)"),
    "heap_keep_bytes": (
        "bytes", "freed memory kept for reuse rather than given back to the OS, so large "
                 "jobs do not fault in fresh pages (glibc only; default 64MiB; 0: the "
                 "allocator's defaults)"),
    "shutdown_notice_s": (
        "seconds", "at shutdown, how long the broker waits for server:shutdown to be "
                   "sent to each WebSocket and SSE client before closing them (default "
                   "1)"),
    "gc_full_interval_s": (
        "seconds", "collect every generation this often, then freeze what survived, so "
                   "cyclic garbage is freed within this long and each pass looks only at "
                   "what was made since the last (default 60; 0: never)"),
}
# Webhook deliveries (actors/webhook_delivery.py), parsed as the limits are.
WEBHOOK_FLAGS: dict[str, tuple[str, str]] = {
    "webhook_max_attempts": ("count", "delivery attempts per event, the first included "
                                      "(default 3)"),
    "webhook_retry_delay_ms": ("ms", "attempt n+1 waits n times this (default 1000)"),
    "webhook_connect_timeout_s": ("seconds", "connect timeout of a delivery (default 5)"),
    "webhook_request_timeout_s": ("seconds", "timeout of a whole delivery attempt "
                                             "(default 10)"),
    "webhook_buffer_events": ("count", "events buffered per webhook; past it they are "
                                       "dropped and counted (default 1000)"),
}
# The HTTP port's limits and periodic frames (transport/http_*.py, docs/http.md).
HTTP_FLAGS: dict[str, tuple[str, str]] = {
    "http_header_timeout_s": ("seconds", "a connection's first request head must be whole "
                                         "by then (default 10; 0: never)"),
    "http_max_header_bytes": ("bytes", "largest request head, 431 past it (default 16KiB)"),
    "http_max_body_bytes": ("bytes", "largest request body, 413 past it (default 64MiB)"),
    "http_body_timeout_s": ("seconds", "a request's whole body must arrive within this "
                                       "long of its head, 408 past it (default 30; 0: "
                                       "never)"),
    "http_max_body_total_bytes": ("bytes", "request bodies still arriving, all requests "
                                           "together; past it the largest are cut, 503 "
                                           "(default 256MiB; 0: no bound)"),
    "http_keep_alive_timeout_s": ("seconds", "an idle kept-alive HTTP connection is "
                                             "closed (default 10)"),
    "http_rate_limit_window_ms": ("ms", "the per-address request window (default 60000; "
                                        "0: no limit)"),
    "http_rate_limit_max_requests": ("count", "HTTP requests per address per window, 429 "
                                              "past it (default 10000; 0: no limit)"),
    "sse_max_clients": ("count", "SSE streams at once, 503 past it (default 1000)"),
    "sse_max_unsent_bytes": ("bytes", "frames queued for an SSE client that does not "
                                      "read before it is cut (default 1MiB)"),
    "sse_heartbeat_s": ("seconds", "heartbeat comment on a quiet SSE stream (default 30)"),
    "sse_replay_events": ("count", "frames kept for Last-Event-ID (default 1000)"),
}
# The bounds on cron schedules (core/repeating/crons.py, actors/scheduler.py), parsed as the
# limits are.
CRON_FLAGS: dict[str, tuple[str, str]] = {
    "cron_min_interval_ms": ("ms", "shortest period of a schedule (repeatEvery, or the "
                                   "closest two firings of a cron expression); shorter "
                                   "is refused at Cron (default 1000)"),
    "max_cron_schedules": ("count", "cron schedules the broker keeps (a cluster: its "
                                    "store); a new one past it is refused (default "
                                    "1000)"),
    "cron_retry_max_ms": ("ms", "longest wait before a schedule whose firings keep being "
                                "refused is tried again, or its period if longer "
                                "(default 60000)"),
}
# The thresholds of the dashboard's monitoring events (queue:idle, queue:threshold,
# worker:overloaded, storage:size-warning, server:memory-warning), parsed as the
# limits are; bunqueue's variable names are read too.
MONITOR_FLAGS: dict[str, tuple[str, str]] = {
    "queue_idle_threshold_ms": ("ms", "queue:idle once a queue had no job ready or active "
                                      "this long (default 30000; 0: never)"),
    "queue_size_threshold_jobs": ("count", "queue:threshold when a queue's ready jobs "
                                           "reach this many (default 0: never)"),
    "worker_overload_threshold_ms": ("ms", "worker:overloaded once a worker's heartbeats "
                                           "report it at its concurrency this long "
                                           "(default 30000; 0: never)"),
    "storage_warning_mib": ("mib", "storage:size-warning when the store uses this many "
                                   "MiB (default 0: never)"),
    "memory_warning_mib": ("mib", "server:memory-warning when the process's resident "
                                  "memory reaches this many MiB (default 0: never)"),
}
ENV_NAMES.update({name: (f"TRIOQUEUE_{name.upper()}",) for name in LIMIT_FLAGS})
ENV_NAMES.update({name: (f"TRIOQUEUE_{name.upper()}",) for name in MONITOR_FLAGS})
ENV_NAMES["queue_idle_threshold_ms"] += ("QUEUE_IDLE_THRESHOLD_MS",)  # bunqueue's names
ENV_NAMES["queue_size_threshold_jobs"] += ("QUEUE_SIZE_THRESHOLD",)
ENV_NAMES["worker_overload_threshold_ms"] += ("WORKER_OVERLOAD_THRESHOLD_MS",)
ENV_NAMES["storage_warning_mib"] += ("STORAGE_WARNING_MB",)
ENV_NAMES["memory_warning_mib"] += ("MEMORY_WARNING_MB",)
ENV_NAMES.update({name: (f"TRIOQUEUE_{name.upper()}",) for name in CRON_FLAGS})
ENV_NAMES.update({name: (f"TRIOQUEUE_{name.upper()}",) for name in HTTP_FLAGS})
ENV_NAMES["http_rate_limit_window_ms"] += ("RATE_LIMIT_WINDOW_MS",)  # bunqueue's names
ENV_NAMES["http_rate_limit_max_requests"] += ("RATE_LIMIT_MAX_REQUESTS",)
ENV_NAMES["cors_allow_origins"] = ("TRIOQUEUE_CORS_ALLOW_ORIGINS", "CORS_ALLOW_ORIGIN")
ENV_NAMES["http_allowed_hosts"] = ("TRIOQUEUE_HTTP_ALLOWED_HOSTS",)
ENV_NAMES["http_allowed_origins"] = ("TRIOQUEUE_HTTP_ALLOWED_ORIGINS",)
ENV_NAMES["metrics_auth"] = ("TRIOQUEUE_METRICS_AUTH", "METRICS_AUTH")
ENV_NAMES.update({name: (f"TRIOQUEUE_{name.upper()}",) for name in WEBHOOK_FLAGS})
ENV_NAMES["webhook_max_attempts"] += ("WEBHOOK_MAX_RETRIES",)  # bunqueue's names
ENV_NAMES["webhook_retry_delay_ms"] += ("WEBHOOK_RETRY_DELAY_MS",)
ENV_NAMES["metrics_max_queues"] += ("METRICS_MAX_QUEUES",)
ENV_NAMES["webhook_allow_private"] = ("TRIOQUEUE_WEBHOOK_ALLOW_PRIVATE",)
ENV_NAMES["otel_enabled"] = ("TRIOQUEUE_OTEL",)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_value(env: Mapping[str, str], setting: str) -> str | None:
    found = env_named(env, setting)
    return None if found is None else found[1]


def env_named(env: Mapping[str, str], setting: str) -> tuple[str, str] | None:
    """The first of the setting's variables that is set: (its name, its value)."""
    return first_set(env, ENV_NAMES[setting])


_BYTE_UNITS = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}


def _bytes(value: str, name: str) -> int:
    """A byte count: a plain integer or one with a binary unit (``512KiB``, ``2M``, ``1GiB``).

    Units are powers of 1024 whether or not the ``i`` is written: a store size is a
    multiple of pages, and ``1G`` meaning 10^9 would surprise nobody only by accident.
    """
    text = value.strip().lower().replace("_", "")
    digits = text.rstrip("kmgtib")
    unit = _BYTE_UNITS.get(text[len(digits):].strip())
    try:
        number = int(digits.strip())
    except ValueError:
        number = -1
    if unit is None or number < 0:
        raise SystemExit(f"Invalid {name}: {value!r} (expected bytes, e.g. 1073741824 or 1GiB)")
    return number * unit


def check_token_lengths(config: Config, source: str) -> None:
    """Refuse, in one line, a token with fewer than ``auth_token_min_chars`` visible
    characters (the token itself is never printed)."""
    minimum = config.auth_token_min_chars
    for n, token in enumerate(config.auth_tokens, 1):
        if (shown := visible_chars(token)) < minimum:
            raise SystemExit(
                f"Invalid {source}: token {n} has {shown} visible characters; a token "
                f"needs at least {minimum} (a long random string, e.g. from `openssl "
                f"rand -hex 32`; --auth-token-min-chars sets the minimum)")


def token_source(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    """Where the tokens came from: the flag, or the variable that was read."""
    if args.auth_tokens is not None:
        return "--auth-tokens"
    found = env_named(env, "auth_tokens")
    return "auth tokens" if found is None else found[0]


def _number(expected: str) -> Callable[[str, str], float]:
    """A parser of a finite number, 0 or more; ``expected`` says what it is."""

    def parse(value: str, name: str) -> float:
        try:
            number = float(value.strip())
        except ValueError:
            number = -1.0
        if not 0 <= number < math.inf:
            raise SystemExit(f"Invalid {name}: {value!r} (expected {expected})")
        return number

    return parse


_seconds = _number("seconds, e.g. 30 or 0.5")


def _count(value: str, name: str) -> int:
    try:
        count = int(value.strip())
    except ValueError:
        count = -1
    if count < 0:
        raise SystemExit(f"Invalid {name}: {value!r} (expected a whole number)")
    return count


_PARSE_LIMIT = {"bytes": _bytes, "seconds": _seconds, "count": _count, "mib": _count,
                "ms": _number("milliseconds, e.g. 1 or 0.5"),
                "ratio": _number("a ratio, e.g. 4 or 0.5")}
_METAVARS = {"bytes": "BYTES", "seconds": "SECONDS", "count": "N", "ms": "MS",
             "ratio": "RATIO", "mib": "MIB"}


def _limits_from(config: Config, args: argparse.Namespace, env: Mapping[str, str]) -> None:
    for setting, (kind, _) in (LIMIT_FLAGS | WEBHOOK_FLAGS | HTTP_FLAGS | CRON_FLAGS
                          | MONITOR_FLAGS).items():
        raw = getattr(args, setting)
        if raw is None:
            raw = env_value(env, setting)
        if raw is not None:
            flag = "--" + setting.replace("_", "-")
            setattr(config, setting, _PARSE_LIMIT[kind](str(raw), flag))


def _auth_tokens_from(config: Config, args: argparse.Namespace,
                      env: Mapping[str, str]) -> None:
    if args.auth_tokens is not None:
        config.auth_tokens = parse_tokens(args.auth_tokens, "--auth-tokens")
    elif (found := env_named(env, "auth_tokens")) is not None:
        config.auth_tokens = parse_tokens(found[1], found[0])
    raw = args.auth_token_min_chars
    if raw is None:
        raw = env_value(env, "auth_token_min_chars")
    if raw is not None:
        config.auth_token_min_chars = _count(str(raw), "--auth-token-min-chars")


def _float_settings(config: Config, args: argparse.Namespace, env: Mapping[str, str]) -> None:
    for setting, unit in (("lease_grace_after_pause_s", "seconds"),
                          ("pg_outage_s", "seconds"),
                          ("log_slow_step_ms", "milliseconds"),
                          ("slice_budget_ms", "milliseconds")):
        raw = getattr(args, setting)
        if raw is None:
            raw = env_value(env, setting)
        if raw is not None:
            try:
                setattr(config, setting, float(raw))
            except ValueError:
                raise SystemExit(f"Invalid {setting.replace('_', '-')}: {raw!r} "
                                 f"(expected {unit})") from None


def _switch(flag: bool, env: Mapping[str, str], setting: str) -> bool:
    """An on/off setting: its flag, else its variable, else off."""
    if flag:
        return True
    raw = env_value(env, setting)
    if raw is None:
        return False
    if raw.strip().lower() not in _TRUE | _FALSE:
        raise SystemExit(f"Invalid {ENV_NAMES[setting][0]}: {raw!r} (expected a boolean)")
    return raw.strip().lower() in _TRUE


def _browser_lists(config: Config, args: argparse.Namespace,
                   env: Mapping[str, str]) -> None:
    """The Host names and origins a web page may use the HTTP port from
    (transport/http/origin.py): comma-separated, blanks dropped."""
    for setting in ("http_allowed_hosts", "http_allowed_origins"):
        raw = getattr(args, setting)
        if raw is None:
            raw = env_value(env, setting)
        if raw is not None:
            setattr(config, setting, [v.strip() for v in raw.split(",") if v.strip()])


def config_from(args: argparse.Namespace, env: Mapping[str, str]) -> Config:
    config = Config()
    host = args.host or env_value(env, "host")
    if host:
        config.host = host
    tcp = args.tcp_port if args.tcp_port is not None else env_value(env, "tcp_port")
    if tcp is not None:
        config.tcp_port = parse_port(str(tcp), "tcp port")
    ws = args.ws_port if args.ws_port is not None else env_value(env, "ws_port")
    if ws is not None:
        config.ws_port = parse_port(str(ws), "websocket port")
    data = args.data_dir or env_value(env, "data_dir")
    if data:
        config.data_dir = data
    config.storage_url = args.storage_url or env_value(env, "storage_url") or None
    _auth_tokens_from(config, args, env)
    fsync = args.fsync or env_value(env, "fsync")
    if fsync:
        if fsync not in FSYNC_POLICIES:
            raise SystemExit(f"Invalid fsync: {fsync!r} (expected {'|'.join(FSYNC_POLICIES)})")
        config.fsync = fsync
    level = args.log_level or env_value(env, "log_level")
    if level:
        config.log_level = level.lower()
    for setting in ("store_max_bytes", "store_reserve_bytes", "store_finish_allowance_bytes",
                    "disk_reserve_bytes"):
        raw = getattr(args, setting)
        if raw is None:
            raw = env_value(env, setting)
        if raw is not None:
            setattr(config, setting, _bytes(str(raw), setting.replace("_", "-")))
    config.memory = _switch(args.memory, env, "memory")
    config.webhook_allow_private = _switch(args.webhook_allow_private, env,
                                           "webhook_allow_private")
    config.metrics_auth = _switch(args.metrics_auth, env, "metrics_auth")
    origins = args.cors_allow_origins
    if origins is None:
        origins = env_value(env, "cors_allow_origins")
    if origins is not None:
        config.cors_allow_origins = [o.strip() for o in origins.split(",") if o.strip()]
    _browser_lists(config, args, env)
    config.otel_enabled = _switch(args.otel, env, "otel_enabled")
    _float_settings(config, args, env)
    cluster_settings(config, args, env)
    _limits_from(config, args, env)
    return config


def _add_flags(group: Any, flags: dict[str, tuple[str, str]]) -> None:
    """A flag per setting of ``flags`` (``--max-connections``), parsed later by
    :func:`_limits_from` with its kind's parser."""
    for setting, (kind, text) in flags.items():
        group.add_argument("--" + setting.replace("_", "-"), dest=setting, help=text,
                           metavar=_METAVARS[kind])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trioqueue", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the broker")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--tcp-port", type=int, help="TCP protocol port (default 6789)")
    serve.add_argument("--ws-port", "--http-port", dest="ws_port", type=int,
                       help="WebSocket port (default 6790)")
    serve.add_argument("--data-dir", "--data-path", dest="data_dir",
                       help="LMDB data directory (default ./trioqueue-data)")
    serve.add_argument("--memory", action="store_true", help="keep everything in memory")
    serve.add_argument("--storage", dest="storage_url", metavar="postgresql://...",
                       help="keep jobs in PostgreSQL instead of LMDB (the schema is "
                            "created or migrated at start; docs/durability.md)")
    serve.add_argument("--pg-outage-s", dest="pg_outage_s",
                       help="how long to keep retrying while PostgreSQL is unreachable, "
                            "acknowledging nothing, before stopping (default 30)")
    add_cluster_flags(serve)
    serve.add_argument("--otel", action="store_true",
                       help="OpenTelemetry spans for push, pull and ack (needs "
                            "opentelemetry-api; see docs/tracing.md)")
    serve.add_argument("--auth-tokens", help="comma-separated tokens; enables auth")
    serve.add_argument("--auth-token-min-chars", dest="auth_token_min_chars",
                       help="fewest visible characters a token may have (default 16)")
    serve.add_argument("--fsync", choices=FSYNC_POLICIES,
                       help="when commits reach the disk (default interval)")
    serve.add_argument("--log-level", help="debug, info, warning, error")
    serve.add_argument("--log-slow-step-ms", dest="log_slow_step_ms",
                       help="log a warning for every step of a task that holds the event "
                            "loop this long, with its CPU time (default 0: off; it costs "
                            "a few percent while on)")
    serve.add_argument("--slice-budget-ms", dest="slice_budget_ms",
                       help="how long one slice of long work (Drain, a large PULLB, ...) "
                            "may take before a queue takes fewer jobs a slice (default 4; "
                            "0: fixed slices)")
    serve.add_argument("--store-max-bytes",
                       help="most the store may hold, e.g. 10GiB (default 1TiB for LMDB, "
                            "unlimited with --memory)")
    serve.add_argument("--store-reserve-bytes",
                       help="space kept for existing jobs once new ones are refused "
                            "(default 1/32 of the maximum, at least 8MiB, at most 1/16)")
    serve.add_argument("--store-finish-allowance-bytes",
                       help="result, error and stack trace each live job may keep when it "
                            "finishes, held back from new jobs (default 1KiB)")
    serve.add_argument("--disk-reserve-bytes",
                       help="LMDB: disk space left to other writers (logs, backups) when "
                            "new jobs are refused because the data directory's disk is "
                            "nearly full (default 1/32 of what the store could take "
                            "there, at most 64MiB)")
    serve.add_argument("--lease-grace-after-pause-s", dest="lease_grace_after_pause_s",
                       help="after a pause of the broker itself (SIGSTOP, a frozen VM), "
                            "no lease expires for this many seconds, so holders can "
                            "renew first (default 10; 0 disables)")
    from .client.runner import add_arguments

    worker = sub.add_parser("worker", help="run a Worker on module:function until a signal",
                            description="Process the jobs of --queue with module:function "
                                        "(async def f(job) or def f(job)). The first "
                                        "SIGTERM/Ctrl-C stops pulling and lets running "
                                        "jobs finish within --grace-s; a second hands them "
                                        "back to the broker at once.")
    add_arguments(worker)
    from .admin import add_commands
    from .migrate_command import add_command as add_migrate

    add_migrate(sub)

    add_commands(sub)
    limits = serve.add_argument_group("connection limits")
    _add_flags(limits, LIMIT_FLAGS)
    hooks = serve.add_argument_group("webhooks")
    hooks.add_argument("--webhook-allow-private", action="store_true",
                       help="let webhooks reach loopback and private addresses "
                            "(development only; off: the SSRF guard refuses them)")
    _add_flags(hooks, WEBHOOK_FLAGS)
    _add_flags(serve.add_argument_group("cron schedules"), CRON_FLAGS)
    _add_flags(serve.add_argument_group("monitoring events (docs/http.md)"), MONITOR_FLAGS)
    http = serve.add_argument_group("HTTP port (REST, SSE, health; docs/http.md)")
    http.add_argument("--cors-allow-origins", help="comma-separated origins answered with "
                                                   "Access-Control-Allow-Origin ('*': any)")
    http.add_argument("--http-allowed-hosts", dest="http_allowed_hosts",
                      help="comma-separated Host names answered besides IP addresses, "
                           "localhost and the bound host ('*.corp.example': its "
                           "subdomains; '*': any, no guard against DNS rebinding)")
    http.add_argument("--http-allowed-origins", dest="http_allowed_origins",
                      help="comma-separated origins (https://app.example) whose pages "
                           "may change state and open WebSockets, besides the broker's "
                           "own and --cors-allow-origins ('*': any)")
    http.add_argument("--metrics-auth", action="store_true",
                      help="/prometheus needs a bearer token too")
    _add_flags(http, HTTP_FLAGS)
    return parser


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "worker":
        from .client import runner

        return runner.main(args)
    if args.command == "migrate":
        from . import migrate_command

        return migrate_command.run(args, os.environ if env is None else env)
    if args.command != "serve":
        from . import admin

        return admin.run(args, os.environ if env is None else env)
    env = os.environ if env is None else env
    config = config_from(args, env)
    try:
        config.validate()
    except ValueError as exc:
        raise SystemExit(f"Invalid configuration: {exc}") from None
    check_token_lengths(config, token_source(args, env))
    if config.otel_enabled:
        from .actors.tracing import TracingUnavailable, broker_tracing

        try:  # one line before anything starts, not a traceback from inside the broker
            broker_tracing()
        except TracingUnavailable as exc:
            raise SystemExit(str(exc)) from None
    logging.basicConfig(
        level=getattr(logging, config.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx (webhook deliveries) logs every request at INFO: a line per delivery is
    # noise, and the broker's own delivery log says what failed
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("httpx").setLevel(logging.WARNING)
    return run_serve(config)


__all__ = ["EXIT_CANNOT_LISTEN", "EXIT_CANNOT_OPEN_STORAGE", "EXIT_LOST_OWNERSHIP",
           "EXIT_STORAGE_FAILURE", "EXIT_STORE_IN_USE",
           "build_parser", "config_from", "main", "run_serve"]

if __name__ == "__main__":
    sys.exit(main())
