"""A sandbox behind a network whose HTTPS it does not trust (`create(ca_bundle=...)`,
``--ca-bundle``, ``%config SandboxMagics.ca_bundle``).

The network's CA is one the test makes (`cryptography`), and so is the server: an HTTPS server
of the test's own, on the host's end of Docker's bridge, serving a greeting and a package index
with one wheel (made here, under a name no index has). Containers reach it over the bridge:
no packet leaves the machine. First without a bundle: the run and the build fail and their
errors say that the container does not trust the network's CA and how to pass one; then with
the test's CA as the bundle, the same request succeeds and the package installs.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import http.server
import io
import ipaddress
import ssl
import threading
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from IPython.core.error import UsageError

from jupyter_sandbox import ImageBuildError, SandboxConfigError, create
from jupyter_sandbox.errors import NonZeroExit
from jupyter_sandbox.magics._common import format_error
from jupyter_sandbox.sandbox import ImageSpec, default_base_image

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leaked_containers")]

GREETING = b"hello over tls"
FETCH = """
import os, urllib.request
with urllib.request.urlopen(os.environ["URL"], timeout=20) as r:
    body = r.read().decode()
"""


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _certificates(address: str, folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for ``address`` signed by it: the CA's PEM, the
    server's certificate chain and its key, as files."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("jupyter-sandbox test CA"))
        .issuer_name(_name("jupyter-sandbox test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(_name(address))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    ca_file, chain, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_file.write_bytes(ca.public_bytes(pem))
    chain.write_bytes(server.public_bytes(pem) + ca.public_bytes(pem))
    key_file.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return ca_file, chain, key_file


def _wheel(project: str) -> tuple[str, bytes]:
    """A pure-Python wheel of ``project`` whose module says it was installed: its file name
    and bytes."""
    module = project.replace("-", "_")
    info = f"{module}-1.0.dist-info"
    files = {
        f"{module}.py": b"INSTALLED = 'from the test index'\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {project}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{module}-1.0-py3-none-any.whl", out.getvalue()


class TLSServer:
    """HTTPS on the bridge's host address: ``/`` greets, ``/simple/`` is a package index of
    one wheel; every path asked for is kept in ``paths``."""

    def __init__(self, address: str, folder: Path) -> None:
        self.ca, chain, key = _certificates(address, folder)
        self.project = f"jsbx-ca-probe-{uuid.uuid4().hex[:8]}"
        wheel_name, wheel = _wheel(self.project)
        self.paths: list[str] = []
        pages = {
            "/": GREETING,
            f"/simple/{self.project}/": f'<a href="/files/{wheel_name}">{wheel_name}</a>'.encode(),
            f"/files/{wheel_name}": wheel,
        }
        paths = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self, head: bool = False) -> None:
                paths.append(self.path)
                body = pages.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                kind = "text/html" if self.path.startswith("/simple/") else "text/plain"
                self.send_header("Content-Type", kind)
                self.end_headers()
                if not head:
                    self.wfile.write(body or b"")

            def do_HEAD(self) -> None:  # uv asks before it downloads a wheel
                self.do_GET(head=True)

            def log_message(self, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(chain, key)
        self.server = http.server.ThreadingHTTPServer((address, 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://{address}:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def tls(docker_engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSServer]:
    bridge = docker_engine.api.inspect_network("bridge")
    gateway = bridge["IPAM"]["Config"][0].get("Gateway") or "172.17.0.1"
    server = TLSServer(gateway, tmp_path_factory.mktemp("tls"))
    try:
        yield server
    finally:
        server.close()


def test_an_untrusted_https_server_is_advice_and_the_bundle_makes_it_trusted(tls):
    env = {"URL": tls.url}
    untrusted = create("fetch", code=FETCH, outputs=["body"], network="bridge", env_vars=env)
    with pytest.raises(NonZeroExit) as caught:
        untrusted.run()
    error = caught.value
    assert "CERTIFICATE_VERIFY_FAILED" in error.stderr_tail
    assert "the code does not trust the network's CA" in str(error)
    assert error.parameter == "ca_bundle" and error.hint == "ca_bundle=PATH"
    assert tls.paths == []  # the handshake failed: no request was made

    trusted = create(
        "fetch", code=FETCH, outputs=["body"], network="bridge", env_vars=env, ca_bundle=tls.ca
    )
    assert trusted.run() == GREETING.decode()
    assert tls.paths == ["/"]


def test_a_cell_says_the_option_and_the_config_setting(tls, shell, capsys):
    cell = f"%%sandbox --network bridge --env URL={tls.url} --out body\n{FETCH}"
    result = shell.run_cell(cell)
    assert isinstance(result.error_in_exec, NonZeroExit)
    shown = capsys.readouterr()
    said = format_error(result.error_in_exec)
    assert "the code does not trust the network's CA" in said, said
    assert "--ca-bundle PATH (or %config SandboxMagics.ca_bundle)" in said
    assert "ca_bundle=PATH" not in said
    assert "CERTIFICATE_VERIFY_FAILED" in shown.err  # the code's own traceback streamed

    shell.run_line_magic("config", f"SandboxMagics.ca_bundle = {str(tls.ca)!r}")
    try:
        result = shell.run_cell(cell)
        assert result.error_in_exec is None, result.error_in_exec
        assert shell.user_ns["body"] == GREETING.decode()
    finally:
        shell.run_line_magic("config", "SandboxMagics.ca_bundle = ''")
    shell.user_ns.pop("body")
    options = f"--network bridge --env URL={tls.url} --ca-bundle {tls.ca} --out body"
    result = shell.run_cell(f"%%sandbox {options}\n{FETCH}")
    assert result.error_in_exec is None, result.error_in_exec
    assert shell.user_ns["body"] == GREETING.decode()


def test_a_build_from_an_untrusted_index_says_how_to_pass_its_ca(
    tls, docker_engine, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("PIP_INDEX_URL", tls.url + "simple/")
    monkeypatch.setenv("UV_INDEX_URL", tls.url + "simple/")
    module = tls.project.replace("-", "_")
    code = f"import {module}\nfound = {module}.INSTALLED"
    spec = ImageSpec.normalise(default_base_image(), packages=[tls.project])
    tag = spec.tag(docker_engine.images.get(spec.base).id)
    try:
        with pytest.raises(ImageBuildError) as caught:
            create("probe", code=code, packages=[tls.project], outputs=["found"]).run()
        error = caught.value
        assert "the build does not trust the network's CA" in str(error), str(error)
        assert error.parameter == "ca_bundle" and error.hint in str(error)
        assert [p for p in tls.paths if p.startswith("/simple/")] == []

        box = create(
            "probe", code=code, packages=[tls.project], outputs=["found"], ca_bundle=tls.ca
        )
        assert box.run() == "from the test index"
        assert f"/simple/{tls.project}/" in tls.paths
    finally:
        with contextlib.suppress(docker.errors.ImageNotFound):
            docker_engine.images.remove(tag, force=True)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: d / "missing.pem", "does not exist: give a PEM file of CA certificates"),
        (lambda d: d, "is not a regular file"),
        (lambda d: _write(d / "key.pem", b"-----BEGIN PRIVATE KEY-----\n"), "holds no PEM"),
        (
            lambda d: _write(d / "big.pem", b"-----BEGIN CERTIFICATE-----\n" + b"A" * 2**23),
            "more than a CA bundle",
        ),
    ],
)
def test_a_bad_bundle_is_one_line_before_anything_runs(tmp_path, shell, caplog, make, says):
    path = make(tmp_path)
    with pytest.raises(SandboxConfigError) as caught:
        create("x", code="pass", ca_bundle=path)
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"ca_bundle {str(path)!r}")
    result = shell.run_cell(f"%%sandbox --ca-bundle {path}\npass")
    assert isinstance(result.error_in_exec, UsageError)
    assert str(result.error_in_exec).startswith(f"--ca-bundle {str(path)!r}")
    with caplog.at_level("ERROR"):
        shell.run_line_magic("config", f"SandboxMagics.ca_bundle = {str(path)!r}")
    assert says in caplog.text
    assert shell.magics_manager.registry["SandboxMagics"].ca_bundle == ""  # unchanged
    shell.config.SandboxMagics.pop("ca_bundle")  # what IPython kept of the refused value


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
