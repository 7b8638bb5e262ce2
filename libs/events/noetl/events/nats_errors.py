"""The NATS adapter's error translation: nats-py's failures as the port's errors
(``noetl.events.port``), read here alone. Part of the adapter (docs/architecture.md, "The port").
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, ParamSpec, TypeVar

import nats.errors
from nats.js.errors import (
    APIError,
    NotFoundError,
)

from noetl.events.port import (
    BusError,
    BusRefusedError,
    BusUnavailableError,
    NoStreamError,
)
from noetl.events.retry import describe, is_transient

P = ParamSpec("P")
R = TypeVar("R")


@contextlib.contextmanager
def translating() -> Iterator[None]:
    """nats-py's failures raised inside as the port's (``port_error``); anything else as it is.
    For the few callers that hold a nats-py connection of their own (a CLI command's connect)."""
    try:
        yield
    except BusError:
        raise
    except Exception as e:
        err = port_error(e)
        if err is None:
            raise
        raise err from e


def ported(fn: Callable[P, Coroutine[Any, Any, R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """An operation of the port: what nats-py raises leaves it as ``noetl.events.port``'s error."""

    @functools.wraps(fn)
    async def op(*args: P.args, **kwargs: P.kwargs) -> R:
        try:  # inline, not ``translating()``: this is on the hot path (a try costs nothing)
            return await fn(*args, **kwargs)
        except BusError:
            raise
        except Exception as e:
            err = port_error(e)
            if err is None:
                raise
            raise err from e

    return op


_STREAM_NOT_FOUND = 10059  # nats-server's JSStreamNotFoundErr


def port_error(e: BaseException) -> BusError | None:
    """The port's error for a failure of nats-py (None when ``e`` is not one): the adapter's
    translation, so that what crosses the port is ``noetl.events.port``'s family and nats-py's
    classes and JetStream's error codes are read here alone. ``__cause__`` keeps the original.

    Passing by itself (``is_transient``: time-outs, no responders, a reconnect, no leader) is
    ``BusUnavailableError``; a message that can never be stored is ``BusRefusedError``; a stream that
    is not there ``NoStreamError``; any other nats-py failure a plain ``BusError``.
    """
    if isinstance(e, BusError):
        return e
    if not isinstance(e, nats.errors.Error | APIError | TimeoutError):
        return None
    out: BusError
    text = describe(e)
    if is_transient(e):
        out = BusUnavailableError(text)
    elif never_storable(e):
        out = BusRefusedError(text)
    elif isinstance(e, NotFoundError) and e.err_code == _STREAM_NOT_FOUND:
        out = NoStreamError(text)
    else:
        out = BusError(text)
    out.__cause__ = e
    return out


def never_storable(e: BaseException) -> bool:
    """Refusals of the message itself, never of the moment: a payload over ``max_payload``, a bad
    subject, a stream answering 400 (e.g. message size exceeds the stream's maximum). Anything
    else might pass with time and is retried."""
    if isinstance(e, nats.errors.MaxPayloadError | nats.errors.BadSubjectError):
        return True
    return isinstance(e, APIError) and e.code == 400 and not is_transient(e)
