"""Webhooks from the standalone broker (``trioqueue serve`` in a subprocess, with its
webhook flags) driven through the sync facade; and the flags' parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

import trioqueue.sync
from trioqueue.cli import build_parser, config_from
from trioqueue.testing.process import BrokerProcess
from trioqueue.testing.webhook_receiver import WebhookReceiver


async def test_sync_facade_against_the_standalone_broker(tmp_path: Path,
                                                         nursery: trio.Nursery) -> None:
    receiver: WebhookReceiver = await nursery.start(WebhookReceiver(statuses=[500]).run)
    broker = BrokerProcess(tmp_path / "data", "--webhook-allow-private",
                           "--webhook-retry-delay-ms", "5")
    await broker.start()
    try:
        def produce() -> str:
            with trioqueue.sync.connect(port=broker.tcp_port) as conn:
                queue = conn.queue("cli-hooks")
                hook = queue.add_webhook(receiver.url, ["job.pushed"], secret="s")
                queue.add("n", {"k": 1})
                return str(hook["webhookId"])

        hook_id = await trio.to_thread.run_sync(produce)
        failed, delivered = await receiver.wait_for(2)  # a 500, then the retry
        assert failed.body == delivered.body
        assert json.loads(delivered.body)["event"] == "job.pushed"

        def manage() -> list[dict[str, object]]:
            with trioqueue.sync.connect(port=broker.tcp_port) as conn:
                queue = conn.queue("cli-hooks")
                assert queue.set_webhook_enabled(hook_id, False) is True
                hooks = queue.list_webhooks()
                assert queue.remove_webhook(hook_id) is True
                assert queue.remove_webhook(hook_id) is False
                return hooks

        (entry,) = await trio.to_thread.run_sync(manage)
        assert entry["id"] == hook_id and entry["enabled"] is False
    finally:
        await broker.stop()


def test_webhook_flags_and_variables() -> None:
    parse = build_parser().parse_args
    config = config_from(parse(["serve"]), {})
    assert (config.webhook_allow_private, config.webhook_max_attempts,
            config.webhook_retry_delay_ms) == (False, 3, 1000.0)
    config = config_from(parse(["serve", "--webhook-allow-private",
                                "--webhook-max-attempts", "5",
                                "--webhook-request-timeout-s", "2.5",
                                "--webhook-buffer-events", "50"]), {})
    assert config.webhook_allow_private is True and config.webhook_max_attempts == 5
    assert config.webhook_request_timeout_s == 2.5 and config.webhook_buffer_events == 50
    # bunqueue's variable names, under ours
    config = config_from(parse(["serve"]), {"WEBHOOK_MAX_RETRIES": "4",
                                            "WEBHOOK_RETRY_DELAY_MS": "250",
                                            "TRIOQUEUE_WEBHOOK_ALLOW_PRIVATE": "yes"})
    assert (config.webhook_max_attempts, config.webhook_retry_delay_ms,
            config.webhook_allow_private) == (4, 250.0, True)
    config = config_from(parse(["serve"]), {"WEBHOOK_MAX_RETRIES": "4",
                                            "TRIOQUEUE_WEBHOOK_MAX_ATTEMPTS": "2"})
    assert config.webhook_max_attempts == 2
    with pytest.raises(SystemExit, match="TRIOQUEUE_WEBHOOK_ALLOW_PRIVATE"):
        config_from(parse(["serve"]), {"TRIOQUEUE_WEBHOOK_ALLOW_PRIVATE": "maybe"})
    with pytest.raises(ValueError, match="webhook_max_attempts must be at least 1"):
        config_from(parse(["serve", "--webhook-max-attempts", "0"]), {}).validate()
