"""The ids the host's account files hand out (``/etc/passwd``, ``/etc/group``, ``/etc/subuid``,
``/etc/subgid``).

Both engines pick uids for what they confine from ranges no account may use: the Monty workers
(`orchestration._confine`) and the sandbox containers (`sandbox._pool`). The engines do not import
each other, so the reading of those files lives here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator


def account_lines(paths: Iterable[str]) -> Iterator[tuple[str, str, list[range]]]:
    """``(path, line, ids)`` for each line of these files, ``ids`` being the id ranges the line
    names (empty for a line that names none). A file that cannot be read has no lines."""
    for path in paths:
        try:
            with open(path) as file:
                lines = file.read().splitlines()
        except OSError:
            continue
        for line in lines:
            yield path, line, _id_ranges(line)


def _id_ranges(line: str) -> list[range]:
    fields = line.split(":")
    if len(fields) == 3:  # subuid, subgid: name:first:count
        spans = [(fields[1], fields[2])]
    elif len(fields) == 7:  # passwd: name:password:uid:gid:gecos:home:shell
        spans = [(fields[2], "1"), (fields[3], "1")]
    elif len(fields) == 4:  # group: name:password:gid:members
        spans = [(fields[2], "1")]
    else:
        spans = []
    return [
        range(int(first), int(first) + int(count))
        for first, count in spans
        if first.isdigit() and count.isdigit()
    ]
