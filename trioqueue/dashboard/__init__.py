"""The broker's web dashboard: static files (``static/``) the HTTP port serves at ``/``
(the page) and ``/ui/...`` (its scripts, styles and vendored libraries). The page talks
to the broker only through its REST routes and its WebSocket, like any client."""

from pathlib import Path

STATIC_DIR = Path(__file__).resolve().parent / "static"
