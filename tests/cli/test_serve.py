"""``agentmill serve`` as a real subprocess on 127.0.0.1, reached with the official openai client."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from agentmill.cli.main import main
from tests.helpers.openai_app import free_port

openai = pytest.importorskip("openai")


def test_serve_subprocess_answers_the_openai_client():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentmill.cli.main", "serve", "--model", "tiny", "--port",
                             str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=30)
        r = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                      temperature=0)
        assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= 8
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_bad_model_and_port_exit_2(capsys):
    assert main(["serve", "--model", "gpt-9", "--port", "8123"]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny", "--port", "70000"]) == 2
