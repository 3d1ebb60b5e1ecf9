"""``trioqueue serve`` configuration: flags > TRIOQUEUE_* > bunqueue's names > defaults."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
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


def test_monitoring_thresholds_from_bunqueue_names_and_flags() -> None:
    config = configure(QUEUE_IDLE_THRESHOLD_MS="5000", QUEUE_SIZE_THRESHOLD="100",
                       WORKER_OVERLOAD_THRESHOLD_MS="0", STORAGE_WARNING_MB="512",
                       MEMORY_WARNING_MB="256")
    assert (config.queue_idle_threshold_ms, config.queue_size_threshold_jobs,
            config.worker_overload_threshold_ms) == (5000, 100, 0)
    assert (config.storage_warning_mib, config.memory_warning_mib) == (512, 256)
    config = configure("--memory-warning-mib", "64", "--shutdown-notice-s", "2.5",
                       MEMORY_WARNING_MB="256")
    assert (config.memory_warning_mib, config.shutdown_notice_s) == (64, 2.5)
    with pytest.raises(SystemExit, match="Invalid --queue-size-threshold-jobs"):
        configure(QUEUE_SIZE_THRESHOLD="lots")


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


@pytest.mark.parametrize(("raw", "tokens"), [
    (" a , b ,c ", ["a", "b", "c"]),
    ("single", ["single"]),
])
def test_tokens_are_split_and_trimmed(raw: str, tokens: list[str]) -> None:
    assert configure(AUTH_TOKENS=raw).auth_tokens == tokens
    assert configure("--auth-tokens", raw).auth_tokens == tokens


BLANK_TOKENS = ["", ",", " , ", "   ", "a,,b", " a , ", ",a"]


@pytest.mark.parametrize("raw", BLANK_TOKENS)
@pytest.mark.parametrize("source", ["AUTH_TOKENS", "TRIOQUEUE_AUTH_TOKENS", "--auth-tokens"])
def test_a_blank_token_is_an_error_not_auth_off(raw: str, source: str) -> None:
    """Issue 12, item 6: ``AUTH_TOKENS=""`` (or ``","``) used to turn auth off silently."""
    with pytest.raises(SystemExit) as exited:
        if source.startswith("--"):
            configure(source, raw)
        else:
            configure(**{source: raw})
    message = str(exited.value.code)
    assert message.startswith(f"Invalid {source}: {raw!r} has a blank token"), message
    assert "\n" not in message


def test_a_blank_tokens_flag_is_an_error_despite_the_environment() -> None:
    with pytest.raises(SystemExit):
        configure("--auth-tokens", "", AUTH_TOKENS="secret")


INVISIBLE_TOKENS = ["\u200b", " \u200b ", "\ufeff", "\u2060", "\u200b\u200c\u200d",
                    "\u3000\u200b"]


@pytest.mark.parametrize("raw", INVISIBLE_TOKENS)
@pytest.mark.parametrize("source", ["AUTH_TOKENS", "--auth-tokens"])
def test_a_token_with_no_visible_character_is_an_error(raw: str, source: str) -> None:
    """A zero-width space (or a byte-order mark, a word joiner) was taken as a token:
    a config file that looks blank, or a key a client cannot type."""
    for value, n in ((raw, 1), ("a-visible-token-1," + raw, 2)):
        with pytest.raises(SystemExit) as exited:
            if source.startswith("--"):
                configure(source, value)
            else:
                configure(**{source: value})
        assert str(exited.value.code) == (
            f"Invalid {source}: token {n} has no visible character (only spaces, "
            f"zero-width or format characters such as U+200B)")
    with pytest.raises(ValueError, match="token 1 has no visible character"):
        Config(auth_tokens=[raw]).validate()


def test_config_refuses_blank_tokens_for_an_embedded_broker() -> None:
    for tokens in ([""], ["ok", " "]):
        with pytest.raises(ValueError, match="auth_tokens has a blank entry"):
            Config(auth_tokens=tokens).validate()


LIMIT_CASES = [
    ("--max-connections", "TRIOQUEUE_MAX_CONNECTIONS", "1500", "max_connections", 1500),
    ("--idle-spin-ms", "TRIOQUEUE_IDLE_SPIN_MS", "0.25", "idle_spin_ms", 0.25),
    ("--heap-keep-bytes", "TRIOQUEUE_HEAP_KEEP_BYTES", "16MiB", "heap_keep_bytes", 16 << 20),
    ("--max-frame-bytes", "TRIOQUEUE_MAX_FRAME_BYTES", "1MiB", "max_frame_bytes", 1 << 20),
    ("--max-preauth-frame-bytes", "TRIOQUEUE_MAX_PREAUTH_FRAME_BYTES", "4KiB",
     "max_preauth_frame_bytes", 4096),
    ("--max-partial-frame-total-bytes", "TRIOQUEUE_MAX_PARTIAL_FRAME_TOTAL_BYTES", "1GiB",
     "max_partial_frame_total_bytes", 1 << 30),
    ("--partial-frame-timeout-s", "TRIOQUEUE_PARTIAL_FRAME_TIMEOUT_S", "2.5",
     "partial_frame_timeout_s", 2.5),
    ("--max-write-queue-bytes", "TRIOQUEUE_MAX_WRITE_QUEUE_BYTES", "8M",
     "max_write_queue_bytes", 8 << 20),
    ("--max-write-queue-total-bytes", "TRIOQUEUE_MAX_WRITE_QUEUE_TOTAL_BYTES", "0",
     "max_write_queue_total_bytes", 0),
    ("--auth-timeout-s", "TRIOQUEUE_AUTH_TIMEOUT_S", "3", "auth_timeout_s", 3.0),
    ("--idle-timeout-s", "TRIOQUEUE_IDLE_TIMEOUT_S", "0", "idle_timeout_s", 0.0),
]


@pytest.mark.parametrize(("flag", "variable", "raw", "setting", "value"), LIMIT_CASES)
def test_connection_limits_from_flags_and_environment(
    flag: str, variable: str, raw: str, setting: str, value: float
) -> None:
    assert getattr(configure(flag, raw), setting) == value
    assert getattr(configure(**{variable: raw}), setting) == value
    assert getattr(configure(flag, raw, **{variable: "7"}), setting) == value


@pytest.mark.parametrize(("flag", "raw", "message"), [
    ("--idle-timeout-s", "-1", "Invalid --idle-timeout-s: '-1' (expected seconds"),
    ("--auth-timeout-s", "soon", "Invalid --auth-timeout-s: 'soon' (expected seconds"),
    ("--max-connections", "1.5", "Invalid --max-connections: '1.5' (expected a whole"),
    ("--max-write-queue-total-bytes", "lots", "Invalid --max-write-queue-total-bytes"),
])
def test_invalid_limits_exit_with_a_clear_message(flag: str, raw: str, message: str) -> None:
    with pytest.raises(SystemExit) as exited:
        configure(flag, raw)
    assert str(exited.value.code).startswith(message), exited.value.code


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
    env.update(AUTH_TOKENS=" s3cret-of-16-chars , other-of-16-chars ", LOG_LEVEL="info")
    broker = BrokerProcess(tmp_path / "data", env=env)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        with trio.fail_after(5):
            refused = await client.call("PUSH", queue="q", name="n", data=1)
            assert refused["ok"] is False and refused["error"] == "Not authenticated"
            bad = await client.call("Auth", token="wrong")
            assert bad["ok"] is False and bad["error"] == "Invalid token"
            await client.ok("Auth", token="s3cret-of-16-chars")
            await client.ok("PUSH", queue="q", name="n", data=1)
        await client.aclose()
    finally:
        await broker.stop()
    assert b"auth on (2 tokens)" in broker.log


async def test_the_ready_line_says_auth_off(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRIOQUEUE_") and k != "AUTH_TOKENS"}
    broker = BrokerProcess(tmp_path / "data", "--memory", env=env)
    await broker.start()
    await broker.stop()
    ready = next(line for line in broker.log.splitlines() if b"trioqueue ready" in line)
    assert ready.endswith(b" auth off"), ready


async def test_both_ports_listen_when_the_ready_line_is_printed(tmp_path: Path) -> None:
    """A client that starts on the ready line (a supervisor, a test harness) reaches
    the HTTP port as well as the TCP one: both are listening before it is printed,
    never connection refused. Three starts, each connected to at once."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRIOQUEUE_") and k != "AUTH_TOKENS"}
    for n in range(3):
        broker = BrokerProcess(tmp_path / f"data{n}", "--memory", env=env)
        await broker.start()  # (returns as soon as the ready line is in the log)
        try:
            with trio.fail_after(10):
                async with httpx.AsyncClient() as http:
                    health = await http.get(f"http://127.0.0.1:{broker.ws_port}/health")
                    assert health.status_code == 200, health.text
                client = await RawClient.connect(broker.tcp_port)
                await client.ok("Ping")
                await client.aclose()
        finally:
            await broker.stop()


@pytest.mark.parametrize("raw", ["", " , "])
async def test_a_broker_with_blank_tokens_exits_non_zero_with_one_line(
    tmp_path: Path, raw: str
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRIOQUEUE_")}
    env["AUTH_TOKENS"] = raw
    with trio.fail_after(20):
        done = await trio.run_process(
            [sys.executable, "-m", "trioqueue", "serve", "--memory", "--tcp-port", "0",
             "--ws-port", "0"], env=env, capture_stdout=True, capture_stderr=True,
            check=False)
    assert done.returncode != 0
    lines = done.stderr.decode().strip().splitlines()
    assert lines == [f"Invalid AUTH_TOKENS: {raw!r} has a blank token (comma-separated "
                     "non-blank tokens; leave AUTH_TOKENS unset to run without auth)"]


@pytest.mark.parametrize(("env", "line"), [
    ({"AUTH_TOKENS": "s3cret-of-16-chars,short"},
     "Invalid AUTH_TOKENS: token 2 has 5 visible characters; a token needs at least 16 "
     "(a long random string, e.g. from `openssl rand -hex 32`; --auth-token-min-chars "
     "sets the minimum)"),
    ({"AUTH_TOKENS": "s3cret-of-16-chars", "TRIOQUEUE_AUTH_TOKEN_MIN_CHARS": "20"},
     "Invalid AUTH_TOKENS: token 1 has 18 visible characters; a token needs at least 20 "
     "(a long random string, e.g. from `openssl rand -hex 32`; --auth-token-min-chars "
     "sets the minimum)"),
    ({"AUTH_TOKENS": "\u200b"},
     "Invalid AUTH_TOKENS: token 1 has no visible character (only spaces, zero-width or "
     "format characters such as U+200B)"),
    ({"AUTH_TOKENS": "\u200b" * 16 + "ab"},  # (zero-width characters do not count)
     "Invalid AUTH_TOKENS: token 1 has 2 visible characters; a token needs at least 16 "
     "(a long random string, e.g. from `openssl rand -hex 32`; --auth-token-min-chars "
     "sets the minimum)"),
])
async def test_serve_refuses_a_short_or_invisible_token_in_one_line(
        env: dict[str, str], line: str) -> None:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("TRIOQUEUE_") and k != "AUTH_TOKENS"}
    with trio.fail_after(20):
        done = await trio.run_process(
            [sys.executable, "-m", "trioqueue", "serve", "--memory", "--host", "127.0.0.1",
             "--tcp-port", "0", "--ws-port", "0"], env=full | env, capture_stdout=True,
            capture_stderr=True, check=False)
    assert done.returncode == 1
    assert done.stderr.decode().strip().splitlines() == [line]


def test_the_token_minimum_can_be_lowered_for_an_old_deployment() -> None:
    args = build_parser().parse_args(["serve", "--auth-token-min-chars", "4"])
    config = config_from(args, {"AUTH_TOKENS": "bun1"})
    assert (config.auth_tokens, config.auth_token_min_chars) == (["bun1"], 4)


@pytest.mark.parametrize("which", ["tcp", "ws"])
async def test_serve_on_a_port_in_use_says_so_in_one_line(which: str) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ports = {"tcp": ["--tcp-port", str(port), "--ws-port", "0"],
                 "ws": ["--tcp-port", "0", "--ws-port", str(port)]}[which]
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRIOQUEUE_")}
        with trio.fail_after(20):
            done = await trio.run_process(
                [sys.executable, "-m", "trioqueue", "serve", "--memory", "--host",
                 "127.0.0.1", *ports], env=env, capture_stdout=True, capture_stderr=True,
                check=False)
    kind = {"tcp": "tcp", "ws": "websocket"}[which]
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"error: cannot listen on 127.0.0.1 {kind} port {port}: address already in use "
        f"(another broker running? pick other ports with --tcp-port / --ws-port)"]


async def test_admin_commands_as_a_program(tmp_path: Path) -> None:
    """The installed entry point: output, exit statuses and one-line failures."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TRIOQUEUE_") and k != "AUTH_TOKENS"}
    broker = BrokerProcess(tmp_path / "data", env=env)
    await broker.start()
    env["TCP_PORT"] = str(broker.tcp_port)

    async def run(*argv: str) -> tuple[int, str, str]:
        with trio.fail_after(20):
            done = await trio.run_process([sys.executable, "-m", "trioqueue", *argv],
                                          env=env, capture_stdout=True,
                                          capture_stderr=True, check=False)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    try:
        assert await run("add", "mail", "send", "--data", "{}", "--job-id", "m1",
                         "--json") == (0, '{"queue":"mail","id":"m1"}\n', "")
        status, out, err = await run("queues")
        assert status == 0 and "mail" in out and err == ""
        assert await run("drain", "mail") == (
            2, "", "error: drain deletes jobs: pass --yes to confirm (no terminal to ask "
                   "on)\n")
        assert await run("job", "nope") == (1, "", "error: Job not found\n")
    finally:
        await broker.stop()
