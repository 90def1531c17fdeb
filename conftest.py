"""Shared pytest plugins of the workspace (fixtures every member's tests may use)."""

import os

# Spark starts its JVM with fork + preexec_fn, from a test process where gRPC calls
# are under way: grpc-core's fork handlers then skip themselves ("Other threads are
# currently calling into gRPC") and the gateway died before it said its port, now and
# then (JAVA_GATEWAY_EXITED in CI). Nothing here forks to go on using gRPC in the
# child, so the handlers are off; set before anything imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

pytest_plugins = ["gazette.keyspace.testing.plugin"]
