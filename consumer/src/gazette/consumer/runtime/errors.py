"""Errors of the consumer runtime.

::

    ConsumerError                 anything the runtime raises about a shard
    ├── ReadError                 a source journal could not be read or decoded
    ├── CommitError               the store failed to commit a transaction
    │   └── DependencyFailed      an append the commit waited for failed
    ├── AckError                  appending a transaction's ACK failed
    ├── StatusError               the shard's status could not be written to etcd
    └── ConfigError               an application or flag the process cannot run with

A shard that raises one of these is marked FAILED in etcd with the error's
text (truncated as Gazette does), so ``gazctl shards list`` shows why.
"""

from __future__ import annotations

__all__ = [
    "AckError",
    "CommitError",
    "ConfigError",
    "ConsumerError",
    "DependencyFailed",
    "ReadError",
    "StatusError",
]


class ConsumerError(Exception):
    """Base of the runtime's errors."""


class ReadError(ConsumerError):
    """A source journal could not be read, or a message in it did not decode."""


class CommitError(ConsumerError):
    """The store failed to commit a transaction."""


class DependencyFailed(CommitError):
    """An operation a commit waited for (an append of the transaction) failed: nothing committed."""


class AckError(ConsumerError):
    """Appending a committed transaction's ACK intent failed."""


class StatusError(ConsumerError):
    """Writing the shard's ReplicaStatus to etcd failed."""


class ConfigError(ConsumerError):
    """The application or the flags cannot be run with."""
