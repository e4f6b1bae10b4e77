"""``%%codegen``: the cell is a task in plain words; a model writes a program and its tests,
and the sandbox runs them until they pass.

Lines of the cell that start with ``- `` are constraints, the rest is the prompt. ``--in``
variables that are DataFrames or `File`s are samples (the model sees a summary of at most
``--max-sample-rows`` rows), the others plain inputs. On success the code goes into a new
``%%sandbox`` cell below (marked on its second line, ``# inserted by %%codegen, cell
3f2a9c1d``, so our JupyterLab extension replaces an older copy as it does for
``%%codemode --insert``), and ``--out`` is bound from one run of the tested code on the
``--in`` data itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from IPython.core.error import UsageError
from IPython.core.magic import cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Int, Unicode

from .._shared import _defaults as default
from .._shared._errors import SandboxConfigError

if TYPE_CHECKING:
    from ..codegen import CodeGenEvalResult

from ._common import (
    CellMagics,
    help_option,
    lookup,
    parse_options,
    split_names,
    split_requirements,
)

INSERT_MARK = "# inserted by %%codegen, cell"
"""The second line of an inserted ``%%sandbox`` cell, before a short hash of the source."""


@magics_class
class CodeGenMagics(CellMagics):
    """Defaults are configurable: ``%config CodeGenMagics.llm = 'my_llm'``."""

    options: ClassVar[Mapping[str, str]] = {
        "max_iterations": "--max-iterations",
        "base_packages": "--packages",
    }
    llm = Unicode(
        "",
        help="Notebook variable holding the model (messages -> text, or a pydantic-ai Model), "
        "or a pydantic-ai model name such as 'openai:gpt-4o'.",
    ).tag(config=True)
    max_iterations = Int(10, help="Iterations (code, build, tests) before giving up.").tag(
        config=True
    )
    store = Unicode(
        "",
        help="Folder of the journals and the cache (default: 'codegen' beside the "
        "orchestration store; '-' keeps none).",
    ).tag(config=True)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._inserted: dict[str, str] = {}

    @magic_arguments("%codegen")  # usage and help show %%codegen
    @help_option
    @argument(
        "--llm", metavar="NAME", help="notebook variable holding the model, or provider:model"
    )
    @argument(
        "--in",
        dest="inputs",
        nargs="+",
        action="extend",
        metavar="NAMES",
        help="notebook variables: DataFrames and Files are samples, the rest inputs",
    )
    @argument(
        "--out",
        dest="outputs",
        nargs="+",
        action="extend",
        metavar="NAME[:TYPE]",
        help="variables the code assigns, bound from a run on the --in data",
    )
    @argument("--packages", nargs="+", action="extend", metavar="P", help="pip packages to add")
    @argument("--max-iterations", type=int, metavar="N", help="iterations (default 10)")
    @argument("--max-sample-rows", type=int, metavar="N", help="sample rows the model sees")
    @argument("--resume", action="store_true", help="take up this task's journal where it stopped")
    @argument("--no-cache", action="store_true", help="ask the model again (keeps the new result)")
    @argument("--no-insert", action="store_true", help="insert no %%%%sandbox cell")
    @argument("--quiet", action="store_true", help="no iteration view")
    @cell_magic
    def codegen(self, line: str, cell: str) -> None:
        """Ask a model for a program and its tests; run the tests in the sandbox until they
        pass. Example:

            %%codegen --llm my_llm --in sales --out total:float --packages pandas
            Total of the amount column.
            - amounts may be missing: count them as 0
        """  # fmt: skip
        args = parse_options(self.codegen, line)
        if args is None:
            return
        prompt, constraints = _task(cell)
        name = args.llm or self.llm
        if not name:
            raise UsageError("no model: pass --llm NAME or %config CodeGenMagics.llm = 'NAME'")
        model = name if ":" in name else lookup(self.shell, name, "--llm")
        values = {n: lookup(self.shell, n, "--in") for n in split_names(args.inputs)}
        outputs = {}
        for item in split_names(args.outputs):
            out, _, kind = item.partition(":")
            outputs[out] = kind or None
        from ..codegen import AutoCoderAgent  # the engine and its view: loaded at first use
        from ..display import CodeGenView
        from ..sandbox import File

        samples = {n: v for n, v in values.items() if isinstance(v, File) or _is_frame(v)}
        inputs = {n: type(v) for n, v in values.items() if n not in samples}
        view = CodeGenView(quiet=args.quiet)
        rows = {} if args.max_sample_rows is None else {"max_sample_rows": args.max_sample_rows}
        try:
            agent = AutoCoderAgent(
                model,
                base_packages=split_requirements(args.packages),
                max_iterations=args.max_iterations or self.max_iterations,
                cache="override" if args.no_cache else "auto",
                store=self._store(),
                **rows,
            )
            result = agent.generate(
                prompt,
                constraints=constraints or None,
                samples=samples,
                inputs=inputs,
                outputs=outputs,
                on_event=view.on_event,
                resume=args.resume,
            )
        except SandboxConfigError as exc:
            raise self.usage_error(exc) from None
        view.finish(result.to_record())
        if not result.success:
            raise UsageError(f"%%codegen: {result.error}")
        if result.cached:
            print("%%codegen: the cached result of this task (--no-cache asks the model again)")
        if not args.no_insert:
            self._insert(args, result, [n for n in samples if _is_frame(samples[n])], line, cell)
        if outputs:
            value = result.run(**values)
            bound = value if len(outputs) > 1 else (value,)
            for out, each in zip(outputs, bound, strict=True):
                self.shell.user_ns[out] = each
        # nothing returned: the view showed the result, the code is in the cell below

    def _store(self) -> str:
        if self.store == "-":
            return ""
        return self.store or str(default.default_store_path().with_name("codegen"))

    def _insert(
        self, args: Any, result: CodeGenEvalResult, frames: list[str], line: str, cell: str
    ) -> None:
        """The tested code as a ``%%sandbox`` cell below that runs as the tests did. A
        DataFrame cannot go into a sandbox, its CSV can: each DataFrame ``NAME`` in ``--in``
        is bound as ``NAME_csv`` (a `File`) and the cell names it ``NAME`` first."""
        source = self.frontend_cell_id() or f"{line}\n{cell}"
        mark = f"{INSERT_MARK} {hashlib.sha256(source.encode()).hexdigest()[:8]}"
        names = [f"{n}_csv" if n in frames else n for n in split_names(args.inputs)]
        words = ["%%sandbox"]
        for option, items in (("--in", names), ("--out", split_names(args.outputs))):
            if items:
                words.append(f"{option} {','.join(items)}")
        if result.detected_packages:
            words.append(f"--packages {','.join(result.detected_packages)}")
        aliases = "".join(f"{n} = {n}_csv  # the CSV of the DataFrame {n}\n" for n in frames)
        text = " ".join(words) + f"\n{mark}\n{aliases}{result.solution.code.rstrip()}\n"
        if self._inserted.get(mark) == text:
            print(f"%%codegen: not inserted again: the cell below marked `{mark}` has this code")
            return
        files = result.inputs_for({n: self.shell.user_ns[n] for n in frames})
        for name in frames:
            self.shell.user_ns[f"{name}_csv"] = files[name]
        self.shell.set_next_input(text)
        self._inserted[mark] = text


def _task(cell: str) -> tuple[str, list[str]]:
    """The cell as the prompt and its ``- `` lines as constraints."""
    prompt, constraints = [], []
    for text in cell.splitlines():
        if text.lstrip().startswith("- "):
            constraints.append(text.lstrip()[2:].strip())
        else:
            prompt.append(text)
    task = "\n".join(prompt).strip()
    if not task:
        raise UsageError("%%codegen: the cell is the task; describe it in plain words")
    return task, constraints


def _is_frame(value: object) -> bool:
    return all(hasattr(value, a) for a in ("to_csv", "columns", "head"))
