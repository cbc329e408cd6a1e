"""The one module of tdrl that imports Ray: connection, bounded waits and error translation.

Every other package of tdrl imports without Ray; ``import tdrl.distributed`` raises an
``ImportError`` that names the extra to install when Ray is missing.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

try:
    import ray
    from ray import exceptions as ray_errors
except ImportError as err:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        f"tdrl.distributed: Ray is not installed (got {type(err).__name__}: {err}; expected the "
        "'ray' package). Install it with `pip install tdrl[ray]`."
    ) from err

__all__ = [
    "ActorLost",
    "connect",
    "get",
    "init_within",
    "kill",
    "kill_and_wait",
    "lost",
    "ray",
    "remote_cause",
    "remote_traceback",
    "wait_one",
]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CARETS = re.compile(r"\s*[\^~]+\s*")
# An actor or the object it was producing is gone: the work must be done again elsewhere.
_LOST: tuple[type[BaseException], ...] = (
    ray_errors.RayActorError,  # ActorDiedError and ActorUnavailableError derive from it
    ray_errors.ObjectLostError,  # also OwnerDiedError, ObjectReconstructionFailedError, ...
    ray_errors.WorkerCrashedError,
    ray_errors.NodeDiedError,
)


class ActorLost(Exception):
    """Internal: an actor died or became unreachable while answering ``what``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"{type(cause).__name__}: {str(cause).strip().splitlines()[0][:300]}")
        self.cause = cause


def lost(err: BaseException) -> bool:
    """Whether ``err`` means the actor (or its result) is gone rather than that it raised.

    Examples:
        >>> lost(ValueError("a bug in the env")), lost(ray_errors.ActorDiedError())
        (False, True)
    """
    return isinstance(err, _LOST)


def remote_cause(err: BaseException) -> BaseException | None:
    """The exception an actor raised, as raised there (None when Ray could not rebuild it).

    Examples:
        >>> remote_cause(ValueError("local")) is None
        True
    """
    if isinstance(err, ray_errors.RayTaskError):
        cause = getattr(err, "cause", None)
        if isinstance(cause, Exception) and not isinstance(cause, ray_errors.RayTaskError):
            return cause
    return None


def remote_traceback(err: BaseException) -> str:
    """The remote traceback Ray attached to ``err`` (or to its cause), without colour codes and
    caret lines; ``err``'s own traceback when it carries none.

    Examples:
        >>> remote_traceback(ValueError("local")).splitlines()[-1]
        'ValueError: local'
    """
    for candidate in (err, err.__cause__):
        if isinstance(candidate, ray_errors.RayTaskError):
            text = _ANSI.sub("", str(candidate))
            head, _, body = text.partition("\n")
            lines = [line for line in body.splitlines() if not _CARETS.fullmatch(line)]
            return "\n".join([f"{head.strip()}", "Traceback (most recent call last):", *lines])
    return "".join(traceback.format_exception(type(err), err, err.__traceback__))


def connect(owner: str, ray_init_config: Mapping[str, Any] | None, timeout: float = 30.0) -> bool:
    """Connects this process to Ray; returns whether this call started (or joined) it.

    Ray already initialised in this process is used as it is. Otherwise ``ray.init`` runs with
    ``ray_init_config``, with Ray's rules: it joins the cluster the config or ``RAY_ADDRESS``
    names, else a cluster started with ``ray start`` on this machine, else it starts a local
    instance (:func:`connect_ray` always starts a new one). The connection gets ``timeout``
    seconds (see :func:`init_within`).

    Raises:
        ValueError: ``ray_init_config`` is given while Ray is already initialised (it could not
            be honoured).
        TimeoutError: no connection within ``timeout`` seconds.

    Examples:
        >>> from tdrl.distributed import connect_ray
        >>> _ = connect_ray()
        >>> connect("example", None)  # initialised already: used as it is
        False
    """
    if ray.is_initialized():
        if ray_init_config:
            raise ValueError(
                f"{owner}: Ray is already initialised in this process, so ray_init_config "
                f"cannot be applied (got {dict(ray_init_config)!r}; expected None). Drop "
                "ray_init_config, or pass it before anything else starts Ray."
            )
        return False
    if ray_init_config is not None and not isinstance(ray_init_config, Mapping):
        raise TypeError(
            f"{owner}: ray_init_config must be a dict of ray.init arguments (got "
            f"{type(ray_init_config).__name__}). Pass e.g. {{'address': 'auto'}}."
        )
    init_within(owner, dict(ray_init_config or {}), timeout)
    return True


class _NoSigtermNote(logging.Filter):
    """Drops Ray's note that a ``ray.init`` outside the main thread sets no SIGTERM handler
    (:func:`init_within` runs it in a helper thread on purpose)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()


def _endpoint(address: Any) -> tuple[str, int] | None:
    """``(host, port)`` of an explicit ``host:port`` or ``ray://host:port`` address."""
    if not isinstance(address, str):
        return None
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def _probe(endpoint: tuple[str, int], deadline: float) -> tuple[int, BaseException | None]:
    """Opens TCP connections to ``endpoint`` until one succeeds or ``deadline`` passes;
    returns the attempts and the last error (None: reachable)."""
    attempts, last = 0, None
    while True:
        attempts += 1
        left = deadline - time.monotonic()
        try:
            socket.create_connection(endpoint, timeout=max(0.1, min(left, 5.0))).close()
            return attempts, None
        except OSError as err:
            last = err
        if deadline - time.monotonic() <= 0.5:
            return attempts, last
        time.sleep(0.5)  # a head node that is starting: try again


def init_within(owner: str, kwargs: Mapping[str, Any], timeout: float) -> None:
    """``ray.init(**kwargs)`` that gives up after ``timeout`` seconds.

    Ray retries a cluster it cannot reach for about 13 minutes. Here an explicit
    ``host:port`` address is first probed with TCP connections (again every 0.5 s while the
    time lasts: a head node may be starting), then ``ray.init`` joins the cluster in a helper
    thread that this call waits for until the time is up. An attempt given up on goes on in the
    background and disconnects if it ever connects, so the process is left unconnected.

    Starting a new local instance (``address`` None or ``"local"``) runs in the calling thread
    and is bounded by Ray's own start-up checks, not by ``timeout``: Ray ties the processes it
    starts to the thread that starts them, which must therefore live on.

    Raises:
        ValueError: ``timeout`` is not a finite number of seconds > 0.
        TimeoutError: no connection within ``timeout``; the message says what was tried.
        ConnectionError: Ray refused the address (e.g. ``"auto"`` with no cluster running).

    Examples:
        >>> import socket
        >>> with socket.socket() as s:
        ...     s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]  # nothing listens there
        >>> init_within("example", {"address": f"127.0.0.1:{port}"}, 0.5)
        Traceback (most recent call last):
        ...
        TimeoutError: example: no Ray cluster reachable at 127.0.0.1:... within 0.5 s ...
    """
    ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
    if not ok or not timeout > 0 or math.isinf(timeout):
        raise ValueError(
            f"{owner}: timeout must be a finite number of seconds > 0 (got {timeout!r}). Pass "
            "e.g. 30.0."
        )
    deadline = time.monotonic() + timeout
    address = kwargs.get("address")
    if address in (None, "local") and not os.environ.get("RAY_ADDRESS"):
        ray.init(**kwargs)  # starts a local instance: nothing to wait for over the network
        return
    if address in (None, "auto"):  # Ray joins the cluster RAY_ADDRESS names
        address = os.environ.get("RAY_ADDRESS") or address
    endpoint = _endpoint(address)
    if endpoint is not None:
        attempts, err = _probe(endpoint, deadline)
        if err is not None:
            raise TimeoutError(
                f"{owner}: no Ray cluster reachable at {address} within {timeout:g} s (got "
                f"{type(err).__name__}: {err} on the last of {attempts} TCP connection attempts "
                f"to {endpoint[0]}:{endpoint[1]}; expected a Ray head node listening there). "
                "Check the address and that `ray start --head` runs there, or pass a larger "
                "timeout."
            ) from None
    _init_in_thread(owner, kwargs, deadline, timeout)


def _init_in_thread(owner: str, kwargs: Mapping[str, Any], deadline: float, timeout: float) -> None:
    state: dict[str, Any] = {"abandoned": False}
    lock, finished = threading.Lock(), threading.Event()
    note = _NoSigtermNote()
    worker_log = logging.getLogger("ray._private.worker")

    def attempt() -> None:
        try:
            ray.init(**kwargs)
            state["ok"] = True
        except BaseException as err:  # handed to the caller
            state["error"] = err
        with lock:
            finished.set()
            if state["abandoned"] and state.get("ok"):
                ray.shutdown()  # the caller gave up on this connection: do not keep it

    worker_log.addFilter(note)
    try:
        threading.Thread(target=attempt, name="tdrl-ray-connect", daemon=True).start()
        finished.wait(max(0.0, deadline - time.monotonic()))
        with lock:
            if not finished.is_set():
                state["abandoned"] = True
                shown = ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
                raise TimeoutError(
                    f"{owner}: ray.init({shown}) did not connect within {timeout:g} s (got no "
                    "answer from a Ray cluster there; expected the head node's GCS to answer). "
                    "Check that the address is a Ray head node (`ray status --address ...`), "
                    "or pass a larger timeout."
                )
    finally:
        worker_log.removeFilter(note)
    error = state.get("error")
    if isinstance(error, BaseException):
        if isinstance(error, ConnectionError):
            raise ConnectionError(f"{owner}: could not connect to Ray ({error}).") from error
        raise error


def get(ref: Any, timeout: float, what: str) -> Any:
    """``ray.get(ref)`` within ``timeout`` seconds.

    An exception raised in the actor is raised again as it was raised there (its Ray wrapper
    as the cause); a lost actor raises :class:`ActorLost`.

    Raises:
        TimeoutError: no answer within ``timeout`` seconds, naming ``what``.
    """
    try:
        return ray.get(ref, timeout=timeout)
    except ray_errors.GetTimeoutError:
        raise TimeoutError(
            f"{what}: no answer within {timeout} s (expected one sooner). The actor may be "
            "stuck or the cluster short of resources; raise the timeout in RayOptions if the "
            "work is just slow."
        ) from None
    except Exception as err:
        if lost(err):
            raise ActorLost(err) from err
        cause = remote_cause(err)
        if cause is not None:
            raise cause from err
        raise


def wait_one(refs: Sequence[Any], deadline: float) -> Any | None:
    """The first of ``refs`` that is ready (a result or an error), or None at ``deadline``
    (a ``time.monotonic()`` value)."""
    left = max(0.0, deadline - time.monotonic())
    ready, _ = ray.wait(list(refs), num_returns=1, timeout=left)
    return ready[0] if ready else None


def kill(handle: Any) -> None:
    """Kills an actor now (no Ray-side restart); nothing happens when it is gone already or
    Ray was shut down.

    Examples:
        >>> kill(None)
    """
    if handle is None or not ray.is_initialized():
        return
    with contextlib.suppress(Exception):
        ray.kill(handle, no_restart=True)


def kill_and_wait(handles: Sequence[Any], timeout: float) -> None:
    """Kills the actors, then returns once Ray reports each of them dead, or after ``timeout``
    seconds in all: ``ray.kill`` only sends the order, and a call already on its way could
    still run on an actor that is about to die.

    Examples:
        >>> kill_and_wait([None], timeout=1.0)
    """
    live = [h for h in handles if h is not None]
    for handle in live:
        kill(handle)
    if not live or not ray.is_initialized():
        return
    deadline = time.monotonic() + timeout
    for handle in live:
        # Calls to one actor run in order: a probe that fails with RayActorError comes after the
        # kill took effect. A probe that still ran (the kill is on its way) is followed by another.
        while (left := deadline - time.monotonic()) > 0:
            try:
                ray.get(handle.__ray_ready__.remote(), timeout=left)
            except Exception:  # dead (RayActorError), or no answer before the deadline
                break
