"""One real Cove server (with the E2B listener) for the whole E2B SDK test session; the
SDK finds it through the environment only, as an unmodified E2B program would."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from cove_server import CoveServer  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def cove():
    srv = CoveServer()
    os.environ.update(srv.env())
    try:
        yield srv
    finally:
        srv.stop()
