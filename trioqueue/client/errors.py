"""The client's exceptions: one base, a few kinds a caller can act on.

A refused command (``{ok: false, error}``) becomes a :class:`CommandError` subclass
picked from the broker's error text (bunqueue's texts, which are stable); a transport
failure becomes :class:`ConnectionLost`.
"""

from __future__ import annotations


class TrioqueueError(Exception):
    """Base of every error the client raises."""


class ConnectionLost(TrioqueueError):
    """The connection broke (or could not be made) before the reply came.

    A command sent before the break may or may not have been applied: adding with a
    ``job_id`` makes a retry safe.
    """


class CommandTimeout(ConnectionLost):
    """No reply came within the connection's ``command_timeout_s`` (30 s by default,
    plus the hold of a long-poll); as with a lost connection, the command may or may
    not have been applied, and its socket is dropped.

    Never raised for a refusal: a refused command raises its :class:`CommandError` at
    once, and a value the wire cannot carry is refused before anything is sent
    (:class:`ValidationError`)."""


class CommandError(TrioqueueError):
    """The broker refused a command; ``message`` is its error text."""

    def __init__(self, message: str, command: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.command = command


class JobNotFound(CommandError):
    """The job does not exist (any more)."""


class JobExists(CommandError):
    """A flow names a job id that is taken (``Job <id> already exists``): after an
    ambiguous failure, a retry that meets this means the first attempt went through."""


class LockError(CommandError):
    """A lock token was missing, wrong, or its lease expired."""


class AuthenticationError(CommandError):
    """The broker wants a token, or refused the one given."""


class ValidationError(CommandError):
    """An argument was refused as invalid (a bad option, name, size, ...)."""


class JobFailed(TrioqueueError):
    """A waited-for job failed for good; ``error`` is its last attempt's error."""

    def __init__(self, job_id: str, error: str | None) -> None:
        super().__init__(error or f"Job {job_id} failed")
        self.job_id = job_id
        self.error = error


class WaitTimeout(TrioqueueError):
    """A wait for a job's outcome ran out of time (the job may still finish)."""


_LOCK_TEXTS = ("Lock token required", "Invalid or expired lock token",
               "Lock not found or invalid token")
_AUTH_TEXTS = ("Not authenticated", "Invalid token")
_VALIDATION_MARKS = (" must ", " is required", "too long", "too large", "invalid",
                     "Invalid command", "Unknown command", "cannot depend",
                     "not supported", "cycle", "cannot contain", "duplicate",
                     "not in the flow", "does not name", "does not list", "not found: ")


def error_for(message: str, command: str = "") -> CommandError:
    """The exception for a refusal text."""
    if message.startswith(_LOCK_TEXTS):
        return LockError(message, command)
    if message in _AUTH_TEXTS:
        return AuthenticationError(message, command)
    if message.startswith("Job ") and message.endswith(" already exists"):
        return JobExists(message, command)
    if message.startswith("Dependency job not found"):
        return ValidationError(message, command)
    if message == "Job not found" or (message.startswith("Job ") and
                                      message.endswith(" not found")) or (
            message.startswith("Job not found")):
        return JobNotFound(message, command)
    if any(mark in message for mark in _VALIDATION_MARKS):
        return ValidationError(message, command)
    return CommandError(message, command)
