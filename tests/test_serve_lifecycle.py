"""`trident serve` starting and stopping: it binds 127.0.0.1 unless told otherwise; SIGTERM stops new
connections, lets the streams in flight finish, then exits 0; with --nproc 2 (two pipeline stages)
rank 0 serves and drives the other rank, which samples (penalties and logit_bias too), and both stop
on SIGTERM; usage mistakes (a path that does not exist, a missing --chat-template) exit 2 at start."""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from serve_fixtures import PROMPTS, Server, engine_reference, greedy_reference, serving_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return serving_checkpoint(tmp_path_factory.mktemp("serve_life"))[0]


def _listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) listening on `port`."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(address)
    return found


def _stream(url: str, max_tokens: int, out: list) -> None:
    body = json.dumps({"prompt": "The", "max_tokens": max_tokens, "temperature": 0, "stream": True}).encode()
    request = urllib.request.Request(url + "/v1/completions", data=body)
    with urllib.request.urlopen(request, timeout=120) as response:
        out.append(response.read().decode())


@pytest.mark.timeout(120)
def test_binds_loopback_and_sigterm_finishes_streams_in_flight(checkpoint):
    server = Server(checkpoint, "--max-batch", "4")
    try:
        assert _listening_addresses(server.port) == {"0100007F"}  # 127.0.0.1 only
        bodies: list[str] = []
        clients = [threading.Thread(target=_stream, args=(server.url, 300, bodies)) for _ in range(3)]
        for client in clients:
            client.start()
        deadline = time.monotonic() + 30
        while server.get("/health")["running"] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.get("/health")["running"] == 3
        assert server.stop() == 0
        for client in clients:
            client.join(60)
    finally:
        server.kill()
    with pytest.raises(OSError):  # nothing listens any more
        urllib.request.urlopen(server.url + "/health", timeout=5)
    assert len(bodies) == 3, server.output()[-3000:]
    for body in bodies:
        events = [line[len("data: "):] for line in body.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] in ("length", "stop")
    assert "trident serve: stopped" in server.output()


@pytest.mark.timeout(240)
def test_two_ranks_serve_what_one_process_writes(checkpoint):
    from trident.data.tokenizer import Tokenizer

    tokenizer = Tokenizer.load(checkpoint / "tokenizer.json")
    want = greedy_reference(checkpoint, PROMPTS, 10)
    server = Server(checkpoint, "parallel.pp=2", "--max-batch", "4", nproc=2, timeout=200)
    try:
        results: dict[int, str] = {}

        def ask(i: int) -> None:
            status, body = server.post("/v1/completions", {"prompt": PROMPTS[i], "max_tokens": 10, "temperature": 0})
            results[i] = body["choices"][0]["text"] if status == 200 else str(body)

        askers = [threading.Thread(target=ask, args=(i,)) for i in range(len(PROMPTS))]
        for asker in askers:
            asker.start()
        for asker in askers:
            asker.join(60)
        assert [results.get(i) for i in range(len(PROMPTS))] == [want[p] for p in PROMPTS]
        # the bias columns of the plan reach the sampling stage (rank 1) as they do in one process
        steered = dict(presence_penalty=0.5, frequency_penalty=1.0, logit_bias={7: 3.0})
        status, body = server.post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 10, "temperature": 0,
                                                       "ignore_eos": True, **steered, "logit_bias": {"7": 3.0}})
        ids = engine_reference(checkpoint, [[5, 6, 7]], max_new_tokens=10, stop_at_eod=False, **steered)[0]
        assert status == 200 and body["choices"][0]["text"] == tokenizer.decode(ids), body
        assert server.stop(timeout=60) == 0, server.output()[-3000:]
    finally:
        server.kill()


@pytest.mark.timeout(60)
def test_usage_mistakes_exit_2_before_anything_starts(checkpoint, capsys):
    from trident.cli import main

    assert main(["serve", str(checkpoint), "--max-batch", "0"]) == 2
    assert "--max-batch" in capsys.readouterr().err
    assert main(["serve", str(checkpoint), "parallel.tp=3", "--nproc", "3"]) == 2  # 4 heads do not split 3 ways
    assert "'parallel.tp': model.num_heads=4 must be divisible by tp=3" in capsys.readouterr().err
    assert main(["serve", str(checkpoint), "model.num_layers=3"]) == 2
    assert "parallel.*" in capsys.readouterr().err
    assert main(["serve", str(checkpoint.parent / "step_9999999")]) == 2  # not "missing COMPLETE marker"
    assert f"{checkpoint.parent / 'step_9999999'}: no such file or folder" in capsys.readouterr().err
    assert main(["serve", str(checkpoint), "--chat-template", "nowhere.jinja"]) == 2
    assert "--chat-template nowhere.jinja: no such file" in capsys.readouterr().err
