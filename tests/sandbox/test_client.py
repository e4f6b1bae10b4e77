"""The engine connection under fan-out: more requests in flight than the SDK's default pool
of 10 connections must not make urllib3 discard connections (its warning path read the size
of a pool the SDK could close meanwhile, raising ``AttributeError`` into a run)."""

from __future__ import annotations

import logging
import threading

import pytest

from jupyter_sandbox.sandbox._client import client

pytestmark = pytest.mark.docker


def test_many_requests_at_once_keep_every_connection(caplog: pytest.LogCaptureFixture) -> None:
    api = client().api
    start = threading.Barrier(32)

    def ask() -> None:
        start.wait()
        for _ in range(5):
            api.containers(all=True, filters={"label": "jupyter-sandbox.kind=nothing"})

    with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
        threads = [threading.Thread(target=ask) for _ in range(32)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not [r for r in caplog.records if "pool is full" in r.getMessage()]
