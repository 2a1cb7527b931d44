"""E2B's Code Interpreter SDK (PyPI `e2b-code-interpreter`), unchanged, against Cove's
`code-interpreter-v1` template (templates/code-interpreter: its server and template file),
built here offline from the wheels and .debs scripts/test-e2b.sh downloaded on the host."""

import base64
import os
import subprocess
import sys

import pytest
from e2b import TimeoutException
from e2b_code_interpreter import Sandbox

WHEELS = os.environ.get("COVE_CI_WHEELS", "/var/cache/cove/code-interpreter-wheels")
DEBS = os.environ.get("COVE_CI_DEBS", "/var/cache/cove/code-interpreter-debs")


@pytest.fixture(scope="module", autouse=True)
def code_interpreter_template(cove):
    for what, d in (("wheels", WHEELS), (".debs", DEBS)):
        if not os.path.isdir(d) or not os.listdir(d):
            if os.environ.get("CI") == "true":
                pytest.fail(f"no {what} in {d} (scripts/test-e2b.sh downloads them)")
            pytest.skip(f"no {what} in {d} (scripts/test-e2b.sh downloads them)")
    cove.build_code_interpreter(WHEELS, DEBS)


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
        with pytest.raises(Exception, match="python and javascript only"):
            sbx.run_code("1", language="r")


def test_ipython_line_syntax():
    with Sandbox.create() as sbx:
        execution = sbx.run_code("n = 2\nif n:\n    !echo shell $((n+1)); echo warn >&2\nn * 2")
        assert execution.error is None, execution.error
        assert execution.logs.stdout == ["shell 1\n"]  # bash's $n, not Python's
        assert execution.logs.stderr == ["warn\n"]
        assert execution.text == "4"
        assert sbx.run_code("%%bash\necho from bash").logs.stdout == ["from bash\n"]
        assert sbx.run_code("%cd /tmp").logs.stdout == ["/tmp\n"]
        assert sbx.run_code("import os; os.getcwd()").text == "'/tmp'"
        sbx.run_code("%env MAGIC_VAR=on")
        assert sbx.run_code("os.environ['MAGIC_VAR']").text == "'on'"
        assert sbx.run_code("%pip --version").logs.stdout[0].startswith("pip ")
        # A cell that is Python as written keeps its meaning.
        assert sbx.run_code('s = """\n!not run\n"""\n7 % 4').text == "3"
        failed = sbx.run_code("%timeit 1")
        assert failed.error is not None and failed.error.name == "UsageError"
        # The SDK's timeout ends a shell command too; the context goes on.
        with pytest.raises(TimeoutException):
            sbx.run_code("!sleep 30", timeout=2)
        assert sbx.run_code("n").text == "2"


def test_javascript_contexts_beside_python():
    with Sandbox.create() as sbx:
        assert sbx.run_code("1+1", language="js").text == "2"
        # Globals stay between executions of the language's default context.
        assert sbx.run_code("var kept = 40; let lexical = 2", language="javascript").error is None
        seen = []
        execution = sbx.run_code("console.log('from node', kept); kept + lexical",
                                 language="js", on_stdout=lambda m: seen.append(m.line))
        assert execution.logs.stdout == ["from node 40\n"]
        assert seen == ["from node 40\n"]
        assert execution.text == "42"
        assert sbx.run_code("console.error('oops')", language="js").logs.stderr == ["oops\n"]
        # A thrown error: its name, message and a stack from the cell.
        execution = sbx.run_code("function f() { throw new TypeError('bad input') }\nf()",
                                 language="js")
        assert execution.error is not None
        assert execution.error.name == "TypeError"
        assert execution.error.value == "bad input"
        assert "at f (<cell>:1:" in execution.error.traceback
        assert "kernel.js" not in execution.error.traceback
        # Top-level await keeps its declarations; results are shown as Node's REPL shows them.
        execution = sbx.run_code("const got = await Promise.resolve({a: [1, 2]})\ngot",
                                 language="js")
        assert execution.error is None, execution.error
        assert execution.text == "{ a: [ 1, 2 ] }"
        assert sbx.run_code("got.a.length + kept", language="js").text == "42"
        assert sbx.run_code("process.env.JS_GREETING", language="js",
                            envs={"JS_GREETING": "hi"}).text == "'hi'"
        assert sbx.run_code("process.env.JS_GREETING", language="js").text is None
        # A context of its own, in its own directory, sharing nothing with the default one.
        ctx = sbx.create_code_context(language="js", cwd="/tmp")
        assert ctx.language == "javascript" and ctx.cwd == "/tmp"
        assert sbx.run_code("process.cwd()", context=ctx).text == "'/tmp'"
        assert sbx.run_code("typeof kept", context=ctx).text == "'undefined'"
        assert sbx.run_code("require('os').userInfo().username", context=ctx).text == "'user'"
        # import(): builtins, and ES modules relative to the context's directory.
        sbx.files.write("/tmp/cove_mod.mjs", "export const v = 41\n")
        imported = sbx.run_code("(await import('./cove_mod.mjs')).v + 1", context=ctx)
        assert imported.text == "42"
        assert imported.logs.stderr == []  # no notice about node's experimental flag
        assert sbx.run_code("(await import('node:path')).join('a', 'b')",
                            context=ctx).text == "'a/b'"
        # The SDK's timeout interrupts a busy loop and a pending await; state is kept.
        sbx.run_code("var n = 1", context=ctx)
        with pytest.raises(TimeoutException):
            sbx.run_code("while (true) {}", context=ctx, timeout=2)
        with pytest.raises(TimeoutException):
            sbx.run_code("await new Promise((r) => setTimeout(r, 30000))", context=ctx, timeout=2)
        assert sbx.run_code("n + 1", context=ctx).text == "2"
        sbx.restart_code_context(ctx)
        assert sbx.run_code("typeof n", context=ctx).text == "'undefined'"
        # A cell that ends its process: the context comes back, empty.
        sbx.run_code("var m = 1", context=ctx)
        assert sbx.run_code("process.exit(3)", context=ctx).error.name == "DeadKernelError"
        assert sbx.run_code("typeof m", context=ctx).text == "'undefined'"
        # Python, in the same sandbox, is untouched by all of it.
        assert sbx.run_code("'kept' in globals()").text == "False"
        assert sbx.run_code("import sys; sys.version_info[0]").text == "3"
        sbx.remove_code_context(ctx)


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
    assert "js: [ 2, 4, 6 ]" in r.stdout
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")
