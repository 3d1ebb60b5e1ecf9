"""The HTTP port's settings from flags and variables (bunqueue's names included), and
their validation."""

from __future__ import annotations

import pytest

from trioqueue.cli import build_parser, config_from
from trioqueue.config import Config


def parsed(*argv: str, **env: str) -> Config:
    return config_from(build_parser().parse_args(["serve", *argv]), env)


def test_http_limits_from_flags_and_variables() -> None:
    config = parsed("--sse-max-clients", "5", "--http-max-body-bytes", "2MiB",
                    "--metrics-auth", TRIOQUEUE_SSE_HEARTBEAT_S="2",
                    RATE_LIMIT_WINDOW_MS="1000", RATE_LIMIT_MAX_REQUESTS="7",
                    CORS_ALLOW_ORIGIN="http://a, http://b,")
    assert config.sse_max_clients == 5
    assert config.http_max_body_bytes == 2 * 1024 * 1024
    assert config.metrics_auth is True
    assert config.sse_heartbeat_s == 2
    assert (config.http_rate_limit_window_ms, config.http_rate_limit_max_requests) == (1000, 7)
    assert config.cors_allow_origins == ["http://a", "http://b"]


def test_defaults_follow_bunqueue() -> None:
    config = parsed()
    assert (config.http_rate_limit_window_ms, config.http_rate_limit_max_requests) == (
        60_000, 10_000)
    assert (config.sse_max_clients, config.sse_replay_events, config.sse_heartbeat_s) == (
        1000, 1000, 30)
    assert config.metrics_auth is False and config.cors_allow_origins == []


@pytest.mark.parametrize("setting, value, message", [
    ("sse_max_clients", 0, "sse_max_clients must be at least 1"),
    ("http_max_header_bytes", 0, "http_max_header_bytes must be at least 1"),
    ("http_header_timeout_s", -1, "http_header_timeout_s must be a finite number"),
    ("stats_snapshot_interval_s", float("inf"), "stats_snapshot_interval_s must be"),
    ("http_rate_limit_max_requests", -1, "http_rate_limit_max_requests must be at least 0"),
])
def test_bad_http_settings_are_refused(setting: str, value: float, message: str) -> None:
    config = Config()
    setattr(config, setting, value)
    with pytest.raises(ValueError, match=message):
        config.validate()


def test_allowed_hosts_and_origins_from_flags_and_variables() -> None:
    config = parsed("--http-allowed-hosts", "broker.internal, *.corp.example,",
                    TRIOQUEUE_HTTP_ALLOWED_ORIGINS="https://app.example,http://b:8080")
    assert config.http_allowed_hosts == ["broker.internal", "*.corp.example"]
    assert config.http_allowed_origins == ["https://app.example", "http://b:8080"]
    config.validate()
    assert parsed().http_allowed_hosts == [] and parsed().http_allowed_origins == []


@pytest.mark.parametrize("setting, value, message", [
    ("http_allowed_origins", ["app.example"], "is not an origin"),
    ("http_allowed_origins", ["https://app.example/path"], "is not an origin"),
    ("http_allowed_origins", ["null"], "is not an origin"),
    ("http_allowed_hosts", ["broker:6790"], "is not a host name"),
    ("http_allowed_hosts", ["http://broker"], "is not a host name"),
])
def test_bad_allowed_hosts_and_origins_are_refused(setting: str, value: list[str],
                                                   message: str) -> None:
    config = Config()
    setattr(config, setting, value)
    with pytest.raises(ValueError, match=message):
        config.validate()
