"""The SSRF guard of webhook URLs: which URLs and addresses a webhook may reach.

A webhook makes the broker send HTTP requests wherever a client says, so a client able
to register one could make the broker probe its own network (an admin port on
localhost, a database on 10.x, a cloud's metadata service at 169.254.169.254). The
guard runs twice: :func:`check_url` when the webhook is added (the URL's form, and its
host when the host is an address or a known internal name), and
:func:`refused_address` on every address the host resolves to when a delivery is made
(a public-looking name may resolve to 127.0.0.1, or change what it resolves to after
the check). ``allow_private`` (the broker's ``webhook_allow_private`` flag, for
development) lets private and loopback addresses through both checks.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from .errors import Refused

MAX_URL_LENGTH = 2048
SCHEMES = ("http", "https")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Names that always mean this machine or a cloud's metadata service, whatever DNS says.
_INTERNAL_NAMES = frozenset({
    "localhost", "metadata", "metadata.google.internal", "metadata.goog",
    "instance-data", "instance-data.ec2.internal",
})
_INTERNAL_SUFFIXES = (".localhost", ".internal", ".local")
# What inet_aton reads as an IPv4 address besides the dotted quad ("2130706433",
# "0x7f.1", "127.1"): the resolver accepts these forms, so the guard reads them too.
_IPV4_FORMS = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)


def check_url(url: object, *, allow_private: bool) -> str:
    """``url`` if a webhook may be registered with it, else :class:`Refused`."""
    if not isinstance(url, str) or not url:
        raise Refused("url is required")
    if len(url) > MAX_URL_LENGTH:
        raise Refused(f"Webhook URL too long (max {MAX_URL_LENGTH} characters)")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        raise Refused("Invalid webhook URL") from None
    if parts.scheme.lower() not in SCHEMES:
        raise Refused("Webhook URL must use http or https")
    if not host:
        raise Refused("Invalid webhook URL")
    if not allow_private:
        check_host(host)
    return url


def check_host(host: str) -> None:
    """Refuse a host that names this machine, a private network or a metadata service
    without resolving it (an address literal, or a reserved name)."""
    name = host.lower().rstrip(".")
    if name in _INTERNAL_NAMES or name.endswith(_INTERNAL_SUFFIXES):
        raise Refused("Webhook URL must not target localhost, private or internal hosts")
    address = address_literal(name)
    if address is not None and refused_address(address):
        raise Refused("Webhook URL must not target localhost, private or internal hosts")


def address_literal(host: str) -> IPAddress | None:
    """The address ``host`` spells, in any form the resolver would read; None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    if _IPV4_FORMS.fullmatch(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def refused_address(address: IPAddress) -> bool:
    """Whether a delivery may not connect to ``address``: anything but a global unicast
    address (loopback, private, link-local with the metadata services, CGNAT,
    unspecified, multicast, reserved). An IPv4 address inside IPv6 is judged as IPv4."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None:
            address = inner
    return not address.is_global or address.is_multicast
