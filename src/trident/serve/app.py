"""The HTTP server: the OpenAI completions and chat completions APIs on aiohttp, in front of the
engine thread.

Why aiohttp: one well-kept package (the one fsspec's HTTP filesystem, s3fs and the harness already
install) gives the server, streamed responses (server-sent events are a StreamResponse) and a
graceful shutdown that stops listening and waits for in-flight handlers; an ASGI stack would add two
packages (starlette + uvicorn) and a second event-loop owner for the same.

Routes: POST /v1/completions and /v1/chat/completions (serve/handlers.py), GET /v1/models,
GET /health, GET /metrics (Prometheus text), and the tokenizer routes lm-evaluation-harness's
`local-completions` looks for (GET /tokenizer_info, POST /tokenize, POST /detokenize) so it
tokenizes exactly as the server does. Every error is the OpenAI JSON error object (serve/errors.py).
"""
from __future__ import annotations

import asyncio
import logging
import signal
import time

from aiohttp import web

from trident.data.tokenizer import EOD_TOKEN
from trident.serve.errors import MAX_BODY_BYTES, METRICS, error_response, errors_as_json
from trident.serve.fields import BadRequest
from trident.serve.handlers import STATE, bad_request, chat_completions, completions, read_json
from trident.serve.metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("trident.serve")


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response({"object": "list", "data": [{
        "id": state["name"], "object": "model", "created": state["created"], "owned_by": "trident",
        "max_model_len": state["context"]}]})


async def health(request: web.Request) -> web.Response:
    engine = request.app[STATE]["engine"]
    if engine.error is not None:
        return error_response(503, f"the engine failed: {engine.error}", code="engine_error", extra={"status": "error"})
    return web.json_response({"status": "ok", **engine.load})


async def metrics(request: web.Request) -> web.Response:
    text = request.app[METRICS].render(request.app[STATE]["engine"].load)
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


async def tokenizer_info(request: web.Request) -> web.Response:
    tokenizer = request.app[STATE]["tokenizer"]
    return web.json_response({"eos_token": _eod_text(tokenizer), "bos_token": None, "pad_token": None,
                              "model_max_length": request.app[STATE]["context"]})


def _eod_text(tokenizer) -> str:
    """The end-of-text token (a Hugging Face model's own eos_token, else <|endoftext|>)."""
    return getattr(tokenizer, "eod_token", EOD_TOKEN)


async def tokenize(request: web.Request) -> web.Response:
    tokenizer = request.app[STATE]["tokenizer"]
    try:
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise BadRequest("prompt", "must be a string")
    except BadRequest as err:
        return bad_request(err)
    text = body["prompt"]
    if text == _eod_text(tokenizer):
        return web.json_response({"tokens": [tokenizer.eod_id]})
    return web.json_response({"tokens": tokenizer.encode(text)})


async def detokenize(request: web.Request) -> web.Response:
    tokenizer = request.app[STATE]["tokenizer"]
    try:
        body = await read_json(request)
        tokens = body.get("tokens") if isinstance(body, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) and 0 <= t < tokenizer.vocab_size
                                                   for t in tokens):
            raise BadRequest("tokens", f"must be a list of token ids in [0, {tokenizer.vocab_size})")
    except BadRequest as err:
        return bad_request(err)
    return web.json_response({"prompt": tokenizer.decode(tokens)})


def build_app(engine_loop, tokenizer, name: str, context: int, template, stop_ids=frozenset()) -> web.Application:
    """template: the model's ChatTemplate (its `template` None when it has none); stop_ids: end
    tokens besides <|endoftext|> (the chat template's eos_token)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[errors_as_json])
    app[STATE] = {"engine": engine_loop, "tokenizer": tokenizer, "name": name, "context": context,
                  "created": int(time.time()), "template": template, "stop_ids": frozenset(stop_ids)}
    app[METRICS] = Metrics()
    app.add_routes([web.post("/v1/completions", completions), web.post("/v1/chat/completions", chat_completions),
                    web.get("/v1/models", models), web.get("/health", health), web.get("/metrics", metrics),
                    web.get("/tokenizer_info", tokenizer_info), web.post("/tokenize", tokenize),
                    web.post("/detokenize", detokenize)])
    return app


async def run_app(app: web.Application, host: str, port: int, shutdown_timeout: float, on_ready=None) -> None:
    """Serve until SIGTERM or SIGINT; then stop listening and let in-flight requests finish."""
    runner = web.AppRunner(app, shutdown_timeout=shutdown_timeout, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    if on_ready is not None:
        on_ready()
    await stop.wait()
    log.info("stopping: no new connections; finishing the requests in flight")
    await runner.cleanup()
