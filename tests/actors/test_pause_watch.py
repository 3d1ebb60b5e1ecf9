"""PauseWatch: a pause of the broker's own loop is told from an idle broker.

Under trio's MockClock with autojump, time passes only up to the next timer, as on a
broker that is idle but running; ``jump`` moves the clock with nothing run, as SIGSTOP
or a frozen VM does.
"""

from __future__ import annotations

import trio
import trio.testing

from trioqueue.actors.clock import PAUSE_MIN_S, PAUSE_TICK_S, PauseWatch, TrioClock


async def test_an_idle_broker_is_not_paused_a_stopped_one_is(
        autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioClock()
    watch = PauseWatch(clock, grace_s=5)
    assert watch.grace_ms == 5000
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        await trio.sleep(600)  # ten idle minutes: the watch looked all along
        assert watch.check() == 0
        autojump_clock.jump(40)
        assert watch.check() == 1  # the first look after the pause sees it
        assert watch.resumed_ms == clock.now_ms()
        assert watch.check() == 1  # counted once
        await trio.sleep(1)
        assert watch.pauses == 1  # and the watch's own looks agree
        assert watch.check() == 1  # a look now; then a busy moment, shorter than a pause
        autojump_clock.jump(PAUSE_MIN_S * 0.9)
        assert watch.check() == 1
        autojump_clock.jump(PAUSE_MIN_S * 2)
        await trio.testing.wait_all_tasks_blocked()  # the watch looks by itself
        assert watch.pauses == 2
        nursery.cancel_scope.cancel()
    autojump_clock.jump(40)
    assert watch.check() == 2  # not running: a gap means nothing


async def test_a_watch_that_never_ran_sees_no_pause(
        autojump_clock: trio.testing.MockClock) -> None:
    watch = PauseWatch(TrioClock(), grace_s=1)
    await trio.sleep(60)
    assert watch.check() == 0


async def test_looks_of_a_busy_broker_put_the_watchs_own_off(
        autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioClock()
    watch = PauseWatch(clock, grace_s=5)
    async with trio.open_nursery() as nursery:
        await nursery.start(watch.run)
        for _ in range(50):  # five busy seconds: an actor's step every 0.1 s
            await trio.sleep(0.1)
            watch.check(clock.now_ms())
        assert watch.own_looks <= 1  # the watch's task hardly woke
        assert watch.pauses == 0
        await trio.sleep(2)  # idle: the watch looks by itself, a tick apart
        assert 2 / PAUSE_TICK_S - 1 <= watch.own_looks <= 2 / PAUSE_TICK_S + 2
        for _ in range(10):
            await trio.sleep(0.1)
            watch.check(clock.now_ms())
        autojump_clock.jump(40)  # stopped while busy: the next look sees it
        assert watch.check(clock.now_ms()) == 1
        autojump_clock.jump(PAUSE_MIN_S * 2)  # and while the watch alone looks
        await trio.testing.wait_all_tasks_blocked()
        assert watch.pauses == 2
        nursery.cancel_scope.cancel()
