"""What a notebook cell shows, inside the container: ``display()``, figures, the last value.

Copied next to the cell as ``jsbx_display`` and imported by the auto-IO runner, so, like the
codec, it is standard library only, has no package-relative imports, and imports nothing at
the top that a fresh interpreter has not already loaded (``os``, ``sys``, ``builtins``): a
cell that displays nothing pays for this module alone (no ``json``, ``ast``, ``matplotlib``).
There is no IPython in the container unless the cell asks for it, so this gives a cell what a
notebook would, in a few small pieces:

- `run` runs the cell; when its last statement is an expression (and the cell does not end
  with ``;``), the value, unless None, is displayed, as ``Out[n]`` would be. The split reads
  the cell's syntax tree through ``compile``'s ``PyCF_ONLY_AST`` flag, which imports nothing.
- `display` (also a builtin, as in IPython) writes each object's MIME bundle, built from its
  ``_repr_mimebundle_`` / ``_repr_html_`` / ``_repr_png_``... methods (pandas' tables,
  IPython's ``HTML`` objects), to ``/var/outputs/.displays/NNNNNN.json``; the host reads those
  files as untrusted data after the run (`_displays`). A matplotlib figure becomes a PNG.
- When the cell imports matplotlib, its backend is set to this module (unless ``MPLBACKEND``
  says otherwise), so ``plt.show()`` displays the open figures, and figures still open when
  the cell ends are displayed then, as the inline backend does.
- When the cell imports ``IPython.display`` and no IPython is installed, a small stand-in
  module answers with `display`, ``HTML``, ``Markdown``, ``SVG``, ``JSON`` and ``Image``;
  with IPython installed, its own ``display`` is replaced by this one (without a shell it
  would only print the object's repr).
"""

from __future__ import annotations

import builtins
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

DISPLAYS = "/var/outputs/.displays"
"""Where each display is written, one JSON file each, numbered in order (no output name
starts with a dot, so no declared output can be this folder)."""
BACKEND = "module://jsbx_display"
"""This module as a matplotlib backend (it is in ``sys.modules``, so matplotlib finds it)."""
_PY_CF_ONLY_AST = 0x400
"""``ast.PyCF_ONLY_AST``, spelt out so that reading the cell's tree imports no ``ast``."""
_REPRS = (
    ("text/html", "_repr_html_"),
    ("text/markdown", "_repr_markdown_"),
    ("image/svg+xml", "_repr_svg_"),
    ("image/png", "_repr_png_"),
    ("image/jpeg", "_repr_jpeg_"),
    ("application/json", "_repr_json_"),
    ("text/latex", "_repr_latex_"),
)
"""IPython's repr methods and the MIME type each gives (the host keeps only those it can show
safely)."""

_written = 0
_figures: set[int] = set()
"""ids of the figures displayed already: `flush` does not show them again."""


def run(code: str, filename: str, namespace: dict[str, Any]) -> None:
    """Run the cell in ``namespace``; display its last expression's value as a notebook would."""
    tree = compile(code, filename, "exec", _PY_CF_ONLY_AST, dont_inherit=True)
    body = tree.body
    last = body[-1] if body else None
    if last is None or type(last).__name__ != "Expr" or code.rstrip().endswith(";"):
        exec(compile(tree, filename, "exec", dont_inherit=True), namespace)
        flush()
        return
    tree.body = body[:-1]
    exec(compile(tree, filename, "exec", dont_inherit=True), namespace)
    # `Expression` is the tree type of eval mode; taken from a parse, again so no `ast` import
    expression = compile("0", filename, "eval", _PY_CF_ONLY_AST, dont_inherit=True)
    expression.body = last.value
    value = eval(compile(expression, filename, "eval", dont_inherit=True), namespace)
    if value is not None:
        display(value)
    flush()


def display(*objs: Any, raw: bool = False, **_ignored: Any) -> None:
    """IPython's ``display``: each object's rich representation, in order. ``raw=True``: the
    objects are MIME bundles already (``{"text/html": ...}``). Other keywords
    (``display_id``, ``metadata``...) are accepted and ignored."""
    for obj in objs:
        data = dict(obj) if raw and isinstance(obj, dict) else _bundle(obj)
        if data:
            _write(data)


def _bundle(obj: Any) -> dict[str, Any]:
    """The MIME bundle IPython's formatters would make for ``obj``."""
    figure = sys.modules.get("matplotlib.figure")
    if figure is not None and isinstance(obj, figure.Figure):
        _figures.add(id(obj))
        return {"image/png": _png(obj), "text/plain": _repr(obj)}
    data: dict[str, Any] = {}
    if not isinstance(obj, type):  # a class has these as unbound functions
        found = _call(obj, "_repr_mimebundle_", include=None, exclude=None)
        if isinstance(found, dict):
            data.update(found)
        for mime, method in _REPRS:
            if mime not in data:
                value = _call(obj, method)
                if value is not None:
                    data[mime] = value
    data.setdefault("text/plain", _repr(obj))
    return data


def _call(obj: Any, method: str, **kwargs: Any) -> Any:
    """``obj.method(**kwargs)``, its data alone when it returns ``(data, metadata)``; None when
    it has no such method or it fails (told on stderr, as IPython's formatters tell)."""
    function = getattr(obj, method, None)
    if not callable(function):
        return None
    try:
        value = function(**kwargs)
    except NotImplementedError:
        return None
    except Exception as exc:  # the object's own code: the cell goes on, as in IPython
        print(f"display: {type(obj).__name__}.{method} raised {exc!r}", file=sys.stderr)
        return None
    return value[0] if isinstance(value, tuple) and len(value) == 2 else value


def _repr(obj: Any) -> str:
    try:
        return repr(obj)
    except Exception as exc:
        return f"<{type(obj).__name__}: repr raised {type(exc).__name__}>"


def _png(figure: Any) -> bytes:
    import io

    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _write(data: dict[str, Any]) -> None:
    """One display as a file: text as text, bytes (a PNG) as base64, JSON data as itself."""
    import base64
    import json

    global _written
    shown: dict[str, Any] = {}
    for mime, value in data.items():
        if isinstance(value, bytes | bytearray):
            shown[mime] = base64.b64encode(value).decode()
        elif isinstance(value, str) or mime == "application/json":
            shown[mime] = value
    try:
        text = json.dumps({"data": shown}, default=str)
    except (TypeError, ValueError):  # JSON data that is not JSON: the rest still shows
        shown.pop("application/json", None)
        text = json.dumps({"data": shown}, default=str)
    os.makedirs(DISPLAYS, exist_ok=True)
    _written += 1
    with open(os.path.join(DISPLAYS, f"{_written:06d}.json"), "w", encoding="utf-8") as file:
        file.write(text)


# -- matplotlib: this module is its backend ---------------------------------------------------


def show(*_args: Any, **_kwargs: Any) -> None:
    """``plt.show()``: display the open figures, then close them (as the inline backend)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    for number in pyplot.get_fignums():
        figure = pyplot.figure(number)
        if id(figure) not in _figures:
            display(figure)
    pyplot.close("all")


def flush() -> None:
    """At the cell's end: the figures still open are shown, when this module is the backend."""
    matplotlib = sys.modules.get("matplotlib")
    pyplot = sys.modules.get("matplotlib.pyplot")
    if matplotlib is not None and pyplot is not None and matplotlib.get_backend() == BACKEND:
        show()


def __getattr__(name: str) -> Any:
    """``FigureCanvas``, as a backend module must name it: Agg's canvas, imported only when
    matplotlib asks (a cell without matplotlib never imports it). Kept as a global once asked
    for: matplotlib reads it again from the module's ``vars()``, which this hook is not."""
    if name == "FigureCanvas":
        from matplotlib.backends.backend_agg import (  # type: ignore[import-not-found]
            FigureCanvasAgg,
        )

        globals()["FigureCanvas"] = FigureCanvasAgg
        return FigureCanvasAgg
    raise AttributeError(name)


# -- imports the cell makes: matplotlib's backend, IPython's display --------------------------


class _Hooks:
    """A finder that only watches: after ``matplotlib`` loads it sets the backend, after
    ``IPython.core.display_functions`` loads it puts `display` in its place; every other
    import goes to the finders after it untouched."""

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        after = _AFTER_LOAD.get(name)
        if after is None:
            return None
        index = sys.meta_path.index(cls)
        for finder in sys.meta_path[index + 1 :]:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_then(module: Any) -> None:
            exec_module(module)
            after(module)

        spec.loader.exec_module = exec_then
        return spec


def _matplotlib_loaded(module: Any) -> None:
    if not os.environ.get("MPLBACKEND"):
        module.rcParams["backend"] = BACKEND


def _ipython_loaded(module: Any) -> None:
    module.display = display


_AFTER_LOAD = {
    "matplotlib": _matplotlib_loaded,
    "IPython.core.display_functions": _ipython_loaded,
}


class _StandIn:
    """Last among the finders: answers ``IPython`` and ``IPython.display`` only when nothing
    else can (IPython is not installed), with a module holding `display` and the classes
    cells use with it."""

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in ("IPython", "IPython.display"):
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, cls, is_package=name == "IPython")  # type: ignore[arg-type]

    @staticmethod
    def create_module(spec: Any) -> None:
        return None

    @staticmethod
    def exec_module(module: Any) -> None:
        names = {
            "display": display,
            "HTML": HTML,
            "Markdown": Markdown,
            "SVG": SVG,
            "JSON": JSON,
            "Image": Image,
        }
        module.__dict__.update(names)
        module.__all__ = list(names)


class _Data:
    """IPython's ``DisplayObject``, in small: data given, or read from ``filename``."""

    _binary = False

    def __init__(self, data: Any = None, url: str | None = None, filename: str | None = None,
                 **_ignored: Any) -> None:  # fmt: skip
        if filename is not None:
            with open(filename, "rb" if self._binary else "r") as file:
                data = file.read()
        self.data = data
        self.url = url

    def __repr__(self) -> str:
        return f"<IPython.core.display.{type(self).__name__} object>"  # as IPython's say


class HTML(_Data):
    def _repr_html_(self) -> str:
        return str(self.data)


class Markdown(_Data):
    def _repr_markdown_(self) -> str:
        return str(self.data)


class SVG(_Data):
    def _repr_svg_(self) -> str:
        data = self.data
        return data.decode() if isinstance(data, bytes) else str(data)


class JSON(_Data):
    def _repr_json_(self) -> Any:
        return self.data


class Image(_Data):
    """A PNG or JPEG (told by its first bytes when ``format`` is not given)."""

    _binary = True

    def __init__(self, data: Any = None, url: str | None = None, filename: str | None = None,
                 format: str | None = None, **ignored: Any) -> None:  # fmt: skip
        if isinstance(data, str) and filename is None and not data.startswith("<"):
            filename, data = data, None  # Image("plot.png"), as IPython reads it
        super().__init__(data, url, filename, **ignored)
        self.format = format or ("jpeg" if bytes(self.data or b"")[:2] == b"\xff\xd8" else "png")

    def _repr_png_(self) -> bytes | None:
        return self.data if self.format == "png" else None

    def _repr_jpeg_(self) -> bytes | None:
        return self.data if self.format in ("jpeg", "jpg") else None


def install() -> None:
    """Make `display` a builtin and watch the imports above (the runner calls this once)."""
    builtins.display = display  # type: ignore[attr-defined]
    sys.meta_path.insert(0, _Hooks)
    sys.meta_path.append(_StandIn)
