"""A corpus of known Python-sandbox escapes, each run in real Monty.

Each attempt must be refused with an error, and leave no trace: no host file read or
written, no environment variable read, no process started, no network reached, nothing
reached through dunders. The canaries (a file and an environment variable holding a secret)
prove nothing leaked.
"""

from __future__ import annotations

import os

import pytest

from jupyter_sandbox import OrchestrationError, orchestrate

SECRET = "s3cret-canary-7f1e"


def echo(value: str) -> str:
    return value


@pytest.fixture(scope="module")
def canaries(tmp_path_factory):
    folder = tmp_path_factory.mktemp("canary")
    (folder / "secret.txt").write_text(SECRET)
    os.environ["JUPYTER_SANDBOX_CANARY"] = SECRET
    yield folder
    del os.environ["JUPYTER_SANDBOX_CANARY"]


ESCAPES = {
    "open a host file": "open('{dir}/secret.txt').read()",
    "pathlib read": "import pathlib\npathlib.Path('{dir}/secret.txt').read_text()",
    "write a host file": "open('{dir}/pwned', 'w').write('x')",
    "pathlib write": "import pathlib\npathlib.Path('{dir}/pwned').write_text('x')",
    "os.environ": "import os\nos.environ['JUPYTER_SANDBOX_CANARY']",
    "os.getenv": "import os\nos.getenv('JUPYTER_SANDBOX_CANARY')",
    "os.system": "import os\nos.system('touch {dir}/pwned')",
    "os.popen": "import os\nos.popen('cat {dir}/secret.txt').read()",
    "subprocess": "import subprocess\nsubprocess.run(['touch', '{dir}/pwned'])",
    "socket": "import socket\nsocket.create_connection(('127.0.0.1', 22))",
    "urllib": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1')",
    "http.client": "import http.client\nhttp.client.HTTPConnection('127.0.0.1').request('GET', '')",
    "ctypes": "import ctypes\nctypes.CDLL(None)",
    "importlib": "import importlib\nimportlib.import_module('os').system('true')",
    "__import__": "__import__('os').system('touch {dir}/pwned')",
    "sys.modules": "import sys\nsys.modules['os'].environ",
    "sys._getframe": "import sys\nsys._getframe().f_back.f_globals",
    "subclasses walk": "().__class__.__base__.__subclasses__()",
    "mro walk": "[].__class__.__mro__[1].__subclasses__()",
    "object subclasses": "object.__subclasses__()",
    "type subclasses": "type.__subclasses__(object)",
    "class mro": "class A:\n    pass\nA.__mro__[-1].__subclasses__()",
    "lambda globals": "(lambda: 0).__globals__",
    "lambda code": "(lambda: 0).__code__",
    "function builtins": "def f():\n    pass\nf.__builtins__",
    "tool globals": "echo.__globals__",
    "getattr dunder": "getattr(echo, '__globals__')",
    "generator frame": "g = (x for x in [1])\ng.gi_frame.f_back.f_globals",
    "format string dunder": "'{{0.__class__.__mro__}}'.format(1)",
    "format tool globals": "'{{0.__globals__}}'.format(echo)",
    "eval import": "eval(\"__import__('os').getenv('JUPYTER_SANDBOX_CANARY')\")",
    "exec import": "exec('import os\\nr = os.environ')\nr",
    "compile": "compile('1', 'x', 'eval')",
    "globals builtins": "globals()['__builtins__']",
    "vars builtins": "vars()",
    "breakpoint": "breakpoint()",
    "input": "input()",
    "pickle": "import pickle\npickle.loads(b'cos\\nsystem\\n(S\"true\"\\ntR.')",
    "asyncio subprocess": "import asyncio\nawait asyncio.create_subprocess_shell('true')",
    "shutil": "import shutil\nshutil.rmtree('{dir}')",
    "tempfile": "import tempfile\ntempfile.mkstemp()",
    "io.open": "import io\nio.open('{dir}/secret.txt').read()",
    "os.listdir": "import os\nos.listdir('{dir}')",
    "signal": "import signal\nsignal.alarm(1)",
    "threading": "import threading\nthreading.Thread(target=print).start()",
    "multiprocessing": "import multiprocessing\nmultiprocessing.Process(target=print).start()",
    "tool handle attribute": "echo.func",
}


@pytest.mark.parametrize("name", ESCAPES)
def test_escape_attempt_is_refused_and_leaks_nothing(name, canaries):
    code = ESCAPES[name].format(dir=canaries)
    with pytest.raises(OrchestrationError) as info:
        orchestrate(code, tools=[echo], type_check=False)
    assert SECRET not in f"{info.value}\n{info.value.sandbox_traceback}"
    assert info.value.result is not None
    assert SECRET not in info.value.result.stdout
    assert sorted(p.name for p in canaries.iterdir()) == ["secret.txt"]
    assert (canaries / "secret.txt").read_text() == SECRET
