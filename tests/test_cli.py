"""``trioqueue serve`` configuration: flags > TRIOQUEUE_* > bunqueue's names > defaults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from trioqueue.cli import build_parser, config_from, main
from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.process import BrokerProcess


def configure(*flags: str, **env: str) -> Config:
    return config_from(build_parser().parse_args(["serve", *flags]), env)


def test_defaults_without_flags_or_environment() -> None:
    assert configure() == Config()


def test_bunqueue_environment_names() -> None:
    config = configure(TCP_PORT="7001", HTTP_PORT="7002", HOST="0.0.0.0",
                       AUTH_TOKENS="a,b", BUNQUEUE_DATA_PATH="/srv/bq", LOG_LEVEL="DEBUG")
    assert (config.tcp_port, config.ws_port, config.host) == (7001, 7002, "0.0.0.0")
    assert config.auth_tokens == ["a", "b"]
    assert config.data_dir == "/srv/bq"
    assert config.log_level == "debug"


@pytest.mark.parametrize(("env", "expected"), [
    ({"DATA_PATH": "/d"}, "/d"),
    ({"BQ_DATA_PATH": "/bq", "DATA_PATH": "/d"}, "/bq"),
    ({"BUNQUEUE_DATA_PATH": "/bun", "BQ_DATA_PATH": "/bq", "DATA_PATH": "/d"}, "/bun"),
    ({"TRIOQUEUE_DATA_DIR": "/trio", "BUNQUEUE_DATA_PATH": "/bun"}, "/trio"),
])
def test_data_path_aliases_in_bunqueue_order(env: dict[str, str], expected: str) -> None:
    assert configure(**env).data_dir == expected


def test_trioqueue_names_beat_bunqueue_names() -> None:
    config = configure(
        TCP_PORT="7001", TRIOQUEUE_TCP_PORT="8001",
        HTTP_PORT="7002", TRIOQUEUE_WS_PORT="8002",
        HOST="0.0.0.0", TRIOQUEUE_HOST="127.0.0.2",
        AUTH_TOKENS="bun", TRIOQUEUE_AUTH_TOKENS="trio",
        LOG_LEVEL="error", TRIOQUEUE_LOG_LEVEL="warning",
    )
    assert (config.tcp_port, config.ws_port, config.host) == (8001, 8002, "127.0.0.2")
    assert config.auth_tokens == ["trio"]
    assert config.log_level == "warning"


def test_flags_beat_every_environment_name() -> None:
    config = configure(
        "--tcp-port", "9001", "--http-port", "9002", "--host", "10.0.0.1",
        "--data-path", "/flag", "--auth-tokens", "flag", "--fsync", "always",
        "--log-level", "error", "--memory",
        TRIOQUEUE_TCP_PORT="8001", TCP_PORT="7001", TRIOQUEUE_WS_PORT="8002",
        HTTP_PORT="7002", TRIOQUEUE_HOST="127.0.0.2", HOST="0.0.0.0",
        TRIOQUEUE_DATA_DIR="/trio", BUNQUEUE_DATA_PATH="/bun",
        TRIOQUEUE_AUTH_TOKENS="trio", AUTH_TOKENS="bun", TRIOQUEUE_FSYNC="never",
        TRIOQUEUE_LOG_LEVEL="debug", TRIOQUEUE_MEMORY="0",
    )
    assert (config.tcp_port, config.ws_port, config.host) == (9001, 9002, "10.0.0.1")
    assert config.data_dir == "/flag"
    assert config.auth_tokens == ["flag"]
    assert config.fsync == "always"
    assert config.log_level == "error"
    assert config.memory is True


def test_an_empty_tokens_flag_turns_auth_off_despite_the_environment() -> None:
    assert configure("--auth-tokens", "", AUTH_TOKENS="secret").auth_tokens == []


@pytest.mark.parametrize(("raw", "tokens"), [
    (" a , b ,, ,c ", ["a", "b", "c"]),
    ("single", ["single"]),
    ("", []),
    (" , ,", []),
])
def test_tokens_are_split_trimmed_and_blanks_dropped(raw: str, tokens: list[str]) -> None:
    assert configure(AUTH_TOKENS=raw).auth_tokens == tokens
    assert configure("--auth-tokens", raw).auth_tokens == tokens


@pytest.mark.parametrize(("value", "memory"), [
    ("1", True), ("true", True), ("YES", True), (" on ", True),
    ("0", False), ("false", False), ("No", False), ("off", False), ("", False),
])
def test_memory_from_environment(value: str, memory: bool) -> None:
    assert configure(TRIOQUEUE_MEMORY=value).memory is memory


@pytest.mark.parametrize(("flags", "env", "message"), [
    ((), {"TCP_PORT": "abc"}, "Invalid tcp port: 'abc' (expected a port number)"),
    ((), {"TRIOQUEUE_TCP_PORT": "65536"}, "Invalid tcp port: '65536' (expected 0-65535)"),
    ((), {"HTTP_PORT": "-1"}, "Invalid websocket port: '-1' (expected 0-65535)"),
    (("--tcp-port", "70000"), {}, "Invalid tcp port: '70000' (expected 0-65535)"),
    ((), {"TRIOQUEUE_FSYNC": "sometimes"},
     "Invalid fsync: 'sometimes' (expected interval|always|never)"),
    ((), {"TRIOQUEUE_MEMORY": "maybe"},
     "Invalid TRIOQUEUE_MEMORY: 'maybe' (expected a boolean)"),
    (("--lease-grace-after-pause-s", "soon"), {},
     "Invalid lease-grace-after-pause-s: 'soon' (expected seconds)"),
])
def test_invalid_values_exit_with_a_clear_message(
    flags: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        configure(*flags, **env)
    assert exited.value.code == message


def test_lease_grace_after_pause_from_flag_and_environment() -> None:
    assert configure().lease_grace_after_pause_s == 10.0
    env = {"TRIOQUEUE_LEASE_GRACE_AFTER_PAUSE_S": "2.5"}
    assert configure(**env).lease_grace_after_pause_s == 2.5
    assert configure("--lease-grace-after-pause-s", "0", **env).lease_grace_after_pause_s == 0


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_a_grace_that_is_not_a_finite_number_of_seconds_stops_main(value: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--lease-grace-after-pause-s", value], env={})
    assert exited.value.code == ("Invalid configuration: lease_grace_after_pause_s must be "
                                 "a finite number, 0 or more")


def test_invalid_environment_stops_main_before_serving() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve"], env={"TCP_PORT": "not-a-port"})
    assert "Invalid tcp port" in str(exited.value.code)


@pytest.mark.parametrize("flags", [("--tcp-port", "abc"), ("--fsync", "sometimes")])
def test_invalid_flags_are_refused_by_the_parser(
    flags: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        configure(*flags)
    assert exited.value.code == 2
    assert "invalid" in capsys.readouterr().err


async def test_broker_process_honours_bunqueue_auth_tokens(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIOQUEUE_")}
    env.update(AUTH_TOKENS=" s3cret , other ", LOG_LEVEL="info")
    broker = BrokerProcess(tmp_path / "data", env=env)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        with trio.fail_after(5):
            refused = await client.call("PUSH", queue="q", name="n", data=1)
            assert refused["ok"] is False and refused["error"] == "Not authenticated"
            bad = await client.call("Auth", token="wrong")
            assert bad["ok"] is False and bad["error"] == "Invalid token"
            await client.ok("Auth", token="s3cret")
            await client.ok("PUSH", queue="q", name="n", data=1)
        await client.aclose()
    finally:
        await broker.stop()
