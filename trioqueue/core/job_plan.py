"""The steps of JobRecord's hot methods, as data, and their C form.

:mod:`trioqueue.core.job` declares each field once (``_FIELDS``, ``_INTERNAL``) and turns
the table into steps: for ``to_record`` and ``to_wire`` one ``(key, attr, kind, default)``
per stored key, in the order of the keys, for ``admit`` one ``(attr, argument, default)``
per slot. The steps are rendered into the generated Python methods (the definition, and
the fallback) and, where the extension ``trioqueue.core._job_slots`` is built, handed to
it once by :func:`install`, which puts C callables of the same behaviour in the methods'
places: each reads the slots through their member descriptors' offsets, for a job of
exactly the class (any other call goes to the Python method).

A kind says when a step stores its field (``self.attr``, ``d`` the dict being built):
"""

from __future__ import annotations

from typing import Any

from . import native

ALWAYS: str = "always"  # d[key] = self.attr
IS_NOT: str = "is_not"  # if self.attr is not default: d[key] = self.attr
IS_NOT_NE: str = "is_not_ne"  # ... is not default and self.attr != default: ...
TRUTHY: str = "truthy"  # if self.attr: d[key] = self.attr
FLOAT: str = "float"  # d[key] = float(self.attr)
FLOAT_NOT_NONE: str = "float_not_none"  # if self.attr is not None: d[key] = float(...)

# (key, attribute, kind, default): one store of to_record or to_wire.
Step = tuple[str, str, str, Any]
# (attribute, index of the admit argument it takes or -1, default): one slot of admit.
AdmitSlot = tuple[str, int, Any]

_c = native.extension("trioqueue.core._job_slots")


def install(cls: type, *, record_steps: tuple[Step, ...], wire_steps: tuple[Step, ...],
            admit_slots: tuple[AdmitSlot, ...], admit_args: int, wire_cls: type,
            wire_defaults: dict[str, Any], list_attrs: frozenset[str]) -> str:
    """Put the C forms of ``cls.to_record``, ``cls.to_wire`` and ``cls.admit`` in place,
    each falling back on the Python method it replaces; "C", or "Python" where the
    extension is not built (the methods stay as they are)."""
    if _c is None:
        return "Python"
    slots = vars(cls)

    def planned(steps: tuple[Step, ...]) -> tuple[tuple[Any, str, str, Any], ...]:
        return tuple((slots[attr], key, kind, default) for key, attr, kind, default in steps)

    record = _c.record_method(cls, slots["to_record"], planned(record_steps))
    wire = _c.wire_method(cls, slots["to_wire"], planned(wire_steps), wire_cls, wire_defaults)
    admit = _c.admit_function(
        cls, slots["admit"].__func__,
        tuple((slots[attr], arg, default) for attr, arg, default in admit_slots),
        admit_args, list_attrs, slots["name"])
    for name, method in (("to_record", record), ("to_wire", wire),
                         ("admit", staticmethod(admit))):
        setattr(cls, name, method)
    return "C"
