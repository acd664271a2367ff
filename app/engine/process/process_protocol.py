"""What crosses the engine process's pipe: one dataclass per call, event and status.

The window's side (app.engine.process.engine_process) and the child's side (app.engine.process.process_server) each
keep one dispatch table, message class → handler, and neither unpacks anything by position.
Adding a message means one class here and one entry in the receiving side's table.

Calls that answer carry ``call``: the child replies with a Result or a Failure naming it. The
window fills it in when it sends (``dataclasses.replace``). Reports about an engine say which start
they are about (``start``: the child counts the Start messages it got), so a stale one is recognised.

Benchmarks add their own messages through a separate entry (app.engine.process.bench_entry), never here.
Everything here must pickle: multiprocessing sends it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from app.core.settings.settings import EngineConfig, SamplingConfig
from app.engine.errors import EngineFailure
from app.engine.events import EngineEvent, EngineReady, StatusChanged
from app.engine.requests import MessageSpec, Resume, ToolChoiceSpec, ToolSpec

T = TypeVar("T")

# ---- window → engine process ------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Call(Generic[T]):
    """A message the child answers with a Result[T] or Failure naming ``call``."""

    call: int = 0


@dataclass(frozen=True, kw_only=True)
class Start(Call[EngineReady]):
    """Load the engine (the child's n-th Start: its reports about this engine carry n)."""

    config: EngineConfig
    kv_block_size: int | None = None


@dataclass(frozen=True, kw_only=True)
class Abort(Call[None]):
    request_id: str


@dataclass(frozen=True, kw_only=True)
class Shutdown(Call[None]):
    """Stop the engine; the process stays for the next Start."""


@dataclass(frozen=True)
class Generate:
    """Stream one reply; its events come back as Event messages, ending with a Finished."""

    request_id: str
    messages: tuple[MessageSpec, ...]
    sampling: SamplingConfig
    ignore_eos: bool = False
    resume: Resume | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoiceSpec | None = None


@dataclass(frozen=True)
class Cancel:
    """The window stopped listening to a reply: the child cancels its stream (vLLM aborts the request)."""

    request_id: str


@dataclass(frozen=True)
class AnswerNow:
    request_id: str


@dataclass(frozen=True)
class Exit:
    """End the engine and the process."""


# ---- engine process → window ------------------------------------------------------------------


@dataclass(frozen=True)
class Result(Generic[T]):
    """The answer to call ``call``: what its Call[T] returns (an EngineReady for Start, None for most)."""

    call: int
    value: T


@dataclass(frozen=True)
class Failure:
    call: int
    failure: EngineFailure = field(compare=False)  # exceptions compare by identity


@dataclass(frozen=True)
class Event:
    request_id: str
    event: EngineEvent


@dataclass(frozen=True)
class Status:
    event: StatusChanged


@dataclass(frozen=True)
class EngineDied:
    """The engine of the child's ``start``-th Start stopped by itself."""

    start: int


ToEngineProcess = Start | Abort | Shutdown | Generate | Cancel | AnswerNow | Exit
ToWindow = Result | Failure | Event | Status | EngineDied

Handlers = Mapping[type, Callable[[Any], None]]


class ProtocolError(RuntimeError):
    """A message no table knows: a side sent something the other was not built for."""


def dispatch(handlers: Handlers, message: object) -> None:
    """Hand ``message`` to its class's handler."""
    handler = handlers.get(type(message))
    if handler is None:
        raise ProtocolError(f"no handler for {type(message).__name__} on this side of the engine pipe")
    handler(message)
