"""What the client raises. Every failure is an OverlapdError: `code` the
grpc.StatusCode, `message` the reason; the subclasses below are also the
built-in exception a Python caller would expect."""
import errno
import os
from typing import Optional

import grpc


class OverlapdError(Exception):
    """A call the daemon refused or could not answer, or an argument the
    client refused before sending: `code` is the grpc.StatusCode (e.g.
    INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE when no daemon answers),
    `message` the reason, `address` the daemon's."""

    def __init__(self, code: grpc.StatusCode, message: str, address: str = ""):
        super().__init__("%s: %s" % (code.name, message))
        self.code = code
        self.message = message
        self.address = address

    def __str__(self) -> str:
        return "%s: %s" % (self.code.name, self.message)


class InvalidArgumentError(OverlapdError, ValueError):
    """An argument the client refused before sending (code INVALID_ARGUMENT)."""

    def __init__(self, message: str, address: str = ""):
        super().__init__(grpc.StatusCode.INVALID_ARGUMENT, message, address)


class InputFileError(OverlapdError, FileNotFoundError):
    """A file the client was given (a graph, a TLS file) that it cannot read
    (code INVALID_ARGUMENT); `filename` is its path."""

    def __init__(self, what: str, path: str, reason: str, error: Optional[int] = errno.ENOENT):
        OverlapdError.__init__(self, grpc.StatusCode.INVALID_ARGUMENT,
                               "%s: cannot read %s: %s" % (what, path, reason))
        self.errno = error
        self.strerror = reason
        self.filename = path


class JobTimeoutError(OverlapdError, TimeoutError):
    """A job that did not end within the time the caller gave (code
    DEADLINE_EXCEEDED): `job_id`, and `cancelled` whether the client
    cancelled it (submit(wait=True)) or left it running (wait, watch)."""

    def __init__(self, message: str, address: str, job_id: str, cancelled: bool):
        OverlapdError.__init__(self, grpc.StatusCode.DEADLINE_EXCEEDED, message, address)
        self.job_id = job_id
        self.cancelled = cancelled


def unreachable(address: str, detail: str) -> OverlapdError:
    """UNAVAILABLE in words, as overlapctl says it: the address, whether a
    unix socket is there at all, and gRPC's reason last."""
    path: Optional[str] = None
    if address.startswith("unix:"):
        path = address[len("unix:"):]
    elif address.startswith("/"):
        path = address
    if path is not None and not os.path.exists(path):
        why = ("no socket at %s: is overlapd running? (systemctl status overlapd; or "
               "Client(addr) / OVERLAPD_ADDR for another one)" % path)
    elif path is not None:
        why = "the daemon is not running or not answering on this socket (%s)" % detail
    else:
        why = ("the daemon is not running or not reachable there (%s); if it uses TLS, pass "
               "tls_ca (and tls_cert/tls_key when it requires client certificates)" % detail)
    return OverlapdError(grpc.StatusCode.UNAVAILABLE,
                         "cannot reach overlapd at %s: %s" % (address, why), address)


def status_code(code: int) -> grpc.StatusCode:
    """The grpc.StatusCode of a code's number (as the session socket and the
    command ring carry it); UNKNOWN for a number gRPC does not define."""
    for member in grpc.StatusCode:
        if member.value[0] == code:
            return member
    return grpc.StatusCode.UNKNOWN


class SessionError(OverlapdError):
    """A session the daemon refused or ended (overlapd.session): `code` the
    grpc.StatusCode (INVALID_ARGUMENT for a bad graph, rank or buffer,
    ALREADY_EXISTS for a rank already taken, RESOURCE_EXHAUSTED past a cap,
    DEADLINE_EXCEEDED for ranks that did not join or a step whose inputs never
    became ready, UNAVAILABLE when a rank or the daemon has gone, CANCELLED
    after CloseSession), `message` the daemon's reason, `session_id` ("" before
    the daemon gave one) and `rank` this process's rank."""

    def __init__(self, code: grpc.StatusCode, message: str, address: str = "",
                 session_id: str = "", rank: int = -1):
        super().__init__(code, message, address)
        self.session_id = session_id
        self.rank = rank


class SessionTimeoutError(SessionError, TimeoutError):
    """A wait on this side that ran out (code DEADLINE_EXCEEDED): a frame the
    daemon did not answer in time, or a command not complete within the
    caller's timeout. The session itself goes on."""

    def __init__(self, message: str, address: str = "", session_id: str = "", rank: int = -1):
        SessionError.__init__(self, grpc.StatusCode.DEADLINE_EXCEEDED, message, address,
                              session_id, rank)


def session_error(code: int, message: str, address: str = "", session_id: str = "",
                  rank: int = -1) -> SessionError:
    """The SessionError for a code's number and the daemon's message."""
    return SessionError(status_code(code), message, address, session_id, rank)
