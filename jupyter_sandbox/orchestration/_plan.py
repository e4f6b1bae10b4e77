"""`plan`: a `RunSpec` turned into a ready `Driver`, the one place a run's driver is made.

Every door builds a `RunSpec` and calls `plan`; what the run gets is decided here, once,
from the spec's fields: the durable subsystem (only with a store or a session: a plain run
never loads it, nor SQLite), the stored run taken up or forked (`RunSpec.resume`), the
answers from a journal, a cache or a store's records, the approval policy, and the features
in their order (`_plug.plug`). Reading this module from top to bottom is the path of each
parameter from the door to the loop.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._shared._events import Output, ignore
from ._approval import Policy, govern, hand_down
from ._driver import Driver
from ._memo import Recorded
from ._plug import plug
from ._replay import Answers
from ._result import answered
from ._spec import Fork, RunSpec, TakeUp

if TYPE_CHECKING:
    from ._hooks import Feature
    from .durable import Durable, Store


def plan(spec: RunSpec, loop: asyncio.AbstractEventLoop) -> Driver:
    """The driver of ``spec``'s run, its async tools on ``loop``: not started (`_run_thread.start`
    runs it). A stored run given back if making its driver fails (`durable.driven`)."""
    if isinstance(spec.resume, (TakeUp, Fork)):
        return _stored(spec, loop)
    if spec.store is None and spec.session is None:  # the common run: nothing durable
        return _made(spec, spec.code, spec.inputs, loop, _plain_features(spec), None)
    return _durable(spec, loop)


def _plain_features(spec: RunSpec) -> tuple[list[Feature], Policy]:
    """A run without a store: a journal, a cache and gates at most."""
    records = None
    if spec.journal is not None and spec.resume:
        records = dict(enumerate(spec.journal.calls))
    answers = Answers(records, spec.cache) if spec.cache is not None or records else None
    policy = govern(spec.tools, spec.approver, durable=False)
    return plug(spec.tools, journal=spec.journal, answers=answers, policy=policy), policy


def _durable(spec: RunSpec, loop: asyncio.AbstractEventLoop) -> Driver:
    """A run with a store or a session: begun in the store (or a stored run of this cell
    taken up, ``resume=True``), the session's state loaded."""
    from .durable import begin, sessions

    store = _opened(spec)
    # A session's dump is read (and may be refused) before `begin` takes a stored run up.
    link = None
    if spec.session is not None:
        link = sessions.open(spec.session, scope=spec.scope, store=store)
    durable = restore = None
    records: dict[int, Recorded] | None = None
    if store is not None:
        emit = spec.on_event or ignore
        durable, restore, records = begin(
            store,
            code=spec.code,
            tools=spec.tools,
            inputs=spec.inputs,
            scope=spec.scope,
            cell=spec.cell,
            resume=bool(spec.resume),
            run_id=spec.run_id,
            limits=spec.limits,  # a resumed snapshot runs under these, not its own
            session=spec.session,
            told=lambda line: emit(Output("stderr", line)),
        )
    journal = spec.journal
    kept = journal is not None and spec.resume and restore is None
    if kept and journal is not None and (records is None or journal.failed):
        # this kernel's own journal keeps the values themselves (the store only plain data):
        # it answers the calls when the store has no records or its last run failed
        records = dict(enumerate(journal.calls))
    answers = Answers(records, spec.cache) if spec.cache is not None or records else None
    policy = govern(spec.tools, spec.approver, durable=durable is not None)
    features = plug(
        spec.tools,
        journal=journal,
        answers=answers,
        session=link,
        durable=durable,
        restore=restore,
        policy=policy,
    )
    checked = spec.type_check and restore is None  # a snapshot's code was checked
    driver = _made(spec, spec.code, spec.inputs, loop, (features, policy), durable, checked)
    driver.result.run_id = None if durable is None else durable.run_id
    driver.result.session = spec.session
    return driver


def _stored(spec: RunSpec, loop: asyncio.AbstractEventLoop) -> Driver:
    """A stored run continued (`TakeUp`) or forked (`Fork`): its own code, and inputs."""
    from .durable import fork, take_up

    store = _opened(spec)
    assert store is not None  # `RunSpec` refuses a stored run without one
    how = spec.resume
    if isinstance(how, TakeUp):
        taken = take_up(
            store,
            how.run_id,
            approve=how.approve,
            reason=how.reason,
            expect=how.expect,
            tools=spec.tools,
            inputs=spec.inputs,
            limits=spec.limits,
        )
    else:
        assert isinstance(how, Fork)
        taken = fork(
            store, how.run_id, how.call_index, how.value, tools=spec.tools, inputs=spec.inputs
        )
    policy = govern(spec.tools, spec.approver, durable=True)
    features = plug(
        spec.tools,
        answers=taken.answers,
        session=taken.link,
        durable=taken.durable,
        restore=taken.restore,
        policy=policy,
    )
    checked = spec.type_check and taken.restore is None
    driver = _made(spec, taken.code, taken.inputs, loop, (features, policy), taken.durable, checked)
    driver.result.run_id = taken.run_id
    driver.result.forked_from = taken.forked_from
    driver.result.session = taken.session
    if isinstance(how, TakeUp) and how.approve is not None:
        driver.result.answer = answered(how.approve, how.reason)
    return driver


def _opened(spec: RunSpec) -> Store | None:
    """The spec's store, opened (a path becomes a `Store`), its caps the spec's ``keep``:
    what the store keeps is the store's (`Store.make_room`)."""
    if spec.store is None:
        return None
    from .durable import open_store

    store = open_store(spec.store)
    if spec.keep is not None:
        store.caps = spec.keep
    return store


def _made(
    spec: RunSpec,
    code: str,
    inputs: Mapping[str, Any],
    loop: asyncio.AbstractEventLoop,
    planned: tuple[list[Feature], Policy],
    durable: Durable | None,
    type_check: bool | None = None,
) -> Driver:
    """The `Driver` itself, its policy handed down to the runs nested in its tools
    (`_approval.hand_down`); a durable run given back if this fails (`durable.driven`)."""
    features, policy = planned
    make = functools.partial(
        Driver,
        code,
        spec.tools,
        inputs,
        spec.limits,
        type_check=spec.type_check if type_check is None else type_check,
        on_event=spec.on_event or ignore,
        loop=loop,
        features=features,
        keep=spec.keep,
    )
    if durable is None:
        return hand_down(make(), policy)
    from .durable import driven

    return hand_down(driven(durable, make), policy)
