"""Reading a model's reply: untrusted text, so a reply we cannot read is a retry, never a crash.

A reply holds labelled lines (``Plan:``, ``Diagnosis:``, ``Packages:``, ``System packages:``)
and fenced Python blocks: the solution, and the tests (a block whose first line names
``test_solution.py``, whose info string says ``tests``, or that defines ``test_`` functions).
Either block may be left out after the first iteration: the last one stands. A block's first
line naming its file (``# solution.py``) is not kept: it says where the block goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ._types import ErrorType

REPLY_CHARS_KEPT = 200_000
"""Characters of a reply read: a longer one is cut there (a model does not write more code)."""
_FENCE = re.compile(r"^```[ \t]*([^\n`]*)\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_LABEL = re.compile(
    r"^[ \t]*\**(plan|approach|diagnosis|packages|system[ _-]packages)\**[ \t]*:[ \t]*(.*)$",
    re.IGNORECASE | re.MULTILINE,
)
_TYPES: dict[str, ErrorType] = {
    "logic": "logic",
    "test": "test",
    "test_error": "test",
    "tests": "test",
    "environment": "environment",
    "env": "environment",
}


@dataclass
class Reply:
    code: str | None = None
    tests: str | None = None
    plan: str | None = None
    approach: str | None = None
    diagnosis: ErrorType | None = None
    diagnosis_text: str = ""
    packages: list[str] = field(default_factory=list)
    system_packages: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.code is None and self.tests is None and not self.packages


def parse(text: str) -> Reply:
    text = text[:REPLY_CHARS_KEPT].replace("\r\n", "\n")
    reply = Reply()
    outside = _FENCE.sub("", text)
    for match in _LABEL.finditer(outside):
        label, value = match.group(1).lower().replace("_", " ").replace("-", " "), match.group(2)
        value = value.strip()
        if label == "plan":
            reply.plan = value
        elif label == "approach":
            reply.approach = value
        elif label == "diagnosis":
            kind, _, why = value.partition(":")
            reply.diagnosis = _TYPES.get(kind.strip().lower().strip("*` "))
            reply.diagnosis_text = why.strip() if reply.diagnosis else value
        else:
            names = [n.strip().strip("`") for n in re.split(r"[,\s]+", value) if n.strip()]
            names = [n for n in names if n.lower() not in ("none", "-", "n/a")]
            (reply.packages if label == "packages" else reply.system_packages).extend(names)
    for info, body in _FENCE.findall(text):
        words = info.strip().lower().split()
        if words and words[0] not in ("python", "py", "python3"):
            continue
        first = body.lstrip().split("\n", 1)[0].lower()
        is_tests = (
            "tests" in words
            or "test" in words
            or ("test_solution" in first)
            or (
                "solution" not in words
                and "solution.py" not in first
                and re.search(r"^def test_", body, re.MULTILINE) is not None
            )
        )
        if re.fullmatch(r"#\s*(test_)?solution\.py\s*", first):
            body = body.lstrip().split("\n", 1)[1] if "\n" in body.lstrip() else ""
        if is_tests and reply.tests is None:
            reply.tests = body
        elif not is_tests and reply.code is None:
            reply.code = body
    return reply
