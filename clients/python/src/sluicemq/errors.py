"""The exceptions of the sluice client, mapped from the engine's SQLSTATEs.

Every error the engine raises has a SQLSTATE of class ``SL`` (docs/sql.md,
"Error codes"). :func:`translate` is the one place where driver errors are
interpreted: it turns a :class:`psycopg.Error` with one of those codes into
the matching subclass of :class:`SluiceError`, keeping the driver's error as
``__cause__``. Other errors (connection failures, cancellations) pass
through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

__all__ = [
    "SluiceError",
    "InvalidName",
    "QueueNotFound",
    "GroupNotFound",
    "QueueExists",
    "GroupExists",
    "InvalidArgument",
    "InvalidOption",
    "InvalidReceipt",
    "PayloadTooLarge",
    "InvalidIsolation",
    "NotSupported",
    "JSONTooDeep",
    "SchemaMissing",
    "translate",
]


class SluiceError(Exception):
    """An error of the sluice engine (or a missing schema).

    ``code`` is the SQLSTATE (such as ``"SL002"``), ``message`` the server's
    message and ``hint`` its hint, if any. Branch on the class or the code,
    not on the message.
    """

    code: str = ""

    def __init__(self, message: str, *, code: str | None = None, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        if code is not None:
            self.code = code
        text = message
        if hint:
            text += f" ({hint.rstrip('.')})"
        super().__init__(text)


class InvalidName(SluiceError):
    """SL001: a queue or group name that is NULL or malformed."""

    code = "SL001"


class QueueNotFound(SluiceError):
    """SL002: no queue with that name."""

    code = "SL002"


class GroupNotFound(SluiceError):
    """SL003: no consumer group with that name in the queue."""

    code = "SL003"


class QueueExists(SluiceError):
    """SL004: create_queue of an existing name."""

    code = "SL004"


class GroupExists(SluiceError):
    """SL005: create_group of an existing name."""

    code = "SL005"


class InvalidArgument(SluiceError):
    """SL006: a NULL or out-of-range argument (body, lease, max_messages, ...)."""

    code = "SL006"


class InvalidOption(SluiceError):
    """SL007: a queue option that is unknown or has a bad value."""

    code = "SL007"


class InvalidReceipt(SluiceError):
    """SL008: a receipt that is not of sluice's form at all.

    A well-formed receipt whose lease is gone is not an error: ack, nack and
    extend report it by not counting it.
    """

    code = "SL008"


class PayloadTooLarge(SluiceError):
    """SL009: body + headers larger than the queue's max_payload."""

    code = "SL009"


class InvalidIsolation(SluiceError):
    """SL010: receive (or send with a dedup_key) outside READ COMMITTED."""

    code = "SL010"


class NotSupported(SluiceError):
    """SL011: a call the queue does not support (yet): seek during its upgrade to engine 2, say."""

    code = "SL011"


class JSONTooDeep(SluiceError):
    """SL012: body or headers nested deeper than 512 levels."""

    code = "SL012"


class SchemaMissing(SluiceError):
    """The database has no sluice schema, or an older one: run ``sluice migrate``."""


_BY_CODE: dict[str, type[SluiceError]] = {
    cls.code: cls
    for cls in (
        InvalidName,
        QueueNotFound,
        GroupNotFound,
        QueueExists,
        GroupExists,
        InvalidArgument,
        InvalidOption,
        InvalidReceipt,
        PayloadTooLarge,
        InvalidIsolation,
        NotSupported,
        JSONTooDeep,
    )
}

# invalid_schema_name, undefined_function, undefined_table, undefined_object
_SCHEMA_CODES = {"3F000", "42883", "42P01", "42704"}


def from_driver(err: psycopg.Error) -> SluiceError | None:
    """The SluiceError for a driver error, or None when it is not sluice's."""
    code = err.sqlstate or ""
    diag = err.diag
    message = diag.message_primary or str(err)
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message, code=code, hint=diag.message_hint)
    if code in _SCHEMA_CODES and "sluice" in message:
        return SchemaMissing(
            message, code=code, hint="install or upgrade the sluice schema with: sluice migrate"
        )
    return None


@contextmanager
def translate() -> Iterator[None]:
    """Re-raise sluice's driver errors as SluiceError subclasses."""
    try:
        yield
    except psycopg.Error as err:
        mapped = from_driver(err)
        if mapped is None:
            raise
        raise mapped from err
