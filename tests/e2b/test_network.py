"""E2B network rules (`network` on create, `allow_internet_access`, `update_network`) on Cove's
egress policy, through the sync and async SDKs, against a server of this module's own whose
sandboxes' gateway goes out to a fake internet (`cove-e2e-lab`: namespaces this module
creates; `allowed.test` is its `web_a`, `b.test` its `web_b`, addresses the lab chose at run
time). No traffic goes anywhere else."""

import os
import sys

import pytest
from e2b import ALL_TRAFFIC, AsyncSandbox, Sandbox
from e2b.exceptions import SandboxException

sys.path.insert(0, os.path.dirname(__file__))
from cove_server import CoveServer, FakeInternet  # noqa: E402

REFUSED = "REFUSED"
# The fake internet's range and web servers (set by the module's fixture).
LAB = {}


@pytest.fixture(scope="module", autouse=True)
def lab_server():
    lab = FakeInternet()
    LAB.update(inet=lab.inet, web_a=lab.web_a, web_b=lab.web_b)
    try:
        srv = CoveServer(upstream=lab)
    except Exception:
        lab.stop()
        raise
    saved = {k: os.environ.get(k) for k in srv.env()}
    os.environ.update(srv.env())
    try:
        yield srv
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        srv.stop()
        lab.stop()


def fetch(sbx, url):
    """The body curl gets from `url` inside the sandbox, or REFUSED (bounded: 8 s)."""
    r = sbx.commands.run(f"curl -fsS -m 8 {url} || echo {REFUSED}", timeout=30)
    return r.stdout.strip().splitlines()[-1]


async def afetch(sbx, url):
    r = await sbx.commands.run(f"curl -fsS -m 8 {url} || echo {REFUSED}", timeout=30)
    return r.stdout.strip().splitlines()[-1]


def test_deny_all_with_an_allowed_domain_then_live_updates():
    sbx = Sandbox.create(network={"deny_out": [ALL_TRAFFIC], "allow_out": ["allowed.test"]})
    try:
        assert fetch(sbx, "http://allowed.test/") == "site=web-a host=allowed.test"
        assert fetch(sbx, "http://b.test/") == REFUSED
        assert fetch(sbx, f"http://{LAB['web_b']}/") == REFUSED
        net = sbx.get_info().network
        assert net["allow_out"] == ["allowed.test"]
        assert net["deny_out"] == [ALL_TRAFFIC]

        # The live update replaces the rules; the next connection follows them.
        web_b = LAB["web_b"]
        sbx.update_network({"deny_out": [ALL_TRAFFIC], "allow_out": [web_b]})
        assert fetch(sbx, f"http://{web_b}/") == f"site=web-b host={web_b}"
        assert fetch(sbx, "http://allowed.test/") == REFUSED
        assert sbx.get_info().network["allow_out"] == [web_b]

        # Omitted fields are cleared: everything is open again.
        sbx.update_network({})
        assert fetch(sbx, "http://b.test/") == "site=web-b host=b.test"
        assert sbx.get_info().network is None
    finally:
        sbx.kill()


def test_an_allowed_address_inside_a_denied_range_stays_reachable():
    web_a, web_b = LAB["web_a"], LAB["web_b"]
    sbx = Sandbox.create(network={"deny_out": [LAB["inet"]], "allow_out": [web_b]})
    try:
        assert fetch(sbx, f"http://{web_b}/") == f"site=web-b host={web_b}"
        assert fetch(sbx, f"http://{web_a}/") == REFUSED
        assert fetch(sbx, "http://allowed.test/") == REFUSED
    finally:
        sbx.kill()


def test_refusals_raise():
    with pytest.raises(SandboxException, match="deny rules take IP addresses"):
        Sandbox.create(network={"deny_out": ["b.test"]})
    with pytest.raises(SandboxException, match="egressProxy"):
        Sandbox.create(network={"egress_proxy": {"address": "proxy.test:1080"}})
    sbx = Sandbox.create()
    try:
        with pytest.raises(SandboxException, match="allowOut"):
            sbx.update_network({"allow_out": ["::1"]})
        # A refused update changes nothing.
        assert fetch(sbx, "http://b.test/") == "site=web-b host=b.test"
    finally:
        sbx.kill()
    with pytest.raises(SandboxException):
        Sandbox.update_network("doesnotexist0000", {"deny_out": [ALL_TRAFFIC]})


async def test_async_internet_off_then_on():
    sbx = await AsyncSandbox.create(allow_internet_access=False)
    try:
        assert await afetch(sbx, "http://b.test/") == REFUSED
        info = await sbx.get_info()
        assert info.allow_internet_access is False
        assert info.network["deny_out"] == [ALL_TRAFFIC]
        await sbx.update_network({"allow_internet_access": True})
        assert await afetch(sbx, "http://b.test/") == "site=web-b host=b.test"
        await sbx.update_network(
            {"deny_out": [ALL_TRAFFIC], "allow_out": ["b.test"]}
        )
        assert await afetch(sbx, "http://b.test/") == "site=web-b host=b.test"
        assert await afetch(sbx, "http://allowed.test/") == REFUSED
    finally:
        await sbx.kill()
