"""Servers in network namespaces of their own, for the allow-list and secret-injection tests
and their benchmark: `Namespaces` makes each namespace with its veth pair and runs
``_netns_server.py`` in it; `CLIENT` is the sandbox's side (requests, tunnels, DNS);
`_certificates` makes a CA and a server certificate with ``openssl``."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

SERVER = Path(__file__).with_name("_netns_server.py")


NET = "10.231"


class Namespaces:
    """Network namespaces with a veth pair each, their server processes, and every resource
    made for them, tracked so the fixture removes all of it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tag = f"{os.getpid() % 100000:05d}"
        self.names: list[str] = []
        self.links: list[str] = []
        self.routes: list[str] = []
        self.processes: list[subprocess.Popen[str]] = []
        self.servers: list[http.server.ThreadingHTTPServer] = []

    def unreachable(self, network: str) -> None:
        """An unreachable route on ``network``: an address of it that no namespace or engine
        network of the test serves never leaves the machine."""
        _ip("route", "add", "unreachable", network)
        self.routes.append(network)

    def host_end(self, n: int) -> str:
        """The host's end of namespace ``n``'s veth pair."""
        return f"jsa{self.tag}{n}h"

    def serve(self, address: str, log: Path) -> None:
        """An HTTP server of the host's own on ``address``:8080, writing each path to ``log``."""

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with open(log, "a") as f:
                    f.write(f"host {self.path}\n")
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        log.touch()
        server = http.server.ThreadingHTTPServer((address, 8080), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.servers.append(server)

    def add(self, n: int, *server: str, net: str = NET) -> Path:
        """Namespace ``n`` at ``{net}.n.2`` running ``_netns_server.py server...``; its log."""
        ns, host_end, ns_end = f"jsan-{self.tag}-{n}", self.host_end(n), f"jsa{self.tag}{n}n"
        _ip("netns", "add", ns)
        self.names.append(ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        self.links.append(host_end)
        _ip("link", "set", ns_end, "netns", ns)
        _ip("addr", "add", f"{net}.{n}.1/24", "dev", host_end)
        _ip("link", "set", host_end, "up")
        for command in (
            ["addr", "add", f"{net}.{n}.2/24", "dev", ns_end],
            ["link", "set", ns_end, "up"],
            ["link", "set", "lo", "up"],
            ["route", "add", "default", "via", f"{net}.{n}.1"],
        ):
            _ip("-n", ns, *command)
        log = self.tmp / f"ns{n}.log"
        log.touch()
        process = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                ns,
                sys.executable,
                str(SERVER),
                server[0],
                str(log),
                *server[1:],
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.processes.append(process)
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        return log

    def close(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
        for process in self.processes:
            process.kill()
            process.wait()
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for network in self.routes:
            subprocess.run(["ip", "route", "del", "unreachable", network], capture_output=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


CLIENT = r"""
import json, socket, urllib.request, urllib.error

def get(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return type(e).__name__

def connect(host, port):
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((host, port)); return "connected"
    except OSError as e:
        return type(e).__name__
    finally:
        s.close()

def tunnel(target, then=None):
    proxy = urllib.request.getproxies()["http"].rsplit("/", 1)[-1].split(":")
    s = socket.create_connection((proxy[0], int(proxy[1])), timeout=20)
    s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = s.recv(4096).split(b"\r\n")[0].decode()
    if then and " 200 " in head:
        s.sendall(then.encode()); head += " | " + s.recv(4096).split(b"\r\n")[0].decode()
    s.close()
    return head

def raw_request(line):
    proxy = urllib.request.getproxies()["http"].rsplit("/", 1)[-1].split(":")
    s = socket.create_connection((proxy[0], int(proxy[1])), timeout=20)
    s.sendall(line.encode() + b"\r\n\r\n")
    head = s.recv(4096).split(b"\r\n")[0].decode()
    s.close()
    return head

def resolve(name):
    try:
        socket.getaddrinfo(name, 80); return "resolved"
    except OSError as e:
        return type(e).__name__

def udp_dns(server, name):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
    try:
        s.sendto(q, (server, 53)); s.recv(512); return "answered"
    except OSError as e:
        return type(e).__name__
"""
"""The sandbox's side of the probes: requests through the proxy, around it, and DNS."""


TEST_CA = "jsbx test CA"


def _certificates(where: Path, names: tuple[str, ...] = ("secret.test", "echo.test")) -> Path:
    """The test's CA and its certificate for the servers' ``names``; the CA's PEM file."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=where)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", "-new", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", f"/CN={TEST_CA}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    openssl("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj",
            f"/CN={names[0]}")  # fmt: skip
    (where / "ext").write_text(
        f"subjectAltName={','.join('DNS:' + n for n in names)}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext")  # fmt: skip
    return where / "ca.pem"
