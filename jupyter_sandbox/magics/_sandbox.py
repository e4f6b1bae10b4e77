"""``%%sandbox``: run the cell once in a disposable Docker container with typed inputs/outputs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, get_args

from IPython.core.error import UsageError
from IPython.core.magic import cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments
from traitlets import Float, List, TraitError, Unicode, observe, validate

from .._shared import _defaults as default
from .._shared._errors import ContainerError, NonZeroExit, SandboxConfigError
from ..orchestration import bind_inputs
from ..records import RunRecord
from ..sandbox import (
    Isolation,
    Resources,
    Sandbox,
    SandboxRun,
    allow_list,
    choose,
    create,
    engine_choice,
    isolation_level,
    parse_secret_for,
    parse_size,
    read_ca_bundle,
)
from ._common import (
    SIZES,
    CellMagics,
    Size,
    check_variable,
    help_option,
    lookup,
    parse_options,
    size_option,
    split_env,
    split_names,
    split_requirements,
    usage_error,
)


def _declarations(values: list[str] | None, option: str) -> dict[str, str | None]:
    """``--in x --in y:int,z`` -> {"x": None, "y": "int", "z": None} (None: infer)."""
    declared: dict[str, str | None] = {}
    for item in split_names(values):
        name, _, kind = item.partition(":")
        check_variable(name, option)  # notebook variables in every mode
        declared[name] = kind or None
    return declared


def _check_name(name: str | None, inputs: Iterable[str], outputs: Iterable[str]) -> None:
    """``--name`` binds a callable in the notebook: never over a variable the same cell reads
    (``--in``) or writes (``--out``), which it would silently replace or be replaced by."""
    if name is None:
        return
    check_variable(name, "--name")
    for option, names in (("--in", inputs), ("--out", outputs)):
        if name in names:
            raise UsageError(
                f"--name {name}: {option} {name} is the same notebook variable and the callable"
                " would replace it; pick another name"
            )


def _env(pairs: list[str] | None) -> dict[str, str]:
    env = {}
    for pair in split_env(pairs):
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--env {pair}: expected KEY=VALUE")
        env[key] = value
    return env


@magics_class
class SandboxMagics(CellMagics):
    """Defaults are configurable: ``%config SandboxMagics.base_image = "python:3.12-slim"``."""

    options: ClassVar[Mapping[str, str]] = {
        "cpu": "--cpus",
        "env_vars": "--env",
        "secrets": "--secret",
    }
    """`create` parameters whose option is spelled otherwise (the rest: ``base_image`` ->
    ``--base-image``)."""

    base_image = Unicode(
        "", help="Image environments build on (default: $JUPYTER_SANDBOX_BASE_IMAGE or local)."
    ).tag(config=True)
    cluster = Unicode(
        "", help="Dask scheduler runs go to (tcp://host:8786); empty: the local engine."
    ).tag(config=True)
    cpus = Float(default.CPU, help="CPUs per run.").tag(config=True)
    memory = Size(default.MEMORY, help=f"Memory per run: {SIZES}.").tag(config=True)
    isolation = Unicode(
        "",
        help="Runtime of each run: container (runc) or gvisor (gVisor's runsc)"
        " (default: $JUPYTER_SANDBOX_ISOLATION or container).",
    ).tag(config=True)
    engine = Unicode(
        "",
        help="Container engine of every run: docker, podman (rootless Podman's Docker API) or"
        " auto (Docker, else Podman) (default: $JUPYTER_SANDBOX_ENGINE or auto).",
    ).tag(config=True)

    session_idle = Float(
        1800.0,
        help="Seconds a --session may wait for its next cell before it is stopped (0: never).",
    ).tag(config=True)

    link_limit = Size(
        default.LINK_LIMIT,
        help="File/Dir outputs one run links into sandbox-outputs/ beside the notebook"
        f" ({SIZES}; 0: none): bigger ones stay in their temp folder, with a note.",
    ).tag(config=True)

    ca_bundle = Unicode(
        default.CA_BUNDLE,
        help="PEM file of CA certificates every run's HTTPS trusts (and its build's, beside"
        " the host's), e.g. /etc/ssl/certs/ca-certificates.crt behind a TLS-inspecting proxy;"
        " a cell's --ca-bundle wins; empty: the image's own CAs.",
    ).tag(config=True)

    @validate("ca_bundle")
    def _ca_bundle_checked(self, proposal: Any) -> str:
        """A missing or non-PEM file fails the ``%config`` line, saying why; nothing changes."""
        if proposal["value"]:
            try:
                read_ca_bundle(proposal["value"])
            except SandboxConfigError as exc:
                raise TraitError(str(exc)) from None
        return str(proposal["value"])

    allow_net = List(
        Unicode(),
        help="Hosts every run may reach when its cell names no --network or --allow-net"
        ' (e.g. ["pypi.org", "api.example.com:443", "10.0.0.0/8"]); empty: no network.',
    ).tag(config=True)

    @validate("allow_net")
    def _allow_net_checked(self, proposal: Any) -> list[str]:
        """A bad entry fails the ``%config`` line, saying what to write; nothing changes."""
        if proposal["value"]:
            try:
                allow_list(proposal["value"])
            except SandboxConfigError as exc:
                raise TraitError(str(exc)) from None
        return list(proposal["value"])

    @validate("engine")
    def _engine_known(self, proposal: Any) -> str:
        """A wrong name fails the ``%config`` line (it says so) and changes nothing."""
        try:
            engine_choice(proposal["value"] or None)
        except SandboxConfigError as exc:
            raise TraitError(str(exc)) from None
        return str(proposal["value"])

    @observe("engine")
    def _engine_changed(self, change: Any) -> None:
        choose(change["new"])

    @magic_arguments("%sandbox")  # usage and help show %%sandbox
    @help_option
    @argument("--name", help="also define NAME in the notebook: NAME(x=...) runs it again")
    @argument(
        "--in",
        dest="inputs",
        nargs="+",
        action="extend",
        metavar="NAME[:TYPE]",
        help="notebook variables passed in (comma- or space-separated, repeatable; "
        "TYPE e.g. int, str, File; default: the value's type)",
    )
    @argument(
        "--out",
        dest="outputs",
        nargs="+",
        action="extend",
        metavar="NAME[:TYPE]",
        help="variables of the code set in the notebook afterwards (comma- or space-separated, "
        "repeatable; default TYPE: the value's type)",
    )
    @argument(
        "--packages",
        nargs="+",
        action="extend",
        metavar="P",
        help="pip packages, comma- or space-separated (installed into an image built once)",
    )
    @argument(
        "--system-packages",
        nargs="+",
        action="extend",
        metavar="P",
        help="apt packages, comma- or space-separated",
    )
    @argument("--image", help="prebuilt image to run as is (no build)")
    @argument("--base-image", metavar="IMAGE", help="image to build the environment on")
    @argument("--cpus", type=float, metavar="N", help=f"CPUs (default {default.CPU:g})")
    @argument(
        "--memory",
        type=size_option,
        metavar="SIZE",
        help=f"memory limit: {SIZES} (default {default.MEMORY})",
    )
    @argument(
        "--timeout",
        type=float,
        metavar="S",
        help=f"seconds before the run is stopped (default {default.SANDBOX_TIMEOUT:g})",
    )
    @argument("--cluster", metavar="ADDR", help="Dask scheduler to run on (default: this machine)")
    @argument(
        "--network",
        choices=("none", "bridge"),
        help=f"none or bridge: a network for the code (default {default.NETWORK})",
    )
    @argument(
        "--allow-net",
        nargs="+",
        action="extend",
        metavar="HOSTS",
        help="the only hosts the code reaches, through a filtering proxy (comma- or"
        " space-separated: pypi.org,api.example.com:443,10.0.0.0/8; ports 443 and 80 unless"
        " given)",
    )
    @argument(
        "--isolation",
        choices=get_args(Isolation),
        help="container (runc, default) or gvisor (the code's system calls served by gVisor)",
    )
    @argument(
        "--ca-bundle",
        metavar="PATH",
        help="PEM file of CA certificates the code's HTTPS trusts, mounted read-only"
        " (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT; the build's installs too), e.g. the"
        " host's behind a TLS-inspecting proxy (default: the image's own CAs)",
    )
    @argument(
        "--env",
        nargs="+",
        action="extend",
        metavar="K=V",
        help="environment variables for the code (comma- or space-separated)",
    )
    @argument(
        "--secret",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="host environment variables read at run time, masked as *** in all output"
        " (comma- or space-separated)",
    )
    @argument(
        "--secret-for",
        nargs="+",
        action="extend",
        metavar="HOST:NAME",
        help="a host environment variable the allow-list's proxy sends to HOST as"
        " 'Authorization: Bearer <value>'; the code sees a placeholder under NAME",
    )
    @argument(
        "--retries",
        type=int,
        default=default.RETRIES,
        metavar="N",
        help=f"re-runs of a failed container before the error surfaces (default {default.RETRIES})",
    )
    @argument(
        "--cache", action="store_true", help="reuse the result of an identical run (kept on disk)"
    )
    @argument(
        "--verbatim",
        action="store_true",
        help="run the cell as written: it reads /var/inputs/NAME, writes /var/outputs/NAME",
    )
    @argument(
        "--command", action="store_true", help="the cell is a bash script (files as --verbatim)"
    )
    @argument(
        "--quiet", action="store_true", help="only the code's own output: no build or run record"
    )
    @argument(
        "--session",
        metavar="NAME",
        help="run the cell in session NAME's container, whose variables and files stay across"
        " cells (the first cell starts it)",
    )
    @argument("--keep", action="store_true", help="the session outlives the kernel (--session)")
    @argument(
        "--from",
        dest="source",
        metavar="NAME[@TAG]",
        help="start the --session from a snapshot of another (%%sandbox_snapshot)",
    )
    @cell_magic
    def sandbox(self, line: str, cell: str) -> None:
        """Run the cell in a fresh container; declared outputs come back as notebook variables.

        Example:

            %%sandbox --in x --out result:int
            result = x * 2
        """  # fmt: skip
        shell = self.shell
        args = parse_options(self.sandbox, line)
        if args is None:  # --help: printed, nothing runs
            return None
        if args.verbatim and args.command:
            raise UsageError("--verbatim and --command are different modes: pick one")
        inputs = _declarations(args.inputs, "--in")
        outputs = _declarations(args.outputs, "--out")
        _check_name(args.name, inputs, outputs)
        values = {name: lookup(shell, name, "--in") for name in inputs}
        base_image = None if args.image else args.base_image or self.base_image or None
        if args.allow_net is not None and args.network is not None:
            raise UsageError(
                f"--allow-net and --network {args.network} both say what the code reaches: pick one"
            )
        network: str | list[str] = args.network or default.NETWORK
        if args.allow_net is not None:
            network = split_names(args.allow_net)
        elif args.network is None and self.allow_net:
            network = list(self.allow_net)
        if args.session:  # a session's cell: its own engine (`_sessions`)
            from ._sessions import run_cell

            return run_cell(
                self,
                args,
                cell,
                values,
                list(outputs),
                packages=split_requirements(args.packages) or [],
                resources=Resources(
                    cpu=self.cpus if args.cpus is None else args.cpus,
                    memory=self.memory if args.memory is None else args.memory,
                ),
                network=network,
                isolation=isolation_level(args.isolation or self.isolation),
                env_vars=_env(args.env),
                secrets=split_names(args.secret) or None,
            )
        if args.keep or args.source:
            raise UsageError("--keep and --from go with --session NAME")
        try:
            sandbox = create(
                args.name or "sandbox",
                # a leading newline: tracebacks count lines as the editor does (%% is line 1)
                code=None if args.command else "\n" + cell,
                command=["bash", "-c", cell] if args.command else None,
                inputs=inputs,
                outputs=outputs,
                packages=split_requirements(args.packages),
                system_packages=split_names(args.system_packages) or None,
                resources=Resources(
                    cpu=self.cpus if args.cpus is None else args.cpus,
                    memory=self.memory if args.memory is None else args.memory,
                ),
                image=args.image,
                auto_io=not args.verbatim,
                retries=args.retries,
                timeout=args.timeout,
                env_vars=_env(args.env),
                secrets=[*split_names(args.secret), *parse_secret_for(split_names(args.secret_for))]
                or None,
                cache="auto" if args.cache else "disable",
                base_image=base_image,
                cluster=args.cluster or self.cluster or None,
                network=network,
                isolation=isolation_level(args.isolation or self.isolation),
                ca_bundle=args.ca_bundle or self.ca_bundle or None,
            )
        except SandboxConfigError as exc:
            if args.allow_net is not None and exc.parameter == "network":
                raise usage_error(exc, {"network": "--allow-net"}) from None
            raise self.usage_error(exc) from None
        limit = parse_size(self.link_limit)
        if args.name:
            shell.user_ns[args.name] = ShownSandbox(sandbox, quiet=args.quiet, link_limit=limit)
        run = run_shown(sandbox, values, quiet=args.quiet, link_limit=limit)
        shell.user_ns.update(run.outputs)


def run_shown(
    sandbox: Sandbox, values: dict[str, Any], *, quiet: bool, link_limit: int
) -> SandboxRun:
    """One run with its live view and final record in the current cell; its `File`/`Dir`
    outputs linked beside the notebook (`_files`) for the record to link to."""
    try:
        sandbox.check(values)  # bad input: one line, before any progress is shown
    except SandboxConfigError as exc:
        raise usage_error(exc, SandboxMagics.options) from None
    from ..display import SandboxView, show_displays  # the views: loaded by the first cell

    view = SandboxView(quiet=quiet)
    try:
        run = sandbox.execute(values, on_event=view.on_event)
    except ContainerError as exc:
        if exc.record is not None:  # the error output shows the error: the record says raised
            view.finish({**exc.record, "raised": True})
        if isinstance(exc, NonZeroExit) and exc.stderr_tail:
            exc.streamed = True  # the cell shows its stderr: show_error says the rest once
        raise
    record = run.to_record()
    run.outputs = _link_files(record, run.outputs, link_limit)
    view.finish(record)
    show_displays(run.displays)  # figures, tables, the last value: after the record, as Out[n]
    return run


def _link_files(record: RunRecord, outputs: dict[str, Any], limit: int) -> dict[str, Any]:
    """Link the run's `File`/`Dir` outputs into ``sandbox-outputs/`` of the kernel's working
    directory (the notebook's folder in JupyterLab); each record row gets its link or note.

    Returns the outputs the notebook variables take: a linked one is the copy the record's
    link opens, so reading the variable and opening the link see one file (an edit saved in
    JupyterLab included). The run's own file (a ``--cache`` entry replays it) is not that
    copy, so neither writes through to the other."""
    from IPython import get_ipython

    from ._files import link_outputs  # loaded by the first run with file outputs

    shell = get_ipython()
    cell = int(shell.execution_count) - 1 if shell is not None else 0  # counted before it runs
    root = Path.cwd()
    taken = dict(outputs)
    for name, linked in link_outputs(outputs, root=root, cell=cell, limit=limit).items():
        row = record["outputs"][name]
        if isinstance(linked, str):
            row["note"] = linked
        else:
            row["link"] = linked
            row["preview"] = linked["path"]  # older renderers: the path a person can find
            taken[name] = type(outputs[name])(root / linked["path"])
    return taken


class ShownSandbox:
    """What ``--name NAME`` defines: the sandbox itself (``tool(NAME)``, ``NAME.run_async``...
    all work), except that calling it in a later cell shows the run there like the magic
    did: live output, then the record."""

    def __init__(self, sandbox: Sandbox, *, quiet: bool, link_limit: int) -> None:
        self._sandbox = sandbox
        self._quiet = quiet
        self._link_limit = link_limit

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sandbox, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``NAME(10.0, 20.0)`` or ``NAME(a=10.0, b=20.0)``: inputs in ``--in`` order, as the
        same sandbox takes them as a tool inside ``%%orchestrate``."""
        try:
            inputs = bind_inputs(self._sandbox.name, list(self._sandbox.inputs), args, kwargs)
        except TypeError as exc:
            raise UsageError(str(exc)) from None
        return run_shown(
            self._sandbox, inputs, quiet=self._quiet, link_limit=self._link_limit
        ).value

    def __repr__(self) -> str:
        return repr(self._sandbox)
