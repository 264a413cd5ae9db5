"""sluicemq: the Python client and worker of sluice, the message queue inside PostgreSQL.

Thin over sluice's SQL API (docs/sql.md): the engine owns the semantics.

- :class:`Client` / :class:`AsyncClient`: every call (send, send_batch,
  receive, ack, nack, extend, queue and group admin, dead letters, redrive,
  discard_dead_letters, upgrade_queue,
  status, peek, leases), each taking ``conn=`` to join the caller's transaction.
- :class:`Worker` / :class:`AsyncWorker`: consume queues with handlers
  registered by decorator.
- :mod:`sluicemq.errors`: one exception class per SQLSTATE of class SL.
"""

from .aio import AsyncClient
from .aio_worker import AsyncWorker
from .client import Client
from .errors import (
    GroupExists,
    GroupNotFound,
    InvalidArgument,
    InvalidIsolation,
    NotSupported,
    InvalidName,
    InvalidOption,
    InvalidReceipt,
    JSONTooDeep,
    PayloadTooLarge,
    QueueExists,
    QueueNotFound,
    SchemaMissing,
    SluiceError,
)
from .types import (
    DeadLetter,
    Duration,
    HandlerFailure,
    Lease,
    MaintainResult,
    Message,
    PeekedMessage,
    QueueInfo,
    QueueOptions,
    QueueStatus,
)
from .worker import Worker

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncWorker",
    "Client",
    "DeadLetter",
    "Duration",
    "GroupExists",
    "GroupNotFound",
    "HandlerFailure",
    "InvalidArgument",
    "InvalidIsolation",
    "NotSupported",
    "InvalidName",
    "InvalidOption",
    "InvalidReceipt",
    "JSONTooDeep",
    "Lease",
    "MaintainResult",
    "Message",
    "PayloadTooLarge",
    "PeekedMessage",
    "QueueExists",
    "QueueInfo",
    "QueueOptions",
    "QueueNotFound",
    "QueueStatus",
    "SchemaMissing",
    "SluiceError",
    "Worker",
]
