"""What the admin commands print: one JSON document with ``--json``, else rich tables;
failures as one line on stderr with an exit status a script can branch on.

Exit statuses (the same for every admin command, docs/operations.md):

- 0: done (``health``: healthy);
- 1: the broker refused the command (its error text is the line), a wrong or missing
  token, a local failure such as an unwritable file; ``health``: unhealthy;
- 2: nothing was asked of the broker: the command line was refused (argparse's own
  status), a destructive command was not confirmed, or the broker could not be reached.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import IO, Any

from rich.console import Console
from rich.table import Table

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_NOT_DONE = 2

# A table printed to a pipe or a file is read by grep and friends: wide enough that a
# row of ids is not folded. (A terminal's own width is used when there is one.)
PIPE_WIDTH_COLUMNS = 200


class CliError(Exception):
    """A failure the command explains in one line; ``status`` is the exit status."""

    def __init__(self, line: str, status: int = EXIT_FAILED) -> None:
        super().__init__(line)
        self.line = line
        self.status = status


class Output:
    """Where a command's results go: ``json`` picks one JSON document over tables."""

    def __init__(self, json_mode: bool, stdout: IO[str] | None = None,
                 stderr: IO[str] | None = None) -> None:
        self.json = json_mode
        self.stdout = sys.stdout if stdout is None else stdout
        self.stderr = sys.stderr if stderr is None else stderr
        width = None if _isatty(self.stdout) else PIPE_WIDTH_COLUMNS
        self.console = Console(file=self.stdout, width=width, highlight=False,
                               soft_wrap=False)

    def emit(self, document: Any, render: Callable[[Console], None]) -> None:
        """``document`` as JSON with ``--json``, else what ``render`` prints."""
        if self.json:
            self.stdout.write(to_json(document) + "\n")
            self.stdout.flush()
        else:
            render(self.console)

    def said(self, document: Any, text: str) -> None:
        """``document`` as JSON with ``--json``, else the one line ``text``."""
        self.emit(document, lambda console: console.print(text, markup=False))

    def fail(self, line: str) -> None:
        self.stderr.write(f"error: {line}\n")
        self.stderr.flush()

    @property
    def interactive(self) -> bool:
        """Progress bars only for a person watching stderr, never in ``--json`` mode."""
        return not self.json and _isatty(self.stderr)

    def confirm(self, question: str, yes: bool, what: str) -> None:
        """Go on when ``--yes`` was given or a person answers y on the terminal.

        Without a terminal to ask on and without ``--yes`` it refuses (exit 2): a script
        must say it means to delete.
        """
        if yes:
            return
        if not _isatty(sys.stdin):
            raise CliError(f"{what} deletes jobs: pass --yes to confirm (no terminal to "
                           f"ask on)", EXIT_NOT_DONE)
        self.stderr.write(f"{question} [y/N] ")
        self.stderr.flush()
        answer = sys.stdin.readline().strip().lower()
        if answer not in ("y", "yes"):
            raise CliError("not confirmed: nothing was changed", EXIT_NOT_DONE)


def to_json(document: Any) -> str:
    """JSON for a document of the broker's values; refuses what JSON cannot hold."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Table:
    """A rich table of plain cells (no markup is read in them: they are users' text)."""
    grid = Table(title=title, title_justify="left")
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*(cell(value) for value in row))
    return grid


def pairs(title: str | None, items: Iterable[tuple[str, Any]]) -> Table:
    """A two-column table of names and values."""
    grid = Table(title=title, title_justify="left", show_header=False)
    grid.add_column("name", style="bold")
    grid.add_column("value", overflow="fold")
    for name, value in items:
        grid.add_row(name, cell(value))
    return grid


def cell(value: Any) -> Any:
    """A table cell: text as is, other values as compact JSON, never markup."""
    from rich.text import Text

    if value is None:
        return Text("-")
    if isinstance(value, str):
        return Text(value)
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, (int, float)):
        return Text(number_text(value))
    return Text(to_json(value))


def number_text(value: float) -> str:
    """A number as a person writes it: whole numbers without ``.0`` (the wire carries
    many as floats)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def when(ms: Any) -> str | None:
    """An epoch-milliseconds time as local ISO time, to the second."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool):
        return None
    return datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="seconds")


def _isatty(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())
