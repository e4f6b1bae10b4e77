"""Every exception jupyter-sandbox raises, grouped by cause.

```
SandboxError                      base: catch this to catch anything of ours
├── SandboxConfigError            bad arguments, found before anything runs (also a ValueError)
├── OrchestrationError            %%orchestrate / orchestrate(): the code run in Monty failed
│   ├── TypeCheckError            rejected by the type checker before any tool ran
│   ├── ToolError                 a tool raised and the code did not catch it
│   ├── LimitExceeded             a limit hit: time, memory, calls... (``.limit`` names it)
│   ├── Interrupted               the user interrupted the run (Ctrl-C)
│   └── CodeModeError             the agent loop ran out of attempts (``.attempts`` has each)
├── StoreError                    the durable store: unusable, unknown run, or a refused blob
└── ContainerError                %%sandbox / create().run(): the Docker side
    ├── DockerUnavailable         no engine reachable (the message says how to start one)
    ├── IsolationUnavailable      the engine lacks the isolation level asked for (gVisor)
    ├── ImageBuildError           image build failed (``.log`` has the failing step's log)
    │   └── InvalidPackageError   a pip or apt package does not exist (``.package``)
    ├── UnusableImage             the image cannot start the program (no python3, no bash)
    ├── SandboxTimeout            the container ran past its timeout
    ├── OutOfMemory               the container was killed for memory
    ├── OutputLimitExceeded       stdout+stderr, or /var/outputs, passed its cap
    ├── SandboxCancelled          cancelled or interrupted (Ctrl-C); the container was removed
    ├── NonZeroExit               the code exited non-zero (``.exit_code``, ``.stderr_tail``)
    ├── SessionLost               a session's container is gone, its state with it (``.oom``)
    ├── SessionCellError          a session's cell raised (``.traceback``); the session stays
    └── OutputError               a declared output is unusable (``.name`` names it)
        ├── MissingOutput         it was not written
        └── InvalidOutput         it was written but does not parse as its declared type
```

"Sandbox" in a name means the Docker side (or, in `SandboxError` and `SandboxConfigError`,
the whole package); the Monty side is `OrchestrationError` and its children.

``retries`` re-run a run whose container failed (`NonZeroExit`, `SandboxTimeout`,
`OutOfMemory`, `OutputLimitExceeded`, an `OutputError`): what may go otherwise next time. Bad
arguments, a failed build, an `UnusableImage`, an engine error and a cancellation are raised
at once.

An error whose remedy is a parameter names it in Python words and carries it as data:
``.parameter`` (``"max_calls"``, ``"network"``, ``"type_check"``...) and ``.hint``, the phrase
of the message that spells it (``"Limits(max_calls=...)"``); the magics show their own option
in its place (``--max-calls``). Both are empty when the message names none.

A `ContainerError` raised by a run carries ``.record``: the JSON-safe run record so far (what
``%%sandbox`` displays even when the run failed), or None when nothing ran. An
`OrchestrationError` carries ``.result``: the trace and output up to the failure.

The classes are defined in a private module; this is their public home, and their
``__module__`` says so (a traceback reads ``jupyter_sandbox.errors.ToolError``).
"""

from __future__ import annotations

from ._shared._errors import (
    CodeModeError,
    ContainerError,
    DockerUnavailable,
    ImageBuildError,
    Interrupted,
    InvalidOutput,
    InvalidPackageError,
    IsolationUnavailable,
    LimitExceeded,
    MissingOutput,
    NonZeroExit,
    OrchestrationError,
    OutOfMemory,
    OutputError,
    OutputLimitExceeded,
    SandboxCancelled,
    SandboxConfigError,
    SandboxError,
    SandboxTimeout,
    SessionCellError,
    SessionLost,
    StoreError,
    ToolError,
    TypeCheckError,
    UnusableImage,
)
from ._shared._public import publish

__all__ = [
    "CodeModeError",
    "ContainerError",
    "DockerUnavailable",
    "ImageBuildError",
    "Interrupted",
    "InvalidOutput",
    "InvalidPackageError",
    "IsolationUnavailable",
    "LimitExceeded",
    "MissingOutput",
    "NonZeroExit",
    "OrchestrationError",
    "OutOfMemory",
    "OutputError",
    "OutputLimitExceeded",
    "SandboxCancelled",
    "SandboxConfigError",
    "SandboxError",
    "SandboxTimeout",
    "SessionCellError",
    "SessionLost",
    "StoreError",
    "ToolError",
    "TypeCheckError",
    "UnusableImage",
]

publish(__name__, globals(), __all__)
