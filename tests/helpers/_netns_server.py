"""Servers a test runs inside a network namespace of its own (``ip netns exec``): every
connection each one sees is written to a log, so a test can prove a request never arrived.

    python _netns_server.py http LOG PORT [PORT...]   HTTP on each port; /redirect?to=URL
                                                       answers 302; RAW:PORT serves raw TCP
    python _netns_server.py headers LOG PORT [...]     the same, logging each request's
                                                       Authorization (``-``: none) after its
                                                       path; /echo answers with its headers;
                                                       TLS:PORT serves HTTPS with the files
                                                       $JSBX_TLS_CERT and $JSBX_TLS_KEY
    python _netns_server.py dns LOG NAME=IP [...]      a DNS server on UDP 53 answering A
                                                       records for NAME (else NXDOMAIN)

Prints ``ready`` once listening. Test scaffolding, not the product: the product's filtering
is Squid's.
"""

from __future__ import annotations

import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def _log(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")


def headers(log: str, ports: list[str]) -> None:
    http(log, ports, headers=True)


def http(log: str, ports: list[str], *, headers: bool = False) -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            port = self.server.server_address[1]
            auth = f" {self.headers.get('Authorization', '-')}" if headers else ""
            _log(log, f"http {port} {self.path}{auth}")
            parts = urlsplit(self.path)
            if headers and parts.path == "/echo":
                echoed = str(self.headers).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(echoed)))
                self.end_headers()
                self.wfile.write(echoed)
                return
            if parts.path == "/redirect":
                self.send_response(302)
                self.send_header("Location", parse_qs(parts.query)["to"][0])
                self.end_headers()
                return
            body = f"hello from {port}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    class Raw(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            _log(log, f"raw {self.server.server_address[1]}")
            self.request.sendall(b"raw-ok\n")

    servers: list[socketserver.BaseServer] = []
    for port in ports:
        if port.startswith("RAW:"):
            socketserver.ThreadingTCPServer.allow_reuse_address = True
            servers.append(socketserver.ThreadingTCPServer(("0.0.0.0", int(port[4:])), Raw))
        elif port.startswith("TLS:"):
            server = ThreadingHTTPServer(("0.0.0.0", int(port[4:])), Handler)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(os.environ["JSBX_TLS_CERT"], os.environ["JSBX_TLS_KEY"])
            server.socket = context.wrap_socket(server.socket, server_side=True)
            servers.append(server)
        else:
            servers.append(ThreadingHTTPServer(("0.0.0.0", int(port)), Handler))
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def _qname(packet: bytes) -> tuple[str, int]:
    labels, i = [], 12
    while packet[i]:
        labels.append(packet[i + 1 : i + 1 + packet[i]].decode("ascii", "replace"))
        i += packet[i] + 1
    return ".".join(labels).lower(), i + 5  # past the root label, QTYPE and QCLASS


def dns(log: str, records: list[str]) -> None:
    answers = dict(r.split("=", 1) for r in records)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("0.0.0.0", 53))
    print("ready", flush=True)
    while True:
        packet, peer = sock.recvfrom(4096)
        try:
            name, end = _qname(packet)
        except (IndexError, UnicodeError):
            continue
        qtype = struct.unpack("!H", packet[end - 4 : end - 2])[0]
        _log(log, f"dns {name} {qtype}")
        found = answers.get(name) if qtype == 1 else None
        flags = 0x8180 if name in answers else 0x8183  # NOERROR / NXDOMAIN
        header = packet[:2] + struct.pack("!HHHHH", flags, 1, 1 if found else 0, 0, 0)
        reply = header + packet[12:end]
        if found:
            reply += b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(found)
        sock.sendto(reply, peer)


if __name__ == "__main__":
    kind, log_path, *rest = sys.argv[1:]
    {"http": http, "headers": headers, "dns": dns}[kind](log_path, rest)
