"""The snippets that measure what the installed Monty runs: one per feature the prompt mentions.

Each probe is a small program with the value it must produce. `_capabilities` runs them all the
way model code runs (through `orchestrate`, type checker included) and records a verdict, so
the system prompt states measured facts instead of what some documentation once claimed.
``instead`` is the advice the prompt gives when a feature turns out not to work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["language", "module", "sandbox"]
"""language/module probes are expected to work; sandbox probes are escapes expected to fail."""


@dataclass(frozen=True)
class Probe:
    key: str
    """Stable identifier: the key of the checked-in table."""
    kind: Kind
    label: str
    """How the system prompt names the feature."""
    code: str
    expect: Any = None
    instead: str = ""


def _lang(key: str, label: str, code: str, expect: Any, instead: str = "") -> Probe:
    return Probe(key, "language", label, code, expect, instead)


def _module(name: str, code: str, expect: Any) -> Probe:
    return Probe(f"import {name}", "module", name, f"import {name}\n{code}", expect)


def _escape(key: str, label: str, code: str) -> Probe:
    return Probe(key, "sandbox", label, code)


PROBES: tuple[Probe, ...] = (
    _lang(
        "functions",
        "functions with defaults, *args/**kwargs, recursion, lambda",
        "def f(n, k=1, *a, **kw):\n    return k if n < 2 else n * f(n - 1)\n"
        "(f(5), (lambda v: v + 1)(1), f(1, *[2], **{'x': 3}))",
        (120, 2, 2),
    ),
    _lang(
        "classes",
        "classes with __init__ and methods",
        "class A:\n    n = 10\n    def __init__(self, x):\n        self.x = x\n"
        "    def double(self):\n        return self.x * 2 + A.n\nA(3).double()",
        16,
    ),
    _lang(
        "inheritance",
        "class inheritance (including custom exception classes)",
        "class A:\n    pass\nclass B(A):\n    pass\n1",
        1,
        "plain classes, dicts or @dataclass; raise ValueError/RuntimeError with a message",
    ),
    _lang(
        "method decorators",
        "@property, @staticmethod, @classmethod",
        "class A:\n    @staticmethod\n    def s():\n        return 2\nA.s()",
        2,
        "plain methods and module-level functions",
    ),
    _lang(
        "dataclasses",
        "@dataclass",
        "from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n    y: int = 2\n"
        "P(1).x + P(1).y",
        3,
    ),
    _lang(
        "try",
        "try/except/else/finally, raise",
        "try:\n    1 / 0\nexcept (ZeroDivisionError, ValueError) as e:\n    r = type(e).__name__\n"
        "else:\n    r = ''\nfinally:\n    done = True\nr",
        "ZeroDivisionError",
    ),
    _lang(
        "with",
        "with statements (context managers you define)",
        "class C:\n    def __enter__(self):\n        return 1\n    def __exit__(self, *a):\n"
        "        return False\nwith C() as v:\n    r = v\nr",
        1,
    ),
    _lang(
        "match",
        "match/case with patterns",
        "match {'k': [1, 2]}:\n    case {'k': [a, b]}:\n        r = a + b\n    case _:\n"
        "        r = 0\nr",
        3,
    ),
    _lang(
        "comprehensions",
        "list/dict/set comprehensions and generator expressions",
        "([x * x for x in range(3)], {k: 1 for k in 'ab'}, {x % 2 for x in range(3)}, "
        "sum(x for x in range(4)))",
        ([0, 1, 4], {"a": 1, "b": 1}, {0, 1}, 6),
    ),
    _lang(
        "formatting",
        "f-strings with format specs, str.format, % formatting",
        "x = 3.14159\nf'{x:.2f}|{x!r}|{\"a\":>3}' + '{}'.format(1) + '%d' % 2",
        "3.14|3.14159|  a12",
    ),
    _lang(
        "assignment",
        "augmented and subscript assignment, unpacking, the walrus operator",
        "x = 1\nx += 2\nd = {}\nd['a'] = x\nl = [0, 0]\nl[0] = 5\na, *rest = l\n"
        "(d, l, a, rest, (y := 4) + y)",
        ({"a": 3}, [5, 0], 5, [0], 8),
    ),
    _lang(
        "scopes",
        "global and nonlocal",
        "g = 1\ndef f():\n    global g\n    g = 2\n    x = 1\n    def h():\n        nonlocal x\n"
        "        x = 3\n    h()\n    return x\n(f(), g)",
        (3, 2),
    ),
    _lang("assert", "assert", "assert 1 == 1, 'never'\nTrue", True),
    _lang(
        "del",
        "del statements",
        "d = {'a': 1}\ndel d['a']\nd",
        {},
        "d.pop(key) or build a new dict/list",
    ),
    _lang(
        "generators",
        "generators (yield)",
        "def gen():\n    yield 1\nlist(gen())",
        [1],
        "build and return a list",
    ),
    _lang(
        "builtins",
        "builtins: len, range, enumerate, zip, sorted(key=), min, max, sum, any, all, isinstance",
        "xs = sorted([3, 1, 2], key=lambda v: -v)\n"
        "(xs, list(enumerate('ab')), list(zip([1], [2])), min(xs), max(xs), any(xs), "
        "all(xs), isinstance(1, int), len(range(3)))",
        ([3, 2, 1], [(0, "a"), (1, "b")], [(1, 2)], 1, 3, True, True, True, 3),
    ),
    _lang(
        "methods",
        "str, list and dict methods",
        "d = {'a': 1}\n('a,b'.split(','), ' y '.strip().upper(), '-'.join(['p', 'q']), "
        "d.get('z', 0), list(d.items()), d.setdefault('c', 3), [1, 2].index(2))",
        (["a", "b"], "Y", "p-q", 0, [("a", 1)], 3, 1),
    ),
    _lang(
        "async",
        "async def, await, await asyncio.gather(...), top-level await",
        "import asyncio\nasync def f(x):\n    await asyncio.sleep(0)\n    return x * 2\n"
        "await asyncio.gather(f(1), f(2))",
        [2, 4],
    ),
    _lang(
        "create_task",
        "asyncio.create_task",
        "import asyncio\nasync def f():\n    return 1\nawait asyncio.create_task(f())",
        1,
        "await asyncio.gather(...)",
    ),
    _lang(
        "async with",
        "async with",
        "class C:\n    async def __aenter__(self):\n        return 1\n"
        "    async def __aexit__(self, *a):\n        return False\nasync def m():\n"
        "    async with C() as c:\n        return c\nawait m()",
        1,
        "plain with, or await calls directly",
    ),
    _lang(
        "await in comprehensions",
        "await inside a comprehension (in an async def)",
        "import asyncio\nasync def f(x):\n    return x\nasync def m():\n"
        "    return [await f(x) for x in range(2)]\nawait m()",
        [0, 1],
        "await asyncio.gather(*[f(x) for x in xs]) or a plain for loop",
    ),
    _module("asyncio", "asyncio.run is None", False),
    _module("json", "json.loads(json.dumps({'a': [1, 2.5]}))", {"a": [1, 2.5]}),
    _module("re", "(re.findall(r'\\d+', 'a1b22'), re.sub('b', 'c', 'ab'))", (["1", "22"], "ac")),
    _module("math", "(math.sqrt(16), math.floor(2.5), round(math.pi, 2))", (4.0, 2, 3.14)),
    _module(
        "datetime",
        "(datetime.date(2024, 1, 31) + datetime.timedelta(days=1)).isoformat()",
        "2024-02-01",
    ),
    _module(
        "collections",
        "(collections.Counter('aab').most_common(1), collections.defaultdict(list)['k'])",
        ([("a", 2)], []),
    ),
    _module("itertools", "list(itertools.chain([1], [2]))", [1, 2]),
    _module("functools", "functools.reduce(lambda a, b: a + b, [1, 2, 3])", 6),
    _module("typing", "x: typing.Optional[int] = None\nx", None),
    _module("random", "random.randint(1, 1)", 1),
    _module("decimal", "str(decimal.Decimal('1.1') + decimal.Decimal('2.2'))", "3.3"),
    _module("hashlib", "hashlib.sha256(b'a').hexdigest()[:8]", "ca978112"),
    _module("base64", "base64.b64encode(b'a')", b"YQ=="),
    _module("bisect", "bisect.bisect([1, 3], 2)", 1),
    _module("copy", "copy.deepcopy([[1]])", [[1]]),
    _module("statistics", "statistics.mean([1, 2, 3])", 2),
    _module("string", "string.ascii_lowercase[:3]", "abc"),
    _module("heapq", "heapq.nsmallest(1, [3, 1])", [1]),
    _module("operator", "operator.add(1, 2)", 3),
    _module("enum", "class E(enum.Enum):\n    A = 1\nE.A.value", 1),
    _module("uuid", "len(str(uuid.uuid4()))", 36),
    _module("textwrap", "textwrap.dedent('  a')", "a"),
    _module("csv", "csv.QUOTE_ALL >= 0", True),
    _escape("open", "open() a file", "open('/etc/hostname').read()"),
    _escape(
        "pathlib",
        "read a file through pathlib",
        "import pathlib\npathlib.Path('/etc/hostname').read_text()",
    ),
    _escape("environ", "read os.environ", "import os\nos.environ['HOME']"),
    _escape("getenv", "call os.getenv", "import os\nos.getenv('HOME')"),
    _escape(
        "subprocess", "start a process (subprocess)", "import subprocess\nsubprocess.run(['true'])"
    ),
    _escape("socket", "open a socket", "import socket\nsocket.socket()"),
    _escape("urllib", "reach the network (urllib)", "import urllib.request"),
    _escape("__import__", "call __import__", "__import__('os')"),
    _escape("dunders", "climb through dunder attributes", "().__class__.__mro__"),
    _escape("globals", "read a function's __globals__", "def f():\n    pass\nf.__globals__"),
)
