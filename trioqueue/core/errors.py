"""Errors that the broker turns into ``{ok: false, error}`` replies.

A :class:`CommandError` carries the exact text the client sees; the texts follow
bunqueue's reference so that its clients (which match substrings such as
``not found``) behave the same against us.
"""


class CommandError(Exception):
    """A refused command: the message is sent verbatim as the reply's ``error``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


INTERNAL_ERROR = "Internal server error"
JOB_NOT_FOUND = "Job not found"
