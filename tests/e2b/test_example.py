"""The README's unmodified E2B example runs against Cove with only E2B_* variables set."""

import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "e2b", "hello_agent.py")


def test_hello_agent_example_runs_unchanged():
    env = {k: v for k, v in os.environ.items()}
    r = subprocess.run([sys.executable, EXAMPLE], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("hello from sb-")
    assert "hello.py" in lines[1]
