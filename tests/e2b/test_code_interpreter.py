"""E2B's Code Interpreter SDK (PyPI `e2b-code-interpreter`), unchanged, against Cove's
`code-interpreter-v1` template (templates/code-interpreter: its server and template file),
built here offline from the wheels scripts/test-e2b.sh downloaded on the host."""

import base64
import os
import subprocess
import sys

import pytest
from e2b import TimeoutException
from e2b_code_interpreter import Sandbox

WHEELS = os.environ.get("COVE_CI_WHEELS", "/var/cache/cove/code-interpreter-wheels")


@pytest.fixture(scope="module", autouse=True)
def code_interpreter_template(cove):
    if not os.path.isdir(WHEELS) or not os.listdir(WHEELS):
        if os.environ.get("CI") == "true":
            pytest.fail(f"no wheels in {WHEELS} (scripts/test-e2b.sh downloads them)")
        pytest.skip(f"no wheels in {WHEELS} (scripts/test-e2b.sh downloads them)")
    cove.build_code_interpreter(WHEELS)


def test_run_code_results_output_errors_and_state():
    with Sandbox.create() as sbx:
        execution = sbx.run_code("1+1")
        assert execution.text == "2"
        assert execution.error is None
        seen = []
        execution = sbx.run_code("x = 40\nprint('hello')\nx + 2", on_stdout=lambda m: seen.append(m.line))
        assert execution.logs.stdout == ["hello\n"]
        assert seen == ["hello\n"]
        assert execution.text == "42"
        # State is kept between executions; errors come back with their traceback.
        execution = sbx.run_code("def f():\n    return x / 0\nf()")
        assert execution.error is not None
        assert execution.error.name == "ZeroDivisionError"
        assert execution.error.value == "division by zero"
        assert "in f" in execution.error.traceback
        # Environment variables of one execution only.
        execution = sbx.run_code("import os; os.environ.get('GREETING')", envs={"GREETING": "hi"})
        assert execution.text == "'hi'"
        assert sbx.run_code("os.environ.get('GREETING')").text is None


def test_matplotlib_chart_is_a_png_and_dataframes_are_html():
    with Sandbox.create() as sbx:
        execution = sbx.run_code(
            "import matplotlib.pyplot as plt\n"
            "plt.plot([1, 2, 3], [1, 4, 9])\n"
            "plt.title('squares')\n"
            "plt.show()"
        )
        assert execution.error is None, execution.error
        pngs = [r.png for r in execution.results if r.png]
        assert len(pngs) == 1
        assert base64.b64decode(pngs[0]).startswith(b"\x89PNG\r\n\x1a\n")
        execution = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2]})")
        assert execution.error is None, execution.error
        main = execution.results[0]
        assert main.is_main_result
        assert "<table" in main.html
        assert "a" in main.text


def test_contexts_and_timeouts():
    with Sandbox.create() as sbx:
        ctx = sbx.create_code_context(cwd="/tmp")
        assert ctx.language == "python" and ctx.cwd == "/tmp"
        assert sbx.run_code("import os; os.getcwd()", context=ctx).text == "'/tmp'"
        sbx.run_code("y = 1", context=ctx)
        # Contexts do not share state.
        assert sbx.run_code("'y' in globals()").text == "False"
        assert ctx.id in [c.id for c in sbx.list_code_contexts()]
        with pytest.raises(TimeoutException):
            sbx.run_code("import time; time.sleep(30)", context=ctx, timeout=2)
        # The interrupted context keeps its state and runs again.
        assert sbx.run_code("y + 1", context=ctx).text == "2"
        sbx.restart_code_context(ctx)
        assert sbx.run_code("'y' in globals()", context=ctx).text == "False"
        sbx.remove_code_context(ctx)
        assert ctx.id not in [c.id for c in sbx.list_code_contexts()]
        with pytest.raises(Exception, match="python only"):
            sbx.run_code("1", language="r")


def test_the_javascript_sdk():
    modules = os.environ.get("E2B_NODE_MODULES")
    if not modules or not os.path.isdir(os.path.join(modules, "@e2b", "code-interpreter")):
        if os.environ.get("CI") == "true":
            pytest.fail("E2B_NODE_MODULES has no @e2b/code-interpreter (scripts/test-e2b.sh)")
        pytest.skip("E2B_NODE_MODULES has no @e2b/code-interpreter")
    test = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_code_interpreter.test.mjs")
    run = subprocess.run(["node", "--test", test], env=dict(os.environ),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_the_example_runs_unchanged(tmp_path):
    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "e2b",
                           "code_interpreter.py")
    r = subprocess.run([sys.executable, os.path.abspath(example)], cwd=tmp_path,
                       env=dict(os.environ), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "1+1 = 2"
    assert "error: ZeroDivisionError - division by zero" in r.stdout
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")
