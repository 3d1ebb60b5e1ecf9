"""The job record: what a queue keeps in memory, what storage persists, what the wire shows.

One class serves all three so that a field is added in one place. ``to_wire`` gives
bunqueue's Job object (camelCase keys, epoch-ms timestamps as floats so that msgpack sends
them as float64, as bunqueue's int64 rule requires); ``to_record`` and ``from_record``
give the storage form, which is the wire form plus the internal fields that the wire
never shows (the stored lifecycle state, the admission sequence, the DLQ entry).
"""

from __future__ import annotations

from sys import intern
from typing import Any, Final

from . import job_plan
from .job_plan import (
    ALWAYS,
    FLOAT,
    FLOAT_NOT_NONE,
    IS_NOT,
    IS_NOT_NE,
    TRUTHY,
    AdmitSlot,
    Step,
)

# Where a job lives. The fine-grained states a client sees (waiting, prioritized,
# delayed) are derived from a QUEUED job's runAt and priority at the time of asking;
# see trioqueue.core.states.
QUEUED = "queued"
ACTIVE = "active"
WAITING_CHILDREN = "waiting-children"
COMPLETED = "completed"
FAILED = "failed"

LIVE_STATES = frozenset({QUEUED, ACTIVE, WAITING_CHILDREN})
FINISHED_STATES = frozenset({COMPLETED, FAILED})

TIMELINE_MAX = 20

# (wire name, attribute name, default). Mutable defaults are copied per job.
_FIELDS: tuple[tuple[str, str, Any], ...] = (
    ("id", "id", ""),
    ("queue", "queue", ""),
    ("name", "name", "default"),
    ("data", "data", None),
    ("priority", "priority", 0),
    ("createdAt", "created_at", 0),
    ("runAt", "run_at", 0),
    ("startedAt", "started_at", None),
    ("completedAt", "completed_at", None),
    ("attempts", "attempts", 0),
    ("maxAttempts", "max_attempts", 3),
    ("backoff", "backoff", 1000),
    ("backoffConfig", "backoff_config", None),
    ("ttl", "ttl", None),
    ("timeout", "timeout", None),
    ("uniqueKey", "unique_key", None),
    ("customId", "custom_id", None),
    ("dependsOn", "depends_on", ()),
    ("parentId", "parent_id", None),
    ("childrenIds", "children_ids", ()),
    ("childrenCompleted", "children_completed", 0),
    ("tags", "tags", ()),
    ("groupId", "group_id", None),
    ("progress", "progress", 0),
    ("progressMessage", "progress_message", None),
    ("stacktrace", "stacktrace", None),
    ("removeOnComplete", "remove_on_complete", False),
    ("removeOnFail", "remove_on_fail", False),
    ("repeat", "repeat", None),
    ("lastHeartbeat", "last_heartbeat", 0),
    ("stallTimeout", "stall_timeout", None),
    ("stallCount", "stall_count", 0),
    ("stackTraceLimit", "stack_trace_limit", 10),
    ("keepLogs", "keep_logs", None),
    ("sizeLimit", "size_limit", None),
    ("failParentOnFailure", "fail_parent_on_failure", False),
    ("removeDependencyOnFailure", "remove_dependency_on_failure", False),
    ("continueParentOnFailure", "continue_parent_on_failure", False),
    ("ignoreDependencyOnFailure", "ignore_dependency_on_failure", False),
    ("deduplicationTtl", "deduplication_ttl", None),
    ("deduplicationExtend", "deduplication_extend", False),
    ("deduplicationReplace", "deduplication_replace", False),
    ("debounceId", "debounce_id", None),
    ("debounceTtl", "debounce_ttl", None),
    ("durable", "durable", False),
    ("lifo", "lifo", False),
    ("timeline", "timeline", ()),
    ("traceContext", "trace_context", None),
)

_TIMESTAMPS = frozenset({"createdAt", "runAt", "startedAt", "completedAt", "lastHeartbeat"})
_LISTS = frozenset({"dependsOn", "childrenIds", "tags", "timeline"})

# Internal fields persisted with the record but never sent as part of the Job object.
_INTERNAL: tuple[tuple[str, Any], ...] = (
    ("state", QUEUED),
    ("seq", 0),  # admission order within the queue; restores FIFO order after a restart
    ("dlq", None),  # {"reason", "error", "enteredAt", ...} once in the DLQ
    ("dedup_lost", False),  # its uniqueKey was handed to a replacing job
    ("dedup_expires_at", None),  # when its uniqueKey lapses (ms), if it has a TTL
    # dependencies not settled yet (ids); a job with any waits in WAITING_CHILDREN
    ("pending", None),
)
_INTERNAL_ALWAYS = ("state", "seq")


class JobWire(dict):  # type: ignore[type-arg]
    """A Job object on its way out: a plain dict that says which values came from clients.

    An encoder that must rewrite numbers (msgpack's int64 rule) only needs to look at
    :data:`CLIENT_VALUED` keys; everything else the broker built itself (timestamps as
    floats, small counters, strings, flags), which saves walking ~45 keys per job.
    """

    __slots__ = ()


# Keys whose values a client chose (and may hold any number); see JobWire.
CLIENT_VALUED = frozenset({
    "data", "priority", "backoff", "backoffConfig", "ttl", "timeout", "stallTimeout",
    "stackTraceLimit", "keepLogs", "sizeLimit", "deduplicationTtl", "debounceTtl",
    "progress", "repeat",
})


# The last timeline entry made for each state, with the timestamp it was made for. An
# entry without details is the same dict for every job that makes the same transition in
# the same millisecond (a PUSHB or PULLB moves hundreds of jobs at one ``now``), and no
# code changes an entry once it is in a timeline: sharing it saves a dict and a float,
# 224 bytes, per live job.
_last_entries: dict[str, tuple[float, dict[str, Any]]] = {}


def timeline_entry(state: str, timestamp: float) -> dict[str, Any]:
    """``{"state": state, "timestamp": float(timestamp)}``, shared with the jobs that made
    the same transition at the same time. Never change the dict it returns."""
    last = _last_entries.get(state)
    if last is not None and last[0] == timestamp:
        return last[1]
    entry = {"state": state, "timestamp": float(timestamp)}
    _last_entries[state] = (timestamp, entry)
    return entry


def new_timeline(state: str, timestamp: float) -> list[dict[str, Any]]:
    """A new job's timeline: its first transition, as a shared :func:`timeline_entry`."""
    return [timeline_entry(state, timestamp)]


# Every field's default object, by a name the generated methods use (``_d0``, ...): a job
# made by admit, __init__ or from_record holds these very objects in its default fields,
# so to_wire and to_record can tell a default by identity, cheaper than by equality.
_DEFAULTS: dict[str, Any] = {f"_d{i}": default for i, (_, _, default) in enumerate(_FIELDS)}
_DEFAULTS.update({f"_i_{name}": default for name, default in _INTERNAL})
_DEFAULT_NAME = {attr: f"_d{i}" for i, (_, attr, _) in enumerate(_FIELDS)}
_DEFAULT_NAME.update({name: f"_i_{name}" for name, _ in _INTERNAL})
# The Job object of a job whose every field has its default; to_wire starts from a copy.
# (traceContext, our own field, is on it only when set: bunqueue's Job has no such key.)
_WIRE_ONLY_WHEN_SET = frozenset({"traceContext"})
_WIRE_DEFAULTS = JobWire({wire: default for wire, _, default in _FIELDS
                          if wire not in _WIRE_ONLY_WHEN_SET})


def _ref(attr: str, default: Any) -> str:
    """How generated code names ``attr``'s default: a literal where Python makes every
    such value one object (None, booleans, small ints, identifier-like strings, the
    empty tuple), else the default object itself by name (``backoff``'s 1000)."""
    if default is None or isinstance(default, (bool, str, tuple)) or (
            type(default) is int and -5 <= default <= 256):
        return repr(default)
    return _DEFAULT_NAME[attr]


def _is_ref(attr: str, default: Any) -> str:
    """``attr``'s default as the right operand of ``is``: by name but for None and the
    booleans (``x is 0`` would be a SyntaxWarning, and a name is one object anyway)."""
    return repr(default) if default is None or isinstance(default, bool) else (
        _DEFAULT_NAME[attr])


def _compile(name: str, source: str, **names: Any) -> Any:
    """Build a method from generated source, as :mod:`dataclasses` does.

    A job is created, stored and sent once per push; a generated straight-line method
    is several times faster than a loop over the field table, and the table stays the
    single place where a field is declared.
    """
    scope: dict[str, Any] = {}
    exec(source, {"JobWire": JobWire, **_DEFAULTS, **names}, scope)  # noqa: S102
    return scope[name]


def _init_source() -> str:
    params, body = [], []
    for _, attr, default in _FIELDS + tuple((n, n, d) for n, d in _INTERNAL):
        if isinstance(default, tuple):
            # Most jobs have no tags, dependencies or children: they share one empty
            # tuple (a list is made when one is set), which saves three lists a job.
            params.append(f"{attr}=None")
            body.append(f"    self.{attr} = () if not {attr} else list({attr})")
        else:
            params.append(f"{attr}={_ref(attr, default)}")
            body.append(f"    self.{attr} = {attr}")
    return f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(body) + "\n"


# Set by admit() from its arguments, in this order; every other field starts at its
# default (and lastHeartbeat at created_at).
_ADMIT_ARGS = ("id", "queue", "created_at", "run_at", "seq", "timeline")


def _admit_slots() -> tuple[AdmitSlot, ...]:
    """What admit stores in each slot before the options: an argument or the default."""
    slots = []
    for _, attr, default in _FIELDS + tuple((n, n, d) for n, d in _INTERNAL):
        source = "created_at" if attr == "last_heartbeat" else attr
        slots.append((attr, _ADMIT_ARGS.index(source) if source in _ADMIT_ARGS else -1,
                      default))
    return tuple(slots)


def _admit_source() -> str:
    lines = [f"def admit({', '.join(_ADMIT_ARGS)}, options):", "    self = _new(JobRecord)"]
    for attr, arg, default in _admit_slots():
        # defaults are immutable (the list fields share the empty tuple)
        value = _ADMIT_ARGS[arg] if arg >= 0 else _ref(attr, default)
        lines.append(f"    self.{attr} = {value}")
    lines += [
        "    for attr, value in options.items():",
        "        if attr in _LIST_ATTRS:",
        "            value = () if not value else list(value)",
        "        setattr(self, attr, value)",
        # A queue's jobs mostly share a few names: one string each, not one a job.
        "    if type(self.name) is str:",
        "        self.name = _intern(self.name)",
        "    return self",
    ]
    return "\n".join(lines) + "\n"


def _step_source(var: str, step: Step) -> str:
    """One line of a generated to_wire or to_record: the store of ``step``'s field into
    ``var`` under the test its kind names (see trioqueue.core.job_plan)."""
    key, attr, kind, default = step
    value = f"float(self.{attr})" if kind in (FLOAT, FLOAT_NOT_NONE) else f"self.{attr}"
    store = f"{var}[{key!r}] = {value}"
    if kind in (ALWAYS, FLOAT):
        return f"    {store}"
    if kind == TRUTHY:
        test = f"self.{attr}"
    elif kind == FLOAT_NOT_NONE:
        test = f"self.{attr} is not None"
    else:
        ref = _is_ref(attr, default)
        test = f"self.{attr} is not {ref}"
        if kind == IS_NOT_NE:
            test += f" and self.{attr} != {ref}"
    return f"    if {test}: {store}"


def _wire_steps() -> tuple[Step, ...]:
    # A copy of the defaults' Job object (a C copy of its key table), then a store only
    # for the fields that are not their default object: most of a job's 47 fields are,
    # and a test of identity costs a fifth of a store (and of building 47 entries anew).
    # The result is the same dict, keys in field order, as building it whole.
    steps: list[Step] = []
    for wire, attr, default in _FIELDS:
        if wire in ("createdAt", "runAt", "lastHeartbeat"):
            steps.append((wire, attr, FLOAT, None))
        elif wire in _TIMESTAMPS:
            steps.append((wire, attr, FLOAT_NOT_NONE, None))
        else:
            steps.append((wire, attr, IS_NOT, default))
    return tuple(steps)


def _to_wire_source() -> str:
    lines = ["def to_wire(self):", "    w = JobWire(_WIRE_DEFAULTS)"]
    lines += [_step_source("w", step) for step in _wire_steps()]
    lines.append("    return w")
    return "\n".join(lines) + "\n"


# Always stored, even when equal to the default (they identify and order the job).
_ALWAYS = frozenset({"id", "queue", "name", "data", "createdAt", "runAt"})


def _record_steps() -> tuple[Step, ...]:
    steps: list[Step] = [(w, a, ALWAYS, d) for w, a, d in _FIELDS if w in _ALWAYS]
    steps += [(n, n, ALWAYS, None) for n in _INTERNAL_ALWAYS]
    # A default is recognised by identity first (see _DEFAULTS), equality only after.
    for name, default in _INTERNAL:
        if name not in _INTERNAL_ALWAYS:  # (None ones hold None, a dict, a list or a number)
            steps.append((name, name, IS_NOT if default is None else IS_NOT_NE, default))
    for wire, attr, default in _FIELDS:
        if wire in _ALWAYS:
            continue
        if isinstance(default, tuple):
            steps.append((wire, attr, TRUTHY, default))
        elif default is None or isinstance(default, bool):
            steps.append((wire, attr, IS_NOT, default))
        else:
            steps.append((wire, attr, IS_NOT_NE, default))
    return tuple(steps)


def _to_record_source() -> str:
    steps = _record_steps()
    lead = next(i for i, step in enumerate(steps) if step[2] != ALWAYS)
    lines = ["def to_record(self):",
             "    r = {" + ", ".join(f"{k!r}: self.{a}" for k, a, _, _ in steps[:lead]) + "}"]
    lines += [_step_source("r", step) for step in steps[lead:]]
    lines.append("    return r")
    return "\n".join(lines) + "\n"


class JobRecord:
    """One job. Plain attributes; ``__slots__`` keeps 100k waiting jobs cheap."""

    __slots__ = tuple(attr for _, attr, _ in _FIELDS) + tuple(n for n, _ in _INTERNAL)

    id: str
    queue: str
    name: str
    data: Any
    priority: float
    created_at: int
    run_at: int
    started_at: int | None
    completed_at: int | None
    attempts: int
    max_attempts: int
    backoff: float
    backoff_config: dict[str, Any] | None
    ttl: float | None
    timeout: float | None
    unique_key: str | None
    custom_id: str | None
    depends_on: list[str]
    parent_id: str | None
    children_ids: list[str]
    children_completed: int
    tags: list[str]
    group_id: str | None
    progress: float
    progress_message: str | None
    stacktrace: list[str] | None
    remove_on_complete: bool
    remove_on_fail: bool
    repeat: dict[str, Any] | None
    last_heartbeat: int
    stall_timeout: float | None
    stall_count: int
    stack_trace_limit: float
    keep_logs: float | None
    size_limit: float | None
    fail_parent_on_failure: bool
    remove_dependency_on_failure: bool
    continue_parent_on_failure: bool
    ignore_dependency_on_failure: bool
    deduplication_ttl: float | None
    deduplication_extend: bool
    deduplication_replace: bool
    debounce_id: str | None
    debounce_ttl: float | None
    durable: bool
    lifo: bool
    timeline: list[dict[str, Any]]
    trace_context: dict[str, str] | None
    state: str
    seq: int
    dlq: dict[str, Any] | None
    dedup_lost: bool
    dedup_expires_at: float | None
    pending: list[str] | None

    __init__ = _compile("__init__", _init_source())

    @staticmethod
    def admit(id: str, queue: str, created_at: int, run_at: int, seq: int,
              timeline: list[dict[str, Any]], options: dict[str, Any]) -> JobRecord:
        """A new job from a push: ``options`` are attribute values (parse_job_input's
        output: name, data and whatever the client set); the rest take their defaults.

        The same job as ``Job(...)`` builds, in a third of the time: the push path
        makes one per job, and binding ~50 keyword arguments was its largest cost.
        ``timeline`` is kept, not copied.
        """
        return _admit(id, queue, created_at, run_at, seq, timeline, options)

    def add_timeline(self, state: str, timestamp: int, **extra: Any) -> None:
        """Record a transition; like bunqueue, later transitions are dropped once full."""
        if len(self.timeline) < TIMELINE_MAX:
            if extra:
                entry: dict[str, Any] = {"state": state, "timestamp": float(timestamp)}
                entry.update(extra)
            else:
                entry = timeline_entry(state, timestamp)
            if type(self.timeline) is tuple:  # the shared empty one
                self.timeline = []
            self.timeline.append(entry)

    # The Job object as bunqueue sends it (timestamps as floats: the int64 rule).
    to_wire = _compile("to_wire", _to_wire_source(), _WIRE_DEFAULTS=_WIRE_DEFAULTS)
    # The storage form: fields that differ from their default, plus the internals;
    # from_record fills the defaults back in.
    to_record = _compile("to_record", _to_record_source())

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> JobRecord:
        job = cls.__new__(cls)
        for wire, attr, default in _FIELDS:
            value = record.get(wire, default)
            if wire in _LISTS:
                value = list(value) if value else ()
            elif wire in _TIMESTAMPS and isinstance(value, float):
                value = int(value)
            setattr(job, attr, value)
        for attr, default in _INTERNAL:
            setattr(job, attr, record.get(attr, default))
        if type(job.name) is str:
            job.name = intern(job.name)
        return job


_LIST_ATTRS: Final = frozenset(attr for wire, attr, _ in _FIELDS if wire in _LISTS)
_admit = _compile("admit", _admit_source(), JobRecord=JobRecord, _new=object.__new__,
                  _LIST_ATTRS=_LIST_ATTRS, _intern=intern)
# The generated methods, which define what the C forms do (and serve where it is absent).
_py_to_wire = JobRecord.to_wire
_py_to_record = JobRecord.to_record
_py_admit = _admit

# "C" where trioqueue.core._job_slots is built: to_record, to_wire and admit then run the
# same steps in C (tests/core/test_job_slots.py holds them to the Python forms).
IMPLEMENTATION: Final = job_plan.install(
    JobRecord, record_steps=_record_steps(), wire_steps=_wire_steps(),
    admit_slots=_admit_slots(), admit_args=len(_ADMIT_ARGS), wire_cls=JobWire,
    wire_defaults=_WIRE_DEFAULTS, list_attrs=_LIST_ATTRS)
