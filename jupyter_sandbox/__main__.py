"""Command line: ``python -m jupyter_sandbox <command>`` (also installed as ``jupyter-sandbox``)."""

from __future__ import annotations

import argparse
import sys


def _install_kernel(args: argparse.Namespace) -> int:
    from ._kernelspec import DISPLAY_NAME, install_kernel

    dest = install_kernel(user=args.user, prefix=args.prefix)
    print(f"installed kernelspec {DISPLAY_NAME!r} in {dest}")
    return 0


def _base_image(args: argparse.Namespace) -> int:
    from .sandbox import build_base_image

    build_base_image(args.tag, build_tools=args.build_tools, force=args.force)
    return 0


def _images(args: argparse.Namespace) -> int:
    from .sandbox import list_images, prune

    if args.action == "prune":
        for tag in prune(include_base=args.all):
            print(f"removed {tag}")
        return 0
    for row in list_images():
        name = ", ".join(row["tags"]) or row["id"]
        packages = " ".join(filter(None, (row["packages"], row["system_packages"])))
        print(f"{row['kind']:5} {row['size_mb']:>8} MB  {name}  {packages}".rstrip())
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from ._doctor import failed, report, run_checks

    checks = run_checks(base_image=args.base_image)
    for line in report(checks):
        print(line)
    return 1 if failed(checks) else 0


def _add_sandbox_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from .sandbox import DEFAULT_BASE_IMAGE

    base = commands.add_parser(
        "base-image", help="build the local Python base image (debootstrap, no registry)"
    )
    base.add_argument("--tag", default=DEFAULT_BASE_IMAGE, help=f"default {DEFAULT_BASE_IMAGE}")
    base.add_argument("--build-tools", action="store_true", help="include gcc, make, libc6-dev")
    base.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    base.set_defaults(func=_base_image)
    images = commands.add_parser("images", help="list or prune jupyter-sandbox images")
    images.add_argument("action", nargs="?", choices=("list", "prune"), default="list")
    images.add_argument("--all", action="store_true", help="prune: the base image too")
    images.set_defaults(func=_images)
    doctor = commands.add_parser(
        "doctor",
        help="check this machine's setup: one line per check, with the fix for each problem "
        "(exit status 1 when a required check fails)",
    )
    doctor.add_argument(
        "--base-image", metavar="IMAGE", help="check this base image (default: as %%sandbox)"
    )
    doctor.set_defaults(func=_doctor)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyter-sandbox",
        description="Set up jupyter-sandbox on this machine (also: python -m jupyter_sandbox).",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    kernel = commands.add_parser(
        "install-kernel", help='install the "Python 3 (sandbox)" kernelspec'
    )
    kernel.add_argument("--user", action="store_true", help="install for this user")
    kernel.add_argument(
        "--prefix",
        help="install under this prefix (default: sys.prefix, or per user where it is read-only)",
    )
    kernel.set_defaults(func=_install_kernel)
    _add_sandbox_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
