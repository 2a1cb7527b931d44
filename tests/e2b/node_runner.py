"""Runs the Node SDK test against a fresh Cove server (used by run-e2b-tests.sh)."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cove_server import CoveServer  # noqa: E402

with CoveServer() as srv:
    env = dict(os.environ, **srv.env())
    test = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_smoke.test.mjs")
    rc = subprocess.run(["node", "--test", test], env=env).returncode
    if rc != 0:
        print(srv.read_log(), file=sys.stderr)
sys.exit(rc)
