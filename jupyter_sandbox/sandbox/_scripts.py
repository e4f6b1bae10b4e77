"""The shell scripts a run's container runs as its own process (PID 1: it reaps orphans, and
the code cannot kill it), and the end they share.

`OWN_SCRIPT` is a container made for its run (no spare waited): the program is its argument.
`SPARE_SCRIPT` is a spare's: the interpreter (`_warm.WAITER`) is started ahead and waits for
its one program on the attach stream. Both end in `STATUS`, which hands the host the
program's exit status and the outputs' tar (`_container` reads them; `extract_outputs`).
"""

from __future__ import annotations

from ._io import OUTPUTS

WRAPPER = "jupyter-sandbox"
"""The scripts' ``$0``: ``sh`` names it in its own errors (`OWN_SCRIPT`, `SPARE_SCRIPT`)."""
MARKER_START = f"\x1e{WRAPPER} outputs "
"""How every run's marker begins (`_container` adds a random token and ``\x1e``)."""
STATUS = """printf '%s' "$m" >&2
printf '%s%s %s\\n' "$m" "$rc" "$o"
[ "$rc" -eq 0 ] && [ "$n" -gt 0 ] || exit "$rc"
i=0 k=0
while [ "$i" -lt "$n" ]; do
if [ ! -x {outputs} ] || [ -e "{outputs}/$1" ] || [ -L "{outputs}/$1" ]
then set -- "$@" "$1"; k=$((k + 1)); fi
shift; i=$((i + 1))
done
shift $(($# - k))
e= t=0
if [ "$k" -gt 0 ]; then exec 3>&1; e=$(tar -C {outputs} -cf - -- "$@" 2>&1 >&3 3>&-); t=$?; fi
l='
'
printf '%star %s %s\\n' "$m" "$t" "${e%%"$l"*}"
exit 0
""".replace("{outputs}", OUTPUTS)
"""The end both scripts share: the marker on stderr (the program's stderr is all before it),
then on stdout the marker, status line and, after exit 0, the outputs' tar (the positional
parameters are the ``n`` names, then anything else: only the names that exist go to tar, so
a missing output stays `MissingOutput`), then the marker, ``tar``, and tar's exit status and
first message on a line (`verdict`): tar skips what it cannot read with only that message."""
_KILLER = '{ sleep "$1" && kill -KILL -1; } </dev/null >/dev/null 2>&1 &\n'
"""A background ``sleep`` that kills the run at the container's `_pool.lifetime`, should both
the kernel and its watchdog be gone."""
_OOM = """rc=$? o=0
[ "$rc" -ne 137 ] || for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control
do [ -r "$f" ] && while read -r k v; do [ "$k" != oom_kill ] || o=$v; done <"$f"; done
"""
"""The program's exit status and, after a SIGKILL, the OOM kills counted by the memory cgroup
(v2 or v1): the engine's ``OOMKilled`` would come only after teardown."""
OWN_SCRIPT = (
    "IFS= read -r m\n"
    + _KILLER
    + """n=$2
shift 2
(shift "$n"; e=; while IFS= read -r l; do e="$e$l
"; done; eval "$e"; exec "$@" </dev/null)
"""
    + _OOM
    + STATUS
)
"""A container made for its run. The marker and the environment come on stdin; the
environment is evaluated in the subshell that becomes the program, so no name it sets
(``n``, ``IFS``, ``PATH``) reaches the script's own lines."""
SPARE_SCRIPT = (
    _KILLER
    + """{start_env} python3 -c "$2" "$!"
"""
    + _OOM
    + """IFS= read -r m || exit 0
case $m in "$3"*) ;; *) exit 0;; esac
read -r n
shift $#
i=0
while [ "$i" -lt "$n" ]; do IFS= read -r l; set -- "$@" "$l"; i=$((i + 1)); done
"""
    + STATUS
)
"""A spare: the interpreter (the waiter, ``$2``, told the killer's pid) starts at once and
waits for its program on stdin (`_warm`). Once it exited, the rest of stdin is this script's:
the run's marker (``$3`` begins every marker: a spare whose waiter died before its run reads
the host's probe instead, and ends, so the host sees its stream end), then the number of
output names and the names, one a line (identifiers). ``{start_env}`` is filled in by `_warm`
(the variables the interpreter starts with)."""
