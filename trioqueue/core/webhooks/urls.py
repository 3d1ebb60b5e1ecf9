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

One parser reads a webhook URL: httpx's, the one the delivery sends with. A URL two
parsers read differently is how a check is got around (urllib read full-width letters,
a soft hyphen or a tab in the host as a host, httpx refused them and the refusal stopped
the broker; urllib kept ``127。0。0。1`` as a name, httpx reads ``127.0.0.1``). So
:func:`check_url` refuses what httpx refuses, judges the host httpx reads, and returns
the URL as httpx writes it (lower case, an internationalised name in its ASCII form,
the path percent-encoded): that is what is stored and what the delivery parses again.
The parse is pure (no I/O), so the core may do it; the layer rule keeps the core free
of our own outer layers, not of a parsing library (cron rules use cronsim the same way).
"""

from __future__ import annotations

import ipaddress
import re
import socket

import httpx

from ..errors import Refused

MAX_URL_LENGTH = 2048
SCHEMES = ("http", "https")
# The bytes a URL may have to write as %XX in one part or another: non-ASCII, space and
# controls, and the ASCII characters the parser encodes in some part (the user name,
# the path). The length limit counts each as three, before parsing: the parser encodes
# a character at a time, so a URL of 2048 such characters held the loop for a
# millisecond; counted so, a URL holds at most 682 of them.
_MAY_ENCODE = frozenset([*range(0x21), *b'"<>`{}^|\\[];=@', *range(0x7F, 0x100)])
_NEVER_ENCODED = bytes(sorted(set(range(256)) - _MAY_ENCODE))
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")

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
    """The URL a webhook is registered with, in the form the delivery sends to (see the
    module docstring), else :class:`Refused`."""
    if not isinstance(url, str) or not url:
        raise Refused("url is required")
    too_long = Refused(f"Webhook URL too long (max {MAX_URL_LENGTH} characters)")
    if len(url) > MAX_URL_LENGTH or written_length(url) > MAX_URL_LENGTH:
        raise too_long
    # The scheme in lower case first: the parser drops a default port (":80") only
    # after a lower-case scheme, so what it writes then reads back unchanged.
    scheme = _SCHEME.match(url)
    if scheme is not None:
        url = scheme[0].lower() + url[scheme.end():]
    parsed = delivery_url(url)
    if len(str(parsed)) > MAX_URL_LENGTH:  # an internationalised name grew
        raise too_long
    if parsed.scheme not in SCHEMES:
        raise Refused("Webhook URL must use http or https")
    host = parsed.raw_host.decode("ascii")
    port = parsed.port
    if not valid_host(host) or (port is not None and not 0 < port <= 65535):
        raise Refused("Invalid webhook URL")
    if not allow_private:
        check_host(host)
    return str(parsed)


def written_length(url: str) -> int:
    """The length of ``url`` written out, counting every byte that may have to be
    percent-encoded as three (see ``_MAY_ENCODE``)."""
    data = url.encode("utf-8", "surrogatepass")
    return len(data) + 2 * len(data.translate(None, _NEVER_ENCODED))


def delivery_url(url: str) -> httpx.URL:
    """``url`` as the delivery parses it, else :class:`Refused`."""
    try:
        return httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise Refused("Invalid webhook URL") from None


# A host as it reaches the resolver: letters, digits, ``-``, ``_`` and dots (an
# internationalised name is in its ASCII form by then), or an IPv6 literal. What else
# httpx lets through in a host (``%``, a space written ``%20``, ``!$&'()*+,;=``) names
# nothing a resolver finds.
_NAME = re.compile(r"[a-z0-9_.-]+")


def valid_host(host: str) -> bool:
    """Whether ``host`` (httpx's ``raw_host``, unbracketed) is one a delivery can reach."""
    if _NAME.fullmatch(host):
        return True
    if ":" not in host or "%" in host:  # an IPv6 scope (fe80::1%eth0) is this machine's
        return False
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


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


# IPv6 ranges no webhook may reach whatever they hold: site-local (deprecated, still
# routed inside some networks), and the local-use NAT64 prefix, where the IPv4 address
# sits at a place each network chooses (so it cannot be read out) and which is not
# globally reachable.
_REFUSED_V6 = (ipaddress.IPv6Network("fec0::/10"), ipaddress.IPv6Network("64:ff9b:1::/48"))
# IPv6 ranges whose last 32 bits are an IPv4 address the packet goes to: NAT64's
# well-known prefix, IPv4-compatible (``::a.b.c.d``) and IPv4-translated
# (``::ffff:0:a.b.c.d``). IPv4-mapped (``::ffff:a.b.c.d``) and 6to4 (``2002::/16``)
# have their own properties.
_LAST_32_BITS = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("::/96"),
                 ipaddress.IPv6Network("::ffff:0:0:0/96"))


def refused_address(address: IPAddress) -> bool:
    """Whether a delivery may not connect to ``address``: anything but a global unicast
    address (loopback, private, link-local with the metadata services, CGNAT,
    unspecified, multicast, reserved, site-local). An IPv6 address that holds an IPv4
    address (IPv4-mapped, NAT64, IPv4-compatible, IPv4-translated, 6to4) is judged by
    that IPv4 address; a Teredo address is refused when either IPv4 address it holds
    would be, besides its own verdict."""
    if isinstance(address, ipaddress.IPv6Address):
        if any(address in network for network in _REFUSED_V6):
            return True
        teredo = address.teredo
        if teredo is not None and any(map(refused_address, teredo)):
            return True
        inner = embedded_ipv4(address)
        if inner is not None:
            address = inner
    return not address.is_global or address.is_multicast


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, when it stands for one."""
    inner = address.ipv4_mapped or address.sixtofour
    if inner is None and any(address in network for network in _LAST_32_BITS):
        inner = ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return inner
