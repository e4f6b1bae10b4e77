"""Command line: ``python -m jupyter_sandbox <command>`` (also installed as ``jupyter-sandbox``)."""

from __future__ import annotations

import argparse
import sys


def _install_kernel(args: argparse.Namespace) -> int:
    from ._kernelspec import DISPLAY_NAME, install_kernel

    dest = install_kernel(user=args.user, prefix=args.prefix)
    print(f"installed kernelspec {DISPLAY_NAME!r} in {dest}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jupyter-sandbox", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    kernel = commands.add_parser(
        "install-kernel", help='install the "Python 3 (sandbox)" kernelspec'
    )
    kernel.add_argument("--user", action="store_true", help="install for this user")
    kernel.add_argument("--prefix", help="install under this prefix (default: sys.prefix)")
    kernel.set_defaults(func=_install_kernel)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
