"""``trioqueue serve``'s cluster flags and variables (trioqueue/cluster/flags.py)."""

from __future__ import annotations

import argparse

import pytest

from trioqueue.cluster.flags import add_cluster_flags, cluster_settings
from trioqueue.config import Config


def _config(argv: list[str], env: dict[str, str] | None = None) -> Config:
    parser = argparse.ArgumentParser()
    add_cluster_flags(parser)
    config = Config()
    cluster_settings(config, parser.parse_args(argv), env or {})
    return config


def test_seconds_from_flags_then_variables() -> None:
    config = _config(["--cluster", "--cluster-lease-s", "7", "--cluster-read-timeout-s", "0.5"])
    assert (config.cluster_lease_s, config.cluster_read_timeout_s) == (7.0, 0.5)
    config = _config([], {"TRIOQUEUE_CLUSTER_READ_TIMEOUT_S": "3",
                          "TRIOQUEUE_CLUSTER_LEASE_S": "9"})
    assert (config.cluster_lease_s, config.cluster_read_timeout_s) == (9.0, 3.0)
    assert _config([]).cluster_read_timeout_s == 2.0


def test_bad_seconds_are_refused() -> None:
    with pytest.raises(SystemExit, match="Invalid cluster-read-timeout-s: 'soon'"):
        _config(["--cluster-read-timeout-s", "soon"])
    config = _config(["--cluster-read-timeout-s", "0"])
    with pytest.raises(ValueError, match="cluster_read_timeout_s must be between"):
        config.validate()
