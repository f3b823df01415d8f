"""The agent's own exception tree; everything it raises on purpose is one of these.

::

    AgentError
    ├── ConfigError            bad setting: the process exits 2 (CONFIG_EXIT) naming it
    ├── StartupError           start-up cannot go on (no descriptors, no fork server, no
    │                          in-cluster configuration): exit 1, the message printed as is
    ├── CapacityError          more owned nodes than the descriptor limit allows: exit 1
    ├── IllegalTransitionError a worker's handle asked for a move its lifecycle does not
    │                          allow (a bug): every worker stopped in order, exit 1
    ├── SelectorError          a label selector that does not parse (POOL_NODE_SELECTOR's
    │                          parser turns it into a ConfigError)
    ├── ProfileError           malformed custom resource: status ``error`` naming the field
    ├── BackendError           a control or telemetry backend failed this tick
    │   ├── SysfsError         reading/writing the host's sysfs failed (wraps OSError)
    │   ├── RaplUnavailableError    no writable package zone, or a limit that does not stick
    │   ├── HttpBackendError   the HTTP simulator/endpoint failed (wraps URLError, bad JSON,
    │   │                      and the two errors of an exchange below)
    │   └── GpuUnavailableError     no GPU control library/driver on the host (status ``blocked``)
    ├── FencedError            a write refused: it could land after the worker's fence
    ├── JournalError           the original host values cannot be recorded (STATE_DIR full):
    │                          nothing is written to the host
    ├── ProtocolError          a peer sent what its protocol does not allow: never a guess
    │   ├── PipeProtocolError  on a worker's pipe: a frame cut short, one that does not
    │   │                      unpickle, an unexpected message (the worker is stopped)
    │   └── HttpProtocolError  an answer that is not well-formed HTTP/1.x, or a request that
    │                          cannot be written as one (the connection is closed)
    ├── DisconnectedError      an HTTP endpoint closed a kept-alive connection before a byte
    │                          of its answer (the request is sent once more)
    └── KubeError              the Kubernetes API failed (wraps ApiException); never raised
        │                      itself: a subclass says whether to retry
        ├── KubePermanentError a retry would fail the same (403, 404, 422, no configuration)
        └── KubeTemporaryError worth retrying after ``delay`` seconds (5xx, 429, bad answers)
            └── KubeUnreachableError    no HTTP answer at all (refused, reset, timed out)

Third-party errors are wrapped with ``raise Ours(...) from exc`` so the cause is
kept and callers catch one family.
"""

from __future__ import annotations

import enum
import reprlib

_SHOWN = reprlib.Repr()  # keyword arguments only from Python 3.12 on
_SHOWN.maxstring, _SHOWN.maxlong, _SHOWN.maxother = 60, 40, 60
_SHOWN.maxlist = _SHOWN.maxdict = 4
_SHOWN.maxlevel = 2


def shown(value: object) -> str:
    """``repr(value)``, shortened: a bad value is quoted in messages that end up in an
    object's status, and a megabyte string there would make the status write fail."""
    return _SHOWN.repr(value)


CONFIG_EXIT = 2
"""Exit status of a configuration error: a value that does not parse, and one found
unusable at start (a directory that cannot be made or written, an address that cannot
be listened on, a kubeconfig that does not load)."""


class AgentError(Exception):
    """Root of every error the agent raises deliberately."""


class ConfigError(AgentError):
    """A configuration value does not parse or is out of range.

    The message always names the variable, the bad value and what is accepted.
    """

    def __init__(self, variable: str, value: object, accepted: str) -> None:
        self.variable = variable
        self.value = value
        self.accepted = accepted
        super().__init__(f"{variable}={value!r} is invalid: {accepted}")


class StartupError(AgentError):
    """Start-up cannot go on; the message is printed as is and the process exits 1."""


class CapacityError(AgentError):
    """This pod owns more nodes than its descriptor limit lets it run workers for."""


class IllegalTransitionError(AgentError):
    """A worker's handle was asked for a move its lifecycle
    (:mod:`agentpool.supervisor.lifecycle`) does not allow: a bug in the supervisor,
    refused before it could leave a node with two processes or none."""

    def __init__(self, node: str, source: enum.Enum, target: enum.Enum) -> None:
        self.node, self.source, self.target = node, source, target
        super().__init__(f"worker of node {node}: no move from {source.name} to {target.name}")


class SelectorError(AgentError):
    """A label selector's string form does not parse (says where)."""


class ProfileError(AgentError):
    """A NodePowerProfile or TelemetryProfile field is malformed (permanent until edited)."""

    def __init__(self, kind: str, name: str, field: str, problem: str) -> None:
        self.kind = kind
        self.name = name
        self.field = field
        self.problem = problem
        super().__init__(f"{kind} {shown(name)}: {field}: {problem}")


class BackendError(AgentError):
    """A backend could not do what this tick asked; the tick reports it."""


class SysfsError(BackendError):
    """A sysfs read or write failed."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"{path}: {problem}")


class RaplUnavailableError(BackendError):
    """RAPL cannot enforce a cap on this host; the DVFS fallback takes over."""


class GpuUnavailableError(BackendError):
    """The host's GPU management library cannot be used (missing, driver not loaded)."""


class HttpBackendError(BackendError):
    """An HTTP telemetry or control endpoint failed (transport, status or payload)."""

    def __init__(self, url: str, problem: str, status: int | None = None) -> None:
        self.url = url
        self.status = status
        super().__init__(f"{url}: {problem}")


class FencedError(AgentError):
    """A write to the node was refused: it could take effect after this worker's fence,
    when another pod may own the node (:mod:`agentpool.backends.fencing`).

    Not a :class:`BackendError`: nothing that handles a failed backend may swallow it
    and write on."""

    def __init__(self, what: str, late_s: float) -> None:
        self.what = what
        self.late_s = late_s
        when = (
            "before this worker got its first fence" if late_s == float("inf")
            else f"{late_s:.1f}s after this worker's fence"
        )
        super().__init__(f"{what} not sent: it could land {when}, when another pod may own "
                         "the node")


class JournalError(AgentError):
    """The journal of original host values could not be written (a full or read-only
    ``STATE_DIR``), so the write that needed it was not made.

    Not a :class:`BackendError`: the host is fine, and falling back to another backend
    would need a journal entry just the same."""

    def __init__(self, journal: str, problem: str) -> None:
        self.journal = journal
        self.problem = problem
        super().__init__(
            f"cannot record the original host values in the STATE_DIR journal {journal} "
            f"({problem}): nothing written to the host until it can be"
        )


class ProtocolError(AgentError):
    """A peer sent something its protocol does not allow; what it is, is not guessed."""


class PipeProtocolError(ProtocolError):
    """A worker's pipe carried something that is not a whole, well-formed message."""


class HttpProtocolError(ProtocolError):
    """An answer that is not well-formed HTTP/1.x, or a request that cannot be written."""


class DisconnectedError(AgentError):
    """The server closed the connection before a byte of its answer arrived: what a server
    that closed an idle kept-alive connection looks like to the next request."""


class KubeError(AgentError):
    """A Kubernetes API call failed. Raised only as one of its subclasses, which say whether
    a retry may succeed; catch it for "failed, whichever way"."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


class KubePermanentError(KubeError):
    """A Kubernetes API call failed in a way a retry would not change (403, 404, 422, a
    configuration that does not load)."""


class KubeTemporaryError(KubeError):
    """A Kubernetes API call failed in a way worth retrying (5xx, 429, network)."""

    def __init__(self, message: str, status: int | None = None, delay: float = 1.0) -> None:
        self.delay = delay
        super().__init__(message, status)


class KubeUnreachableError(KubeTemporaryError):
    """No HTTP answer came back: the connection was refused, reset or timed out.

    Unlike an answer with an error status, it says nothing about the request, only
    that the API server cannot be reached (:mod:`agentpool.kube.reachability`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, None)
