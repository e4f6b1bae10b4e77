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

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _kernels import kernel
from _namespaces import CLIENT, NET, Namespaces, _ip

from jupyter_sandbox import SandboxConfigError, create
from jupyter_sandbox.errors import NonZeroExit
from jupyter_sandbox.records import RUN_MIME

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

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


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The servers, the resolver the proxy asks, and a server on the host's own address."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("these tests make network namespaces: run them as root with iproute2")
    spaces = Namespaces(tmp_path_factory.mktemp("netns"))
    try:
        logs = {
            "a": spaces.add(1, "http", "8080", "8081", "RAW:2222"),
            "b": spaces.add(2, "http", "8080"),
            "c": spaces.add(3, "http", "8080"),
            "dns": spaces.add(4, "dns", *RECORDS),
        }
        logs["host"] = spaces.tmp / "host.log"
        spaces.serve(f"{NET}.3.1", logs["host"])
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("JUPYTER_SANDBOX_EGRESS_DNS", f"{NET}.4.2")
            yield logs
    finally:
        from jupyter_sandbox.sandbox import _egress

        _egress.close_all()
        spaces.close()
        left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"jsan-{spaces.tag}-" not in left


PROBES = (
    CLIENT
    + r"""
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
)


def _lines(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_the_code_reaches_the_listed_hosts_and_every_bypass_is_refused(world):
    probes = create("probes", code=PROBES, network=ALLOW, timeout=180)
    run = probes.execute({})
    seen = json.loads(run.stdout.strip().splitlines()[-1])
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

    # the run's record: each refused destination once, with why, in the proxy's own terms
    log = run.to_record()["requests"]
    unreachable = "resolves to an address no sandbox may reach"
    assert log["refusals"] == {
        "other.test:8080": "not on the list",
        "allowed.test:8081": "port not on the list",
        "cidr.test:8080": "not on the list",
        f"{NET}.1.2:8080": "not on the list",
        f"{NET}.3.1:8080": "an address no sandbox may reach",
        "host.test:8080": unreachable,
        "169.254.169.254:80": "not on the list",
        "meta.test:80": unreachable,
        "gateway.test:8080": unreachable,
        "allowed.test:8080": "ftp: only HTTP and HTTPS",
        "allowed.test:2222": "port not on the list",
        "exfil-proxy.test:80": "not on the list",
        "exfil-connect.test:443": "not on the list",
    }, log["refusals"]
    assert (log["allowed"], log["refused"]) == (4, 15), log  # the raw sockets never got there


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
    # the record's text fallback: what the run sent out, the refused request named
    assert "1 request: 0 allowed, 1 refused: other.test:8080 not on the list" in shown.out
    assert _lines(world["b"]) == []


SENT = (
    CLIENT
    + r"""
import os
t = os.environ["JSBX_TEST_REQUEST_TOKEN"]
print(json.dumps([
    get(f"http://allowed.test:8080/ok?key={t}"),
    get(f"http://allowed.test:8080/p/{t}/x"),
    tunnel("allowed.test:8080", "GET /tunnel HTTP/1.0\r\n\r\n"),
    get("http://other.test:8080/away"),
    get("http://allowed.test:8081/port"),
    get(f"http://{t}.exfil.test/"),
]))
"""
)
"""Requests a run's record must list: allowed ones (a query, a secret in the path, a tunnel)
and refused ones (another host, another port, a secret in the host)."""


def test_a_runs_record_lists_every_request_it_sent_with_queries_and_secrets_masked(
    world,
    monkeypatch,
    spans,
):
    from jupyter_sandbox.display import _html, _text

    token = "tok" + os.urandom(8).hex()
    monkeypatch.setenv("JSBX_TEST_REQUEST_TOKEN", token)
    sandbox = create(
        "sent",
        code=SENT,
        network=["allowed.test:8080"],
        secrets=["JSBX_TEST_REQUEST_TOKEN"],
        timeout=180,
    )
    run = sandbox.execute({})
    statuses = json.loads(run.stdout.strip().splitlines()[-1])
    assert statuses[:2] + statuses[3:] == [200, 200, 403, 403, 403], statuses
    record = run.to_record()
    log = record["requests"]
    assert (log["total"], log["allowed"], log["refused"]) == (6, 3, 3), log
    rows = [
        (r["method"], r["host"], r["port"], r["path"], r["status"], r["allowed"], r["why"])
        for r in log["rows"]
    ]
    assert rows == [
        ("GET", "allowed.test", 8080, "/ok?***", 200, True, None),
        ("GET", "allowed.test", 8080, "/p/***/x", 200, True, None),
        ("CONNECT", "allowed.test", 8080, "", 200, True, None),
        ("GET", "other.test", 8080, "/away", 403, False, "not on the list"),
        ("GET", "allowed.test", 8081, "/port", 403, False, "port not on the list"),
        ("GET", "***.exfil.test", 80, "/", 403, False, "not on the list"),
    ], rows
    assert all(r["sent"] > 0 and r["received"] > 0 for r in log["rows"]), log["rows"]
    times = [r["time"] for r in log["rows"]]
    assert times == sorted(times) and run.duration > times[-1] - times[0], times
    # what arrived at the server: the query and the secret the code sent, which the log masks
    assert f"http 8080 /ok?key={token}" in _lines(world["a"])
    assert _lines(world["b"]) == []

    from _record_shapes import check_record

    from jupyter_sandbox.display._format import summarised

    check_record(record)
    shown = summarised(record)
    check_record(shown)
    line = (
        "6 requests: 3 allowed, 3 refused: other.test:8080 not on the list,"
        " allowed.test:8081 port not on the list, ***.exfil.test:80 not on the list"
    )
    assert shown.get("summary", {}).get("requests") == line
    text, html = _text.render(shown), _html.render(shown)
    assert line in text and "allowed.test:8081" in text.split(line, 1)[1]
    assert 'class="jsb-requests"' in html and "/p/***/x" in html
    (span,) = [s for s in spans.get_finished_spans() if s.name == "sandbox sent"]
    assert span.attributes["jupyter_sandbox.sandbox.requests.refused"] == 3
    events = [dict(e.attributes) for e in span.events if e.name == "http request"]
    assert [(e["server.address"], e["server.port"]) for e in events] == [
        (host, port) for _, host, port, *_ in rows
    ]
    assert events[3]["jupyter_sandbox.request.why"] == "not on the list"
    for said in (json.dumps(record), text, html, repr(events)):
        assert token not in said


def test_runs_in_flight_together_each_list_only_their_own_requests(world):
    """One proxy serves every run of an allow-list: a run's rows are its own container's.
    The first run's second request is made while the second run still runs."""
    allow = ["allowed.test:8080"]
    first = InFlight(
        CLIENT
        + "first = get('http://allowed.test:8080/one')\n"
        + DOOR
        + "door.accept()\nprint(get('http://allowed.test:8080/one-again'))\n",
        allow,
    )
    try:
        status, address = first.first()
        assert status == "200"
        code = (
            CLIENT
            + "print(get('http://allowed.test:8080/two'))\n"
            + _knock(address)
            + "\nimport time; time.sleep(2)\n"
        )
        second = create("second", code=code, network=allow, timeout=180).execute({})
        assert first.end() is None, first.outcome
    finally:
        first.stop()
    assert first.run.stdout.strip().endswith("200")
    assert _paths(first.run.to_record()) == ["/one", "/one-again"]
    assert _paths(second.to_record()) == ["/two"]
    assert _lines(world["a"]).index("http 8080 /two") < _lines(world["a"]).index(
        "http 8080 /one-again"
    )


LEFT_OPEN = (
    CLIENT
    + r"""
import os
proxy = urllib.request.getproxies()["http"].rsplit("/", 1)[-1].split(":")
s = socket.create_connection((proxy[0], int(proxy[1])), timeout=20)
s.sendall(b"CONNECT allowed.test:8080 HTTP/1.1\r\nHost: allowed.test:8080\r\n\r\n")
s.recv(4096)
s.sendall(b"GET /left-open HTTP/1.0\r\n\r\n")
s.recv(4096)
os._exit(0)  # the tunnel still open: the proxy logs it only when the container's end closes it
"""
)


def test_a_tunnel_the_code_left_open_is_in_its_record(world):
    sandbox = create("open", code=LEFT_OPEN, network=["allowed.test:8080"], timeout=60)
    for _ in range(3):
        (row,) = sandbox.execute({}).to_record()["requests"]["rows"]
        assert (row["method"], row["host"], row["port"], row["status"]) == (
            "CONNECT",
            "allowed.test",
            8080,
            200,
        ), row
    assert _lines(world["a"]).count("http 8080 /left-open") == 3


def _paths(record: Any) -> list[str]:
    return [row["path"] for row in record["requests"]["rows"]]


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
    *_, shown = [  # the record's last state: the run's end
        m["content"]["data"]
        for m in ran.outputs
        if m["msg_type"] in ("display_data", "update_display_data")
        and RUN_MIME in m["content"].get("data", {})
    ]
    log = shown[RUN_MIME]["requests"]
    assert log["refusals"] == {"other.test:8080": "not on the list"}, log
    line = "1 request: 0 allowed, 1 refused: other.test:8080 not on the list"
    assert shown[RUN_MIME]["summary"]["requests"] == line
    assert line in shown["text/plain"] and line in shown["text/html"]
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


LATER = "10.242"
"""A range a test lists, then fills after the proxy started: an unreachable route covers it,
so no address of it that the test does not serve leaves the machine."""


def _statuses(name: str, network: list[str], urls: dict[str, str]) -> dict[str, object]:
    """What a run of ``network`` got for each of ``urls`` (a status, or an error's name)."""
    code = CLIENT + f"print(json.dumps({{k: get(u) for k, u in {urls!r}.items()}}))"
    run = create(name, code=code, network=network, timeout=180).execute({})
    return dict(json.loads(run.stdout.strip().splitlines()[-1]))


def test_addresses_that_appear_after_the_proxy_started_are_refused(world, docker_engine, tmp_path):
    """The host's addresses and the engine's networks were read once, when the proxy started:
    a Docker network or a host address made later inside a listed range was reached. Now the
    proxy's packet filter refuses them when they appear; the range's other server still
    answers."""
    from docker.types import IPAMConfig, IPAMPool

    from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE

    spaces = Namespaces(tmp_path)
    network = server = None
    allow = [f"{LATER}.0.0/16:8080"]
    try:
        spaces.unreachable(f"{LATER}.0.0/16")
        served = spaces.add(5, "http", "8080", net=LATER)
        urls = {"netns": f"http://{LATER}.5.2:8080/served"}
        assert _statuses("before", allow, urls) == {"netns": 200}  # the proxy is up

        # after it started: a host address, and a Docker network with a server on it
        _ip("addr", "add", f"{LATER}.7.1/24", "dev", spaces.host_end(5))
        spaces.serve(f"{LATER}.7.1", tmp_path / "address.log")
        network = docker_engine.networks.create(
            f"jsbx-later-{spaces.tag}",
            ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=f"{LATER}.9.0/24")]),
            labels={"jupyter-sandbox.test": "later"},
        )
        spaces.serve(f"{LATER}.9.1", tmp_path / "gateway.log")  # the network's host address
        server = docker_engine.containers.run(
            DEFAULT_BASE_IMAGE,
            ["python3", "-m", "http.server", "8080"],
            network=network.name,
            detach=True,
            user="65534:65534",
            labels={"jupyter-sandbox.test": "later"},
        )
        server.reload()
        inside = server.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]
        local = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for _ in range(300):  # the host reaches it directly: it is up
            with contextlib.suppress(OSError):
                local.open(f"http://{inside}:8080/up", timeout=5).close()
                break
            time.sleep(0.1)

        urls.update(
            address=f"http://{LATER}.7.1:8080/address",
            gateway=f"http://{LATER}.9.1:8080/gateway",
            container=f"http://{inside}:8080/container",
        )
        seen = _statuses("after", allow, urls)
        assert seen == {"netns": 200, "address": 503, "gateway": 503, "container": 503}, seen
        assert _lines(served) == ["http 8080 /served", "http 8080 /served"]
        assert _lines(tmp_path / "address.log") == _lines(tmp_path / "gateway.log") == []
        assert "/container" not in server.logs().decode()
    finally:
        if server is not None:
            server.remove(force=True)
        if network is not None:
            network.remove()
        spaces.close()


NUMERIC = ["09.1.1.1", f"{NET}.3.09", "999.1.1.1", "2130706433", "[1:2:3:4:5:6:7:8:9]", "[::1::2]"]
"""Hosts that look numeric: no address (so a name to Squid) or, ``2130706433``, loopback."""


def test_a_numeric_host_that_is_no_address_is_refused_without_a_lookup(world):
    """A digits-and-dots host that is no address (``09.1.1.1``) passed the address rule's
    literal test, and the rule looked it up in DNS. Now only an exact address is one."""
    heads = [f"GET http://{host}:8080/numeric HTTP/1.1\r\nHost: {host}" for host in NUMERIC]
    code = CLIENT + (
        f"print(json.dumps([raw_request(h) for h in {heads!r}]"
        f" + [tunnel(t + ':8080') for t in {NUMERIC!r}] + [get({f'http://{NET}.3.2:8080/n'!r})]))"
    )
    asked = len(_lines(world["dns"]))
    run = create("numeric", code=code, network=[f"{NET}.3.0/24:8080"], timeout=180).execute({})
    *refused, literal = json.loads(run.stdout.strip().splitlines()[-1])
    assert refused == ["HTTP/1.1 403 Forbidden"] * (2 * len(NUMERIC)), refused
    assert literal == 200  # an address in the listed network still is one
    queried = {line.split()[1] for line in _lines(world["dns"])[asked:]}
    assert not queried & {host.strip("[]") for host in NUMERIC}, queried
    assert _lines(world["c"]).count("http 8080 /n") == 1


DOOR = r"""
proxy = urllib.request.getproxies()["http"].rsplit("/", 1)[-1].split(":")[0]
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); probe.connect((proxy, 9))
me = probe.getsockname()[0]
door = socket.socket(); door.bind((me, 9999)); door.listen(); door.settimeout(150)
print(f"ready {first} {me}", flush=True)
"""
"""A run in flight says ``ready <its first request's status> <its address>`` and waits for a
knock on port 9999 (`InFlight`) before each next step; ``first`` is set before it."""


class InFlight:
    """A run of ``code`` (`CLIENT` + ``first = ...`` + `DOOR` + its steps) on a thread: what
    its first line said, and how it ended."""

    def __init__(self, code: str, network: list[str]) -> None:
        self.ready = threading.Event()
        self.said: list[str] = []
        self.outcome: list[BaseException | None] = []
        self.cancel = threading.Event()
        self.sandbox = create("inflight", code=code, network=network, timeout=180)
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _heard(self, event: object) -> None:
        if getattr(event, "stream", None) == "stdout" and not self.ready.is_set():
            self.said.append(str(getattr(event, "text", "")))
            if "\n" in "".join(self.said):
                self.ready.set()

    def _run(self) -> None:
        try:
            self.run = self.sandbox.execute({}, on_event=self._heard, cancel=self.cancel)
            self.outcome.append(None)
        except BaseException as exc:
            self.outcome.append(exc)
        finally:
            self.ready.set()

    def first(self) -> tuple[str, str]:
        """(its first request's status, its address), once it is waiting for a knock."""
        assert self.ready.wait(180), self.outcome
        words = "".join(self.said).split()
        assert words[:1] == ["ready"], (self.said, self.outcome)
        return words[1], words[2]

    def end(self) -> BaseException | None:
        """How it ended, once it did."""
        self.thread.join(timeout=240)
        (outcome,) = self.outcome
        return outcome

    def stop(self) -> None:
        """Cancel it if it still runs (a failed test leaves no run waiting for a knock)."""
        self.cancel.set()
        self.thread.join(timeout=240)


def _knock(address: str) -> str:
    """Code that knocks on a run in flight at ``address`` (it goes on with its next step)."""
    return f"import socket; socket.create_connection(({address!r}, 9999), timeout=20).close()"


def _knock_from_outside(engine: Any, network: str, address: str) -> None:
    """Knock from the test's own container on ``network``: not a run, so no egress is asked."""
    from jupyter_sandbox.sandbox import DEFAULT_BASE_IMAGE

    engine.containers.run(
        DEFAULT_BASE_IMAGE, ["python3", "-c", _knock(address)], network=network, remove=True
    )


def test_an_address_that_appears_during_a_run_is_refused_to_it(world, docker_engine, tmp_path):
    """A run already in flight when the host gains an address inside its listed range: the
    proxy's filter follows the host's address changes, so the run's next request is refused."""
    from jupyter_sandbox.sandbox import _egress
    from jupyter_sandbox.sandbox._allowlist import allow_list

    spaces = Namespaces(tmp_path)
    run = None
    allow = [f"{LATER}.0.0/16:8080"]
    steps = (
        f"first = get('http://{LATER}.6.2:8080/first')\n" + DOOR + "door.accept()\n"
        f"print(json.dumps({{'address': get('http://{LATER}.8.1:8080/address')}}))\n"
    )
    try:
        spaces.unreachable(f"{LATER}.0.0/16")
        served = spaces.add(6, "http", "8080", net=LATER)
        run = InFlight(CLIENT + steps, allow)
        status, address = run.first()
        assert status == "200"
        _ip("addr", "add", f"{LATER}.8.1/24", "dev", spaces.host_end(6))
        spaces.serve(f"{LATER}.8.1", tmp_path / "address.log")
        egress = _egress.ensure(docker_engine, allow_list(allow), lambda event: None)
        listing = ["nft", "list", "set", "inet", "jupyter_sandbox", "v4"]
        for _ in range(300):  # the guard's set has it (nothing but a wait: no bound is tested)
            if f"{LATER}.8.1" in egress.guard.exec_run(listing).output.decode():
                break
            time.sleep(0.1)
        _knock_from_outside(docker_engine, egress.network, address)
        assert run.end() is None, run.outcome
        assert json.loads(run.run.stdout.strip().splitlines()[-1]) == {"address": 503}
        assert _lines(tmp_path / "address.log") == []
        assert _lines(served) == ["http 8080 /first"]
    finally:
        if run is not None:
            run.stop()
        spaces.close()


INFLIGHT = (
    r"""
url = "http://allowed.test:8080/inflight"
first = get(url)
"""
    + DOOR
    + r"""
door.accept()  # the test knocks once the proxy is dead
try:
    urllib.request.urlopen(url, timeout=20)  # through the proxy this run was given
    lost = None
except OSError as e:
    lost = e
door.accept()  # the next run knocks once a new proxy served it
if lost is not None:
    raise lost
"""
)


def test_a_killed_proxy_is_replaced_and_a_run_in_flight_says_why_it_failed(world, docker_engine):
    """A proxy killed from outside: the next run's egress removed the network with every run
    on it (exit 137) or failed with the engine's own words. Now a new proxy serves the same
    network, and the run in flight, whose request failed while no proxy was there, keeps its
    container and fails in one line saying why."""
    from jupyter_sandbox.sandbox import _egress
    from jupyter_sandbox.sandbox._allowlist import allow_list

    allow = ["allowed.test:8080"]
    run = InFlight(CLIENT + INFLIGHT, allow)
    try:
        status, address = run.first()
        assert status == "200"
        egress = _egress.ensure(docker_engine, allow_list(allow), lambda event: None)
        dead = egress.proxy.id
        docker_engine.api.kill(dead)
        _knock_from_outside(docker_engine, egress.network, address)  # no new proxy yet

        code = CLIENT + "print(get('http://allowed.test:8080/next'))\n" + _knock(address)
        assert create("next", code=code, network=allow, timeout=180).execute({}).stdout == "200\n"
        error = run.end()
    finally:
        run.stop()
    assert isinstance(error, NonZeroExit), error
    assert error.exit_code == 1, error  # its own failure: not removed with its network
    assert "\n" not in str(error)
    assert str(error).endswith(
        "the network allow-list's proxy stopped during the run, so its requests failed:"
        " run it again (a new proxy serves the next run)"
    ), error
    again = _egress.ensure(docker_engine, allow_list(allow), lambda event: None)
    assert again.network == egress.network and again.proxy.id != dead
    assert _lines(world["a"]).count("http 8080 /next") == 1


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
        ("0x7f000001", "is the IP address 127.0.0.1 written another way: write 127.0.0.1"),
        ("0xa.0xe7.3.2:8080", "is the IP address 10.231.3.2 written another way"),
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


def test_a_session_reaches_the_listed_host_and_is_refused_another_across_cells(
    world, tmp_path, monkeypatch
):
    """A session's network is the one-shot run's allow-list, by the same plan: its proxy and
    internal network, across cells of one container."""
    from jupyter_sandbox.sandbox import _kept, _session
    from jupyter_sandbox.sandbox._session import create_session

    monkeypatch.setenv(_kept.SESSION_DIR_ENV, str(tmp_path / "sessions"))
    try:
        with create_session("listed", network=["allowed.test:8080"], timeout=120) as session:
            session.run(CLIENT)
            assert session.run("get('http://allowed.test:8080/session-first')") == 200
            assert session.run("get('http://other.test:8080/session-other')") == 403
            assert session.run("get('http://allowed.test:8081/session-port')") == 403
            again, around = session.run(
                "get('http://allowed.test:8080/session-again'), connect('10.231.1.2', 8080)"
            )
            assert again == 200
            assert around != "connected"  # no route: the proxy is the only way out
            assert session.spec.reach == "allowed.test:8080"
    finally:
        _session.close_sessions(kept=True)
    arrived = _lines(world["a"])
    assert "http 8080 /session-first" in arrived and "http 8080 /session-again" in arrived
    assert not [line for line in arrived if "session-port" in line]
    assert not [line for line in _lines(world["b"]) if "session" in line]


def test_a_session_cell_with_allow_net_reaches_only_its_host(
    world, shell, docker_engine, tmp_path, monkeypatch, capsys
):
    """``%%sandbox --session NAME --allow-net HOST``: the cell's allow-list, kept by the
    session, and the cell's record lists what that cell sent out (not an earlier cell's); a
    later cell asking for another list is refused in one line. A session started after its
    proxy was killed joins the route again, as a run does: a new proxy serves it."""
    from IPython.core.error import UsageError

    from jupyter_sandbox.sandbox import _egress, _kept, _session
    from jupyter_sandbox.sandbox._allowlist import allow_list

    allow = allow_list(["allowed.test:8080"])

    monkeypatch.setenv(_kept.SESSION_DIR_ENV, str(tmp_path / "sessions"))
    try:
        shell.run_cell_magic(
            "sandbox",
            "--session listed_cell --allow-net allowed.test:8080",
            CLIENT + "get('http://allowed.test:8080/cell-one')",
        )
        capsys.readouterr()
        shell.run_cell_magic(
            "sandbox",
            "--session listed_cell --allow-net allowed.test:8080 --out a --out b",
            "a = get('http://allowed.test:8080/cell-two')\nb = get('http://other.test:8080/')",
        )
        assert (shell.user_ns["a"], shell.user_ns["b"]) == (200, 403)
        shown = capsys.readouterr().out  # the record's text fallback
        assert "2 requests: 1 allowed, 1 refused: other.test:8080 not on the list" in shown
        with pytest.raises(UsageError, match=r"network 'other\.test:8080'"):
            shell.run_cell_magic(
                "sandbox", "--session listed_cell --allow-net other.test:8080", "pass"
            )
        shell.run_line_magic("sandbox_stop", "listed_cell")
        (egress,) = [e for e in _egress._egresses.values() if e.destinations == allow]
        docker_engine.api.kill(egress.proxy.id)
        shell.run_cell_magic(
            "sandbox",
            "--session listed_cell --allow-net allowed.test:8080 --out a",
            CLIENT + "a = get('http://allowed.test:8080/cell-three')",
        )
        assert shell.user_ns["a"] == 200
    finally:
        _session.close_sessions(kept=True)
    assert "http 8080 /cell-two" in _lines(world["a"])
    assert "http 8080 /cell-three" in _lines(world["a"])
