"""`trident serve` as its clients see it, on one server for the module (a free 127.0.0.1 port):
the `openai` package (plain and streamed) and curl get single-process greedy text; 64 concurrent
clients x 8 requests are all answered, none lost or mixed up; every error is the OpenAI JSON error
object with its status (unknown path, wrong method, each field's bad value of both APIs, an
over-long prompt, messages the chat template refuses) and the server keeps serving; /metrics and /health; a client gone
mid-stream frees its slot."""
from __future__ import annotations

import asyncio
import json
import random
import re
import socket
import subprocess
import time

import pytest

from serve_fixtures import PROMPTS, greedy_reference

MAX_TOKENS = 12


@pytest.fixture(scope="module")
def server(chat_server):
    return chat_server


@pytest.fixture(scope="module")
def checkpoint(server):
    return server.checkpoint


@pytest.fixture(scope="module")
def reference(checkpoint):
    return greedy_reference(checkpoint, PROMPTS, MAX_TOKENS)


@pytest.mark.timeout(60)
def test_openai_client_plain_and_streaming(server, reference):
    import openai  # a dev dependency: the real client, not a stand-in

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["tiny"]
    plain = client.completions.create(model="tiny", prompt=PROMPTS[:3], max_tokens=MAX_TOKENS, temperature=0)
    assert [c.text for c in sorted(plain.choices, key=lambda c: c.index)] == [reference[p] for p in PROMPTS[:3]]
    assert plain.usage.completion_tokens > 0
    pieces = [chunk.choices[0].text for chunk in client.completions.create(
        model="tiny", prompt=PROMPTS[0], max_tokens=MAX_TOKENS, temperature=0, stream=True)]
    assert len(pieces) > 1 and "".join(pieces) == reference[PROMPTS[0]]
    sampled = [client.completions.create(model="tiny", prompt="The", max_tokens=8, temperature=0.9, top_p=0.9,
                                         seed=11).choices[0].text for _ in range(2)]
    assert sampled[0] == sampled[1]  # a seed makes a sampled completion reproducible


@pytest.mark.timeout(60)
def test_curl_plain_and_server_sent_events(server, reference):
    body = json.dumps({"prompt": PROMPTS[1], "max_tokens": MAX_TOKENS, "temperature": 0})
    done = subprocess.run(["curl", "-s", "-H", "Content-Type: application/json", "-d", body,
                           server.url + "/v1/completions"], capture_output=True, text=True, timeout=30)
    assert json.loads(done.stdout)["choices"][0]["text"] == reference[PROMPTS[1]]
    stream = json.dumps({"prompt": PROMPTS[1], "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True})
    done = subprocess.run(["curl", "-sN", "-d", stream, server.url + "/v1/completions"], capture_output=True,
                          text=True, timeout=30)
    events = [line[len("data: "):] for line in done.stdout.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
    assert "".join(c["text"] for c in chunks) == reference[PROMPTS[1]]
    assert chunks[-1]["finish_reason"] in ("length", "stop")


@pytest.mark.timeout(60)
def test_echo_logprobs_score_the_prompt_as_one_process(server, checkpoint):
    import torch

    from trident.checkpoint.reader import load_for_inference

    model, tokenizer, _ = load_for_inference(checkpoint)
    ids = tokenizer.encode(PROMPTS[0])
    status, body = server.post("/v1/completions", {"prompt": ids, "max_tokens": 1, "temperature": 0,
                                                   "logprobs": 2, "echo": True})
    assert status == 200
    logprobs = body["choices"][0]["logprobs"]
    assert logprobs["token_logprobs"][0] is None and len(logprobs["token_logprobs"]) == len(ids) + 1
    with torch.no_grad():
        want = model(torch.tensor([ids]))[0, :-1, : tokenizer.vocab_size].log_softmax(-1)
    want = want.gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    assert logprobs["token_logprobs"][1: len(ids)] == pytest.approx(want.tolist(), abs=1e-4)
    assert all(len(top) <= 2 for top in logprobs["top_logprobs"][1:])
    assert body["choices"][0]["text"].startswith(tokenizer.decode(ids))


BAD = [  # (body, the field the 400 names)
    (b'{"prompt": "x", ', "body"),
    (b'["not", "an", "object"]', "body"),
    ({"prompt": "x", "max_tokens": "5"}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "max_tokens": -3}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 384}, "max_tokens"),
    ({"prompt": "x " * 400}, "prompt"),
    ({"prompt": 5}, "prompt"),
    ({"prompt": [1, "a"]}, "prompt[0]"),
    ({"prompt": [10**9]}, "prompt"),
    ({"prompt": "x", "temperature": "hot"}, "temperature"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "logprobs": 9}, "logprobs"),
    ({"prompt": "x", "stream": "yes"}, "stream"),
    ({"prompt": "x", "stop": ["a", ""]}, "stop"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "n": 2, "best_of": 1}, "best_of"),
    ({"prompt": "x", "best_of": 3, "stream": True}, "best_of"),
    ({"prompt": "x", "frequency_penalty": 3}, "frequency_penalty"),
    ({"prompt": "x", "presence_penalty": "a"}, "presence_penalty"),
    ({"prompt": "x", "logit_bias": {"abc": 1}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"5": 101}}, "logit_bias"),
    ({"prompt": "x", "logit_bias": {"100000": 1}}, "logit_bias"),
    ({"prompt": "x", "suffix": "def"}, "suffix"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": "x", "stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ({"prompt": "x", "seed": "x"}, "seed"),
    ({"prompt": "x", "user": 5}, "user"),
    ({"prompt": "x", "best_of": 17}, "best_of"),
    ({"prompt": "x", "frobnicate": 1}, "frobnicate"),
    ({"max_tokens": 3}, "prompt"),
]


HELLO = [{"role": "user", "content": "hi"}]
CHAT_BAD = [
    ({"max_tokens": 3}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, "messages[0].content[0]"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages"),  # the template's raise_exception
    ({"messages": HELLO, "logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ({"messages": HELLO, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"messages": HELLO, "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ({"messages": HELLO, "response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": HELLO, "max_completion_tokens": 0}, "max_completion_tokens"),
    ({"messages": HELLO, "max_tokens": 384}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x " * 400}]}, "messages"),
    ({"messages": HELLO, "n": 2, "best_of": 3}, "best_of"),
    ({"messages": HELLO, "echo": True}, "echo"),
]


def _json_error(status: int, kind: str, answer) -> dict:
    assert kind.startswith("application/json"), (status, kind, answer)
    assert set(answer["error"]) == {"message", "type", "param", "code"}, answer
    return answer["error"]


@pytest.mark.timeout(60)
def test_every_error_is_the_openai_json_object_and_serving_goes_on(server, reference):
    for body, field in BAD:
        status, kind, answer = server.raw("POST", "/v1/completions", body if isinstance(body, bytes) else
                                          json.dumps(body).encode())
        error = _json_error(status, kind, answer)
        assert status == 400 and error["type"] == "invalid_request_error", (body, answer)
        assert error["param"] == field and field in error["message"], (body, answer)
    for method, path, status in [("GET", "/v1/nothing", 404), ("POST", "/v1/chat/complete", 404),
                                 ("GET", "/v1/completions", 405), ("POST", "/v1/models", 405),
                                 ("DELETE", "/v1/chat/completions", 405)]:
        got, kind, answer = server.raw(method, path, b"{}" if method == "POST" else None)
        error = _json_error(got, kind, answer)
        assert got == status and path in error["message"], (method, path, answer)
    long = {"prompt": "x " * 400, "max_tokens": 4}  # 400 tokens, 384 of context
    status, kind, answer = server.raw("POST", "/v1/completions", json.dumps(long).encode())
    error = _json_error(status, kind, answer)
    assert status == 400 and error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert "context length is 384 tokens" in error["message"] and "shorten it to at most 383" in error["message"]
    assert "max_length=384" in error["message"]  # how lm-evaluation-harness users make it fit
    huge = b'{"prompt": "' + b"x" * (17 << 20) + b'"}'  # over the 16 MiB a request may carry
    status, kind, answer = server.raw("POST", "/v1/completions", huge)
    error = _json_error(status, kind, answer)
    assert status == 413 and error["code"] == "request_too_large" and "16777216 bytes" in error["message"], answer
    for body, field in CHAT_BAD:
        status, kind, answer = server.raw("POST", "/v1/chat/completions", json.dumps(body).encode())
        error = _json_error(status, kind, answer)
        assert status == 400 and error["param"] == field and field in error["message"], (body, answer)
    status, answer = server.post("/v1/completions", {"prompt": PROMPTS[2], "max_tokens": MAX_TOKENS, "temperature": 0})
    assert status == 200 and answer["choices"][0]["text"] == reference[PROMPTS[2]]


@pytest.mark.timeout(60)
def test_openai_client_gets_errors_it_can_read(server):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="Only system, user and assistant roles"):
        client.chat.completions.create(model="tiny", messages=[{"role": "tool", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="context length is 384"):
        client.completions.create(model="tiny", prompt="x " * 400, max_tokens=1)
    with pytest.raises(openai.NotFoundError, match="no route POST /v1/embeddings"):
        client.embeddings.create(model="tiny", input="hi")


_SAMPLE = re.compile(r'^([a-z_:][a-z0-9_:]*)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? (-?[0-9.e+-]+|\+Inf|NaN)$')


def _prometheus(text: str) -> dict[str, float]:
    """Samples of the Prometheus text format, each line checked against its grammar."""
    samples, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            assert kind in ("counter", "gauge", "histogram"), line
            typed.add(name)
        elif line and not line.startswith("# HELP "):
            match = _SAMPLE.match(line)
            assert match, line
            assert any(match.group(1).startswith(name) for name in typed), line
            samples[line.rsplit(" ", 1)[0]] = float(match.group(4))
    return samples


@pytest.mark.timeout(60)
def test_metrics_count_requests_tokens_and_first_tokens(server):
    import urllib.request

    before = _prometheus(urllib.request.urlopen(server.url + "/metrics", timeout=10).read().decode())
    status, answer = server.post("/v1/completions", {"prompt": ["The", "A"], "max_tokens": 5, "temperature": 0,
                                                     "ignore_eos": True})
    assert status == 200
    server.raw("GET", "/v1/nothing")
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        after = _prometheus(response.read().decode())

    def grew(sample: str) -> float:
        return after[sample] - before.get(sample, 0.0)

    assert grew('trident_serve_requests_total{route="/v1/completions",status="200"}') == 1
    assert grew('trident_serve_requests_total{route="other",status="404"}') == 1
    assert grew("trident_serve_prompt_tokens_total") == answer["usage"]["prompt_tokens"]
    assert grew("trident_serve_generation_tokens_total") == 10
    assert grew("trident_serve_time_to_first_token_seconds_count") == 1
    assert after['trident_serve_time_to_first_token_seconds_bucket{le="+Inf"}'] == \
        after["trident_serve_time_to_first_token_seconds_count"]
    assert after["trident_serve_requests_waiting"] == 0 and after["trident_serve_slots"] == 16
    assert server.get("/health")["status"] == "ok"


async def _client(url: str, jobs: list[tuple[int, str]], seen: list) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for tag, prompt in jobs:
            body = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "user": str(tag)}
            async with session.post(url + "/v1/completions", json=body) as response:
                assert response.status == 200, await response.text()
                seen.append((tag, prompt, (await response.json())["choices"][0]["text"]))


@pytest.mark.timeout(180)
def test_64_clients_by_8_requests_each_get_their_own_answer(server, reference):
    draw = random.Random(0)
    plan = [[(8 * c + i, draw.choice(PROMPTS)) for i in range(8)] for c in range(64)]
    seen: list = []

    async def everyone():
        await asyncio.gather(*(_client(server.url, jobs, seen) for jobs in plan))

    asyncio.run(everyone())
    assert sorted(tag for tag, _, _ in seen) == list(range(64 * 8))  # none lost, none twice
    wrong = [(tag, prompt, text) for tag, prompt, text in seen if text != reference[prompt]]
    assert not wrong, wrong[:3]
    assert server.get("/health")["running"] == 0


@pytest.mark.timeout(60)
def test_a_client_gone_mid_stream_frees_its_slot(server):
    before = server.get("/health")["finished"].get("cancelled", 0)
    body = json.dumps({"prompt": "The", "max_tokens": 370, "temperature": 0, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        received = b""
        while b"data: " not in received:  # streaming has begun
            received += sock.recv(4096)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        health = server.get("/health")
        if health["finished"].get("cancelled", 0) > before and health["running"] == 0:
            break
        time.sleep(0.05)
    assert health["finished"].get("cancelled", 0) == before + 1 and health["running"] == 0, health
