"""The sliced JSON decoder gives what one json call gives, or refuses what it refuses,
however its windows cut the text (they are made tiny here, so every path is taken:
runs, one item alone, opened containers, long strings cut between escapes)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from trioqueue.transport.large import json_text
from trioqueue.transport.large.data_sizes import DataTooLarge
from trioqueue.transport.slicing import Slicer, run_steps
from trioqueue.transport.wire.codec import JSON, DecodeError

TRICKY = ["a", ",", "]", "}", '"', "\\", "\u00e9", "\U0001F600", "\n", " ", "u", "\ud83d"]
EDITS = [",", "]", "}", '"', "\\", "x", " ", "\\u12", "\\ud83d", "NaN", "1e400", "[", '{"a":']


@pytest.fixture(autouse=True)
def tiny_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_text, "WINDOW_CHARS", 40)
    monkeypatch.setattr(json_text, "PIECE_CHARS", 7)
    monkeypatch.setattr(json_text, "MIN_RUN_CHARS", 2)
    monkeypatch.setattr(json_text, "FIRST_PIECE_CHARS", 3)


def decoded(text: str) -> tuple[str, Any]:
    try:
        return "ok", run_steps(json_text.json_decode_steps(
            text.encode("utf-8", "surrogatepass"), text, Slicer(), 1 << 30))[0]
    except DecodeError:
        return "refused", None


def expected(text: str) -> tuple[str, Any]:
    try:
        return "ok", JSON.decode(text)
    except DecodeError:
        return "refused", None


def random_value(rnd: random.Random, depth: int = 0) -> Any:
    r = rnd.random()
    if depth < 6 and r < 0.25:
        return [random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 8))]
    if depth < 6 and r < 0.45:
        return {random_text(rnd): random_value(rnd, depth + 1) for _ in range(rnd.randint(0, 6))}
    if r < 0.7:
        return random_text(rnd)
    return rnd.choice([1, -0.5, 1e15, True, None, False, 12345678901234567890, 0])


def random_text(rnd: random.Random) -> str:
    return "".join(rnd.choice(TRICKY) for _ in range(rnd.randint(0, 30)))


def test_the_same_values_and_refusals_as_one_json_call() -> None:
    rnd = random.Random(41)
    for _ in range(3000):
        text = json.dumps(random_value(rnd), ensure_ascii=rnd.random() < 0.5,
                          indent=rnd.choice([None, None, 1]))
        if rnd.random() < 0.5:  # broken somewhere
            at = rnd.randrange(len(text) + 1)
            text = text[:at] + rnd.choice(EDITS) + text[at + rnd.choice([0, 0, 1]):]
        assert repr(decoded(text)) == repr(expected(text)), text


def test_the_bound_covers_the_json_of_the_value() -> None:
    """Python's JSON of the value (what the core measures) is never longer than the
    bound, floats written short included."""
    texts = ["[" + ",".join(["1e15"] * 100) + "]", "[1e400,-1e400,1E5,0.1e1]",
             json.dumps({"k": "\u00e9\n" * 50}), json.dumps(["\n\u2028\U0001F600"] * 9)]
    for text in texts:
        parsed, bound = run_steps(json_text.json_decode_steps(
            text.encode(), None, Slicer(), 1 << 30))
        assert bound is not None
        written = json.dumps(parsed, ensure_ascii=False, separators=(",", ":"))
        assert len(written.encode("utf-16-le", "surrogatepass")) // 2 <= bound  # UTF-16 units


def test_objects_made_from_kept_members_are_those_of_one_json_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every object made in a dict sized for its members, merged run by run: the same
    keys in the same order, a later member of a key winning, as one json call."""
    monkeypatch.setattr(json_text, "MIN_PRESIZED", 0)
    rnd = random.Random(7)
    for _ in range(1000):
        text = json.dumps(random_value(rnd), ensure_ascii=rnd.random() < 0.5)
        assert repr(decoded(text)) == repr(expected(text)), text
    members = [f'"k{i % 5000}":{i}' if i % 7 else f'"n{i}":[{i},"{"x" * 50}"]'
               for i in range(40_000)]
    text = "{" + ",".join(members) + "}"
    assert repr(decoded(text)) == repr(expected(text))


class Graves:
    """A graveyard that keeps what it is given."""

    def __init__(self) -> None:
        self.buried: list[Any] = []

    def bury(self, value: Any) -> None:
        self.buried.append(value)


def _command_steps(text: str, limit: int, graves: Graves) -> Any:
    return run_steps(json_text.json_decode_steps(
        text.encode(), text, Slicer(), limit, graves))  # type: ignore[arg-type]


def test_a_command_s_data_over_the_limit_is_refused_and_left_to_the_graveyard() -> None:
    data = {str(i): 0 for i in range(300)}
    text = json.dumps({"cmd": "PUSH", "queue": "q", "data": data, "reqId": "r"}, indent=4)
    compact = len(json.dumps(data, separators=(",", ":")))
    assert len(text) > compact + 10

    # the text's bound over the limit, the data within it: measured exactly
    graves = Graves()
    value, bound = _command_steps(text, compact + 10, graves)
    assert value["data"] == data and bound == compact and graves.buried == []

    with pytest.raises(DataTooLarge) as refused:
        _command_steps(text, compact - 1, graves)
    assert refused.value.req_id == "r"
    assert any(buried is not None and buried.get("data") == data for buried in graves.buried
               if isinstance(buried, dict))
    assert len({id(buried) for buried in graves.buried}) == len(graves.buried)  # each once


def test_what_a_malformed_text_made_is_left_to_the_graveyard() -> None:
    text = '{"data": {' + ",".join(f'"{i}": [{i}]' for i in range(200)) + ', "end": }}'
    graves = Graves()
    with pytest.raises(DecodeError):
        _command_steps(text, 1 << 30, graves)
    kept = [buried for buried in graves.buried if isinstance(buried, list)]
    assert any(len(members) > 1 for members in kept)  # the runs of the object being made
