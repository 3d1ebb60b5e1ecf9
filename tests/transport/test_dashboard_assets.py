"""The dashboard's files on the HTTP port: the page at /, its files under /ui/, from
memory, with no way out of the static directory and no token needed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

StartServer = Callable[..., Any]


@pytest.mark.parametrize("tokens", [[], ["t"]])
async def test_the_page_and_its_files_are_served_without_a_token(
    start_server: StartServer, tokens: list[str],
) -> None:
    server = await start_server(memory=True, auth_tokens=tokens)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=5) as http:
        page = await http.get("/")
        assert page.status_code == 200
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert "/ui/app.js" in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        script = await http.get("/ui/vendor/preact.mjs")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert (await http.get("/ui/vendor/uPlot.min.css")).headers[
            "content-type"].startswith("text/css")
        # the data behind the page still needs the token
        assert (await http.get("/queues")).status_code == (401 if tokens else 200)


@pytest.mark.parametrize("path", ["/ui/nope.js", "/ui/../../config.py", "/ui/%2e%2e/x.js",
                                  "/ui/vendor/../../__init__.py", "/ui/"])
async def test_anything_else_under_ui_is_404(start_server: StartServer, path: str) -> None:
    server = await start_server(memory=True)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=5) as http:
        response = await http.get(path)
    assert response.status_code == 404
