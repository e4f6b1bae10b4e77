"""The allow-list proxy's packet filter: what keeps Squid off the host and the engine's networks
for addresses that appear after the proxy started.

Squid's ``dst`` rules (`_egress.squid_conf`) are read once, at its start; a new reading means a
reconfigure, during which Squid closes its port and every run's next connection is refused. So
the addresses that must never be a destination (the host's own, every engine network's) are
also an nftables set in the proxy's network namespace: Squid's connections to them are
rejected by the kernel when they are made, whatever the set held when the proxy started. The
set is kept by a **guard**, a second container in the proxy's namespace that holds only
``NET_ADMIN`` there (Squid itself holds no capability); it is updated in one nftables
transaction (no gap, no reconfigure) when the host's addresses change.

How a change is seen, at no cost per run: a netlink socket subscribed to the host's address
events (`AddressEvents`). The kernel queues an event when an address is added or removed, a
Docker network's gateway included, before the command that made it returns; a run checks the
queue (no engine round trip, no subprocess) and a thread waits on it for runs in flight.
Link-local and host-scope addresses (a container's veth gets one each start) are not changes:
Squid's own rules refuse those ranges whatever they hold.
"""

from __future__ import annotations

import ipaddress
import select
import socket
import struct
from collections.abc import Iterable

TABLE = "inet jupyter_sandbox"
_RULES = """\
table {table} {{
  set v4 {{ type ipv4_addr; flags interval; {v4}}}
  set v6 {{ type ipv6_addr; flags interval; {v6}}}
  chain out {{
    type filter hook output priority 0; policy accept;
    ct direction reply accept
    meta skuid != proxy accept
    {dns}ip daddr @v4 reject with icmpx type admin-prohibited
    ip6 daddr @v6 reject with icmpx type admin-prohibited
  }}
}}
"""
"""Only Squid's (user ``proxy``) own connections are checked: its answers to the sandboxes
(the reply direction) and the engine's resolver, which forwards from inside this namespace,
are not Squid's requests. The resolvers Squid is told to ask stay reachable on port 53."""

_NETLINK_ADDRESS_GROUPS = 0x10 | 0x100  # RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR
_NEW_ADDRESS, _DELETED_ADDRESS = 20, 21  # RTM_NEWADDR, RTM_DELADDR
_LINK_SCOPE = 253  # RT_SCOPE_LINK; RT_SCOPE_HOST (254) is narrower still


def blocked(addresses: Iterable[str]) -> dict[int, list[str]]:
    """The set's elements by IP version: ``addresses`` (addresses and networks) merged into
    non-overlapping networks (nftables refuses overlapping intervals), loopback left out (in
    the proxy's namespace it is the proxy itself: the engine's resolver listens there)."""
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for address in addresses:
        network = ipaddress.ip_network(address, strict=False)
        if network.is_loopback:
            continue
        if isinstance(network, ipaddress.IPv4Network):
            v4.append(network)
        else:
            v6.append(network)
    return {
        4: [str(n) for n in ipaddress.collapse_addresses(v4)],
        6: [str(n) for n in ipaddress.collapse_addresses(v6)],
    }


def _elements(networks: list[str]) -> str:
    return f"elements = {{ {', '.join(networks)} }}; " if networks else ""


def rules(addresses: Iterable[str], dns: Iterable[str]) -> str:
    """The guard's nftables table: the set of ``addresses`` and the chain that rejects Squid's
    connections to them, the resolvers of ``dns`` excepted on port 53."""
    sets = blocked(addresses)
    exempt = "".join(
        f"{'ip' if ipaddress.ip_address(a).version == 4 else 'ip6'} daddr {a}"
        " meta l4proto { tcp, udp } th dport 53 accept\n    "
        for a in dns
    )
    return _RULES.format(table=TABLE, v4=_elements(sets[4]), v6=_elements(sets[6]), dns=exempt)


def update(addresses: Iterable[str]) -> str:
    """One nftables transaction (one command line) that makes the set hold ``addresses``."""
    sets = blocked(addresses)
    commands = []
    for version in (4, 6):
        commands.append(f"flush set {TABLE} v{version}")
        if sets[version]:
            commands.append(f"add element {TABLE} v{version} {{ {', '.join(sets[version])} }}")
    return "; ".join(commands)


class AddressEvents:
    """The host's address changes, from netlink; `pending` drains what the kernel queued.

    Where netlink is not there (not Linux, a sandboxed kernel) `fileno` is None and nothing is
    ever pending: the set keeps what the proxy started with, as Squid's rules do."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
            sock.bind((0, _NETLINK_ADDRESS_GROUPS))
            sock.setblocking(False)
        except (AttributeError, OSError):
            return
        self._sock = sock

    def fileno(self) -> int | None:
        return None if self._sock is None else self._sock.fileno()

    def wait(self, timeout: float | None) -> None:
        """Until an event is queued (or ``timeout`` s)."""
        if self._sock is not None:
            select.select([self._sock], [], [], timeout)

    def pending(self) -> bool:
        """Whether an address other than a link-local or host one came or went since the last
        call; a lost event (the queue overflowed) counts as one."""
        if self._sock is None:
            return False
        changed = False
        while True:
            try:
                data = self._sock.recv(65536)
            except BlockingIOError:
                return changed
            except OSError:  # ENOBUFS: events were dropped, so something changed
                changed = True
                continue
            changed = changed or _global_address_event(data)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _global_address_event(data: bytes) -> bool:
    """Whether a netlink datagram holds an address message of a scope wider than link-local."""
    offset = 0
    while offset + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, offset)
        if length < 16:
            return True  # malformed: assume the worst
        if kind in (_NEW_ADDRESS, _DELETED_ADDRESS) and offset + 24 <= len(data):
            scope = data[offset + 16 + 3]  # ifaddrmsg: family, prefixlen, flags, scope
            if scope < _LINK_SCOPE:
                return True
        offset += (length + 3) & ~3
    return False
