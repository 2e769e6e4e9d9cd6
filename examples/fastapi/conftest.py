"""The example's own tests run on Postkit's pytest plugin: a fresh database per test, on the
server POSTKIT_TEST_DSN names (else an embedded PostgreSQL)."""

pytest_plugins = ["postkit.testing"]
