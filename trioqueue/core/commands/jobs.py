"""Protocol commands applied to one queue: decode fields, call the state machine, shape replies.

Each handler takes the queue's :class:`~trioqueue.core.queue.QueueState`, the decoded
request map and a :class:`Ctx`, and returns the reply payload (the keys besides ``ok``
and ``reqId``) exactly as bunqueue shapes it (see the reference's section 2.13), or a
:class:`~trioqueue.core.queue.PullWaiter` when a long-poll must wait. Errors are raised
as :class:`~trioqueue.core.errors.Refused` with bunqueue's texts.

Which command each handler answers, and everything else about the command, is declared
once in :mod:`trioqueue.core.commands.table`.
"""

from __future__ import annotations

from typing import Any

from .. import fields
from ..errors import Refused
from ..options import parse_job_input, validate_job_data
from ..queue import PullWaiter, QueueState, Sliced, slices
from ..queue.dependencies import push_reads
from ..queue.slices import ackb_sliced, admit_batch, pushb_sliced
from .context import Ctx, Reply, _opt_int, _refuse_if_full, _token
from .groups import pull_group

# ------------------------------------------------------------------ producing


def push(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    spec = parse_job_input(msg, custom_id_key="jobId", frame_bytes=ctx.frame_bytes,
                           max_data_bytes=ctx.max_data_bytes, json_bound=ctx.json_bound)
    if "custom_id" in spec:
        fields.check_id_fits_queue(q.name, spec["custom_id"])
        if "depends_on" not in spec:  # a finished job holding the id is retired
            q.finished.want(push_reads([spec]))
    if "depends_on" in spec:
        q.check_push_dependencies([spec], ctx.now, batch=False)
    # After validation (a malformed job is refused for good, whatever the space),
    # before the state changes (a refused job leaves no trace).
    _refuse_if_full(ctx)
    return {"id": q.push([spec], ctx.now)[0]}


def pushb(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | Sliced:
    jobs = msg.get("jobs")
    if not isinstance(jobs, list):
        raise Refused("jobs must be an array")
    parse = JobsParser(q, jobs, ctx)
    if not slices.is_long(len(jobs)):
        specs = parse(0, len(jobs))
        before = q.c.pushed
        ids = admit_batch(q, specs, parse.linked, ctx.now, ctx.storage_full)
        return slices.batch_pushed(q, len(jobs), before, ids, ctx.now)
    # Validation as well as admission in slices (1,000 jobs took 6-12 ms to validate):
    # the batch is still refused whole, before any of it is admitted.
    return pushb_sliced(q, len(jobs), parse, ctx.now, ctx.storage_full)


class JobsParser:
    """Validates a PUSHB's jobs, a range at a time, with the limits of its request."""

    __slots__ = ("q", "jobs", "frame_bytes", "max_data_bytes", "json_bound", "linked")

    def __init__(self, q: QueueState, jobs: list[Any], ctx: Ctx) -> None:
        self.q = q
        self.jobs = jobs
        # Taken now: a later slice runs under another request's context.
        self.frame_bytes = ctx.frame_bytes
        self.max_data_bytes = ctx.max_data_bytes
        self.json_bound = ctx.json_bound
        self.linked = False  # any custom id or dependency: only then is there more to check

    def __call__(self, start: int, stop: int) -> list[dict[str, Any]]:
        specs = []
        for i in range(start, stop):
            item = self.jobs[i]
            if not isinstance(item, dict):
                raise Refused(f"jobs[{i}]: job must be an object")
            try:
                spec = parse_job_input(item, custom_id_key="customId",
                                       frame_bytes=self.frame_bytes,
                                       max_data_bytes=self.max_data_bytes,
                                       json_bound=self.json_bound)
                if "custom_id" in spec:
                    fields.check_id_fits_queue(self.q.name, spec["custom_id"])
                    self.linked = True
                elif "depends_on" in spec:
                    self.linked = True
                specs.append(spec)
            except Refused as exc:
                raise Refused(f"jobs[{i}]: {exc.message}") from None
        return specs


# ------------------------------------------------------------------ consuming


def _pull(q: QueueState, msg: dict[str, Any], ctx: Ctx, batch: bool
          ) -> Reply | PullWaiter | Sliced:
    timeout = fields.pull_timeout(msg.get("timeout"))
    count = fields.pullb_count(msg.get("count")) if batch else 1
    owner = msg.get("owner")
    if owner is not None and not isinstance(owner, str):
        raise Refused("owner must be a string")
    lock_ttl = fields.lock_ttl(msg.get("lockTtl"))
    detach = msg.get("detach") is True
    pull_group(q, msg.get("group"))
    # A PULLB of many: its first slice now, ended by the step's deadline as the later
    # ones are, and the rest as long work (queue/slices.py).
    leased = slices.lease(q, count, ctx.now, owner=owner, lock_ttl=lock_ttl,
                          conn=ctx.conn, detach=detach)
    if isinstance(leased, Sliced):
        return leased
    jobs, tokens = leased
    if jobs or timeout <= 0:
        return q.pull_reply(jobs, tokens, batch=batch, owner=owner, now=ctx.now)
    return PullWaiter(handle=None, count=count, batch=batch, owner=owner, lock_ttl=lock_ttl,
                      conn=ctx.conn, detach=detach, deadline_ms=int(ctx.now + timeout))


def pull(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | PullWaiter | Sliced:
    return _pull(q, msg, ctx, batch=False)


def pullb(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | PullWaiter | Sliced:
    return _pull(q, msg, ctx, batch=True)



def ack(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    remove = msg.get("removeOnComplete")
    q.ack(
        fields.job_id(msg.get("id")),
        ctx.now,
        token=_token(msg),
        has_result="result" in msg,
        result=msg.get("result"),
        remove=True if remove is True else None,
    )
    return {}


def _parallel(msg: dict[str, Any], key: str, n: int) -> list[Any] | None:
    value = msg.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise Refused(f"{key} must be an array")
    if len(value) != n:
        raise Refused(f"ACKB {key} length must match ids length")
    return value


def ackb_args(msg: dict[str, Any]) -> tuple[list[str], list[Any] | None, list[Any] | None,
                                          list[Any] | None]:
    ids = fields.str_list(msg.get("ids"), "ids")
    tokens = _parallel(msg, "tokens", len(ids))
    results = msg.get("results")
    if not isinstance(results, list) or len(results) != len(ids):
        results = None  # bunqueue: a result-less batch ack unless lengths match
    removes = msg.get("removeOnCompletes")
    if not isinstance(removes, list) or len(removes) != len(ids):
        removes = None
    return ids, tokens, results, removes


def ackb(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply | Sliced:
    ids, tokens, results, removes = ackb_args(msg)
    checked, ignored = q.ackb_check(ids, tokens)  # every token, before any change

    def reply() -> Reply:
        if ignored:
            return {"data": {"ignoredIds": [ids[i] for i in ignored],
                             "ignoredIndices": ignored}}
        return {}

    if slices.is_long(len(checked)):
        return ackb_sliced(q, checked, ctx.now, results=results, removes=removes,
                           reply=reply)
    q.ackb_apply(checked, ctx.now, results=results, removes=removes)
    return reply()


def fail(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    error = msg.get("error")
    if error is not None and not isinstance(error, str):
        error = str(error)
    stack = fields.fail_stack(msg.get("stack"))
    applied = q.fail(
        fields.job_id(msg.get("id")),
        ctx.now,
        token=_token(msg),
        error=error,
        stack=stack,
        trace=msg.get("stack"),
        unrecoverable=msg.get("unrecoverable") is True,
        remove_on_fail=True if msg.get("removeOnFail") is True else None,
    )
    if not applied:
        return {"data": {"applied": False, "reason": "already-finalized"}}
    return {}


def extend_lock(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    duration = fields.lock_duration(msg.get("duration"))
    if duration is None:
        raise Refused("duration is required")
    if not q.extend_lock(job_id, ctx.now, token=_token(msg), duration=duration):
        raise Refused("Lock not found or invalid token")
    return {}


def extend_locks_args(msg: dict[str, Any]) -> tuple[list[str], list[Any], list[float]]:
    ids = fields.str_list(msg.get("ids"), "ids")
    tokens = msg.get("tokens")
    durations = msg.get("durations")
    if not isinstance(tokens, list) or len(tokens) != len(ids):
        raise Refused("tokens length must match ids length")
    if not isinstance(durations, list) or len(durations) != len(ids):
        raise Refused("durations length must match ids length")
    checked: list[float] = []
    for i, d in enumerate(durations):
        try:
            duration = fields.lock_duration(d)
            if duration is None:
                raise Refused("duration is required")
            checked.append(duration)
        except Refused as exc:
            raise Refused(f"durations[{i}]: {exc.message}") from None
    return ids, tokens, checked


def extend_locks(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    ids, tokens, durations = extend_locks_args(msg)
    count = 0
    for job_id, token, duration in zip(ids, tokens, durations, strict=True):
        tok = token if isinstance(token, str) else None
        if q.extend_lock(job_id, ctx.now, token=tok, duration=duration):
            count += 1
    return {"count": count}


def job_heartbeat(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    duration = fields.lock_duration(msg.get("duration"))
    if not q.heartbeat(job_id, ctx.now, token=_token(msg), duration=duration):
        raise Refused("Job not found or not active (or invalid token)")
    return {"data": {"ok": True}}


def heartbeat_b_args(msg: dict[str, Any]) -> tuple[list[str], list[Any] | None]:
    ids = fields.str_list(msg.get("ids"), "ids")
    tokens = msg.get("tokens")
    if tokens is not None and (not isinstance(tokens, list) or len(tokens) != len(ids)):
        raise Refused("tokens length must match ids length")
    return ids, tokens


def job_heartbeat_b(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    ids, tokens = heartbeat_b_args(msg)
    count = 0
    for i, job_id in enumerate(ids):
        tok = tokens[i] if tokens is not None and isinstance(tokens[i], str) else None
        if q.heartbeat(job_id, ctx.now, token=tok, duration=None):
            count += 1
    return {"data": {"ok": True, "count": count}}


# ------------------------------------------------------------------ progress and logs


def progress(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    q.set_progress(fields.job_id(msg.get("id")), ctx.now, msg.get("progress"),
                   msg.get("message"), "message" in msg)
    return {}


def get_progress(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return q.get_progress(fields.job_id(msg.get("id")), ctx.now)


LOG_LEVELS = ("info", "warn", "error")


def add_log(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    message = msg.get("message")
    if not isinstance(message, str):
        raise Refused("message must be a string")
    level = msg.get("level", "info")
    if level not in LOG_LEVELS:
        raise Refused("level must be one of info, warn, error")
    q.add_log(job_id, ctx.now, message, level)
    return {"data": {"added": True}}



def get_logs(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    return {"data": q.get_logs(job_id, _opt_int(msg.get("start"), "start"),
                               _opt_int(msg.get("end"), "end"))}


def clear_logs(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    keep = fields.keep_logs_argument(msg.get("keepLogs"))
    q.clear_logs(job_id, keep or 0)
    return {}


# ------------------------------------------------------------------ manual moves


def cancel(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    q.cancel(fields.job_id(msg.get("id")), ctx.now)
    return {}


def update(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    data = msg.get("data")
    # JSON-serialisable; no size limit (bunqueue); not walked again where the
    # transport's decode checked its types (a large frame's bound)
    validate_job_data(data, max_chars=None, json_bound=ctx.json_bound)
    q.update_data(job_id, data)
    q.announce("job:data-updated", ctx.now, jobId=job_id)
    return {}


def change_priority(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    priority = fields.priority_change(msg.get("priority"))
    lifo = msg.get("lifo")
    q.change_priority(job_id, ctx.now, priority,
                      None if lifo is None else fields.lenient_bool(lifo))
    q.announce("job:priority-changed", ctx.now, jobId=job_id, newPriority=priority)
    return {}


def promote(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    q.promote(job_id, ctx.now)
    q.announce("job:promoted", ctx.now, jobId=job_id)
    return {}


def promote_jobs(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    count = fields.strict_number(msg.get("count"), "count", minimum=0, integer=True)
    return q.promote_jobs_work(ctx.now, None if count is None else int(count))


def change_delay(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    delay = fields.delay_required(msg.get("delay"))
    q.change_delay(job_id, ctx.now, delay, _token(msg))
    q.announce("job:delay-changed", ctx.now, jobId=job_id, newDelay=delay)
    return {}


def move_to_delayed(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    delay = fields.delay_required(msg.get("delay"))
    q.change_delay(job_id, ctx.now, delay, _token(msg), active_only=True)
    q.announce("job:moved-to-delayed", ctx.now, jobId=job_id, delay=delay)
    return {}


def move_to_wait(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    """Back to waiting. A dead-lettered job is revived as a new live job, which a nearly
    full store refuses like a push (the revival asks for room, moves._revive); moving
    a live job is a change of an existing job and is always allowed."""
    job_id = fields.job_id(msg.get("id"))
    q.move_to_wait(job_id, ctx.now, _token(msg))
    return {}


def discard(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    job_id = fields.job_id(msg.get("id"))
    q.discard(job_id, ctx.now, _token(msg))
    q.announce("job:discarded", ctx.now, jobId=job_id)
    return {}


# ------------------------------------------------------------------ control


def pause(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    q.set_paused(True, ctx.now)
    return {}


def resume(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    q.set_paused(False, ctx.now)
    return {}


_STALL_NUMBERS = ("stallInterval", "maxStalls", "gracePeriod")


def set_stall_config(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    config = msg.get("config")
    if not isinstance(config, dict):
        raise Refused("config must be an object")
    update: dict[str, Any] = {}
    if config.get("enabled") is not None:
        update["enabled"] = fields.lenient_bool(config["enabled"])
    for key in _STALL_NUMBERS:
        if config.get(key) is not None:
            number = fields.lenient_number(config[key], key, minimum=0)
            assert number is not None
            update[key] = int(number)
    q.set_stall_config(update)
    q.announce("config:stall-changed", ctx.now, config=dict(q.stall))
    return {}


def get_stall_config(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"config": dict(q.stall)}


def drain(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    return q.drain_work(ctx.now)


def obliterate(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Sliced:
    return q.obliterate_work(ctx.now)


def is_paused(q: QueueState, msg: dict[str, Any], ctx: Ctx) -> Reply:
    return {"paused": q.paused}

