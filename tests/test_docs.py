"""The user pages stand on their own.

What a user reads is ``README.md`` and ``docs/*.md`` in a checkout of this repository:
a page that names a file only a developer's machine has, or a link that leads nowhere,
sends the reader to nothing. The benchmarks page is kept to what a user compares (the
current figures, the command behind each, the machine); the history of how each was
reached stays in git, so the page has a length a reader can take in.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [*sorted(DOCS.glob("*.md")), REPO / "README.md"]
BENCHMARKS_MAX_LINES = 400

# A path on a developer's machine: a work tree, a temporary directory, a home.
DEVELOPER_PATH = re.compile(r"(?<![\w.~$-])/(?:work|tmp|home|root|Users|mnt)/[\w./-]*")
# A relative path that climbs out of the directory it is named from.
CLIMBING_PATH = re.compile(r"(?<![\w./-])(?:\.\./)+[\w.-][\w./-]*")
# A document a page names as a path (`x.md`, `dir/x.md`), in code spans or links.
NAMED_DOCUMENT = re.compile(r"[`(]((?:[\w.-]+/)*[\w.-]+\.md)(?:#[\w-]*)?[`)]")
# A link or image: [text](target) or ![alt](target).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A section of another page named the way these pages do: `docs/x.md`, "Section".
SECTION_REFERENCE = re.compile(r"`?(?:docs/)?([a-z-]+\.md)`?,? \"([^\"]+)\"")


def _lines(page: Path) -> Iterator[tuple[int, str]]:
    """The page's lines outside fenced code blocks (a command there is not a name)."""
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


@cache
def _repo_files() -> tuple[str, ...]:
    ignored = {".git", "build", ".venv", "node_modules", "__pycache__"}
    return tuple(str(path.relative_to(REPO)) for path in REPO.rglob("*")
                 if path.is_file() and not ignored & set(path.relative_to(REPO).parts))


def _inside(path: Path) -> bool:
    return path.resolve().is_relative_to(REPO)


def _in_repo(name: str, page: Path) -> bool:
    """Whether ``name`` is a file of the repository, named from the page, from the
    repository's root, or as the tail of a path inside it (``actors/writer.py``)."""
    for base in (page.parent, REPO, DOCS):
        candidate = base / name
        if _inside(candidate) and candidate.exists():
            return True
    tail = re.sub(r"^(?:\.\./)+", "", name).lstrip("./")
    return any(file == tail or file.endswith("/" + tail) for file in _repo_files())


def _slug(heading: str) -> str:
    """The anchor a Markdown renderer (GitHub's) gives a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@cache
def _headings(page: Path) -> tuple[str, ...]:
    return tuple(re.sub(r"^#+\s*", "", line).strip() for _, line in _lines(page)
                 if re.match(r"#{1,6}\s", line))


def _names_section(page: Path, section: str) -> bool:
    """A heading that starts with ``section``, or a paragraph labelled with it
    (``**Takeover.**``, ``Not bounded yet:``)."""
    wanted = section.lower()
    if any(heading.lower().strip("`").startswith(wanted) for heading in _headings(page)):
        return True
    text = page.read_text().lower()
    return f"**{wanted}" in text or f"\n{wanted}:" in text


def test_the_benchmarks_page_is_short_enough_to_read() -> None:
    lines = len((DOCS / "benchmarks.md").read_text().splitlines())
    assert lines < BENCHMARKS_MAX_LINES, (
        f"docs/benchmarks.md has {lines} lines; keep the current figures, the commands "
        f"and the machine (under {BENCHMARKS_MAX_LINES}), and leave the history to git")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_no_page_names_a_path_outside_the_repository(page: Path) -> None:
    outside: set[str] = set()
    for number, line in _lines(page):
        outside |= {f"{number}: {m[0]}" for m in DEVELOPER_PATH.finditer(line)}
        outside |= {f"{number}: {m[0]}" for m in CLIMBING_PATH.finditer(line)
                    if not _in_repo(m[0].rstrip("."), page)}
        outside |= {f"{number}: {m[1]}" for m in NAMED_DOCUMENT.finditer(line)
                    if not _in_repo(m[1], page)}
    assert not outside, f"{page.name} names files a user does not have: {sorted(outside)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for number, line in _lines(page):
        for match in LINK.finditer(line):
            target = match[1]
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            name, _, anchor = target.partition("#")
            linked = (page.parent / name) if name else page
            if not (_inside(linked) and linked.is_file()):
                broken.append(f"{number}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in {
                    _slug(heading) for heading in _headings(linked)}:
                broken.append(f"{number}: {target} (no such heading)")
    assert not broken, f"{page.name} links to nothing: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_section_a_page_points_at_exists(page: Path) -> None:
    missing = []
    for number, line in _lines(page):
        for match in SECTION_REFERENCE.finditer(line):
            target = DOCS / match[1]
            if not target.is_file() or not _names_section(target, match[2]):
                missing.append(f'{number}: {match[1]}, "{match[2]}"')
    assert not missing, f"{page.name} points at sections that do not exist: {missing}"


# A source file named in a code span: `core/queue/leases.py`, `transport/_pieces.c`.
SOURCE_FILE = re.compile(r"(?<![\w/.-])((?:\.\./)*(?:[\w-]+/)*[\w-]+\.(?:py|c))\b")


def _missing_sources(page: Path) -> list[str]:
    """Each source file named in backticks on ``page`` that the repository lacks: a
    path with a folder is taken from ``trioqueue/`` or from the root, a bare name must
    be some file of the package or the tests."""
    missing = []
    for number, line in _lines(page):
        for span in re.findall(r"`([^`]+)`", line):
            for name in SOURCE_FILE.findall(span):
                if "/" in name:
                    found = (REPO / "trioqueue" / name).is_file() or (REPO / name).is_file()
                else:
                    found = any(Path(file).name == name for file in _repo_files()
                                if file.startswith(("trioqueue/", "tests/")))
                if not found:
                    missing.append(f"{number}: {name}")
    return missing


def test_the_architecture_page_names_only_files_that_exist() -> None:
    """The contributors' map: every module it names is where it says, so a file that
    moved takes the page's line with it."""
    missing = _missing_sources(DOCS / "architecture.md")
    assert not missing, ("docs/architecture.md names source files that do not exist "
                         f"(paths are from trioqueue/ or the repository's root): {missing}")
