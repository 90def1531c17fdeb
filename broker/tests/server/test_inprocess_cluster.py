"""The append/read integration tests, run again on the in-process broker harness.

``gazette.broker.server.testing.InProcessCluster`` runs four brokers in two zones
in the test's own event loop (Gazette's ``brokertest`` idea) against the real
etcd; the tests of ``test_broker_statuses`` and the file:// codec round trips
of ``test_broker_codecs`` take it in place of a cluster of processes.
"""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import test_broker_codecs as codecs_tests
import test_broker_statuses as statuses

from gazette.broker.server import testing as server_testing
from gazette.keyspace import testing as ks_testing

pytestmark = pytest.mark.integration

TESTS: list[Callable[..., Awaitable[None]]] = [
    statuses.test_ok_append_and_read_everywhere,
    statuses.test_journal_not_found,
    statuses.test_not_primary_and_not_member_without_proxy,
    statuses.test_insufficient_journal_brokers,
    statuses.test_offset_not_yet_available_and_blocking_read,
    statuses.test_etcd_transaction_failed,
    statuses.test_not_allowed,
    statuses.test_register_mismatch,
    statuses.test_suspended_and_resumed,
    statuses.test_malformed_requests_change_nothing,
    statuses.test_client_disconnect_mid_append,
    statuses.test_list_watch_and_list_fragments,
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.__name__.removeprefix("test_"))
async def test_on_the_in_process_harness(
    test: Callable[..., Awaitable[None]],
    etcd_server: ks_testing.EtcdServer,
    tmp_path: pathlib.Path,
) -> None:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint, work_dir=tmp_path, brokers=4
    ) as cluster:
        await test(cluster)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec_name", sorted(codecs_tests.CODECS))
async def test_file_store_round_trip_in_process(
    codec_name: str, etcd_server: ks_testing.EtcdServer, tmp_path: pathlib.Path
) -> None:
    async with server_testing.InProcessCluster(
        etcd_server.endpoint, work_dir=tmp_path, brokers=4
    ) as cluster:
        cl: Any = cluster
        await codecs_tests.test_file_store_round_trip(cl, codec_name)
