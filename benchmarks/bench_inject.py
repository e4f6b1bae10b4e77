"""What a secret the proxy adds costs: HTTPS through the intercepting proxy against the same
request through a plain ``CONNECT`` tunnel, and a warm run with an injected secret against one
without.

    .venv/bin/python benchmarks/bench_inject.py [--rounds N] [--requests N] [--pause S]

The servers are the benchmark's own, as the tests' are (root: network namespaces, a resolver
and a TLS server with a certificate made for two fake names, from
`tests/helpers/_namespaces.py`). One name carries a `Secret` (its tunnels bumped by Squid's
``ssl-bump``), the other does not (spliced end to end): the same server, the same run, each
request a new connection (``urllib``, as most clients), timed inside the sandbox; the medians
of each round's medians. The warm rows time a whole ``create().run()`` of ``y = x * 2`` on that
allow-list, with and without the secret (its placeholder, its proxy of its own and the CA
bundle staged beside the program). Rows take turns each round. A script, not a test: numbers
depend on the machine."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "helpers"))

from _namespaces import Namespaces, _certificates
from _timing import measure_prepared, print_table
from bench_isolation import warm

from jupyter_sandbox import Sandbox, Secret, create
from jupyter_sandbox.sandbox import _egress
from jupyter_sandbox.sandbox._pool import settle

NET = "10.233"
ALLOW = ["api.bench:8443", "plain.bench:8443"]
NAME = "JSBX_BENCH_KEY"
REQUESTS = """
import json, statistics, time, urllib.request
def timed(url):
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        urllib.request.urlopen(url, timeout=20).read()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)
timed("https://api.bench:8443/warm"); timed("https://plain.bench:8443/warm")
print(json.dumps({"spliced": timed("https://plain.bench:8443/x"),
                  "bumped": timed("https://api.bench:8443/x")}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=20, help="requests per host per round")
    parser.add_argument("--pause", type=float, default=1.0, help="seconds between warm runs")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("the benchmark makes network namespaces: run it as root")
    spaces = Namespaces(Path(tempfile.mkdtemp(prefix="bench-inject-")))
    try:
        ca = _certificates(spaces.tmp, names=("api.bench", "plain.bench"))
        os.environ["JSBX_TLS_CERT"] = str(spaces.tmp / "server.pem")
        os.environ["JSBX_TLS_KEY"] = str(spaces.tmp / "server.key")
        spaces.add(8, "headers", "TLS:8443", net=NET)
        records = [f"api.bench={NET}.8.2", f"plain.bench={NET}.8.2"]
        spaces.add(9, "dns", *records, net=NET)
        os.environ["JUPYTER_SANDBOX_EGRESS_DNS"] = f"{NET}.9.2"
        os.environ["JUPYTER_SANDBOX_EGRESS_CA"] = str(ca)
        os.environ[NAME] = "bench-secret"
        run(args, ca)
    finally:
        settle()
        _egress.close_all()
        spaces.close()


def run(args: argparse.Namespace, ca: Path) -> None:
    secret = [Secret(NAME, hosts=["api.bench"])]
    requests = create(
        "bench-requests",
        code=REQUESTS,
        inputs={"count": int},
        network=ALLOW,
        secrets=secret,
        ca_bundle=ca,
        timeout=900,
    )
    spliced, bumped = [], []
    for _ in range(args.rounds):
        seen = json.loads(requests.execute({"count": args.requests}).stdout.splitlines()[-1])
        spliced.append(seen["spliced"])
        bumped.append(seen["bumped"])
    print(f"median of {args.rounds} rounds of {args.requests} HTTPS requests per host")
    print_table(
        "one HTTPS request, a new connection each (ratio against the spliced tunnel)",
        [
            ("CONNECT, spliced (no secret for the host)", statistics.median(spliced)),
            ("CONNECT, bumped (the proxy adds the secret)", statistics.median(bumped)),
        ],
        unit="ms",
    )
    timeouts = itertools.count(3000)

    def sandbox(name: str, given: list[str | Secret]) -> Sandbox:
        return create(
            name,
            code="y = x * 2",
            inputs={"x": int},
            outputs={"y": int},
            network=ALLOW,
            secrets=given,
            ca_bundle=ca,
            timeout=next(timeouts),  # spares of its own (`warm`)
        )

    plain, injected = sandbox("bench-plain", []), sandbox("bench-injected", list(secret))

    def runner(box: Sandbox) -> Callable[[], object]:
        return lambda: box.run(x=21)

    rows = [
        (f"warm run, {args.pause:g} s apart: no secret", plain),
        (f"warm run, {args.pause:g} s apart: injected secret", injected),
    ]
    times = measure_prepared(
        [(label, warm(box, 1, args.pause, runner(box)), runner(box)) for label, box in rows],
        args.rounds,
    )
    print_table("a warm run on the allow-list (ratio against no secret)", times, unit="ms")


if __name__ == "__main__":
    main()
