"""Warm pools through the SDK against a real server: put, get, list, a create served by the
pool with its own env and metadata, delete (drains)."""

from __future__ import annotations

import time

import pytest

import cove

# A size no other test asks for, so only this test's creates are served by the pool.
SIZE = {"memory_mib": 320}


def _wait_ready(client, name, ready, timeout=120.0):
    deadline = time.monotonic() + timeout
    while True:
        pool = client.get_pool(name)
        if pool.ready == ready:
            return pool
        assert time.monotonic() < deadline, f"pool never had {ready} ready: {pool}"
        time.sleep(0.1)


def test_pool_put_get_list_claim_delete(client):
    pool = client.put_pool("py-warm", "tiny", min_ready=1, max=2, resources=SIZE)
    assert isinstance(pool, cove.Pool)
    assert (pool.template, pool.release, pool.min_ready, pool.max) == ("tiny", None, 1, 2)
    assert pool.resources.memory_mib == 320
    _wait_ready(client, "py-warm", 1)
    assert "py-warm" in {p.name for p in client.list_pools()}

    sb = client.create_sandbox("tiny", resources=SIZE, env={"FROM_POOL": "yes"}, metadata={"suite": "pools"}, wait=False)
    try:
        assert sb.state == "running", "served by the pool, running at once"
        assert client.run(sb, "echo $FROM_POOL").stdout == b"yes\n"
        assert client.get_sandbox(sb.id).metadata == {"suite": "pools"}
        refilled = _wait_ready(client, "py-warm", 1)
        assert (refilled.hits, refilled.misses) == (1, 0)
    finally:
        client.delete_sandbox(sb)

    client.delete_pool("py-warm")
    with pytest.raises(cove.NotFound) as err:
        client.get_pool("py-warm")
    assert err.value.code == "pool_not_found"
    with pytest.raises(cove.InvalidArgument):
        client.put_pool("Bad Name", "tiny")
