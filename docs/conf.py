"""Sphinx configuration of the jupyter-sandbox documentation (``bash scripts/docs.sh``).

Diátaxis: tutorials (the notebooks, rendered, not executed), how-to guides, reference (generated
from the docstrings and the magics' own parsers) and explanation. The build runs with ``-W``:
a warning is an error. The reference pages under ``reference/api/`` and ``reference/magics``'s
generated part are written by this file at each build from the packages' ``__all__``, so a new
public name is documented (or fails the build) without anyone editing a page.

Why Sphinx rather than MkDocs Material: autodoc reads the reference from the code itself (the
docstrings, the magics' parsers, traitlets' ``%config`` help), myst-nb renders the notebooks
with no extra converter, and the PyData theme is what JupyterLab, IPython and ipykernel use,
so a Jupyter user already knows the layout.
"""

from __future__ import annotations

import importlib
import inspect
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import jupyter_sandbox  # noqa: E402

project = "jupyter-sandbox"
author = "the jupyter-sandbox authors"
copyright = "the jupyter-sandbox authors"
release = version = jupyter_sandbox.__version__

extensions = [
    "myst_nb",  # Markdown pages (it includes myst-parser) and the notebooks as pages
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = [
    "_build",
    "Thumbs.db",
    ".DS_Store",
    # Executed copies the notebook runner leaves beside the sources (gitignored).
    "**/*.executed.ipynb",
    "**/.ipynb_checkpoints",
    "**/_generated",  # written below, included by pages
]

# The notebooks need Docker, real kernels and restarts: the test suite runs them
# (tests/e2e/test_notebooks.py); the site shows them as written.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
# Our docstrings write `name` for a Python object, as a link where Sphinx knows it.
default_role = "py:obj"

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autosummary_generate = False  # our own generator below writes the pages
napoleon_google_docstring = False
napoleon_numpy_docstring = False

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-sandbox"
html_logo = "../jupyter_sandbox/resources/logo-svg.svg"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_center": ["sphinx-version"],
}
html_sidebars = {"index": []}


# --- the reference, generated from __all__ -------------------------------------------------

PUBLIC = [
    "jupyter_sandbox.errors",
    "jupyter_sandbox.events",
    "jupyter_sandbox.records",
    "jupyter_sandbox",
    "jupyter_sandbox.orchestration",
    "jupyter_sandbox.sandbox",
    "jupyter_sandbox.codemode",
    "jupyter_sandbox.codegen",
    "jupyter_sandbox.display",
]
"""Every public module, in the order a name finds its home: the first module here whose
``__all__`` lists it documents it (a class whose ``__module__`` names a public module is
documented there), so what users import from ``jupyter_sandbox`` is documented under that
name; the others link to it."""

TITLES = {
    "jupyter_sandbox": "jupyter_sandbox: the top-level API",
    "jupyter_sandbox.errors": "jupyter_sandbox.errors: every exception, one tree",
    "jupyter_sandbox.events": "jupyter_sandbox.events: what on_event receives",
    "jupyter_sandbox.records": "jupyter_sandbox.records: the saved record format",
    "jupyter_sandbox.orchestration": "jupyter_sandbox.orchestration: the Monty engine",
    "jupyter_sandbox.sandbox": "jupyter_sandbox.sandbox: the Docker engine",
    "jupyter_sandbox.codemode": "jupyter_sandbox.codemode: a model writes the code",
    "jupyter_sandbox.codegen": "jupyter_sandbox.codegen: a model writes a tested program",
    "jupyter_sandbox.display": "jupyter_sandbox.display: live views and MIME bundles",
}


def _module(name: str) -> object:
    return importlib.import_module(name)


def _homes() -> dict[str, tuple[str, str]]:
    """``id(object)`` -> (home module, name) for every public name."""
    homes: dict[int, tuple[str, str]] = {}
    for modname in PUBLIC:
        mod = _module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            key = id(obj)
            if inspect.ismodule(obj) or key in homes:
                continue
            owner = getattr(obj, "__module__", None) if inspect.isclass(obj) else None
            if owner in PUBLIC and name in _module(owner).__all__:
                homes[key] = (owner, name)
            else:
                homes[key] = (modname, name)
    return homes


def _is_data(obj: object) -> bool:
    return not (inspect.isclass(obj) or callable(obj)) or _alias(obj)


def _alias(obj: object) -> bool:
    """A type alias (``Literal[...]``, ``X | Y``, ``dict[str, str]``): documented as data."""
    return type(obj).__module__ in ("typing", "types", "collections.abc") and not inspect.isclass(
        obj
    )


_ATTR_DOCS: dict[str, list[tuple[str, str]]] = {}


def _attr_doc(name: str, obj: object) -> str:
    """The docstring written under ``name = ...`` in the module that defines it (autodoc
    looks only in the module being documented, which merely re-exports it)."""
    if not _ATTR_DOCS:
        import pkgutil

        from sphinx.errors import PycodeError
        from sphinx.pycode import ModuleAnalyzer

        for info in pkgutil.walk_packages(jupyter_sandbox.__path__, "jupyter_sandbox."):
            if info.name.endswith("__main__") or ".magics" in info.name:
                continue
            try:
                docs = ModuleAnalyzer.for_module(info.name).find_attr_docs()
            except PycodeError:  # a module without source: nothing to read
                continue
            for (scope, attr), lines in docs.items():
                if not scope:
                    _ATTR_DOCS.setdefault(attr, []).append((info.name, "\n".join(lines)))
        docs = ModuleAnalyzer.for_module("jupyter_sandbox").find_attr_docs()
        for (scope, attr), lines in docs.items():
            if not scope:
                _ATTR_DOCS.setdefault(attr, []).append(("jupyter_sandbox", "\n".join(lines)))
    for modname, doc in _ATTR_DOCS.get(name, []):
        if getattr(_module(modname), name, None) is obj:
            return doc
    raise RuntimeError(f"{name}: public data without a docstring under its assignment")


def _data(name: str, obj: object) -> list[str]:
    lines = [f".. py:data:: {name}"]
    if isinstance(obj, str | int | float):
        lines.append(f"   :value: {obj!r}")
    else:
        lines.append(f"   :value: {_show(obj)}")
    lines.append("")
    lines += ["   " + line if line else "" for line in _attr_doc(name, obj).splitlines()]
    return [*lines, ""]


def _show(obj: object) -> str:
    text = repr(obj).replace("jupyter_sandbox._shared._events.", "").replace("typing.", "")
    return text.replace("jupyter_sandbox.codemode._result.", "")


def write_reference() -> None:
    out = HERE / "reference" / "api"
    shutil.rmtree(out, ignore_errors=True)  # a page of a module renamed since is not kept
    out.mkdir(parents=True)
    homes = _homes()
    for modname in PUBLIC:
        mod = _module(modname)
        lines = [TITLES[modname], "=" * len(TITLES[modname]), ""]
        lines += [f".. automodule:: {modname}", "   :no-members:", ""]
        here, elsewhere, modules = [], [], []
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.ismodule(obj):
                modules.append(obj.__name__)
                continue
            home = homes[id(obj)]
            (here if home == (modname, name) else elsewhere).append((name, obj, home))
        if modules or elsewhere:
            lines += ["Also exported here:", ""]
            lines += [f"- the module :py:mod:`{m}`" for m in modules]
            lines += [f"- `{n} <{h}.{hn}>` (documented in `{h}`)" for n, _, (h, hn) in elsewhere]
            lines.append("")
        lines += [f".. currentmodule:: {modname}", ""]
        for name, obj, _ in here:
            if _is_data(obj):
                lines += _data(name, obj)
                continue
            lines.append(f".. {'autoclass' if inspect.isclass(obj) else 'autofunction'}:: {name}")
            if modname == "jupyter_sandbox.errors":
                lines.append("   :no-members:")
            lines.append("")
        (out / f"{modname}.rst").write_text("\n".join(lines))
    write_magics(out)


def write_magics(out: Path) -> None:
    """Each magic's ``--help`` (its own parser's text) and each magics class's ``%config``
    options (traitlets' own description): the reference cannot drift from the code."""
    import pkgutil

    from IPython.core.magic import Magics

    import jupyter_sandbox.magics as package
    from jupyter_sandbox.magics import CELL_MAGICS, LINE_MAGICS

    classes: list[type] = []  # every Magics class of the package, in module order
    for info in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        mod = importlib.import_module(info.name)
        classes += [
            c
            for c in vars(mod).values()
            if inspect.isclass(c) and issubclass(c, Magics) and c.__module__ == info.name
        ]
    lines = ["The magics' options", "===================", ""]
    lines += [
        "Generated from the magics' own parsers: the same text as ``%%MAGIC --help``.",
        "",
    ]
    for kind, names in (("%%", CELL_MAGICS), ("%", LINE_MAGICS)):
        for name in names:
            cls = next(c for c in classes if hasattr(c, name))
            doc = inspect.cleandoc(getattr(cls, name).__doc__ or "")
            doc = doc.removeprefix("::").strip("\n")
            title = f"``{kind}{name}``"
            lines += [title, "-" * len(title), "", ".. code-block:: text", ""]
            lines += ["   " + line if line else "" for line in doc.splitlines()]
            lines.append("")
    lines += ["``%config`` defaults", "--------------------", ""]
    for cls in classes:
        if cls.class_traits(config=True):
            lines += [cls.class_config_rst_doc(), ""]
    (out / "magics.rst").write_text("\n".join(lines))


def write_benchmarks() -> None:
    """The performance page's tables from the benchmark scripts' JSON results
    (``benchmarks/results/``, written with ``JUPYTER_SANDBOX_BENCH_JSON``)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tables

    results = sorted(str(p) for p in (ROOT / "benchmarks" / "results").glob("*.json"))
    out = HERE / "explanation" / "_generated"
    out.mkdir(exist_ok=True)
    text = tables.main(results) if results else "No results are committed yet.\n"
    (out / "benchmarks.md").write_text(text)


def write_defaults() -> None:
    """The defaults page's table from `jupyter_sandbox._shared._defaults`: each default's name,
    value and docstring, in the module's order and sections, so the docs say what the code
    runs with."""
    from sphinx.pycode import ModuleAnalyzer

    from jupyter_sandbox._shared import _defaults

    analyzer = ModuleAnalyzer.for_module(_defaults.__name__)
    docs = analyzer.find_attr_docs()
    source = inspect.getsource(_defaults).splitlines()
    lines: list[str] = []
    for text in source:
        if text.startswith("# -- "):
            title = text.removeprefix("# -- ").rstrip("- ").strip()
            lines += ["", f"**{title}**", "", "| default | value | what it is |", "|---|---|---|"]
            continue
        name = text.split(" ", 1)[0].split(":", 1)[0]
        if not name.isupper() or ("", name) not in docs or not text.startswith(name):
            continue
        doc = " ".join(docs[("", name)]).strip().replace("|", "\\|")
        value = getattr(_defaults, name)
        lines.append(f"| `{name}` | `{value!r}` | {doc} |")
    out = HERE / "reference" / "_generated"
    out.mkdir(exist_ok=True)
    (out / "defaults.md").write_text("\n".join(lines).lstrip() + "\n")


def write_options() -> None:
    """Each cell magic's options table (``_options.py``: from the magic's own parser, with an
    example per option), included by the magic's reference page."""
    sys.path.insert(0, str(HERE))
    import _options

    from jupyter_sandbox.magics import CELL_MAGICS

    out = HERE / "reference" / "_generated"
    out.mkdir(exist_ok=True)
    for name in CELL_MAGICS:
        (out / f"options-{name}.md").write_text(_options.table(name, _options.parser_of(name)))


write_reference()
write_benchmarks()
write_defaults()
write_options()


# --- hooks ----------------------------------------------------------------------------------


def fences_to_literal(app, what, name, obj, options, lines: list[str]) -> None:  # noqa: ANN001
    """Docstrings draw text (the error tree) between Markdown fences, which ``help()`` shows as
    is; reStructuredText needs a literal block."""
    out, inside = [], False
    for line in lines:
        if line.strip().startswith("```"):
            out += ["::", ""] if not inside else [""]
            inside = not inside
        else:
            out.append("    " + line if inside else line)
    lines[:] = out


def notebook_cells_are_ipython(app, doctree) -> None:  # noqa: ANN001
    """The notebooks' cells are IPython (``%%orchestrate``, ``$var``), not plain Python."""
    from docutils import nodes

    if "notebooks/" not in app.env.docname:
        return
    for node in doctree.findall(nodes.literal_block):
        if node.get("language") == "python":
            node["language"] = "ipython3"


def setup(app) -> None:  # noqa: ANN001
    app.connect("autodoc-process-docstring", fences_to_literal)
    app.connect("doctree-read", notebook_cells_are_ipython)
