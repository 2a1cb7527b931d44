"""One real Cove server for the whole MCP test session (the E2B tests' launcher: loopback
ports, its own data dir and network prefix, `base` built from the shared cache)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "e2b"))
from cove_server import CoveServer  # noqa: E402


@pytest.fixture(scope="session")
def cove():
    srv = CoveServer()
    try:
        yield srv
    finally:
        srv.stop()
