"""Pure parts of the Docker engine: codec, types, spec normalisation and hash, create() checks.

No Docker needed: these run everywhere and fast.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest

from jupyter_sandbox import (
    Dir,
    File,
    InvalidPackageError,
    Resources,
    SandboxConfigError,
    create,
)
from jupyter_sandbox.sandbox import ImageSpec, _codec, _hostcfg
from jupyter_sandbox.sandbox._spec import parse_size
from jupyter_sandbox.sandbox._types import infer_tag, type_tag

NASTY = "a'b\"c\n$(rm -rf /); `id` && echo pwned | cat ; \\ \t é 🐍 \x00 %s {x}"
VALUES = [
    ("int", 0),
    ("int", -(10**30)),
    ("float", 0.1),
    ("float", -1e300),
    ("float", math.inf),
    ("bool", True),
    ("bool", False),
    ("str", ""),
    ("str", NASTY),
    ("str", "  padded\n\n"),
    ("bytes", bytes(range(256))),
    ("none", None),
    ("datetime", dt.datetime(2024, 1, 2, 3, 4, 5, 678901)),
    ("datetime", dt.datetime(2024, 1, 2, 3, 4, tzinfo=dt.timezone(dt.timedelta(hours=-5)))),
    ("date", dt.date(1999, 12, 31)),
    ("timedelta", dt.timedelta(days=-3, microseconds=7)),
    ("timedelta", dt.timedelta(days=9999, seconds=1, microseconds=999999)),
    ("json", [1, "two", None, {"three": [3.5, True]}]),
    ("json", {"k": NASTY, "nested": {"a": []}}),
]


@pytest.mark.parametrize(("tag", "value"), VALUES)
def test_codec_round_trips_exactly(tag, value):
    decoded = _codec.decode(tag, _codec.encode(tag, value))
    assert decoded == value
    assert type(decoded) is type(value)


@pytest.mark.parametrize(("tag", "value"), VALUES)
def test_inferred_tag_matches(tag, value):
    assert infer_tag(value) == tag


def test_codec_writes_natural_text_for_scripts():
    assert _codec.encode("int", 42) == b"42"
    assert _codec.encode("bool", True) == b"true"
    assert _codec.encode("date", dt.date(2024, 1, 2)) == b"2024-01-02"
    assert _codec.decode("int", b"42\n") == 42  # what `echo 42 > /var/outputs/n` writes
    assert _codec.decode("str", b"3\n") == "3\n"  # strings are never trimmed


@pytest.mark.parametrize(
    ("tag", "value"),
    [
        ("int", True),
        ("int", "1"),
        ("json", (1, 2)),
        ("json", {1: "a"}),
        ("date", dt.datetime.now()),
    ],
)
def test_codec_refuses_what_would_not_round_trip(tag, value):
    with pytest.raises(TypeError):
        _codec.encode(tag, value)


@pytest.mark.parametrize(("tag", "data"), [("int", b"4x"), ("bool", b"maybe"), ("json", b"{")])
def test_codec_rejects_unparsable_files(tag, data):
    with pytest.raises(ValueError):  # noqa: PT011 (json, int and bool raise different subclasses)
        _codec.decode(tag, data)


@pytest.mark.parametrize(
    ("declared", "tag"),
    [
        (int, "int"),
        ("int", "int"),
        (" Float ", "float"),
        (None, "none"),
        (type(None), "none"),
        (dt.datetime, "datetime"),
        ("datetime.datetime", "datetime"),
        (list, "json"),
        ("dict", "json"),
        (File, "file"),
        ("File", "file"),
        (Dir, "dir"),
    ],
)
def test_type_declarations(declared, tag):
    assert type_tag(declared) == tag


@pytest.mark.parametrize("declared", [complex, set, "decimal", object, "pickle"])
def test_unsupported_types_fail(declared):
    with pytest.raises(SandboxConfigError, match="unsupported type"):
        type_tag(declared)


def test_spec_hash_ignores_package_order_case_and_spelling():
    a = ImageSpec.normalise(
        "base", packages=["Requests>=2", "six", "zope.interface"], system_packages=["jq", "curl"]
    )
    b = ImageSpec.normalise(
        "base",
        packages=["zope_interface", "six", "requests >= 2", "six"],
        system_packages=["curl", "jq"],
    )
    assert a == b
    assert a.tag("sha256:1") == b.tag("sha256:1")


def test_spec_hash_changes_with_what_shapes_the_image():
    base = ImageSpec.normalise("base", packages=["six"])
    assert base.tag("sha256:1") != base.tag("sha256:2")  # rebuilt base
    assert base.tag("x") != ImageSpec.normalise("base", packages=["six==1.16"]).tag("x")
    jq = ImageSpec.normalise("base", packages=["six"], system_packages=["jq"])
    assert base.tag("x") != jq.tag("x")
    true = ImageSpec.normalise("base", packages=["six"], commands=["true"])
    assert base.tag("x") != true.tag("x")


def test_no_packages_means_no_build():
    assert not ImageSpec.normalise("base").needs_build


def test_dockerfile_keeps_host_settings_out_of_the_image_env():
    text = ImageSpec.normalise("base", packages=["six"]).dockerfile(
        with_ca=True, build_args=["UV_INDEX_URL"]
    )
    assert "ENV" not in text  # build ARGs only: gone from the final image's environment
    assert "export SSL_CERT_FILE=" in text
    assert "UV_NATIVE_TLS" not in text  # deprecated: uv warned about it in every build
    assert "ARG UV_INDEX_URL" in text
    assert text.rstrip().endswith("USER 1000:1000")


@pytest.mark.parametrize("bad", ["six; rm -rf /", "$(id)", "a b", "pkg==1 || true", "-e ."])
def test_malformed_pip_package_is_refused_naming_it(bad):
    with pytest.raises(InvalidPackageError) as info:
        create("x", code="", packages=[bad])
    assert info.value.package == bad.strip()


@pytest.mark.parametrize("bad", ["jq;id", "Foo", "curl && id", "../x"])
def test_malformed_apt_package_is_refused_naming_it(bad):
    with pytest.raises(InvalidPackageError) as info:
        create("x", code="", system_packages=[bad])
    assert info.value.package == bad


@pytest.mark.parametrize(
    ("size", "expected"),
    [("1g", 2**30), ("512Mi", 512 * 2**20), ("8Gi", 8 * 2**30), ("100m", 100 * 2**20), (42, 42)],
)
def test_parse_size(size, expected):
    assert parse_size(size) == expected


@pytest.mark.parametrize(("cpu", "expected"), [(2, 2), (0.5, 0.5), ("2", 2.0), ("500m", 0.5)])
def test_cpu_as_number_or_kubernetes_text(cpu, expected):
    assert Resources(cpu=cpu).cpu == expected


def test_resources_as_object_or_dict():
    assert Resources.coerce({"cpu": 2, "memory": "2g"}) == Resources(cpu=2, memory="2g")
    with pytest.raises(SandboxConfigError, match="unknown resources"):
        Resources.coerce({"gpu": 1})
    with pytest.raises(SandboxConfigError, match="bad size"):
        Resources(memory="lots")
    with pytest.raises(SandboxConfigError, match="bad cpu"):
        Resources(cpu="many")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"code": "x", "command": ["true"]}, "mutually exclusive"),
        ({}, "give code= .* or command="),
        ({"code": "x", "arguments": ["a"]}, "arguments= only goes with command="),
        ({"code": "x", "inputs": {"x": complex}}, "unsupported type"),
        ({"code": "x", "outputs": {"y": set}}, "unsupported type"),
        ({"code": "x", "inputs": {"solution.py": File}}, "not a Python variable name"),
        ({"code": "x", "inputs": {"class": int}}, "not a Python variable name"),
        ({"command": ["true"], "inputs": {"../etc": File}}, "bad input name"),
        ({"code": "x", "image": "img", "packages": ["six"]}, "prebuilt"),
        ({"code": "x", "cache": "always"}, "cache must be"),
        ({"code": "x", "network": "host"}, "network must be"),
        ({"code": "x", "retries": -1}, "retries"),
        ({"code": "x", "timeout": 0}, "timeout"),
        ({"code": "x", "env_vars": {"A B": "1"}}, "bad environment variable name"),
        ({"code": "x", "secrets": "TOKEN"}, "list of strings"),
        ({"command": "ls -l"}, "list of strings"),
    ],
)
def test_create_refuses_bad_arguments(kwargs, message):
    with pytest.raises(SandboxConfigError, match=message):
        create("bad", **kwargs)


def test_command_mode_accepts_file_names_with_dots():
    sandbox = create(
        "tests",
        command=["/bin/bash", "-c", "cat $0"],
        arguments=["/var/inputs/solution.py"],
        inputs={"solution.py": File},
        outputs={"exit_code": str},
    )
    assert sandbox.command == ["/bin/bash", "-c", "cat $0", "/var/inputs/solution.py"]


def test_run_checks_inputs_against_the_declaration():
    sandbox = create("s", code="y = x", inputs={"x": int}, outputs={"y": int})
    with pytest.raises(SandboxConfigError, match="missing input"):
        sandbox.run()
    with pytest.raises(SandboxConfigError, match="unexpected input"):
        sandbox.run(x=1, z=2)


def test_index_settings_keep_only_urls_a_container_can_reach(monkeypatch):
    monkeypatch.setenv("PIP_INDEX_URL", "https://pypi.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///opt/pypi/simple https://extra.example/s")
    settings = _hostcfg.index_settings()
    assert settings["UV_INDEX_URL"] == "https://pypi.example/simple"
    assert settings["UV_EXTRA_INDEX_URL"] == "https://extra.example/s"


# --- what an allow-listed run sent out, as its proxy's log lines say ----------------------


def _line(host: str, port: str, url: str, *, method: str = "GET", denied: bool = False) -> str:
    from jupyter_sandbox.sandbox._requests import TAG

    result = "TCP_DENIED 403 150 400 ERR_ACCESS_DENIED" if denied else "TCP_MISS 200 150 900 -"
    return f"{TAG} 1790000000.125 172.19.0.3 {method} http {host} {port} {result} {url}"


def test_request_lines_are_parsed_strictly_and_masked():
    from jupyter_sandbox.sandbox._allowlist import allow_list
    from jupyter_sandbox.sandbox._requests import parse

    secret = "s3cr3t-token"
    logs = "\n".join(
        [
            "1790000000.1 0 172.19.0.3 TCP_DENIED/403 0 GET http://x/ - HIER_NONE/- text/html",
            _line("api.test", "443", f"http://api.test:443/v1/{secret}/items?key={secret}"),
            _line(f"{secret}.evil.test", "80", "http://x/", denied=True),
            _line("api.test", "8443", "http://api.test:8443/", denied=True),
            _line("api.test", "443", "http://api.test/ extra words"),  # not our format
            _line("[2001:db8::5]", "443", "[2001:db8::5]:443", method="CONNECT", denied=True),
            "jsbx-request not a number at all",
        ]
    )
    rows = parse(logs, allow_list(["api.test:443", "2001:db8::/64"]), (secret,))
    assert [(r.host, r.port, r.path, r.allowed, r.why) for r in rows] == [
        ("api.test", 443, "/v1/***/items?***", True, None),
        ("***.evil.test", 80, "/", False, "not on the list"),
        ("api.test", 8443, "/", False, "port not on the list"),
        ("2001:db8::5", 443, "", False, "an address no sandbox may reach"),
    ]
    assert rows[3].target == "[2001:db8::5]:443"
    assert all(secret not in repr(r) for r in rows)


def test_a_run_keeps_its_first_requests_and_counts_the_rest():
    from jupyter_sandbox.display._format import requests_line
    from jupyter_sandbox.sandbox._allowlist import allow_list
    from jupyter_sandbox.sandbox._requests import REQUESTS_KEPT, RequestLog, parse

    many = [_line("api.test", "443", f"http://api.test/{n}") for n in range(REQUESTS_KEPT + 5)]
    refused = [_line(f"h{n}.test", "443", "h:443", method="CONNECT", denied=True) for n in range(4)]
    log = RequestLog()
    log.add(parse("\n".join(many + refused), allow_list(["api.test:443"])))
    record = log.to_record()
    assert len(record["rows"]) == REQUESTS_KEPT
    assert (record["total"], record["allowed"], record["refused"]) == (REQUESTS_KEPT + 9, 205, 4)
    assert list(record["refusals"]) == [f"h{n}.test:443" for n in range(4)]  # kept past the rows
    assert requests_line(record) == (
        "209 requests: 205 allowed, 4 refused: h0.test:443 not on the list,"
        " h1.test:443 not on the list, h2.test:443 not on the list, ..."
    )
