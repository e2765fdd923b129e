"""The app's plain-ASGI hardening middleware (web/app.py ``Harden``), in process: 413 before routing, the per-token
rate limit (20 requests/s), test-mode fault injection on PUT, and the security headers on routed responses."""

from __future__ import annotations

import pytest

from agentmill.methods.autocog.web.loadtest import U8_DESIGN, prepare
from agentmill.methods.autocog.web.store import Store


def test_gate_and_headers(tmp_path) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from agentmill.methods.autocog.web.app import create_app

    st = Store(tmp_path / "h.sqlite")
    st.add_observation("o1", U8_DESIGN)
    tok, tok2 = st.create_sessions("o1", 2)
    app = create_app(st, test_mode=True)
    with TestClient(app) as c:
        r = c.get("/s/nope")
        assert r.status_code == 404 and r.headers["content-security-policy"] == "default-src 'self'"
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["cache-control"] == "no-store"
        assert c.put(f"/api/s/{tok}/trials/0", content=b"x" * 20_000,
                     headers={"content-type": "application/json"}).status_code == 413
        prepare(c, tok2)
        assert c.post("/test/faults", params={"trials": 1}).json() == {"trials": 1}
        put = {"side_pressed": "L", "rt_ms": 900.0}
        assert c.put(f"/api/s/{tok2}/trials/0", json=put).status_code == 503  # injected, nothing stored
        r = c.put(f"/api/s/{tok2}/trials/0", json=put)
        assert r.status_code == 200 and r.json() == {"status": "stored"} and r.headers["cache-control"] == "no-store"
        codes = [c.get(f"/api/s/{tok}").status_code for _ in range(25)]  # one token: 20 per second pass
        assert codes.count(429) >= 1 and codes[0] == 200
    assert [t["trial_idx"] for t in st.trials(st.session(tok2)["session_id"])] == [0]
    st.close()
