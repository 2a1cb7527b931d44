"""The stdlib-only example (examples/python/run_command.py) against the test server: it finds
the token through COVE_DATA_DIR and exits with its command's code."""

from __future__ import annotations

import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python", "run_command.py")


def test_example_honours_the_data_dir_and_the_exit_code(server, build_logs):
    env = {k: v for k, v in os.environ.items() if k != "COVE_TOKEN"}
    env.update(COVE_URL=server.url, COVE_DATA_DIR=server.data_dir)
    done = subprocess.run([sys.executable, EXAMPLE, "tiny"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 3, done.stderr.decode()
    assert b"line 0 on stdout\nline 1 on stdout\nline 2 on stdout\n" in done.stdout
    assert b"one line on stderr" in done.stderr
    assert b"exit code 3" in done.stdout


def test_example_exits_125_when_the_api_fails(server, build_logs):
    env = {k: v for k, v in os.environ.items() if k != "COVE_TOKEN"}
    env.update(COVE_URL=server.url, COVE_DATA_DIR=server.data_dir)
    done = subprocess.run([sys.executable, EXAMPLE, "no-such-template"], env=env, capture_output=True, timeout=60)
    assert done.returncode == 125
    assert b"template_not_found" in done.stderr
