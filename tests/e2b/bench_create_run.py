"""p50/p90 of `Sandbox.create()` + `commands.run("echo hi")` through the E2B Python SDK (sync)
and, when E2B_NODE_MODULES names a node_modules with npm `e2b`, the JavaScript SDK, beside the
same through Cove's own /v1 API (create, wait, run, collect output), in one run against one
server. Prints a small table; asserts nothing about timings.

Usage: python bench_create_run.py [N]   (default 20; each sandbox is deleted after its round)
"""

import os
import statistics
import sys
import time

import json
import subprocess

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cove_server import CoveServer  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def e2b_round():
    from e2b import Sandbox

    t = time.perf_counter()
    sbx = Sandbox.create()
    out = sbx.commands.run("echo hi").stdout
    took = time.perf_counter() - t
    assert out == "hi\n", out
    sbx.kill()
    return took


def cove_round(http):
    t = time.perf_counter()
    resp = http.post("/v1/sandboxes", json={"template": "base"}).json()
    op = resp["operation"]
    while op["state"] not in ("succeeded", "failed", "cancelled"):
        op = http.get(f"/v1/operations/{op['id']}", params={"wait": "30s"}).json()
    assert op["state"] == "succeeded", op
    sid = resp["sandbox"]["id"]
    cmd = http.post(f"/v1/sandboxes/{sid}/commands", json={"shell": "echo hi"}).json()
    cid = cmd["command"]["id"]
    out = http.get(
        f"/v1/sandboxes/{sid}/commands/{cid}/output", params={"wait": "30s"}
    ).json()
    took = time.perf_counter() - t
    import base64

    assert base64.b64decode(out["stdout"]) == b"hi\n", out
    http.delete(f"/v1/sandboxes/{sid}")
    return took


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    with CoveServer() as srv:
        os.environ.update(srv.env())
        http = httpx.Client(
            base_url=srv.api_url, headers={"Authorization": f"Bearer {srv.token}"}, timeout=120
        )
        e2b_round(), cove_round(http)  # warm-up, not counted
        e2b, cove = [], []
        for _ in range(n):
            e2b.append(e2b_round())
            cove.append(cove_round(http))
        rows = [("e2b python sdk", e2b), ("cove /v1 api", cove)]
        if os.environ.get("E2B_NODE_MODULES"):
            script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_bench.mjs")
            out = subprocess.run(["node", script, str(n)], env=dict(os.environ),
                                 capture_output=True, text=True, check=True).stdout
            rows.insert(1, ("e2b js sdk", [ms / 1000 for ms in json.loads(out)]))
        print(f"create + run('echo hi'), n={n}, ms")
        print(f"{'path':<22}{'p50':>8}{'p90':>8}{'mean':>8}")
        for name, xs in rows:
            print(f"{name:<22}{pct(xs, 50)*1000:>8.0f}{pct(xs, 90)*1000:>8.0f}"
                  f"{statistics.mean(xs)*1000:>8.0f}")
        print(f"ratio p50 e2b/cove: {pct(e2b, 50) / pct(cove, 50):.2f}")


if __name__ == "__main__":
    main()
