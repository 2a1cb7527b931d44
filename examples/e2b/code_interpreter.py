"""An unmodified E2B Code Interpreter script: it knows nothing about Cove.

Build the `code-interpreter-v1` template once (docs/e2b.md, "Code Interpreter"), then run it
against Cove with only the environment set:

    E2B_API_KEY=$(cat /var/lib/cove/admin.token) \
    E2B_API_URL=http://127.0.0.1:7703 E2B_SANDBOX_URL=http://127.0.0.1:7703 \
    python examples/e2b/code_interpreter.py      # pip install e2b-code-interpreter
"""

import base64

from e2b_code_interpreter import Sandbox

with Sandbox.create() as sandbox:
    print("1+1 =", sandbox.run_code("1+1").text)
    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3, 4], [1, 4, 9, 16])\n"
        "plt.title('squares')\n"
        "plt.show()"
    )
    png = next(r.png for r in execution.results if r.png)
    with open("chart.png", "wb") as f:
        f.write(base64.b64decode(png))
    print("chart.png written,", len(png) * 3 // 4, "bytes")
    failed = sandbox.run_code("1/0")
    print("error:", failed.error.name, "-", failed.error.value)
    # JavaScript runs beside Python, in a Node.js context of its own.
    print("js:", sandbox.run_code("[1, 2, 3].map((x) => x * 2)", language="js").text)
