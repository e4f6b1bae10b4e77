"""The digest that seals an approved call, and how a paused call's arguments are shown
(`orchestration._approval`): the same call hashes alike in any process, a
secret the call holds does not reach the digest, and only the largest arguments are cut."""

from __future__ import annotations

import os
import subprocess
import sys

from jupyter_sandbox.orchestration._approval import APPROVAL_CHARS, digest, shown

SET_DIGEST = (
    "from jupyter_sandbox.orchestration._approval import digest;"
    "print(digest('f', [{'b', 'a', 'zz', 'q', 'mm', 'c'}], {'k': frozenset({'x', 'y', 'w'})}))"
)


def test_a_call_holding_a_set_hashes_alike_whatever_the_hash_seed():
    """A set's order changes with PYTHONHASHSEED (a restarted kernel): its digest does not."""
    found = {
        subprocess.run(
            [sys.executable, "-c", SET_DIGEST],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert len(found) == 1 and len(found.pop()) == 16


def test_a_secret_in_a_call_does_not_reach_its_digest():
    """A saved notebook shows the digest: guessing the secret must not be testable against it."""
    one = digest("send", ["token=S3CR3T-one"], {}, ("S3CR3T-one",))
    other = digest("send", ["token=S3CR3T-two"], {}, ("S3CR3T-two",))
    assert one == other
    assert digest("send", ["token=S3CR3T-one"], {}) != one  # unmasked: the value counts


def test_only_the_largest_arguments_are_cut_and_each_cut_is_said():
    huge = "x" * (APPROVAL_CHARS * 3)
    paths = [f"/data/{i}" for i in range(13)]
    seen = shown([huge, paths], {"force": True})
    assert seen.args[1] == repr(paths) and seen.kwargs == {"force": "True"}
    assert seen.cut == {"0": len(repr(huge))}
    assert sum(map(len, [*seen.args, *seen.kwargs.values()])) == APPROVAL_CHARS
