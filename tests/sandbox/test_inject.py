"""Secrets the allow-list's proxy adds to requests: the sandbox's code holds a placeholder, the
secret's host receives the secret in exactly the requests made to it, and nothing the code can
read or ask holds it.

The servers are the test's own, in network namespaces (`test_allownet.Namespaces`): the
secret's host and an allowed host that echoes the headers it was sent, both logging each
request's ``Authorization``; the proxy resolves their names through the test's resolver.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _namespaces import CLIENT, TEST_CA, Namespaces, _certificates

from jupyter_sandbox import SandboxConfigError, Secret, create, orchestrate, tool
from jupyter_sandbox.sandbox import _egress, _inject
from jupyter_sandbox.sandbox._inject import CA_NAME

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

NET = "10.232"
ALLOW = [
    "secret.test:8080",
    "secret.test:8443",
    "echo.test:8080",
    "echo.test:8443",
    "refused-here.test:9",
]
NAME = "JSBX_TEST_INJECTED_KEY"
PREFIX = "jsbxsecret-"
"""Every test secret starts so: the sandbox looks for it there and compares digests, never
being told the secret itself (its output would be masked, hiding a leak from the test)."""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("these tests make network namespaces: run them as root with iproute2")
    spaces = Namespaces(tmp_path_factory.mktemp("netns-secrets"))
    patch = pytest.MonkeyPatch()
    try:
        ca = _certificates(spaces.tmp)
        patch.setenv("JSBX_TLS_CERT", str(spaces.tmp / "server.pem"))
        patch.setenv("JSBX_TLS_KEY", str(spaces.tmp / "server.key"))
        logs = {
            "secret": spaces.add(5, "headers", "8080", "TLS:8443", net=NET),
            "echo": spaces.add(6, "headers", "8080", "TLS:8443", net=NET),
            "dns": spaces.add(7, "dns", f"secret.test={NET}.5.2", f"echo.test={NET}.6.2", net=NET),
        }
        patch.setenv("JUPYTER_SANDBOX_EGRESS_DNS", f"{NET}.7.2")
        patch.setenv("JUPYTER_SANDBOX_EGRESS_CA", str(ca))  # the proxy trusts the servers
        yield {**logs, "ca": ca}
    finally:
        patch.undo()
        _egress.close_all()
        spaces.close()


@pytest.fixture(autouse=True)
def fresh_logs(request: pytest.FixtureRequest) -> None:
    """Each test reads only its own requests (the servers append to their logs per request)."""
    if "hosts" in request.fixturenames:
        for name, log in request.getfixturevalue("hosts").items():
            if name != "ca":
                log.write_text("")


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh secret in the host's environment, with a ``%`` (a format character to Squid)."""
    value = f"{PREFIX}{secrets.token_hex(12)}%41"
    monkeypatch.setenv(NAME, value)
    return value


THIEF = (
    CLIENT
    + """
import hashlib, os, stat

DIGEST, LENGTH, PREFIX, NAME = digest, int(length), prefix, name
found = []

keys = set()

def holds(where, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    for block in data.split(b"-----BEGIN PRIVATE KEY-----")[1:]:
        keys.add(hashlib.sha256(block.split(b"-----END")[0].strip()).hexdigest())
    start = data.find(PREFIX.encode())
    while start != -1:
        if hashlib.sha256(data[start : start + LENGTH]).hexdigest() == DIGEST:
            found.append(where)
            return
        start = data.find(PREFIX.encode(), start + 1)

def body(url, headers=None):
    import urllib.request, urllib.error
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        return e.read()
    except Exception as e:
        return repr(e).encode()

placeholder = os.environ[NAME]
bearer = {"Authorization": "Bearer " + placeholder}
holds("environment", "\\n".join(f"{k}={v}" for k, v in os.environ.items()))
for root, dirs, files in os.walk("/"):
    if root in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for f in files:
        path = os.path.join(root, f)
        try:
            if stat.S_ISREG(os.lstat(path).st_mode):
                with open(path, "rb") as fh:
                    holds(path, fh.read(8 << 20))
        except OSError:
            pass
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["self"]:
    for part in ("environ", "cmdline", "status", "mountinfo"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as fh:
                holds(f"/proc/{pid}/{part}", fh.read())
        except OSError:
            pass
proxy = os.environ["HTTP_PROXY"].rsplit("/", 1)[-1]
sent = {
    "with_placeholder": body("http://secret.test:8080/with-placeholder", bearer),
    "without_header": body("http://secret.test:8080/without-header"),
    "echo_with_placeholder": body("http://echo.test:8080/echo", bearer),
    "redirect_away": body("http://secret.test:8080/redirect?to=http://echo.test:8080/echo", bearer),
    "refused_host": body("http://refused-here.test:9/", bearer),
    "cache_manager": body(f"http://{proxy}/squid-internal-mgr/config"),
    "cache_object": raw_request(f"GET cache_object://{proxy.split(':')[0]}/config HTTP/1.0"),
    "proxy_itself": body(f"http://{proxy}/"),
    "tls_with_placeholder": body("https://secret.test:8443/with-placeholder", bearer),
    "tls_echo": body("https://echo.test:8443/echo", bearer),
}

def issuer(host):
    import http.client, ssl
    host_, port = proxy.split(":")
    conn = http.client.HTTPSConnection(host_, int(port), context=ssl.create_default_context())
    conn.set_tunnel(host, 8443)
    conn.connect()
    name = dict(p[0] for p in conn.sock.getpeercert()["issuer"])["commonName"]
    conn.request("GET", "/issuer")
    conn.getresponse().read()
    conn.close()
    return name
issuers = {host: issuer(host) for host in ("secret.test", "echo.test")}
for where, data in sent.items():
    holds(where, data)
echo = sent["redirect_away"].decode("utf-8", "replace")
tls_echo = sent["tls_echo"].decode("utf-8", "replace")
print(json.dumps({"found": found, "placeholder": placeholder, "echo": echo, "tls_echo": tls_echo,
                  "issuers": issuers, "keys": sorted(keys)}))
"""
)
"""The sandbox's side: everything it can read or ask, searched for the secret."""


def _requests(log: Path) -> list[str]:
    return log.read_text().splitlines()


def _steal(secret: str, given: list[str | Secret], ca: Path) -> dict[str, Any]:
    """What `THIEF` found, run with the secret ``given`` so (trusting the servers' ``ca``)."""
    sandbox = create(
        "thief",
        code=THIEF,
        inputs={"digest": str, "length": str, "prefix": str, "name": str},
        network=ALLOW,
        secrets=given,
        timeout=240,
        ca_bundle=ca,
    )
    run = sandbox.execute(
        {
            "digest": hashlib.sha256(secret.encode()).hexdigest(),
            "length": str(len(secret)),
            "prefix": PREFIX,
            "name": NAME,
        }
    )
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_search_finds_a_secret_given_as_a_plain_name(hosts, secret):
    found = _steal(secret, [NAME], hosts["ca"])["found"]
    assert {"environment", "/proc/self/environ"} <= set(found), found


def test_the_secrets_host_receives_it_and_nothing_the_code_reaches_holds_it(hosts, secret):
    seen = _steal(secret, [Secret(NAME, hosts=["secret.test"])], hosts["ca"])
    assert seen["found"] == [], seen
    placeholder = seen["placeholder"]
    assert placeholder.startswith("jsbx-placeholder-") and secret not in placeholder
    assert _requests(hosts["secret"]) == [
        f"http 8080 /with-placeholder Bearer {secret}",
        f"http 8080 /without-header Bearer {secret}",
        f"http 8080 /redirect?to=http://echo.test:8080/echo Bearer {secret}",
        f"http 8443 /with-placeholder Bearer {secret}",  # HTTPS: intercepted for its host
        f"http 8443 /issuer Bearer {secret}",
    ]
    assert _requests(hosts["echo"]) == [
        f"http 8080 /echo Bearer {placeholder}",
        f"http 8080 /echo Bearer {placeholder}",  # the redirect: what the code sent, no more
        f"http 8443 /echo Bearer {placeholder}",
        "http 8443 /issuer -",
    ]
    # the secret's host is shown the kernel's CA's certificate; any other, its own end to end
    assert seen["issuers"] == {"secret.test": CA_NAME, "echo.test": TEST_CA}
    assert f"Bearer {placeholder}" in seen["tls_echo"]
    assert _inject._ca is not None
    key = _inject._ca.key_file
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert oct(key.parent.stat().st_mode & 0o777) == "0o700"
    body = key.read_bytes().split(b"-----BEGIN PRIVATE KEY-----")[1].split(b"-----END")[0]
    assert hashlib.sha256(body.strip()).hexdigest() not in seen["keys"]
    assert f"Bearer {placeholder}" in seen["echo"]  # the echo answered what it was sent
    proxies = [e for e in _egress._egresses.values() if e.injection is not None]
    assert proxies, "the run's egress adds the secret"
    for egress in proxies:  # its log, as the engine keeps it: no header, no secret
        assert secret not in egress.proxy.logs().decode("utf-8", "replace")


def test_runs_without_the_secret_share_no_proxy_with_runs_that_add_it(hosts, secret):
    code = (
        "import urllib.request\nurllib.request.urlopen('http://secret.test:8080/plain', timeout=20)"
    )
    create("plain", code=code, network=ALLOW).execute({})
    assert _requests(hosts["secret"])[-1] == "http 8080 /plain -"
    added = create("added", code=code, network=ALLOW, secrets=[Secret(NAME, hosts=["secret.test"])])
    added.execute({})
    assert _requests(hosts["secret"])[-1] == f"http 8080 /plain Bearer {secret}"


def test_a_sandbox_tool_fanned_out_in_orchestrate_sends_the_secret_from_every_run(hosts, secret):
    fetch = create(
        "fetch",
        code="import os, urllib.request\n"
        "urllib.request.urlopen(f'http://secret.test:8080/fan{x}', timeout=20)\n"
        f"y = os.environ[{NAME!r}].startswith('jsbx-placeholder-')",
        inputs={"x": int},
        outputs={"y": bool},
        network=ALLOW,
        secrets=[Secret(NAME, hosts=["secret.test"])],
    )
    code = "import asyncio\nawait asyncio.gather(*[fetch(i) for i in range(3)])"
    result = orchestrate(code, tools=[tool(fetch, name="fetch", concurrency=3)])
    assert result.value == [True, True, True]
    assert sorted(_requests(hosts["secret"])) == [
        f"http 8080 /fan{i} Bearer {secret}" for i in range(3)
    ]


def test_the_magics_secret_for_sends_the_secret_to_its_host_only(hosts, secret, shell):
    result = shell.run_cell(
        "%%sandbox --allow-net secret.test:8080 echo.test:8080"
        f" --secret-for secret.test:{NAME}\n"
        "import os, urllib.request\n"
        "for url in ('http://secret.test:8080/magic', 'http://echo.test:8080/magic'):\n"
        "    urllib.request.urlopen(url, timeout=20)\n"
        f"print(os.environ[{NAME!r}].startswith('jsbx-placeholder-'))"
    )
    assert result.error_in_exec is None, result.error_in_exec
    assert _requests(hosts["secret"])[-1] == f"http 8080 /magic Bearer {secret}"
    assert _requests(hosts["echo"])[-1] == "http 8080 /magic -"


def test_a_secret_for_hosts_is_refused_where_no_proxy_can_add_it(monkeypatch, shell):
    injected = [Secret(NAME, hosts=["api.example.com"])]
    with pytest.raises(SandboxConfigError, match="list its hosts in network"):
        create("x", code="pass", secrets=injected)
    with pytest.raises(SandboxConfigError, match="not on the network allow-list: add"):
        create("x", code="pass", network=["other.example.com"], secrets=injected)
    with pytest.raises(SandboxConfigError, match="needs isolation 'container'"):
        create("x", code="pass", network=["api.example.com"], secrets=injected, isolation="gvisor")
    with pytest.raises(SandboxConfigError, match="drop cluster"):
        create(
            "x",
            code="pass",
            network=["api.example.com"],
            secrets=injected,
            cluster="tcp://127.0.0.1:8786",
        )
    with pytest.raises(SandboxConfigError, match="format must hold one"):
        create(
            "x",
            code="pass",
            network=["api.example.com"],
            secrets=[Secret(NAME, hosts=["api.example.com"], format="Bearer")],
        )
    with pytest.raises(SandboxConfigError, match="bad header name"):
        create(
            "x",
            code="pass",
            network=["api.example.com"],
            secrets=[Secret(NAME, hosts=["api.example.com"], header="X: y")],
        )
    with pytest.raises(SandboxConfigError, match="as_env_var renames a placeholder"):
        create("x", code="pass", secrets=[Secret(NAME, as_env_var="OTHER")])
    one = create(
        "x",
        code="pass",
        network=["api.example.com"],
        secrets=[Secret(NAME, hosts="api.example.com")],
    )
    assert one.injected[0].hosts == ("api.example.com",)
    assert create("x", code="pass", secrets=[Secret(NAME)]).secrets == (NAME,)
    sandbox = create("x", code="pass", network=["api.example.com"], secrets=injected)
    monkeypatch.delenv(NAME, raising=False)
    with pytest.raises(SandboxConfigError, match=f"secret '{NAME}' is not set"):
        sandbox.check({})
    monkeypatch.setenv(NAME, 'two\nlines "quoted"')
    with pytest.raises(SandboxConfigError, match="printable ASCII on one line") as caught:
        sandbox.check({})
    assert "quoted" not in str(caught.value)
    result = shell.run_cell(f"%%sandbox --secret-for {NAME}\npass")
    assert "--secret-for takes HOST:NAME" in str(result.error_in_exec)
    result = shell.run_cell(f"%%sandbox --secret-for api.example.com:{NAME}\npass")
    assert "list its hosts in network" in str(result.error_in_exec)


def test_rootless_podman_refuses_a_secret_for_hosts_in_one_line(on_podman, monkeypatch):
    """Podman cannot keep the host off the proxy's network: refused before a CA or a proxy
    is made on it."""
    monkeypatch.setenv(NAME, f"{PREFIX}podman")
    sandbox = create(
        "x",
        code="pass",
        network=["api.example.com"],
        secrets=[Secret(NAME, hosts=["api.example.com"])],
    )
    with pytest.raises(SandboxConfigError, match="needs Docker: Podman at unix://") as raised:
        sandbox.execute({})
    assert "\n" not in str(raised.value)
