"""``trioqueue serve``'s cluster flags (docs/scale-out.md), each also a ``TRIOQUEUE_*``
variable; kept beside :mod:`.cli`, which calls :func:`add_cluster_flags` and
:func:`cluster_settings`."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ..config import Config

CLUSTER_ENV = {
    "cluster": "TRIOQUEUE_CLUSTER",
    "broker_id": "TRIOQUEUE_BROKER_ID",
    "advertise": "TRIOQUEUE_ADVERTISE",
    "cluster_lease_s": "TRIOQUEUE_CLUSTER_LEASE_S",
    "cluster_read_timeout_s": "TRIOQUEUE_CLUSTER_READ_TIMEOUT_S",
}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def add_cluster_flags(serve: Any) -> None:
    group = serve.add_argument_group("several brokers on one PostgreSQL database")
    group.add_argument("--cluster", action="store_true", default=None,
                       help="share the --storage database with other brokers: each "
                            "queue is served by one of them, any of them answers any "
                            "client (docs/scale-out.md)")
    group.add_argument("--broker-id", dest="broker_id",
                       help="this broker's name in the cluster (default: a fresh one at "
                            "each start)")
    group.add_argument("--advertise", metavar="HOST:PORT",
                       help="where the other brokers reach this one's TCP port "
                            "(default: --host and --tcp-port)")
    group.add_argument("--cluster-lease-s", dest="cluster_lease_s", metavar="SECONDS",
                       help="a broker without a heartbeat this long is dead to the others "
                            "and its queues move (default 5)")
    group.add_argument("--cluster-read-timeout-s", dest="cluster_read_timeout_s",
                       metavar="SECONDS",
                       help="how long Stats, Metrics, Prometheus, the dashboard and "
                            "ListWorkers wait for the other brokers' answers; one later "
                            "is left out and named in the reply (default 2)")


def cluster_settings(config: Config, args: argparse.Namespace, env: Mapping[str, str]) -> None:
    """Fill ``config``'s cluster settings from the flags, else the variables."""
    flag = args.cluster
    if flag is None:
        raw = env.get(CLUSTER_ENV["cluster"])
        if raw is not None and raw.strip().lower() not in _TRUE + _FALSE:
            raise SystemExit(f"Invalid {CLUSTER_ENV['cluster']}: {raw!r} (expected a boolean)")
        flag = raw is not None and raw.strip().lower() in _TRUE
    config.cluster = bool(flag)
    for setting in ("broker_id", "advertise"):
        value = getattr(args, setting) or env.get(CLUSTER_ENV[setting]) or None
        if value is not None:
            setattr(config, setting, value)
    for setting in ("cluster_lease_s", "cluster_read_timeout_s"):
        raw = getattr(args, setting) or env.get(CLUSTER_ENV[setting])
        if raw is not None:
            try:
                setattr(config, setting, float(raw))
            except ValueError:
                flag = setting.replace("_", "-")
                raise SystemExit(f"Invalid {flag}: {raw!r} (expected seconds)") from None
