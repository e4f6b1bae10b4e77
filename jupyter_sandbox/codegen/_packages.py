"""Packages from the code's imports, and every name from a reply checked before it is used.

An import name is mapped to the distribution that provides it (``sklearn`` is
``scikit-learn``); the image build checks that it exists. A package or system package named in
a model's reply is untrusted text: it must match the grammar the sandbox's image spec uses for
every package (`ImageSpec.normalise`: a name, extras, version bounds; no URL, path or
``--index-url`` option), or it is refused with a note, never installed. The model gives no
build commands: there is no field for them.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable

from .._shared._errors import InvalidPackageError
from ..sandbox import ImageSpec

DISTRIBUTIONS = {
    "sklearn": "scikit-learn",
    "cv2": "opencv-python-headless",
    "PIL": "pillow",
    "yaml": "pyyaml",
    "bs4": "beautifulsoup4",
    "dateutil": "python-dateutil",
    "skimage": "scikit-image",
    "Crypto": "pycryptodome",
    "dotenv": "python-dotenv",
    "jwt": "pyjwt",
    "magic": "python-magic",
    "docx": "python-docx",
    "pptx": "python-pptx",
    "attr": "attrs",
    "google.protobuf": "protobuf",
    "serial": "pyserial",
    "usb": "pyusb",
    "OpenSSL": "pyopenssl",
    "fitz": "pymupdf",
}
"""Import names whose distribution has another name."""

LOCAL = frozenset({"solution", "conftest", "test_solution"})
"""The modules the test run writes beside the tests: not packages."""


def imported(code: str) -> list[str]:
    """Top-level modules ``code`` imports that are not in the standard library (in the order
    first seen); code that does not parse imports nothing we can see."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in LOCAL and top != "__future__":
                found[name if name in DISTRIBUTIONS else top] = None
    return list(found)


def distributions(modules: Iterable[str]) -> list[str]:
    return list(
        dict.fromkeys(DISTRIBUTIONS.get(m, DISTRIBUTIONS.get(m.split(".")[0], m)) for m in modules)
    )


def checked(names: Iterable[str], *, system: bool = False) -> tuple[list[str], list[str]]:
    """``(accepted, notes)``: each name the image spec's grammar accepts, in its canonical
    spelling (``Foo_Bar`` is ``foo-bar``), and a note for each refused one (shown cut, never
    run)."""
    accepted: list[str] = []
    notes: list[str] = []
    for name in names:
        text = name if isinstance(name, str) else repr(name)
        try:
            if system:
                spec = ImageSpec.normalise("base", system_packages=[text])
            else:
                spec = ImageSpec.normalise("base", packages=[text])
        except InvalidPackageError:
            kind = "system package" if system else "package"
            notes.append(f"refused {kind} {_shown(text)!r}: not a package name")
            continue
        accepted += spec.system_packages if system else spec.packages  # as the image names it
    return list(dict.fromkeys(accepted)), notes


def _shown(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
