"""Errors of the allocator.

::

    AllocatorError
    ├── DecodeError          a key or value under the allocator root failed to decode
    ├── MemberKeyMissing     our member key vanished from etcd (lease lost, or deleted)
    ├── TxnFailed            a checked etcd transaction's comparisons did not hold
    ├── EtcdError            an etcd RPC failed (wraps the aetcd / grpc error)
    └── LeaseLost            the member lease could not be kept alive
"""

from __future__ import annotations


class AllocatorError(Exception):
    """Base of every allocator error."""


class DecodeError(AllocatorError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


class MemberKeyMissing(AllocatorError):
    def __init__(self, key: str) -> None:
        super().__init__(f"member key not found in Etcd ({key})")
        self.key = key


class TxnFailed(AllocatorError):
    def __init__(self, what: str = "transaction checks did not succeed") -> None:
        super().__init__(what)


class EtcdError(AllocatorError):
    pass


class LeaseLost(AllocatorError):
    def __init__(self, lease_id: int) -> None:
        super().__init__(f"unable to keep member lease alive (lease {lease_id:x})")
        self.lease_id = lease_id
