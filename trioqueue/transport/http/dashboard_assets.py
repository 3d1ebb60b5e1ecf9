"""The dashboard's files on the HTTP port: ``GET /`` is the page, ``GET /ui/<file>`` its
scripts, styles and vendored libraries (trioqueue/dashboard/static).

Every file is read once, when the port starts (some 200 KB), and served from memory:
no disk read on the event loop, and no path from a request ever reaches the file system
(a request names a key of the table, or gets 404), so ``..`` or an encoded slash cannot
escape the directory. The files hold no data, so they are served without a token; the
page asks for one and sends it as a bearer token with each API call.
"""

from __future__ import annotations

from pathlib import Path

from .rest.api import Response, error_body

PREFIX = "/ui/"
INDEX = "index.html"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon",
}
# The page may load what the broker serves and talk to it (REST and its WebSocket), and
# nothing else: no inline script, no other origin.
SECURITY_HEADERS = [
    ("content-security-policy", "default-src 'self'; connect-src 'self' ws: wss:; "
                                "img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
                                "frame-ancestors 'none'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
]


class DashboardAssets:
    def __init__(self, static_dir: Path) -> None:
        self._files: dict[str, tuple[bytes, str]] = {}
        if static_dir.is_dir():
            for path in sorted(static_dir.rglob("*")):
                kind = CONTENT_TYPES.get(path.suffix)
                if path.is_file() and kind is not None:
                    name = path.relative_to(static_dir).as_posix()
                    self._files[name] = (path.read_bytes(), kind)

    def answer(self, path: str) -> Response | None:
        """The file ``path`` names (None: not one of the dashboard's paths)."""
        if path == "/":
            name = INDEX
        elif path.startswith(PREFIX):
            name = path[len(PREFIX):]
        else:
            return None
        found = self._files.get(name)
        if found is None:
            return Response(404, error_body("Not found"))
        body, kind = found
        # the page is looked at again on each load (a new broker's files); the rest is
        # named by the page, so a reload fetches what it names afresh as well
        return Response(200, body, content_type=kind,
                        headers=[("cache-control", "no-cache"), *SECURITY_HEADERS])
