"""The C form of JobRecord's hot methods (trioqueue.core._job_slots) against the
generated Python ones, which define them: the same dicts, keys in the same order, the
same value objects, the same dict class; the same jobs from admit; the same exceptions;
and the Python method for every call the C form does not take."""

from __future__ import annotations

import gc
import sys
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from trioqueue.core import job as job_module
from trioqueue.core import native
from trioqueue.core.job import (
    _FIELDS,
    _INTERNAL,
    _LIST_ATTRS,
    _TIMESTAMPS,
    JobRecord,
    JobWire,
    _py_admit,
    _py_to_record,
    _py_to_wire,
)

SLOTS: tuple[str, ...] = JobRecord.__slots__
DEFAULTS: dict[str, Any] = {attr: default for _, attr, default in _FIELDS}
DEFAULTS.update(dict(_INTERNAL))


def test_the_c_form_is_built() -> None:
    # Without a compiler the package keeps the generated Python methods, which are
    # correct but cost the broker ~600 Python bytecodes more per pushed job: CI must
    # have the C form (and runs the suite again on the Python one, on purpose).
    if native.PURE_PYTHON:
        assert job_module.IMPLEMENTATION == "Python"
        assert JobRecord.to_record is _py_to_record
        return
    assert job_module.IMPLEMENTATION == "C"
    assert type(JobRecord.to_record).__module__ == "trioqueue.core._job_slots"


class Odd:
    """A value whose comparisons, truth or float conversion misbehave."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __ne__(self, other: object) -> Any:
        if self.mode == "ne_raises":
            raise ValueError("no !=")
        if self.mode == "ne_odd":
            return Odd("bool_raises")
        return self.mode != "ne_false"

    def __eq__(self, other: object) -> bool:
        return self is other

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self.mode == "bool_raises":
            raise LookupError("no truth")
        return self.mode != "bool_false"

    def __float__(self) -> float:
        if self.mode == "float_raises":
            raise OverflowError("no float")
        return 2.5

    def __repr__(self) -> str:
        return f"Odd({self.mode!r})"


odds = hs.builds(Odd, hs.sampled_from(["ne_raises", "ne_odd", "ne_false", "bool_raises",
                                       "bool_false", "float", "float_raises", "plain"]))
anything = hs.one_of(
    hs.none(), hs.booleans(), hs.sampled_from([0, 0.0, -0.0, 1, 1.0, float("nan"), "", "0"]),
    hs.integers(), hs.floats(), hs.text(max_size=4), hs.just(()), hs.just([]),
    hs.lists(hs.integers(), max_size=3), hs.tuples(hs.integers()),
    hs.dictionaries(hs.text(max_size=2), hs.integers(), max_size=2), odds)


def value_for(default: Any) -> hs.SearchStrategy[Any]:
    """The default itself, values equal to it but other objects, or anything."""
    near: list[Any] = [default]
    if type(default) is int:
        # a fresh int (another object past the small-int cache: 1000), its float, and
        # False for 0
        near += [int(str(default)), float(default)] + ([False] if default == 0 else [])
    elif type(default) is str:
        near += ["".join(list(default)) + "", str(default.encode().decode())]
    elif type(default) is bool:
        near += [int(default), float(default)]
    elif isinstance(default, tuple):
        near += [[], ["a"], ("b",)]
    return hs.one_of(hs.sampled_from(near), anything)


def fresh_str(s: str) -> str:
    return (s + "x")[:-1]


SLOT_VALUES = {attr: value_for(default) for attr, default in DEFAULTS.items()}
TIMESTAMP_ATTRS = {attr for wire, attr, _ in _FIELDS if wire in _TIMESTAMPS}
for attr in TIMESTAMP_ATTRS:  # mostly numbers, sometimes anything
    SLOT_VALUES[attr] = hs.one_of(hs.integers(0, 10**13), hs.none(), hs.floats(),
                                  hs.sampled_from(["1.5", "x"]), anything)


def outcome(method: Any, *args: Any) -> tuple[Any, ...]:
    try:
        result = method(*args)
    except Exception as e:  # the same exception, with the same message
        return ("raised", type(e), str(e))
    return ("ok", result)


def assert_same_dict(c: Any, py: Any) -> None:
    assert c[0] == py[0]
    if c[0] == "raised":
        assert c == py
        return
    c, py = c[1], py[1]
    assert type(c) is type(py)
    assert list(c) == list(py)  # the same keys in the same order
    for key in py:
        if key in _TIMESTAMPS and type(py[key]) is float:  # float() made it
            assert type(c[key]) is float and (
                c[key] == py[key] or (c[key] != c[key] and py[key] != py[key]))
        else:
            assert c[key] is py[key], key


def make_job(values: dict[str, Any], unset: frozenset[str]) -> JobRecord:
    job = JobRecord.__new__(JobRecord)
    for attr in SLOTS:
        if attr not in unset:
            setattr(job, attr, values.get(attr, DEFAULTS[attr]))
    return job


@settings(max_examples=400, deadline=None)
@given(values=hs.fixed_dictionaries({}, optional=SLOT_VALUES),
       unset=hs.frozensets(hs.sampled_from(SLOTS), max_size=2))
def test_to_record_and_to_wire_match_python(values: dict[str, Any],
                                            unset: frozenset[str]) -> None:
    # Most examples have every slot set; some have one or two unset (AttributeError).
    job = make_job(values, unset if len(values) % 4 == 0 else frozenset())
    assert_same_dict(outcome(JobRecord.to_record, job), outcome(_py_to_record, job))
    assert_same_dict(outcome(JobRecord.to_wire, job), outcome(_py_to_wire, job))
    # through an instance too (the method binding)
    assert_same_dict(outcome(lambda: job.to_record()), outcome(_py_to_record, job))
    assert_same_dict(outcome(lambda: job.to_wire()), outcome(_py_to_wire, job))


def test_records_of_admitted_and_stored_jobs_match_python() -> None:
    jobs = [JobRecord(), JobRecord.admit("j", "q", 5, 7, 1, [], {"name": "n", "data": 1})]
    jobs.append(JobRecord.from_record(_py_to_record(jobs[1])))
    for job in jobs:
        assert_same_dict(outcome(job.to_record), outcome(_py_to_record, job))
        assert_same_dict(outcome(job.to_wire), outcome(_py_to_wire, job))
        assert type(job.to_wire()) is JobWire


option_keys = hs.one_of(hs.sampled_from(SLOTS), hs.sampled_from(sorted(_LIST_ATTRS)),
                        hs.sampled_from(["nope", "__class__", 5]))
option_values = hs.one_of(anything, hs.lists(hs.text(max_size=2), max_size=3),
                          hs.text(max_size=3).map(fresh_str), hs.just("default"),
                          # equal to an interned string, not it: admit interns the name
                          hs.sampled_from(["default", "queued", "id"]).map(fresh_str))


def same_jobs(c: JobRecord, py: JobRecord, options: dict[Any, Any]) -> None:
    assert type(c) is type(py) is JobRecord
    for attr in SLOTS:
        cv, pv = getattr(c, attr), getattr(py, attr)
        if attr in _LIST_ATTRS and options.get(attr):
            assert type(cv) is type(pv) is list and cv == pv
            assert cv is not pv and cv is not options[attr]
        else:
            assert cv is pv, attr  # defaults, arguments, options, the interned name


@settings(max_examples=400, deadline=None)
@given(options=hs.dictionaries(option_keys, option_values, max_size=8),
       created=hs.one_of(hs.integers(), anything), seq=hs.integers(0, 10**6))
def test_admit_matches_python(options: dict[Any, Any], created: Any, seq: int) -> None:
    timeline: list[Any] = [{"state": "waiting", "timestamp": 1.0}]
    job_id, queue = fresh_str("job-1"), fresh_str("q")
    args = (job_id, queue, created, int(str(10**5)), seq, timeline)
    c = outcome(JobRecord.admit, *args, dict(options))
    py = outcome(_py_admit, *args, dict(options))
    assert c[0] == py[0]
    if c[0] == "raised":
        assert c == py
    else:
        same_jobs(c[1], py[1], options)
        assert c[1].timeline is options.get("timeline", timeline) or "timeline" in options
        assert c[1].last_heartbeat is options.get("last_heartbeat", created)
        assert_same_dict(outcome(c[1].to_record), outcome(_py_to_record, c[1]))


def test_admit_takes_keywords_and_any_mapping_through_python() -> None:
    options = {"name": fresh_str("n"), "tags": ("t",)}
    timeline: list[Any] = []
    py = _py_admit("j", "q", 1, 2, 3, timeline, options)
    same_jobs(JobRecord.admit("j", "q", 1, 2, 3, timeline, options=options), py, options)
    same_jobs(JobRecord.admit("j", "q", 1, 2, 3, timeline, types.MappingProxyType(options)),
              py, options)
    with pytest.raises(TypeError):
        JobRecord.admit("j", "q", 1, 2, 3, [])
    with pytest.raises(TypeError):
        JobRecord.admit("j", "q", 1, 2, 3, [], {}, {})
    fresh = fresh_str("default")
    named = JobRecord.admit("j", "q", 1, 2, 3, [], {"name": fresh})
    assert named.name is sys.intern("default") and named.name is not fresh


def test_admit_stops_as_python_when_the_options_change_under_it() -> None:
    def run(admit: Any) -> tuple[Any, ...]:
        options: dict[str, Any] = {}

        class Grows:
            def __bool__(self) -> bool:
                options["data"] = 1
                return True

            def __iter__(self) -> Any:
                return iter(["a"])

        options["tags"] = Grows()
        return outcome(admit, "j", "q", 1, 2, 3, [], options)

    assert run(JobRecord.admit) == run(_py_admit)
    assert run(JobRecord.admit)[1] is RuntimeError


def test_wrong_objects_and_arguments_go_to_python() -> None:
    class Sub(JobRecord):
        __slots__ = ()

    sub = Sub.__new__(Sub)
    for attr in SLOTS:
        setattr(sub, attr, DEFAULTS[attr])
    sub.data = {"x": 1}
    assert_same_dict(outcome(JobRecord.to_record, sub), outcome(_py_to_record, sub))
    assert_same_dict(outcome(JobRecord.to_wire, sub), outcome(_py_to_wire, sub))
    for method, py in ((JobRecord.to_record, _py_to_record), (JobRecord.to_wire, _py_to_wire)):
        for args in ((object(),), (None,), (), (JobRecord(), 1)):
            assert outcome(method, *args) == outcome(py, *args)
        assert outcome(lambda m=method: m(self=JobRecord())) == outcome(
            lambda p=py: p(self=JobRecord()))
    empty = JobRecord.__new__(JobRecord)
    assert outcome(empty.to_record) == outcome(_py_to_record, empty)
    assert outcome(empty.to_record)[1] is AttributeError


def test_a_comparison_that_changes_the_job_is_read_back_as_python_does() -> None:
    def run(to_record: Any) -> dict[str, Any]:
        job = JobRecord()

        class Moves:
            def __ne__(self, other: object) -> bool:
                job.backoff = "moved"
                return True

        job.backoff = Moves()
        result: dict[str, Any] = to_record(job)
        return result

    assert run(JobRecord.to_record)["backoff"] == run(_py_to_record)["backoff"] == "moved"


def test_a_wire_class_with_its_own_setitem_goes_to_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stored: list[str] = []

    def setitem(self: dict[str, Any], key: str, value: Any) -> None:
        stored.append(key)
        dict.__setitem__(self, key, value)

    monkeypatch.setattr(JobWire, "__setitem__", setitem, raising=False)
    job = JobRecord(data=1)
    assert list(job.to_wire().items()) == list(_py_to_wire(job).items())
    assert stored and stored[: len(stored) // 2] == stored[len(stored) // 2:]


def test_no_reference_is_lost_or_kept() -> None:
    marker = object()
    job = JobRecord.admit("j", "q", 1, 2, 3, [], {"data": marker, "backoff": marker})
    broken = JobRecord.admit("j", "q", 1, 2, 3, [], {"data": marker})
    del broken.timeline
    default = DEFAULTS["backoff"]

    def calls() -> None:
        for _ in range(200):
            job.to_record()
            job.to_wire()
            JobRecord.admit("j", "q", 1, 2, 3, [], {"data": marker, "tags": [marker]})
            for method in (broken.to_record, broken.to_wire):
                with pytest.raises(AttributeError):
                    method()
            with pytest.raises(AttributeError):
                JobRecord.admit("j", "q", 1, 2, 3, [], {"data": marker, "nope": marker})

    calls()
    gc.collect()
    before = sys.getrefcount(marker), sys.getrefcount(default)
    calls()
    gc.collect()
    assert (sys.getrefcount(marker), sys.getrefcount(default)) == before


def test_the_methods_keep_their_names_and_python_forms() -> None:
    assert JobRecord.to_record.__name__ == "to_record"
    assert getattr(JobRecord.to_wire, "__wrapped__", JobRecord.to_wire) is _py_to_wire
    assert "push" in (JobRecord.admit.__doc__ or "")


class Relabelled(JobRecord):
    """A class of JobRecord's layout that a job's __class__ may be assigned to."""

    __slots__ = ()

    @property  # type: ignore[misc]
    def timeline(self) -> list[Any]:  # shadows the slot: read by name, as Python does
        return ["relabelled"]


def test_a_job_relabelled_midway_is_read_by_name_as_python_does() -> None:
    def run(method: Any) -> tuple[Any, ...]:
        job = JobRecord()

        class Relabels:
            def __ne__(self, other: object) -> bool:
                job.__class__ = Relabelled
                return True

        job.backoff = Relabels()
        return outcome(method, job)

    for method, py in ((JobRecord.to_record, _py_to_record), (JobRecord.to_wire, _py_to_wire)):
        c, p = run(method), run(py)
        assert c[0] == p[0] == "ok" and list(c[1]) == list(p[1])
        assert c[1]["timeline"] == p[1]["timeline"]
    assert run(JobRecord.to_record)[1]["timeline"] == ["relabelled"]

    fresh = fresh_str("default")
    job = JobRecord.admit("j", "q", 1, 2, 3, [], {"__class__": Relabelled, "name": fresh})
    py = _py_admit("j", "q", 1, 2, 3, [], {"__class__": Relabelled, "name": fresh})
    assert type(job) is type(py) is Relabelled and job.name is py.name is sys.intern(fresh)
