"""JobRecord.to_wire and to_record against their plain definitions.

Both are generated methods that tell a default by identity first (to_wire copies a
template of the defaults and stores only the other fields); these tests say what they
must give: the same keys in the same order, and the same values of the same types, as
building the dict field by field, for defaults, values equal to a default but not the
same object (``0.0`` for ``0``, a fresh ``1000``), and anything else.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hs

from trioqueue.core.job import (
    _ALWAYS,
    _FIELDS,
    _INTERNAL,
    _INTERNAL_ALWAYS,
    _TIMESTAMPS,
    _WIRE_ONLY_WHEN_SET,
    JobRecord,
    new_timeline,
)


def wire_reference(job: JobRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for wire, attr, _ in _FIELDS:
        value = getattr(job, attr)
        if value is None and wire in _WIRE_ONLY_WHEN_SET:
            continue  # (our own fields: absent from bunqueue's Job unless set)
        out[wire] = float(value) if wire in _TIMESTAMPS and value is not None else value
    return out


def record_reference(job: JobRecord) -> dict[str, Any]:
    out = {wire: getattr(job, attr) for wire, attr, _ in _FIELDS if wire in _ALWAYS}
    out.update({name: getattr(job, name) for name in _INTERNAL_ALWAYS})
    for name, default in _INTERNAL:
        if name not in _INTERNAL_ALWAYS and getattr(job, name) != default:
            out[name] = getattr(job, name)
    for wire, attr, default in _FIELDS:
        if wire in _ALWAYS:
            continue
        value = getattr(job, attr)
        if isinstance(default, tuple):
            keep = bool(value)
        elif default is None:
            keep = value is not None
        elif isinstance(default, bool):
            keep = value is not default
        else:
            keep = value != default
        if keep:
            out[wire] = value
    return out


def typed(d: dict[str, Any]) -> list[tuple[str, type, Any]]:
    return [(k, type(v), v) for k, v in d.items()]


def _value(attr: str, default: Any) -> hs.SearchStrategy[Any]:
    """The default itself, a value equal to it but another object, or another value."""
    if isinstance(default, bool):
        return hs.booleans()
    if default is None:
        return hs.one_of(hs.none(), hs.integers(0, 10**13), hs.floats(0, 1e6),
                         hs.text(max_size=5), hs.dictionaries(hs.text(max_size=3),
                                                              hs.integers(), max_size=2))
    if isinstance(default, tuple):
        return hs.one_of(hs.just(()), hs.just([]), hs.lists(hs.text(max_size=4), max_size=3))
    if isinstance(default, str):
        return hs.one_of(hs.just(default), hs.just("".join(list(default))),
                         hs.text(max_size=6))
    return hs.one_of(hs.just(default), hs.just(float(default)),
                     hs.just(int(str(default))), hs.integers(-5, 10**13),
                     hs.floats(-1e6, 1e6, allow_nan=False))


_FIELD_VALUES = {attr: _value(attr, default) for _, attr, default in _FIELDS
                 if attr not in ("created_at", "run_at", "last_heartbeat")}
_FIELD_VALUES.update({name: _value(name, default) for name, default in _INTERNAL})
_FIELD_VALUES["created_at"] = hs.integers(0, 10**13)
_FIELD_VALUES["run_at"] = hs.integers(0, 10**13)
_FIELD_VALUES["last_heartbeat"] = hs.integers(0, 10**13)
_FIELD_VALUES["started_at"] = hs.one_of(hs.none(), hs.integers(0, 10**13))
_FIELD_VALUES["completed_at"] = hs.one_of(hs.none(), hs.integers(0, 10**13))


@settings(max_examples=150, deadline=None)
@given(hs.fixed_dictionaries({}, optional=_FIELD_VALUES))
def test_generated_forms_match_their_definitions(values: dict[str, Any]) -> None:
    job = JobRecord(**values)
    assert typed(job.to_wire()) == typed(wire_reference(job))
    assert typed(job.to_record()) == typed(record_reference(job))
    # and a job read back from its record
    back = JobRecord.from_record(job.to_record())
    assert typed(back.to_wire()) == typed(wire_reference(back))
    assert typed(back.to_record()) == typed(record_reference(back))


def test_admitted_and_default_jobs() -> None:
    for job in (JobRecord(),
                JobRecord.admit("j", "q", 5, 7, 1, new_timeline("waiting", 5),
                                {"name": "n", "data": {"a": 1}}),
                JobRecord.admit("j", "q", 5, 7, 1, [], {"backoff": 1000, "priority": 0.0,
                                                        "tags": ["t"]})):
        assert typed(job.to_wire()) == typed(wire_reference(job))
        assert typed(job.to_record()) == typed(record_reference(job))
    # each call makes a dict of its own: changing one leaves the next alike
    job = JobRecord()
    job.to_wire()["state"] = "x"
    assert "state" not in job.to_wire()
