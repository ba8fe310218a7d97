"""A fault inside the server answers 500 with the OpenAI error object and an incident id, and the
traceback goes to the server's log, never to the client; a failed engine makes /health answer 503
with the same object; a model without a chat template answers chat requests 400 naming
--chat-template. In this process: the real aiohttp app (trident.serve.app.build_app) in front of
an engine whose submit fails, the fault a test needs to provoke."""
from __future__ import annotations

import asyncio
import logging

import pytest

from eval_fixtures import tiny_tokenizer


class FailingEngine:
    """An engine loop whose submit has a bug (not the RuntimeError a stopped engine raises)."""
    error = None
    load = {"running": 0, "waiting": 0, "slots": 1, "finished": {}}

    def submit(self, request):
        raise KeyError("secret internal detail")


async def _ask(app, method: str, path: str, body: dict | None = None) -> tuple[int, str, dict]:
    from aiohttp.test_utils import TestClient, TestServer

    async with TestClient(TestServer(app)) as client:
        response = await client.request(method, path, json=body)
        return response.status, response.headers["Content-Type"], await response.json()


@pytest.mark.timeout(60)
def test_a_fault_answers_500_json_and_logs_its_traceback(tmp_path, caplog):
    from trident.serve.app import build_app
    from trident.serve.chat_template import ChatTemplate

    tokenizer = tiny_tokenizer(tmp_path)
    engine = FailingEngine()
    app = build_app(engine, tokenizer, "tiny", 64, ChatTemplate(None, "nowhere", {}, missing="none here"))
    with caplog.at_level(logging.ERROR, logger="trident.serve"):
        status, kind, body = asyncio.run(_ask(app, "POST", "/v1/completions", {"prompt": "The", "max_tokens": 2}))
    assert status == 500 and kind.startswith("application/json")
    error = body["error"]
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    assert "secret internal detail" not in str(body) and "Traceback" not in str(body)
    incident = error["message"].split("incident ")[1].split(";")[0]
    logged = [r for r in caplog.records if incident in r.getMessage()]
    assert logged and logged[0].exc_info is not None and "secret internal detail" in caplog.text
    engine.error = RuntimeError("CUDA error: device lost")
    app = build_app(engine, tokenizer, "tiny", 64, ChatTemplate(None, "nowhere", {}, missing="none here"))
    status, kind, body = asyncio.run(_ask(app, "GET", "/health"))
    assert status == 503 and kind.startswith("application/json") and body["status"] == "error"
    assert "device lost" in body["error"]["message"]


@pytest.mark.timeout(60)
def test_chat_without_a_template_is_a_400_naming_the_option(tmp_path):
    from trident.serve.app import build_app
    from trident.serve.chat_template import ChatTemplate

    (tmp_path / "step_1").mkdir()
    template = ChatTemplate.load(tmp_path / "step_1")  # a checkpoint folder without the chat files
    app = build_app(FailingEngine(), tiny_tokenizer(tmp_path), "tiny", 64, template)
    status, kind, body = asyncio.run(_ask(app, "POST", "/v1/chat/completions",
                                          {"messages": [{"role": "user", "content": "hi"}]}))
    assert status == 400 and kind.startswith("application/json") and body["error"]["code"] == "no_chat_template"
    assert "no chat template" in body["error"]["message"] and "--chat-template" in body["error"]["message"]
    assert "neither chat_template.jinja nor tokenizer_config.json" in body["error"]["message"]
