"""Validators for command fields, raising :class:`Refused` with bunqueue's texts.

Every function takes the raw decoded value, which may be any JSON/msgpack/CBOR type, and
either returns the value in the form the broker uses or raises ``Refused`` whose
message is the exact text a bunqueue client would see.

Two numeric families exist because bunqueue has two:

* :func:`strict_number` for command fields that bunqueue passes on as they are (PULL
  ``timeout``, PULLB ``count``, lease lengths): a string is not a number there.
* :func:`lenient_number` for job options and the delay/priority setters, where bunqueue
  reads a plain decimal numeric string (``"3"``, ``" -2.5 "``) as its number.

``bool`` is a subclass of ``int`` in Python but ``true`` is not a number in JS, so every
numeric check refuses booleans explicitly.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from typing_extensions import Unpack

from trioqueue.core.errors import Refused
from trioqueue.core.large_values.json_slices import compact_json

MAX_NAME_LENGTH = 256
"""Queue names, job names, groupIds and job ids: at most 256 (UTF-16) characters."""

MAX_DURATION_MS = 4_320_000_000_000_000
"""Half the JS Date range (8.64e15 / 2): the longest honoured delay/ttl/timeout.

bunqueue clamps longer durations to it, so that ``timestamp + duration`` stays a valid
date; an int so that messages print it the way JS does (no ``.0``).
"""

MAX_PULL_TIMEOUT_MS = 60_000
MAX_PULLB_COUNT = 1_000
MAX_WAIT_TIMEOUT_MS = 600_000
DEFAULT_LOCK_TTL_MS = 30_000
DEFAULT_WAIT_TIMEOUT_MS = 30_000
MAX_FAIL_STACK_LINES = 100

_QUEUE_NAME = re.compile(r"[A-Za-z0-9_\-.:]+")

# JS ``\s`` (WhiteSpace + LineTerminator), spelled out: Python's ``\s`` differs (it
# matches \x1c-\x1f and \x85, and misses U+FEFF). Digits are ASCII only, as JS ``\d``.
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
# bunqueue's rule for a "plain decimal numeric string": no exponent, no hex, no bare
# ".5" or "5.", no Infinity. JS Number() accepts more, but bunqueue's coercion does not.
_NUMERIC_STRING = re.compile(rf"[{_JS_SPACE}]*([+-]?[0-9]+(?:\.[0-9]+)?)[{_JS_SPACE}]*")

# Integers at least this large overflow a JS double (they would be Infinity there).
_FLOAT_OVERFLOW = 2**1024 - 2**970
MAX_SAFE_INTEGER = 2**53 - 1


# --------------------------------------------------------------------------- helpers


def js_length(text: str) -> int:
    """Length of ``text`` as JS counts it (UTF-16 code units), which bunqueue's limits use.

    Characters outside the BMP count twice; a string of at most 128 code points can never
    exceed 256 units, so the common case costs one ``len``.
    """
    n = len(text)
    if n <= 128 or text.isascii():
        return n
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def js_number_str(value: float) -> str:
    """Format a number the way JS ``String(number)`` does (``60000``, not ``60000.0``).

    Error texts embed bounds; bunqueue builds them with template strings.
    """
    if isinstance(value, int):
        return str(value)
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" not in text:
        return text
    # Both languages print the shortest round-tripping digits; they differ only in when
    # they switch to exponent form (JS: below 1e-6 or from 1e21) and how they spell it.
    mantissa, exponent = text.split("e")
    exp = int(exponent)
    if exp < 0 and abs(value) >= 1e-6:
        sign = "-" if mantissa.startswith("-") else ""
        digits = mantissa.lstrip("-").replace(".", "")
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    return f"{mantissa}e{'+' if exp > 0 else '-'}{abs(exp)}"


def is_number(value: Any) -> bool:
    """True for int/float values that JS would see as a number (booleans excluded)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: int | float) -> bool:
    """``Number.isFinite`` for a value already known to be a number."""
    if isinstance(value, float):
        return math.isfinite(value)
    return -_FLOAT_OVERFLOW < value < _FLOAT_OVERFLOW


def coerce_numeric_string(value: Any) -> Any:
    """A plain decimal numeric string as its number; any other value unchanged.

    The number is what JS ``Number()`` gives: a double, returned as an ``int`` when it is
    integral and safe (so ``"3"`` is ``3``), else a ``float`` (``"1" * 400`` is ``inf``).
    """
    if not isinstance(value, str):
        return value
    match = _NUMERIC_STRING.fullmatch(value)
    if match is None:
        return value
    number = float(match.group(1))
    if number.is_integer() and -MAX_SAFE_INTEGER <= number <= MAX_SAFE_INTEGER:
        return int(number)
    return number


def _check_number(
    value: Any,
    field: str,
    minimum: float | None,
    maximum: float | None,
    integer: bool,
) -> int | float:
    # The order of checks (type, finiteness, integrality, bounds) is bunqueue's.
    if not is_number(value):
        raise Refused(f"{field} must be a number")
    if not is_finite(value):
        raise Refused(f"{field} must be a finite number")
    if integer and isinstance(value, float) and not value.is_integer():
        raise Refused(f"{field} must be an integer")
    if minimum is not None and value < minimum:
        raise Refused(f"{field} must be at least {js_number_str(minimum)}")
    if maximum is not None and value > maximum:
        raise Refused(f"{field} must be at most {js_number_str(maximum)}")
    return value  # type: ignore[no-any-return]


# ------------------------------------------------------------------- generic fields


def positive_safe_integer(value: Any, field: str) -> int:
    """bunqueue's ``<field> must be a positive safe integer`` (1..2**53-1, no string
    coercion: a caller that accepts numeric strings coerces first)."""
    if (not is_number(value) or not is_finite(value)
            or (isinstance(value, float) and not value.is_integer())
            or not 1 <= value <= MAX_SAFE_INTEGER):
        raise Refused(f"{field} must be a positive safe integer")
    return int(value)


def queue_name(value: Any) -> str:
    """A queue name: 1-256 characters of ``[A-Za-z0-9_\\-.:]``."""
    if not isinstance(value, str) or not value:
        raise Refused("Queue name is required")
    if js_length(value) > MAX_NAME_LENGTH:
        raise Refused("Queue name too long (max 256 characters)")
    if _QUEUE_NAME.fullmatch(value) is None:
        raise Refused("Queue name contains invalid characters")
    return value


def job_id(value: Any, field: str = "id", *, check_length: bool = True) -> str:
    """A required job id (``id``, ``childId``, ...).

    Custom ids become the job id and a storage key, so ids longer than 256 characters
    are refused. Lookup-only commands whose clients expect ``Job not found`` for an
    unknown id may pass ``check_length=False`` (such an id can never exist anyway).
    """
    if not isinstance(value, str) or not value:
        raise Refused(f"{field} is required")
    if check_length:
        check_job_id_length(value)
    return value


def check_job_id_length(value: str) -> None:
    if js_length(value) > MAX_NAME_LENGTH:
        raise Refused("Job id too long (max 256 characters)")


# Storage keys hold a queue name and a job id side by side (LMDB caps keys at 511 bytes,
# of which 10 go to separators, state and time): a custom id must fit beside its queue.
_KEY_BYTES_FOR_QUEUE_AND_ID = 501


def check_id_fits_queue(queue: str, job_id: str) -> None:
    room = _KEY_BYTES_FOR_QUEUE_AND_ID - len(queue)  # queue names are ASCII
    if len(job_id) * 4 > room and len(job_id.encode()) > room:
        raise Refused(f"Job id too long for queue {queue} (max {room} bytes)")


# A dependency outcome row is keyed by both ids (storage.keys.MAX_DEP_IDS_BYTES).
MAX_DEP_PAIR_BYTES = 509
_GENERATED_ID_BYTES = 36  # a UUIDv7 the broker assigns when there is no custom id


def check_dependency_pair(parent_id: str | None, child_id: str) -> None:
    """A parent/child pair must fit one storage key (custom ids may be long Unicode)."""
    parent_bytes = _GENERATED_ID_BYTES if parent_id is None else len(parent_id.encode())
    if parent_bytes + len(child_id.encode()) > MAX_DEP_PAIR_BYTES:
        raise Refused(f"Job ids too long to link {child_id} to its dependent "
                           f"(max {MAX_DEP_PAIR_BYTES} bytes together)")


def optional_str(value: Any, field: str) -> str | None:
    """``None`` (absent) or a string; anything else is refused."""
    if value is None or isinstance(value, str):
        return value
    raise Refused(f"{field} must be a string")


def str_list(value: Any, field: str) -> list[str]:
    """An array of strings, returned as a new list (never the caller's object)."""
    if isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, str):
                break
        else:
            return list(value)
    raise Refused(f"{field} must be an array of strings")


def group_id(value: Any) -> str:
    """A groupId: a string of 1-256 characters without NUL (bunqueue's texts)."""
    if not isinstance(value, str):
        raise Refused("groupId must be a string")
    if not value:
        raise Refused("groupId must be a non-empty string")
    if js_length(value) > MAX_NAME_LENGTH:
        raise Refused("groupId must be at most 256 characters")
    if "\0" in value:
        raise Refused("groupId must not contain NUL characters")
    return value


def strict_number(
    value: Any,
    field: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    integer: bool = False,
    default: float | None = None,
    required: bool = False,
) -> float | None:
    """A number that is NOT coerced from a string (PULL timeout, count, lease lengths).

    ``None`` (absent, nil or msgpack ext 0) gives ``default``, or ``<field> is required``
    when ``required``. Returns the value as given (int or float).
    """
    if value is None:
        if required:
            raise Refused(f"{field} is required")
        return default
    return _check_number(value, field, minimum, maximum, integer)


class NumberRules(TypedDict, total=False):
    """The rules :func:`strict_number` takes, named once for :func:`lenient_number`."""

    minimum: float | None
    maximum: float | None
    integer: bool
    default: float | None
    required: bool


def lenient_number(value: Any, field: str, **rules: Unpack[NumberRules]) -> float | None:
    """Like :func:`strict_number`, but a plain decimal numeric string counts as its number.

    Accepted strings: optional JS whitespace, optional sign, ASCII digits, optional
    ``.digits`` (bunqueue's rule). ``"1e3"``, ``"0x10"``, ``".5"``, ``""``, ``"  "`` and
    ``"Infinity"`` are not numbers (``<field> must be a number``).
    """
    if isinstance(value, str):
        value = coerce_numeric_string(value)
    return strict_number(value, field, **rules)


def lenient_bool(value: Any) -> bool:
    """JS ``Boolean(value)``, which bunqueue applies to ``lifo``/``removeOn*``.

    False for ``None``, ``False``, ``0``, ``0.0``, NaN and ``""``; True for everything
    else, including the string ``"false"``/``"0"`` and empty arrays/maps/bytes (JS
    objects are always truthy). So ``1`` is true and ``0`` is false.
    """
    if value is None or value is False:
        return False
    if value is True:
        return True
    if isinstance(value, (int, float)):
        return value == value and value != 0
    if isinstance(value, str):
        return value != ""
    return True


# ------------------------------------------------------------ specific command fields


def pull_timeout(value: Any) -> float:
    """PULL/PULLB ``timeout``: 0..60000 ms, default 0; strings refused."""
    result = strict_number(value, "timeout", minimum=0, maximum=MAX_PULL_TIMEOUT_MS, default=0)
    assert result is not None
    return result


def pullb_count(value: Any) -> int:
    """PULLB ``count``: 1..1000; strings refused; required.

    bunqueue does not require an integer; its fill loop (``while delivered < count``)
    delivers ``ceil(count)`` jobs for a fraction, so that is what we return.
    """
    result = strict_number(value, "count", minimum=1, maximum=MAX_PULLB_COUNT, required=True)
    assert result is not None
    return math.ceil(result)


def lock_duration(
    value: Any, field: str = "duration", default: float | None = None
) -> float | None:
    """A lease length (ExtendLock ``duration``, JobHeartbeat ``duration``, PULL ``lockTtl``).

    Any finite number, any sign (0 or negative ends the lease at once); a string is not a
    number because bunqueue adds it to ``now`` unconverted. ``None`` gives ``default``.
    """
    if value is None:
        return default
    if not is_number(value):
        raise Refused(f"{field} must be a number")
    if not is_finite(value):
        raise Refused(f"{field} must be a finite number")
    return value  # type: ignore[no-any-return]


def lock_ttl(value: Any) -> float:
    """PULL/PULLB ``lockTtl``: finite, any sign (``0`` is legal), default 30000 ms."""
    result = lock_duration(value, "lockTtl", DEFAULT_LOCK_TTL_MS)
    assert result is not None
    return result


def wait_timeout(value: Any) -> float:
    """WaitJob ``timeout``: 0..600000 ms, default 30000; strings refused."""
    result = strict_number(
        value, "timeout", minimum=0, maximum=MAX_WAIT_TIMEOUT_MS, default=DEFAULT_WAIT_TIMEOUT_MS
    )
    assert result is not None
    return result


def priority_change(value: Any) -> float:
    """ChangePriority ``priority``: finite (numeric strings accepted); missing means 0."""
    result = lenient_number(value, "priority", default=0)
    assert result is not None
    return result


def delay_required(value: Any, field: str = "delay") -> float:
    """ChangeDelay/MoveToDelayed ``delay``: required, finite, clamped to +-4.32e15 ms.

    Negative delays are kept (the job becomes ready with a past ``runAt``).
    """
    result = lenient_number(value, field, required=True)
    assert result is not None
    return max(-MAX_DURATION_MS, min(MAX_DURATION_MS, result))


def keep_logs_argument(value: Any) -> int | None:
    """ClearLogs ``keepLogs``: ``None`` clears all; <=0 clears all (0); a fraction floors.

    NaN and non-numbers are refused with ``keepLogs must be a number``; +Infinity keeps
    every entry (returned as a very large count).
    """
    if value is None:
        return None
    number = coerce_numeric_string(value)
    if not is_number(number) or number != number:
        raise Refused("keepLogs must be a number")
    if number <= 0:
        return 0
    return MAX_SAFE_INTEGER if not is_finite(number) else min(math.floor(number), MAX_SAFE_INTEGER)


def fail_stack(value: Any) -> list[str] | None:
    """FAIL ``stack``: the first 100 string elements of an array (others dropped).

    The wire is not type-checked by clients; non-arrays and arrays with no strings give
    ``None`` (no stack), as bunqueue's handler does.
    """
    if not isinstance(value, (list, tuple)):
        return None
    lines = [line for line in value if isinstance(line, str)][:MAX_FAIL_STACK_LINES]
    return lines or None


# What JavaScript's Number() accepts (ASCII digits only, like JS): decimals with an
# optional exponent, Infinity, and unsigned 0x/0o/0b integer literals.
_JS_DECIMAL = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|Infinity)")
_JS_RADIX = re.compile(r"0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")


def normalise_progress(value: Any) -> tuple[float, str | None]:
    """bunqueue's progress normalisation: numbers clamp to 0..100; text becomes a message.

    Numeric text is read as JavaScript's ``Number()`` would (so ``"1_000"`` or ``"inf"``
    stay text); an object's message is its compact ``JSON.stringify`` form.
    """
    if isinstance(value, bool):
        value = 1 if value else 0
    if value is None:
        return 0, None
    if isinstance(value, (int, float)):
        if value != value:  # NaN
            return 0, None
        return min(max(value, 0), 100), None
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0, None
        if _JS_RADIX.fullmatch(text):
            number = float(int(text, 0))
        elif _JS_DECIMAL.fullmatch(text):
            number = float(text)
        else:
            return 0, value
        number = min(max(number, 0.0), 100.0)
        return (int(number) if number.is_integer() else number), None
    try:
        return 0, compact_json(value)
    except (TypeError, ValueError):
        return 0, str(value)
