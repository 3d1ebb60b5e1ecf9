"""Test tools shipped with trioqueue: a raw wire client and (later) the fault harness."""

from .wire import RawClient

__all__ = ["RawClient"]
