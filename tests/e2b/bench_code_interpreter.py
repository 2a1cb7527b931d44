"""p50/p90 of the Code Interpreter SDK's `Sandbox.create()` + `run_code("1+1")` (template
`code-interpreter-v1`, built first from templates/code-interpreter) beside the base SDK's
`Sandbox.create()` + `commands.run("python3 -c 'print(1+1)'")` (template `base`), and
`run_code("1+1", language="js")` (its JavaScript context starts at that first use), alternating,
in one run against one server. Prints a small table; asserts nothing about timings.

Usage: python bench_code_interpreter.py [N]   (default 10; each sandbox is killed after its
round; the wheels and .debs come from COVE_CI_WHEELS and COVE_CI_DEBS, as in
scripts/test-e2b.sh)
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_create_run import pct  # noqa: E402
from cove_server import CoveServer  # noqa: E402

WHEELS = os.environ.get("COVE_CI_WHEELS", "/var/cache/cove/code-interpreter-wheels")
DEBS = os.environ.get("COVE_CI_DEBS", "/var/cache/cove/code-interpreter-debs")


def run_code_round(language=None):
    from e2b_code_interpreter import Sandbox

    t = time.perf_counter()
    sbx = Sandbox.create()
    text = sbx.run_code("1+1", language=language).text
    took = time.perf_counter() - t
    assert text == "2", text
    sbx.kill()
    return took


def command_round():
    from e2b import Sandbox

    t = time.perf_counter()
    sbx = Sandbox.create()
    out = sbx.commands.run("python3 -c 'print(1+1)'").stdout
    took = time.perf_counter() - t
    assert out == "2\n", out
    sbx.kill()
    return took


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with CoveServer() as srv:
        os.environ.update(srv.env())
        srv.build_code_interpreter(WHEELS, DEBS)
        run_code_round(), command_round()  # warm-up, not counted
        ci, js, cmd = [], [], []
        for _ in range(n):
            ci.append(run_code_round())
            js.append(run_code_round("js"))
            cmd.append(command_round())
        print(f"create + first result, n={n}, ms")
        print(f"{'path':<58}{'p50':>8}{'p90':>8}")
        for name, xs in (
            ("code interpreter: create() + run_code('1+1')", ci),
            ("code interpreter: create() + run_code('1+1', 'js')", js),
            ("e2b base: create() + commands.run(python3 -c print(1+1))", cmd),
        ):
            print(f"{name:<58}{pct(xs, 50) * 1000:>8.0f}{pct(xs, 90) * 1000:>8.0f}")


if __name__ == "__main__":
    main()
