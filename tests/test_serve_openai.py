"""`trident serve` as the installed `openai` package drives it, on the serving tests' shared server
(conftest.py's chat_server, whose checkpoint carries a Hugging Face tokenizer_config.json with a
chat template): chat completions plain and streamed (n, seed, stop, logprobs, usage), and
completions with every field at its default and with penalties, logit_bias, best_of, and
max_tokens=0 scoring. Expected tokens come from the same
checkpoint's engine in this process (trident.infer.batching), never from the server itself."""
from __future__ import annotations

import pytest

from serve_fixtures import engine_reference

HELLO = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "How do you water plants?"}]


@pytest.fixture(scope="module")
def server(chat_server):
    return chat_server


@pytest.fixture(scope="module")
def checkpoint(server):
    return server.checkpoint, server.tokenizer


@pytest.fixture(scope="module")
def client(server):
    import openai  # the real client (a dev dependency), not a stand-in

    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0) as client:
        yield client


def _chat_ids(checkpoint, messages) -> list[int]:
    from trident.serve.chat_template import ChatTemplate

    path, tokenizer = checkpoint
    return tokenizer.encode(ChatTemplate.load(path).render(messages))


@pytest.mark.timeout(90)
def test_chat_plain_and_streamed_equal_the_engine_on_the_rendered_prompt(checkpoint, client):
    path, tokenizer = checkpoint
    ids = _chat_ids(checkpoint, HELLO)
    want = tokenizer.decode(engine_reference(path, [ids], max_new_tokens=12)[0])
    plain = client.chat.completions.create(model="tiny", messages=HELLO, max_completion_tokens=12, temperature=0)
    choice = plain.choices[0]
    assert plain.object == "chat.completion" and choice.message.role == "assistant"
    assert choice.message.content == want and choice.finish_reason in ("length", "stop")
    assert plain.usage.prompt_tokens == len(ids)
    chunks = list(client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


@pytest.mark.timeout(90)
def test_chat_n_with_a_seed_equals_single_requests_with_seed_plus_index(client):
    settings = dict(model="tiny", messages=HELLO, max_tokens=10, temperature=1.0, top_p=0.9)
    both = client.chat.completions.create(n=2, seed=41, **settings)
    singles = [client.chat.completions.create(seed=seed, **settings).choices[0].message.content for seed in (41, 42)]
    assert [c.message.content for c in sorted(both.choices, key=lambda c: c.index)] == singles
    assert singles[0] != singles[1]
    again = client.chat.completions.create(n=2, seed=41, **settings)
    assert [c.message.content for c in again.choices] == [c.message.content for c in both.choices]
    streamed = {}
    for chunk in client.chat.completions.create(n=2, seed=41, stream=True, **settings):  # each delta names its choice
        for choice in chunk.choices:
            streamed[choice.index] = streamed.get(choice.index, "") + (choice.delta.content or "")
    assert [streamed[0], streamed[1]] == singles


@pytest.mark.timeout(90)
def test_chat_stop_and_logprobs(checkpoint, client):
    full = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=16, temperature=0,
                                          logprobs=True, top_logprobs=3)
    text, entries = full.choices[0].message.content, full.choices[0].logprobs.content
    assert len(entries) == full.usage.completion_tokens and "".join(e.token for e in entries) == text
    for entry in entries:  # greedy: each token is its own top alternative
        assert len(entry.top_logprobs) == 3 and entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=16, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=16, temperature=0,
                                              stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed) == text[: text.index(stop)]


@pytest.mark.timeout(90)
def test_completions_accept_every_field_at_its_default(client, server):
    defaults = dict(best_of=1, echo=False, frequency_penalty=0, presence_penalty=0, logit_bias={}, logprobs=None,
                    max_tokens=16, n=1, stop=None, stream=False, stream_options=None, suffix=None, temperature=1,
                    top_p=1, user="someone")
    spelled = client.completions.create(model="tiny", prompt="The", seed=3, **defaults)
    bare = client.completions.create(model="tiny", prompt="The", seed=3)
    assert spelled.choices[0].text == bare.choices[0].text and spelled.usage == bare.usage
    chat = client.chat.completions.create(model="tiny", messages=HELLO, seed=3, frequency_penalty=0,
                                          presence_penalty=0, logit_bias={}, n=1, response_format={"type": "text"},
                                          tools=None, stream=False, user="someone", store=False)
    assert chat.choices[0].message.content
    assert "/v1/completions for user 'someone'" in server.output()  # `user` is logged


@pytest.mark.timeout(90)
def test_completions_penalties_and_logit_bias_as_the_engine_applies_them(checkpoint, client):
    path, tokenizer = checkpoint
    ids = tokenizer.encode("The")

    def served(**fields) -> str:
        return client.completions.create(model="tiny", prompt=ids, max_tokens=14, temperature=0,
                                         extra_body={"ignore_eos": True}, **fields).choices[0].text

    def engine(**settings) -> list[int]:
        return engine_reference(path, [ids], max_new_tokens=14, stop_at_eod=False, **settings)[0]

    plain = engine()
    penalised = engine(presence_penalty=1.0, frequency_penalty=1.5)
    assert penalised != plain
    assert served(presence_penalty=1.0, frequency_penalty=1.5) == tokenizer.decode(penalised)
    banned = plain[0]
    without = engine(logit_bias={banned: -100.0})
    assert banned not in without
    assert served(logit_bias={str(banned): -100}) == tokenizer.decode(without)
    forced = tokenizer.encode(" water")[0]
    assert served(logit_bias={str(forced): 100}) == tokenizer.decode([forced] * 14)


@pytest.mark.timeout(90)
def test_best_of_returns_the_n_sequences_with_the_highest_cumulative_logprob(client):
    settings = dict(model="tiny", prompt="A man fills the sink", max_tokens=8, temperature=1.0, logprobs=1)
    singles = [client.completions.create(seed=seed, **settings).choices[0] for seed in (70, 71, 72)]
    ranked = sorted(singles, key=lambda c: -sum(c.logprobs.token_logprobs))
    best = client.completions.create(best_of=3, n=2, seed=70, **settings)
    assert [c.text for c in sorted(best.choices, key=lambda c: c.index)] == [c.text for c in ranked[:2]]
    assert best.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in singles)


@pytest.mark.timeout(90)
def test_max_tokens_0_with_echo_scores_the_prompt_only(client):
    prompt = "Question: How do you clean a window?\nAnswer:"
    scored = client.completions.create(model="tiny", prompt=prompt, max_tokens=0, echo=True, logprobs=1,
                                       temperature=0)
    one = client.completions.create(model="tiny", prompt=prompt, max_tokens=1, echo=True, logprobs=1, temperature=0)
    got, ref = scored.choices[0].logprobs, one.choices[0].logprobs
    assert scored.choices[0].text == prompt and scored.usage.completion_tokens == 0
    assert got.token_logprobs[0] is None and len(got.tokens) == len(ref.tokens) - 1
    assert got.token_logprobs == ref.token_logprobs[:-1] and got.top_logprobs == ref.top_logprobs[:-1]


@pytest.mark.timeout(90)
def test_completion_stream_with_usage_and_n(client):
    chunks = list(client.completions.create(model="tiny", prompt=["The", "A"], n=2, seed=9, max_tokens=6,
                                            temperature=1.0, stream=True, stream_options={"include_usage": True}))
    texts = {}
    for chunk in chunks[:-1]:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + choice.text
    plain = client.completions.create(model="tiny", prompt=["The", "A"], n=2, seed=9, max_tokens=6, temperature=1.0)
    assert texts == {c.index: c.text for c in plain.choices} and sorted(texts) == [0, 1, 2, 3]
    assert chunks[-1].choices == [] and chunks[-1].usage == plain.usage
