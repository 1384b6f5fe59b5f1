"""meshpool's exceptions: one class per status code, all under Error.

Every call that fails raises the class of its status code, carrying the C++
library's message (which says what to do). Batched calls do not raise for a
single key: they return the exception instance in that key's place.

The codes keep their meaning from the C++ API:
Unavailable: retry this call. Aborted: retry the higher-level operation.
FailedPrecondition: fix the state first (e.g. the client is closed).
"""

from __future__ import annotations


class Error(Exception):
    """Base of every meshpool error. ``code`` is the status code's name
    (``"NOT_FOUND"``...), ``message`` the library's explanation."""

    code = "UNKNOWN"

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def __eq__(self, other: object) -> bool:
        return (type(self) is type(other)
                and self.message == other.message)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.message))


class Cancelled(Error):
    """The operation was cancelled."""
    code = "CANCELLED"


class Unknown(Error):
    """An error the library could not classify."""
    code = "UNKNOWN"


class InvalidArgument(Error, ValueError):
    """A bad argument: a key over the limit, a wrong type, a read-only or
    non-contiguous buffer, an unregistered (address, length) pair."""
    code = "INVALID_ARGUMENT"


class DeadlineExceeded(Error, TimeoutError):
    """The operation did not finish within its timeout."""
    code = "DEADLINE_EXCEEDED"


class NotFound(Error, KeyError):
    """The key, region or model does not exist (also a KeyError)."""
    code = "NOT_FOUND"


class AlreadyExists(Error):
    """The name is taken."""
    code = "ALREADY_EXISTS"


class PermissionDenied(Error, PermissionError):
    """Not allowed."""
    code = "PERMISSION_DENIED"


class ResourceExhausted(Error):
    """Out of memory in the pool, of pin-table entries, or of sessions."""
    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(Error):
    """The state does not allow the call (e.g. the client is closed)."""
    code = "FAILED_PRECONDITION"


class Aborted(Error):
    """A conflict: retry the higher-level operation."""
    code = "ABORTED"


class OutOfRange(Error, ValueError):
    """Outside the valid range: past a region's end, or a buffer too small
    for the value (the message names the size needed)."""
    code = "OUT_OF_RANGE"


class Unimplemented(Error, NotImplementedError):
    """Not supported (by this transport or build)."""
    code = "UNIMPLEMENTED"


class Internal(Error):
    """A broken invariant inside meshpool: please report it."""
    code = "INTERNAL"


class Unavailable(Error, ConnectionError):
    """A node or the coordinator could not be reached: retry the call."""
    code = "UNAVAILABLE"


class DataLoss(Error):
    """Stored bytes could not be verified (lost or corrupt)."""
    code = "DATA_LOSS"


class Unauthenticated(Error):
    """Missing or wrong credentials."""
    code = "UNAUTHENTICATED"


_BY_CODE: dict[int, type[Error]] = {
    1: Cancelled, 2: Unknown, 3: InvalidArgument, 4: DeadlineExceeded,
    5: NotFound, 6: AlreadyExists, 7: PermissionDenied, 8: ResourceExhausted,
    9: FailedPrecondition, 10: Aborted, 11: OutOfRange, 12: Unimplemented,
    13: Internal, 14: Unavailable, 15: DataLoss, 16: Unauthenticated,
}


def error_for_code(code: int, message: str) -> Error:
    """The exception for an absl status code (used by the extension)."""
    return _BY_CODE.get(code, Unknown)(message)


__all__ = ["Error", "error_for_code"] + [c.__name__ for c in _BY_CODE.values()]
