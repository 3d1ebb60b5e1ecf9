"""Errors that the broker turns into ``{ok: false, error}`` replies.

A :class:`Refused` carries the exact text the client sees; the texts follow
bunqueue's reference so that its clients (which match substrings such as
``not found``) behave the same against us.
"""


class Refused(Exception):
    """A refused command: the message is sent verbatim as the reply's ``error``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


INTERNAL_ERROR = "Internal server error"
JOB_NOT_FOUND = "Job not found"

# New jobs refused while the store is nearly full (docs/durability.md, "Full storage").
# Retriable: nothing was admitted, and the same command succeeds once space is freed.
# Clients can match the "Storage full" prefix.
STORAGE_FULL = "Storage full: new jobs are refused until space is freed (retry later)"
