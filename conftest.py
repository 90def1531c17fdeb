"""Shared pytest plugins of the workspace (fixtures every member's tests may use)."""

pytest_plugins = ["gazette.keyspace.testing.plugin"]
