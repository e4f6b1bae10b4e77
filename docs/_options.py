"""The options table of each cell magic, made from the magic's own parser at each docs build.

The option, its value, its default and what it does are read from the parser (the text
``%%MAGIC --help`` prints), so they cannot drift from the code. Only the examples are written
here; an option without one fails the build (and ``tests/test_docs.py``), so a new option
cannot reach the docs without its row.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

EXAMPLES: dict[str, dict[str, str]] = {
    "orchestrate": {
        "--in": "`--in x,y`",
        "--out": "`--out total`",
        "--tools": "`--tools add,fetch`",
        "--timeout": "`--timeout 5`",
        "--max-memory": "`--max-memory 64`",
        "--max-calls": "`--max-calls 50`",
        "--max-result": "`--max-result 1`",
        "--max-output": "`--max-output 1`",
        "--max-stack-depth": "`--max-stack-depth 200`",
        "--max-transfer": "`--max-transfer 64`",
        "--no-type-check": "`--no-type-check`",
        "--quiet": "`--quiet`",
        "--resume": "`--resume`",
        "--cache": "`--cache`",
        "--session": "`--session cleanup`",
        "--no-store": "`--no-store`",
    },
    "sandbox": {
        "--name": "`--name double`",
        "--in": "`--in rows,n:int`",
        "--out": "`--out table:str`",
        "--packages": "`--packages pandas matplotlib`",
        "--system-packages": "`--system-packages ffmpeg`",
        "--image": "`--image python:3.12-slim`",
        "--base-image": "`--base-image python:3.12-slim`",
        "--cpus": "`--cpus 2`",
        "--memory": "`--memory 2g`",
        "--timeout": "`--timeout 60`",
        "--cluster": "`--cluster tcp://scheduler:8786`",
        "--network": "`--network bridge`",
        "--allow-net": "`--allow-net pypi.org,api.example.com:443`",
        "--isolation": "`--isolation gvisor`",
        "--ca-bundle": "`--ca-bundle /etc/ssl/certs/ca-certificates.crt`",
        "--env": "`--env MODE=fast LEVEL=2`",
        "--secret": "`--secret API_KEY`",
        "--secret-for": "`--secret-for api.example.com:API_KEY`",
        "--retries": "`--retries 2`",
        "--cache": "`--cache`",
        "--verbatim": "`--verbatim`",
        "--command": "`--command`",
        "--quiet": "`--quiet`",
        "--session": "`--session analysis`",
        "--keep": "`--keep`",
        "--from": "`--from analysis@loaded`",
    },
    "codemode": {
        "--llm": "`--llm my_llm`, `--llm openai:gpt-4o`",
        "--tools": "`--tools price,search`",
        "--in": "`--in cities`",
        "--out": "`--out report`",
        "--max-attempts": "`--max-attempts 5`",
        "--insert": "`--insert`",
        "--quiet": "`--quiet`",
    },
    "codegen": {
        "--llm": "`--llm my_llm`, `--llm openai:gpt-4o`",
        "--in": "`--in sales`",
        "--out": "`--out total:float`",
        "--packages": "`--packages pandas`",
        "--max-iterations": "`--max-iterations 5`",
        "--max-sample-rows": "`--max-sample-rows 20`",
        "--resume": "`--resume`",
        "--no-cache": "`--no-cache`",
        "--no-insert": "`--no-insert`",
        "--quiet": "`--quiet`",
    },
}
"""Per cell magic, an example of each of its options (``--help`` has none)."""

_DEFAULT = re.compile(r"\s*[(;]?\s*default:? ([^)]*)\)?$")


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's options, ``--help`` left out (every magic takes it)."""
    return [a for a in parser._actions if a.option_strings and "--help" not in a.option_strings]


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "(none: a switch)"
    if action.choices:
        return " or ".join(f"`{choice}`" for choice in action.choices)
    many = " ..." if action.nargs in ("+", "*") else ""
    return f"`{action.metavar or action.dest.upper()}{many}`"


def row(magic: str, action: argparse.Action) -> str:
    """One Markdown row: option, value, default, what it does, example."""
    name = action.option_strings[-1]
    example = EXAMPLES[magic].get(name)
    if example is None:
        raise RuntimeError(f"%%{magic} {name}: add its example to docs/_options.py EXAMPLES")
    what = (action.help or "").replace("%%", "%")
    found = _DEFAULT.search(what)
    default = found.group(1) if found else ("off" if action.nargs == 0 else "-")
    if found:  # the default has its own column; a parenthesis it closed stays closed
        what = _DEFAULT.sub(")" if found.group(0).lstrip().startswith(";") else "", what)
    cells = [f"`{name}`", _value(action), default, what, example]
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def table(magic: str, parser: Any) -> str:
    """The Markdown table of every option of ``%%magic``."""
    lines = ["| option | value | default | what it does | example |", "|---|---|---|---|---|"]
    lines += [row(magic, action) for action in options(parser)]
    return "\n".join(lines) + "\n"


def parser_of(magic: str) -> Any:
    """The argparse parser IPython's ``magic_arguments`` built for the cell magic ``magic``."""
    import importlib
    import inspect
    import pkgutil

    import jupyter_sandbox.magics as package

    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        for cls in vars(importlib.import_module(info.name)).values():
            if inspect.isclass(cls) and cls.__module__ == info.name and hasattr(cls, magic):
                return getattr(cls, magic).parser
    raise LookupError(f"no cell magic %%{magic} in jupyter_sandbox.magics")
