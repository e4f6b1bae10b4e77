"""Allow-listed network (`create(network=[...])`, ``--allow-net``): against a real Squid proxy
on a real internal Docker network, with servers each in a network namespace of its own.

The servers log every connection they get, and the DNS server the proxy asks logs every
query: a bypass that is refused must leave no line there, not only fail in the sandbox.

Layout (``10.231.N.2`` in namespace N, ``10.231.N.1`` the host's end of its veth pair):
``allowed.test`` -> server A (HTTP 8080 and 8081, raw TCP 2222); ``other.test`` -> server B;
server C at 10.231.3.2 is reached by the listed network ``10.231.3.0/24:8080``, whose
``10.231.3.1`` is the host's own address (a server of the test listens there too);
the DNS server (namespace 4) answers ``meta.test`` with the metadata address and
``host.test`` with the host's.
"""

from __future__ import annotations

import http.server
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _kernels import kernel

from jupyter_sandbox import SandboxConfigError, create
from jupyter_sandbox.errors import NonZeroExit

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

SERVER = Path(__file__).with_name("_netns_server.py")
NET = "10.231"
ALLOW = [
    "allowed.test:8080",
    "meta.test:80",
    "host.test:8080",
    "gateway.test:8080",
    f"{NET}.3.0/24:8080",
]
RECORDS = [
    f"allowed.test={NET}.1.2",
    f"other.test={NET}.2.2",
    f"cidr.test={NET}.3.2",
    f"host.test={NET}.3.1",
    "meta.test=169.254.169.254",
    "gateway.test=172.17.0.1",
]


class Namespaces:
    """Network namespaces with a veth pair each, their server processes, and every resource
    made for them, tracked so the fixture removes all of it."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tag = f"{os.getpid() % 100000:05d}"
        self.names: list[str] = []
        self.links: list[str] = []
        self.processes: list[subprocess.Popen[str]] = []

    def add(self, n: int, *server: str) -> Path:
        """Namespace ``n`` at ``10.231.n.2`` running ``_netns_server.py server...``; its log."""
        ns, host_end, ns_end = f"jsan-{self.tag}-{n}", f"jsa{self.tag}{n}h", f"jsa{self.tag}{n}n"
        _ip("netns", "add", ns)
        self.names.append(ns)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        self.links.append(host_end)
        _ip("link", "set", ns_end, "netns", ns)
        _ip("addr", "add", f"{NET}.{n}.1/24", "dev", host_end)
        _ip("link", "set", host_end, "up")
        for command in (
            ["addr", "add", f"{NET}.{n}.2/24", "dev", ns_end],
            ["link", "set", ns_end, "up"],
            ["link", "set", "lo", "up"],
            ["route", "add", "default", "via", f"{NET}.{n}.1"],
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
        for process in self.processes:
            process.kill()
            process.wait()
        for link in self.links:
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        for ns in self.names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class _HostServer(http.server.ThreadingHTTPServer):
    hits: list[str]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The servers, the resolver the proxy asks, and a server on the host's own address."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("these tests make network namespaces: run them as root with iproute2")
    spaces = Namespaces(tmp_path_factory.mktemp("netns"))
    host = None
    try:
        logs = {
            "a": spaces.add(1, "http", "8080", "8081", "RAW:2222"),
            "b": spaces.add(2, "http", "8080"),
            "c": spaces.add(3, "http", "8080"),
            "dns": spaces.add(4, "dns", *RECORDS),
        }

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with open(logs["host"], "a") as f:
                    f.write(f"host {self.path}\n")
                self.send_response(200)
                self.end_headers()

        logs["host"] = spaces.tmp / "host.log"
        logs["host"].touch()
        host = http.server.ThreadingHTTPServer((f"{NET}.3.1", 8080), Handler)
        threading.Thread(target=host.serve_forever, daemon=True).start()
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("JUPYTER_SANDBOX_EGRESS_DNS", f"{NET}.4.2")
            yield logs
    finally:
        from jupyter_sandbox.sandbox import _egress

        _egress.close_all()
        if host is not None:
            host.shutdown()
            host.server_close()
        spaces.close()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"jsan-{spaces.tag}-" not in left


PROBES = r"""
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

N = "10.231"
print(json.dumps({
    "allowed": get("http://allowed.test:8080/ok"),
    "cidr_literal": get(f"http://{N}.3.2:8080/ok"),
    "tunnel_allowed": tunnel("allowed.test:8080", "GET /tunnel HTTP/1.0\r\n\r\n"),
    "other_host": get("http://other.test:8080/"),
    "other_port": get("http://allowed.test:8081/"),
    "name_in_cidr": get("http://cidr.test:8080/"),
    "ip_of_allowed_name": get(f"http://{N}.1.2:8080/"),
    "redirect": get("http://allowed.test:8080/redirect?to=http://other.test:8080/moved"),
    "host_literal": get(f"http://{N}.3.1:8080/"),
    "host_by_name": get("http://host.test:8080/"),
    "metadata_literal": get("http://169.254.169.254/latest/meta-data/"),
    "metadata_by_name": get("http://meta.test/latest/meta-data/"),
    "engine_gateway_by_name": get("http://gateway.test:8080/"),
    "ftp_scheme": raw_request("GET ftp://allowed.test:8080/ HTTP/1.1\r\nHost: allowed.test"),
    "connect_other_port": tunnel("allowed.test:2222"),
    "connect_ip_literal": tunnel(f"{N}.1.2:8080"),
    "raw_to_server": connect(f"{N}.1.2", 2222),
    "raw_to_cidr": connect(f"{N}.3.2", 8080),
    "raw_to_gateway": connect("172.17.0.1", 8080),
    "raw_to_host": connect(f"{N}.3.1", 8080),
    "resolve_allowed": resolve("allowed.test"),
    "resolve_exfil": resolve("exfil-resolve.test"),
    "udp_dns": udp_dns(f"{N}.4.2", "exfil-udp.test"),
    "proxy_exfil": get("http://exfil-proxy.test/"),
    "connect_exfil": tunnel("exfil-connect.test:443"),
}))
"""


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_the_code_reaches_the_listed_hosts_and_every_bypass_is_refused(world):
    probes = create("probes", code=PROBES, network=ALLOW, timeout=180)
    seen = json.loads(probes.execute({}).stdout.strip().splitlines()[-1])
    allowed = {"allowed": 200, "cidr_literal": 200}
    assert {k: seen[k] for k in allowed} == allowed, seen
    assert seen["tunnel_allowed"].startswith("HTTP/1.1 200 "), seen
    assert seen["tunnel_allowed"].endswith("HTTP/1.0 200 OK"), seen
    refused = [
        "other_host",
        "other_port",
        "name_in_cidr",
        "ip_of_allowed_name",
        "redirect",
        "host_literal",
        "host_by_name",
        "metadata_literal",
        "metadata_by_name",
        "engine_gateway_by_name",
        "proxy_exfil",
    ]
    assert {k: seen[k] for k in refused} == dict.fromkeys(refused, 403), seen
    for key in ("connect_other_port", "connect_ip_literal", "connect_exfil", "ftp_scheme"):
        assert seen[key].startswith("HTTP/1.1 403 "), (key, seen)
    for key in ("raw_to_server", "raw_to_cidr", "raw_to_gateway", "raw_to_host"):
        assert seen[key] != "connected", (key, seen)  # no route: the proxy is the only way
    for key in ("resolve_allowed", "resolve_exfil"):
        assert seen[key] == "gaierror", (key, seen)  # names never resolve in the sandbox
    assert seen["udp_dns"] != "answered", seen

    # what arrived: exactly the allowed requests, nothing of the refused ones
    assert sorted(_lines(world["a"])) == sorted(
        [
            "http 8080 /ok",
            "http 8080 /tunnel",
            "http 8080 /redirect?to=http://other.test:8080/moved",
        ]
    )
    assert _lines(world["b"]) == []
    assert _lines(world["c"]) == ["http 8080 /ok"]
    assert _lines(world["host"]) == []
    queried = {line.split()[1] for line in _lines(world["dns"])}
    # the proxy asked only about allowed names; nothing the code made up ever left as DNS.
    # Squid also looks up its client's (the sandbox's) own address once: a name Docker chose.
    from jupyter_sandbox.sandbox import _egress

    (egress,) = [e for e in _egress._egresses.values() if e.destinations == probes.network]
    subnet = ipaddress.ip_network(
        egress.proxy.attrs["NetworkSettings"]["Networks"][egress.network]["IPAddress"] + "/16",
        strict=False,
    )
    reverse = {q for q in queried if q.endswith(".in-addr.arpa")}
    for name in reverse:
        address = ".".join(reversed(name.removesuffix(".in-addr.arpa").split(".")))
        assert ipaddress.ip_address(address) in subnet, name
    assert queried - reverse <= {"allowed.test", "host.test", "meta.test", "gateway.test"}
    assert "allowed.test" in queried


def test_a_refused_host_fails_the_cell_in_one_line(world, shell, capsys):
    shell.user_ns["url"] = "http://other.test:8080/data"
    result = shell.run_cell(
        "%%sandbox --allow-net allowed.test:8080 --in url\n"
        "import urllib.request\nurllib.request.urlopen(url, timeout=20)"
    )
    error = result.error_in_exec
    assert isinstance(error, NonZeroExit)
    message = str(error)
    assert "\n" not in message
    assert message.endswith(
        "HTTP Error 403: Forbidden; the network allow-list refused other.test:8080:"
        " add it to network=[...]"
    ), message  # the engine's words; the cell shows the option
    assert (error.parameter, error.hint) == ("allow_net", "network=[...]")
    shown = capsys.readouterr()
    assert "refused other.test:8080: add it to --allow-net" in shown.out + shown.err
    assert _lines(world["b"]) == []


def test_a_refused_host_is_the_first_line_of_the_cells_error(world, tmp_path):
    """In a real kernel: the error output opens with the refusal and the option that
    allows the host; the exit code follows, and the 403's traceback streamed above it."""
    with kernel(tmp_path / "store.sqlite") as k:
        ran = k.run(
            "%%sandbox --allow-net allowed.test:8080\n"
            "import urllib.request\nurllib.request.urlopen('http://other.test:8080/', timeout=20)"
        )
    assert ran.status == "error"
    (error,) = [m["content"] for m in ran.outputs if m["msg_type"] == "error"]
    assert error["traceback"][:2] == [
        "NonZeroExit: the network allow-list refused other.test:8080: add it to --allow-net",
        "exited with code 1 (its stderr above says why)",
    ], error["traceback"]
    assert "HTTP Error 403: Forbidden" in ran.text  # the stderr, above
    assert _lines(world["b"]) == []


def test_the_config_default_applies_and_a_cell_can_say_none(world, shell):
    shell.run_line_magic("config", 'SandboxMagics.allow_net = ["allowed.test:8080"]')
    try:
        body = (
            "import urllib.request\n"
            "try:\n    status = urllib.request.urlopen(url, timeout=20).status\n"
            "except Exception as e:\n    status = type(e).__name__\n"
        )
        shell.user_ns["url"] = "http://allowed.test:8080/config"
        shell.run_cell(f"%%sandbox --in url --out status\n{body}").raise_error()
        assert shell.user_ns["status"] == 200
        shell.run_cell(f"%%sandbox --network none --in url --out status\n{body}").raise_error()
        assert shell.user_ns["status"] == "URLError"  # no proxy, no network
        assert "http 8080 /config" in _lines(world["a"])
    finally:
        shell.run_line_magic("config", "SandboxMagics.allow_net = []")


def test_the_watchdog_path_removes_a_kernels_proxy_and_network(world, docker_engine):
    import docker.errors

    from jupyter_sandbox.sandbox import _egress
    from jupyter_sandbox.sandbox._allowlist import allow_list
    from jupyter_sandbox.sandbox._client import owner_labels

    made = _egress.ensure(docker_engine, allow_list(["reaped.test"]), lambda event: None)
    assert made.proxy.status == "running"
    assert made.network in _egress.remove_owned(docker_engine, owner_labels())
    names = [n.name for n in docker_engine.networks.list()]
    assert made.network not in names
    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(made.proxy.id)
    _egress.close_all()  # the registry forgets it without an error


def test_the_proxy_serves_only_its_internal_network(world, docker_engine):
    """The proxy's other side sits on the engine's bridge: a container there asking it for an
    allowed host gets 403, so the proxy is no way in for the bridge's neighbours."""
    from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE, _egress
    from jupyter_sandbox.sandbox._allowlist import allow_list

    egress = _egress.ensure(docker_engine, allow_list(ALLOW), lambda event: None)
    egress.proxy.reload()
    outside = egress.proxy.attrs["NetworkSettings"]["Networks"]["bridge"]["IPAddress"]
    ask = (
        f"import socket; s = socket.create_connection(({outside!r}, 3128), timeout=20);"
        " s.sendall(b'GET http://allowed.test:8080/neighbour HTTP/1.0\\r\\n\\r\\n');"
        " print(s.recv(100).split(b'\\r\\n')[0].decode())"
    )
    answer = docker_engine.containers.run(
        DEFAULT_BASE_IMAGE, ["python3", "-c", ask], network_mode="bridge", remove=True
    )
    assert answer.decode().strip() == "HTTP/1.1 403 Forbidden"
    assert "http 8080 /neighbour" not in _lines(world["a"])


KILLED = """
from jupyter_sandbox import create
create("k", code="import time; time.sleep(120)", network=["reap.test"], timeout=150).run()
"""


def _egress_of(engine, pid: int) -> tuple[list[str], list[str]]:
    """(networks, proxies) the allow-lists of process ``pid`` made."""
    labels = ["jupyter-sandbox.kind=egress", f"jupyter-sandbox.owner-pid={pid}"]
    networks = [n["Name"] for n in engine.api.networks(filters={"label": labels})]
    proxies = [c["Id"] for c in engine.api.containers(all=True, filters={"label": labels})]
    return networks, proxies


def _killed_with_an_egress(engine) -> int:
    """A kernel that ran an allow-listed sandbox, killed with SIGKILL mid-run; its pid."""
    child = subprocess.Popen([sys.executable, "-c", KILLED])
    try:
        for _ in range(600):
            networks, proxies = _egress_of(engine, child.pid)
            running = (
                engine.api.containers(
                    filters={"label": f"jupyter-sandbox.owner-pid={child.pid}", "network": networks}
                )
                if networks
                else []
            )
            if networks and proxies and len(running) >= 2:  # the proxy and the run
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the child never started its allow-listed run")
    finally:
        child.kill()
        child.wait(timeout=30)
    return child.pid


def test_a_killed_kernels_watchdog_removes_its_proxy_and_network(docker_engine):
    pid = _killed_with_an_egress(docker_engine)
    for _ in range(300):
        if _egress_of(docker_engine, pid) == ([], []):
            break
        time.sleep(0.1)
    assert _egress_of(docker_engine, pid) == ([], [])


def test_load_reaps_what_a_killed_kernel_and_its_watchdog_left(docker_engine):
    from _processes import watchdog_of

    from jupyter_sandbox.sandbox import reap_orphans

    child = subprocess.Popen([sys.executable, "-c", KILLED])
    try:
        for _ in range(600):
            networks, proxies = _egress_of(docker_engine, child.pid)
            if networks and proxies and watchdog_of(child.pid) is not None:
                break
            time.sleep(0.1)
        watchdog = watchdog_of(child.pid)
        assert watchdog is not None
        os.kill(watchdog, signal.SIGKILL)  # as a host crash would: the reaper is under test
    finally:
        child.kill()
        child.wait(timeout=30)
    networks, _ = _egress_of(docker_engine, child.pid)
    assert networks  # SIGKILL runs no atexit handler
    reaped = reap_orphans()
    assert set(networks) <= set(reaped)
    assert _egress_of(docker_engine, child.pid) == ([], [])


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("pypi.org:0", "a port is a number from 1 to 65535"),
        ("pypi.org:70000", "a port is a number from 1 to 65535"),
        ("pypi.org:https", "a port is a number from 1 to 65535"),
        ("0.0.0.0/0", "nearly the whole internet"),
        ("::/0", "nearly the whole internet"),
        ("169.254.169.254", "link-local"),
        ("127.0.0.0/8", "loopback"),
        ("localhost:8888", "the host itself"),
        ("*.example.com", "wildcard"),
        ("exa mple.com", "is not a host name"),
        ("bücher.de", "punycode"),
        ("10.0.0.1/8", "host bits set"),
        ("[2001:db8::1", "[IPv6]:port"),
    ],
)
def test_bad_entries_are_one_line_errors_that_say_what_to_write(shell, entry, says):
    from IPython.core.error import UsageError

    with pytest.raises(SandboxConfigError, match=r"^network entry .*") as raised:
        create("x", code="pass", network=[entry])
    assert says in str(raised.value) and "\n" not in str(raised.value)
    result = shell.run_cell(f"%%sandbox --allow-net {entry.replace(' ', '')}\npass")
    if entry == "exa mple.com":
        return  # the magic splits its line on spaces: that entry is another test's
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    assert str(result.error_in_exec).startswith("--allow-net entry"), result.error_in_exec


def test_other_bad_uses_are_refused_before_anything_runs(shell, caplog):
    from IPython.core.error import UsageError

    with pytest.raises(SandboxConfigError, match="empty allow-list"):
        create("x", code="pass", network=[])
    with pytest.raises(SandboxConfigError, match="'none', 'bridge' or a list"):
        create("x", code="pass", network=42)  # type: ignore[arg-type]
    with pytest.raises(SandboxConfigError, match=r"a list of hosts such as \['pypi.org'\]"):
        create("x", code="pass", network="pypi.org")  # type: ignore[arg-type]
    with pytest.raises(SandboxConfigError, match="needs isolation 'container'"):
        create("x", code="pass", network=["pypi.org"], isolation="gvisor")
    with pytest.raises(SandboxConfigError, match="drop cluster"):
        create("x", code="pass", network=["pypi.org"], cluster="tcp://127.0.0.1:8786")
    result = shell.run_cell("%%sandbox --allow-net pypi.org --network bridge\npass")
    assert isinstance(result.error_in_exec, UsageError)
    assert "pick one" in str(result.error_in_exec)
    with caplog.at_level("ERROR"):
        shell.run_line_magic("config", 'SandboxMagics.allow_net = ["0.0.0.0/0"]')
    assert "network entry '0.0.0.0/0' spans /0, nearly the whole internet" in caplog.text
    assert shell.magics_manager.registry["SandboxMagics"].allow_net == []  # unchanged


def test_a_refused_config_value_does_not_break_the_next_load(shell, capsys):
    """IPython's ``%config`` merges a value into the shell's config before the trait refuses
    it: the refused value stayed there and every later ``%load_ext`` raised TraitError, with
    no magics left. Now the load drops that class's settings and says so in one line."""
    shell.run_line_magic("config", 'SandboxMagics.allow_net = ["0.0.0.0/0"]')  # logged, refused
    assert shell.magics_manager.registry["SandboxMagics"].allow_net == []
    assert shell.config.SandboxMagics.allow_net == ["0.0.0.0/0"]  # IPython kept it
    shell.run_line_magic("unload_ext", "jupyter_sandbox")
    capsys.readouterr()
    shell.run_line_magic("load_ext", "jupyter_sandbox")
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "SandboxMagics settings" in said[0] and "dropped" in said[0]
    assert "allow_net" not in shell.config.SandboxMagics
    result = shell.run_cell("%%sandbox --quiet --out y\ny = 6 * 7")
    assert result.success, result.error_in_exec
    assert shell.user_ns["y"] == 42


def test_an_allow_listed_sandboxs_build_reaches_the_package_index_only(docker_engine, monkeypatch):
    """``packages`` install through a proxy that allows only the index; a build step that
    reaches for another host is refused (the step's own output says so)."""
    import secrets

    # the real index, found by the engine's resolver (not the namespace tests' resolver)
    monkeypatch.delenv("JUPYTER_SANDBOX_EGRESS_DNS", raising=False)

    token = secrets.token_hex(4)  # a new image each time: the build really runs
    reach = (
        "python3 -c 'import urllib.request as u; u.urlopen(\"https://example.org/\")' 2>&1"
        f" | tail -1; true # {token}"
    )
    sandbox = create(
        "built",
        code="import six\nprint(six.__name__)",
        packages=["six"],
        additional_commands=[reach],
        network=["allowed.test:8080"],
    )
    run = sandbox.execute({})
    try:
        assert run.stdout.strip() == "six"
        assert run.build is not None and not run.build.cached
        assert "<urlopen error Tunnel connection failed: 403 Forbidden>" in run.build.log
    finally:
        docker_engine.images.remove(run.image, force=True)


def test_rootless_podman_is_refused_in_one_line(on_podman):
    """Rootless Podman's networks cannot keep the host off the sandbox's: a refusal, before
    any container starts (the real service, as its own non-root user)."""
    sandbox = create("x", code="pass", network=["pypi.org"])
    with pytest.raises(SandboxConfigError, match="needs Docker: Podman at unix://") as raised:
        sandbox.execute({})
    assert "\n" not in str(raised.value) and "JUPYTER_SANDBOX_ENGINE=docker" in str(raised.value)
