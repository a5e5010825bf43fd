"""`GET /nodes?view=summary` in Ray's shape: KubeRay's SidecarMode RayJob submitter counts the
ALIVE entries before it submits (tests/kubernetes/test_rayjob.py runs the submitter itself)."""

from __future__ import annotations

import httpx


def test_nodes_summary_lists_alive_nodes_behind_the_token(api):
    with api.client() as c:
        r = c.get("/nodes", params={"view": "summary"})
        assert r.status_code == 200
        body = r.json()
        assert body["result"] is True
        summary = body["data"]["summary"]
        assert [n["raylet"]["state"] for n in summary] == ["ALIVE"]
        assert summary[0]["raylet"]["isHeadNode"] is True and summary[0]["raylet"]["resourcesTotal"]["CPU"] > 0
        assert c.get("/nodes", params={"view": "hostNameList"}).json()["data"]["hostNameList"]
        assert c.get("/nodes", params={"view": "details"}).status_code == 400
    assert httpx.get(f"{api.url}/nodes?view=summary", timeout=30).status_code == 401  # no token
    r = httpx.get(f"{api.url}/nodes?view=summary", headers={"x-ray-authorization": f"Bearer {api.token}"},
                  timeout=30)
    assert r.status_code == 200  # KubeRay's header
