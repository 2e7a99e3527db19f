"""Task addresses ("host:port", "[v6 host]:port"): parsed and checked once, with errors that
name the field of the cluster description they came from."""
from __future__ import annotations

from .errors import ClusterConfigError

MAX_PORT = 65535


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of an address already checked by `parse_address` (brackets dropped)."""
    host, port = address.rsplit(":", 1)
    return host.strip("[]"), int(port)


def parse_address(address, field: str) -> tuple[str, int]:
    """(host, port) of a task address; `field` names where it came from in messages."""
    if not isinstance(address, str):
        raise ClusterConfigError(f"{field} is {address!r}, not a \"host:port\" string",
                                 'give every task an address such as "localhost:12345"')
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ClusterConfigError(f"{field} is {address!r}, which is not \"host:port\"",
                                 'give every task an address such as "localhost:12345"')
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise ClusterConfigError(f"{field} is {address!r}: its IPv6 host lacks the closing \"]\"",
                                     'write an IPv6 address as "[::1]:12345"')
    elif ":" in host:
        raise ClusterConfigError(f"{field} is {address!r}: an IPv6 host needs brackets",
                                 f'write it as "[{host}]:{port}"')
    if not (port.isascii() and port.isdigit()):
        raise ClusterConfigError(f"{field} is {address!r}: its port {port!r} is not a number",
                                 'end the address with a port number, as in "localhost:12345"')
    number = int(port)
    if not 1 <= number <= MAX_PORT:
        raise ClusterConfigError(f"{field} is {address!r}: port {number} is out of range (1 to {MAX_PORT})",
                                 f"use a port from 1 to {MAX_PORT}")
    return host.strip("[]"), number
