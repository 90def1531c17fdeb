"""Shared pytest plugins of the workspace (fixtures every member's tests may use)."""

import os
import signal
import warnings
from collections.abc import Iterator

import pytest

# Spark starts its JVM with fork + preexec_fn, from a test process where gRPC calls
# are under way: grpc-core's fork handlers then skip themselves ("Other threads are
# currently calling into gRPC") and the gateway died before it said its port, now and
# then (JAVA_GATEWAY_EXITED in CI). Nothing here forks to go on using gRPC in the
# child, so the handlers are off; set before anything imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = ["gazette.keyspace.testing.plugin"]

# A test that leaves SIGINT or SIGTERM ignored (code that ends by ignoring them, as
# the broker's run_to_exit does, run in the test process) passes that on to every
# process later tests start: a gazctl child then ignored Ctrl-C and the CLI test that
# interrupts it hung (CI). Each test gets the handlers back as it found them.
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def _signal_handlers_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    before = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    yield
    for sig, handler in before.items():
        if handler is not None and signal.getsignal(sig) is not handler:
            warnings.warn(
                f"{request.node.nodeid} left the {signal.Signals(sig).name} handler changed;"
                " restored",
                stacklevel=1,
            )
            signal.signal(sig, handler)
