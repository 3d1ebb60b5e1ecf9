"""What a web page may do with the HTTP port: the checks every request's head passes.

With auth off (the default) a broker on loopback is reachable by every page its user
opens. A page can send it requests without asking anyone (a form, a ``text/plain``
fetch, an ``<img>``, a WebSocket), though CORS keeps it from reading the answers; and a
page on a name its author controls can point that name at 127.0.0.1 (DNS rebinding)
and then read answers too, its requests carrying its own name in ``Host``. So, before
anything is read or run (:class:`BrowserGuard`):

- ``Host`` must name this broker: an IP literal (rebinding needs a name), ``localhost``
  or a ``*.localhost`` name, the bound host, this machine's name, or a name of
  ``http_allowed_hosts`` (``*`` turns the check off). The port in it is not looked at.
  No ``Host`` at all (HTTP/1.0) is no browser's and passes.
- A request that changes state (any method but GET, HEAD and OPTIONS, and the GET routes
  declared ``changes_state``) and every WebSocket upgrade, when it carries ``Origin``,
  must come from the broker's own origin (the scheme, name and port the request was sent
  to: its ``Host``), or one of ``http_allowed_origins`` or ``cors_allow_origins`` (an
  operator who let an origin read answers means its pages to work). No ``Origin`` (curl,
  the SDKs, our clients) passes, unless ``Sec-Fetch-Site`` says a browser sent it from
  another site (an ``<img>`` GET carries no ``Origin``).
- A request with a body must declare it ``application/json`` (415 otherwise): a page
  may send form and ``text/plain`` bodies anywhere unasked, never JSON.
- Two ``Authorization`` headers are refused (400): which one counts would depend on who
  reads them (a proxy in front may check the other).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...config import Config, normal_origin

_CROSS_SITE = frozenset({"cross-site", "same-site"})  # Sec-Fetch-Site of another origin
_SHOWN_CHARS = 100  # of a refused Host or Origin, in the error text
_READ = frozenset({b"host", b"origin", b"authorization", b"content-type", b"content-length",
                   b"transfer-encoding", b"sec-fetch-site"})  # what _Head takes


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str


@dataclass(slots=True)
class _Head:
    """The headers the guard reads, gathered in one pass over a request's head."""

    hosts: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    authorizations: int = 0
    content_type: str | None = None
    has_body: bool = False
    fetch_site: str | None = None

    @classmethod
    def of(cls, headers: Iterable[tuple[bytes, bytes]]) -> _Head:
        """From the head's (lowercased name, value) pairs, as h11 and ASGI give them."""
        head = cls()
        for name, raw in headers:
            if name not in _READ:
                continue
            value = raw.decode("latin-1")
            if name == b"host":
                head.hosts.append(value)
            elif name == b"origin":
                head.origins.append(value)
            elif name == b"authorization":
                head.authorizations += 1
            elif name == b"content-type":
                head.content_type = value
            elif name == b"content-length":
                head.has_body = head.has_body or value.strip() not in ("", "0")
            elif name == b"transfer-encoding":
                head.has_body = True
            else:
                head.fetch_site = value.strip().lower()
        return head


def host_name(value: str) -> str | None:
    """The name (or IP) of a ``Host`` value, lowercased, without its port or a final
    dot; None when it is not ``host[:port]`` (a bare IPv6 address must be bracketed)."""
    text = value.strip().lower()
    if not text.isascii():
        return None  # browsers send a name in its ASCII (punycode) form
    if text.startswith("["):
        end = text.find("]")
        rest = text[end + 1:]
        if end < 0 or (rest and not (rest[0] == ":" and _is_port(rest[1:]))):
            return None
        return text[1:end]
    name, colon, port = text.partition(":")
    if colon and not _is_port(port):
        return None
    return name.removesuffix(".")


def _is_port(text: str) -> bool:
    return text == "" or (text.isascii() and text.isdigit())


def is_json(content_type: str | None) -> bool:
    """``application/json``, any case, parameters (``charset``) allowed."""
    if content_type is None:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


class BrowserGuard:
    """The checks of the module's docstring, made once per request head from the
    config's lists (built once: a check is a few set lookups)."""

    def __init__(self, config: Config) -> None:
        hosts = [h.strip().lower().removesuffix(".") for h in config.http_allowed_hosts]
        self._any_host = "*" in hosts
        bound = host_name(config.host) if config.host else None
        self._names = frozenset({h for h in hosts if not h.startswith("*.")}
                                | {socket.gethostname().lower()}
                                | ({bound} if bound else set()))
        self._suffixes = tuple(h[1:] for h in hosts if h.startswith("*."))
        origins = [*config.http_allowed_origins, *config.cors_allow_origins]
        self._any_origin = "*" in (o.strip() for o in origins)
        self._origins = frozenset(o for o in map(normal_origin, origins) if o is not None)

    def check_request(self, method: str, headers: Iterable[tuple[bytes, bytes]], *,
                      changes_state: bool) -> Refusal | None:
        """The refusal for an HTTP request's head (None: it may go on)."""
        head = _Head.of(headers)
        refusal = self._check_head(head, changes_state=changes_state)
        if refusal is None and head.has_body and not is_json(head.content_type):
            got = "none" if head.content_type is None else repr(_shown(head.content_type))
            return Refusal(415, f"Content-Type must be application/json for a request "
                                f"with a body (got {got})")
        return refusal

    def check_upgrade(self, headers: Iterable[tuple[bytes, bytes]]) -> Refusal | None:
        """The refusal for a WebSocket upgrade's head, answered before the upgrade:
        CORS does not cover WebSocket, so every upgrade is checked as a write."""
        return self._check_head(_Head.of(headers), changes_state=True)

    def _check_head(self, head: _Head, *, changes_state: bool) -> Refusal | None:
        if head.authorizations > 1:
            return Refusal(400, "More than one Authorization header (send one)")
        if len(head.hosts) > 1:
            return Refusal(400, "More than one Host header")
        if head.hosts and not self.host_allowed(head.hosts[0]):
            return Refusal(403, f"Host {_shown(head.hosts[0])!r} is not allowed: this "
                                "broker answers IP addresses, localhost and the names of "
                                "--http-allowed-hosts (a guard against DNS rebinding)")
        if changes_state:
            return self._check_origin(head)
        return None

    def _check_origin(self, head: _Head) -> Refusal | None:
        if not head.origins:
            if head.fetch_site in _CROSS_SITE:
                return Refusal(403, f"Cross-site request refused: Sec-Fetch-Site is "
                                    f"{head.fetch_site} and no Origin says which site")
            return None
        if self._any_origin:
            return None
        origin = head.origins[0]
        if len(head.origins) == 1 and self.origin_allowed(origin, head.hosts):
            return None
        return Refusal(403, f"Cross-origin request refused: Origin {_shown(origin)!r} is "
                            "not this broker's own; allow it with --http-allowed-origins")

    def host_allowed(self, value: str) -> bool:
        if self._any_host:
            return True
        name = host_name(value)
        if not name:
            return False
        if name == "localhost" or name.endswith(".localhost") or name in self._names:
            return True
        if name.endswith(self._suffixes):
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True

    def origin_allowed(self, origin: str, hosts: list[str]) -> bool:
        """The broker's own origin (the Host the request was sent to, under the
        Origin's scheme: a TLS proxy in front keeps the name) or a listed one."""
        if hosts and origin in (f"http://{hosts[0]}", f"https://{hosts[0]}"):
            return True  # as browsers send them: no parsing needed
        normal = normal_origin(origin)
        if normal is None:
            return False  # "null" (a sandboxed or file: page), garbage
        if normal in self._origins:
            return True
        scheme = normal.partition("://")[0]
        return bool(hosts) and normal_origin(f"{scheme}://{hosts[0].strip()}") == normal
