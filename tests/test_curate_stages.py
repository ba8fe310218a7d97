"""Streaming stages on real-looking inputs: HTML with boilerplate, German/French text, mojibake,
documents that break one Gopher or C4 rule each (and are counted under that rule)."""
import random
import re

import pytest

from trident.curate.document import CurateError, Document
from trident.curate.run.registry import build_stage

ARTICLE = [
    "The json module exposes an API familiar to users of the standard library marshal and pickle "
    "modules. It encodes Python objects as strings in the JSON format and decodes them again, so that "
    "programs written in different languages can exchange structured data with each other.",
    "Encoding basic Python object hierarchies is straightforward: dictionaries become objects, lists "
    "become arrays, and strings, numbers, booleans and None map to their natural JSON counterparts. "
    "Decoding reverses the process and can be customised with hooks for special objects.",
]
ENGLISH = " ".join(ARTICLE) + " " + (
    "The module also offers a command line tool to validate and pretty print JSON objects, which is "
    "useful when one wants to inspect the output of a web service from a shell. It reads from standard "
    "input or a file and writes the formatted result to standard output for the user to read.")
GERMAN = ("Die Stadt liegt an einem breiten Fluss, der im Frühjahr oft über die Ufer tritt. Die Bewohner "
          "haben deshalb schon vor langer Zeit hohe Deiche gebaut und pflegen sie jedes Jahr mit großer Sorgfalt.")
FRENCH = ("La ville se trouve au bord d'une large rivière qui déborde souvent au printemps. Les habitants ont "
          "donc construit depuis longtemps de hautes digues et les entretiennent chaque année avec soin.")


def run(name, docs, **params):
    stage = build_stage(name, params)
    stage.setup()
    kept = list(stage.process(docs))
    counters = stage.counters
    dropped = sum(v for k, v in counters.items() if k.startswith("dropped:"))
    assert counters["in"] == len(docs) == counters["out"] + dropped  # nothing vanishes uncounted
    return kept, counters


def html_doc(doc_id, body_html, status=200, content_type="text/html; charset=utf-8"):
    page = f"""<html><head><title>t</title><script>var tracking = 1;</script></head><body>
<nav><a href="/">Home</a> | <a href="/products">Products</a> | <a href="/contact">Contact us today</a></nav>
<div class="cookie-banner">We use cookies to improve your experience. Accept all cookies.</div>
<main><article><h1>Working with JSON</h1>{body_html}</article></main>
<footer>Copyright 2024 Example Media GmbH. All rights reserved. Imprint.</footer></body></html>"""
    return Document(doc_id, page, {"url": f"https://x.org/{doc_id}", "content_type": content_type,
                                   "http_status": status})


def test_extract_keeps_article_and_removes_boilerplate():
    docs = [html_doc("a", "".join(f"<p>{p}</p>" for p in ARTICLE)),
            html_doc("b", "<p>gone</p>", status=404),
            html_doc("c", "", content_type="application/pdf"),
            Document("d", '<html><body><nav><a href="/">Home</a> | <a href="/p">Products</a></nav>'
                          "<footer>Copyright 2024 Example Media GmbH.</footer></body></html>",
                     {"content_type": "text/html", "http_status": 200}),
            Document("e", "already plain text", {"source": "x.jsonl"})]
    kept, counters = run("extract", docs)
    assert [d.id for d in kept] == ["a", "e"]
    text = kept[0].text
    assert ARTICLE[0] in text and ARTICLE[1] in text
    for boilerplate in ("Contact us today", "cookies", "Copyright", "tracking"):
        assert boilerplate not in text
    assert "content_type" not in kept[0].meta and "http_status" not in kept[0].meta
    assert counters["dropped:non_200"] == 1 and counters["http_status:404"] == 1
    assert counters["dropped:non_html"] == 1 and counters["dropped:no_main_text"] == 1
    assert counters["passthrough:text"] == 1


def test_langid_keeps_english_and_counts_other_languages():
    docs = [Document("en", ENGLISH), Document("de", GERMAN), Document("fr", FRENCH)]
    kept, counters = run("langid", docs, languages=["en"], threshold=0.5)
    assert [d.id for d in kept] == ["en"] and kept[0].meta["language"] == "en"
    assert kept[0].meta["language_score"] > 0.9
    assert counters["dropped:language:de"] == 1 and counters["dropped:language:fr"] == 1
    kept, _ = run("langid", [Document("de", GERMAN), Document("fr", FRENCH)], languages=["de", "fr"])
    assert len(kept) == 2
    kept, counters = run("langid", [Document("en", ENGLISH)], threshold=1.0)
    assert kept == [] and counters["dropped:low_confidence"] == 1


def test_clean_repairs_mojibake_and_normalises():
    docs = [Document("m", "The Mona Lisa doesnâ€™t have eyebrows.\x00  Café   menu\n\n\n\n\nnext"),
            Document("n", "e\u0301cole"),  # decomposed é
            Document("w", " \n\t \x07 ")]
    kept, counters = run("clean", docs)
    assert kept[0].text == "The Mona Lisa doesn't have eyebrows. Café menu\n\nnext"
    assert kept[1].text == "\u00e9cole"
    assert counters["changed:ftfy"] == 2 and counters["changed:normalize"] == 1  # ftfy also drops \x07
    assert counters["dropped:empty"] == 1
    with pytest.raises(CurateError, match="normalization"):
        build_stage("clean", {"normalization": "NFX"})


def test_clean_tidies_white_space_as_its_rules_say():
    """Control characters but tab and newline removed, other space characters made " ", runs of spaces
    one, lines stripped, runs of blank lines one (checked on random mixtures, ftfy and NFC off)."""
    rng = random.Random(4)
    alphabet = "ab \t\n\x00\x0b\x1f\x7f\x85\x9f\xa0\u2000\u200b\u200c\u3000\u2028é"
    stage = build_stage("clean", {"normalization": None, "fix_unicode": False})
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 16)))
        want = "".join(c for c in text if c in "\t\n" or not (ord(c) < 32 or 0x7f <= ord(c) <= 0x9f))
        want = re.sub("  +", " ", re.sub("[\t\xa0\u2000-\u200b\u3000]", " ", want))
        want = "\n".join(line.strip() for line in re.sub(r"\n\s*\n(\s*\n)+", "\n\n", want).split("\n")).strip()
        got = stage.apply(Document("t", text))
        assert (got == "empty" if not want.strip() else got.text == want), repr(text)


def test_min_length_in_words_and_in_tokenizer_tokens(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    docs = [Document("long", "word " * 128), Document("short", "word " * 127)]
    kept, counters = run("min_length", docs, min_tokens=128, unit="words")
    assert [d.id for d in kept] == ["long"] and counters["dropped:too_short"] == 1
    # A character-level tokenizer: 127 words of 4 letters are 508 tokens, above the limit.
    tokenizer = Tokenizer(models.WordLevel({"w": 0, "o": 1, "r": 2, "d": 3, "[UNK]": 4}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    path = tmp_path / "chars.json"
    tokenizer.save(str(path))
    kept, _ = run("min_length", docs, min_tokens=500, tokenizer=str(path))
    assert [d.id for d in kept] == ["long", "short"]


def test_min_length_counts_gpt2_pieces_as_gpt2_pretokenizes():
    """The default unit is GPT-2's pre-tokenizer pieces (MT-NLG counted GPT-2 tokens): a reference
    page of code words is longer than its spaces say."""
    from tokenizers.pre_tokenizers import ByteLevel

    from trident.curate.filters.heuristics import gpt2_pieces

    gpt2 = ByteLevel(add_prefix_space=False, use_regex=True)
    for text in ("SPI_finish(void) returns SPI_OK_FINISH;\n\n  if it isn't connected -- 3.14 ", ENGLISH, GERMAN,
                 "x  =  y\t\t# 2 spaces\r\nÉcole d'été, naïve café's 東京 1999年"):
        assert gpt2_pieces(text) == len(gpt2.pre_tokenize_str(text)), text
    code = "int SPI_finish(void) returns SPI_OK_FINISH or SPI_ERROR_UNCONNECTED. " * 9  # 54 words, 181 pieces
    kept, counters = run("min_length", [Document("code", code)], min_tokens=128)
    assert [d.id for d in kept] == ["code"] and gpt2_pieces(code) >= 128 > len(code.split())
    kept, _ = run("min_length", [Document("code", code)], min_tokens=128, unit="words")
    assert kept == []
    with pytest.raises(CurateError, match="unit"):
        build_stage("min_length", {"unit": "bytes"})


def _prose(n_words):
    base = ENGLISH.split()
    return " ".join(base[i % len(base)] + ("" if i % 17 else f" v{i}") for i in range(n_words))


GOPHER_CASES = {
    "word_count": "the cat and the dog sat on the mat with a hat",
    "mean_word_length": " ".join(["the", "of", "and", "to", "a", "in", "is", "it"] * 10),
    "symbol_ratio": _prose(80) + " #tag" * 20,
    "bullet_lines": "\n".join(f"- item {i} of the list with more words here" for i in range(12)),
    "ellipsis_lines": "\n".join(f"and the story goes on with line {i} while the night grows dark ..." for i in range(12)),
    "alpha_words": _prose(60) + " " + " ".join(str(1000 + i) for i in range(40)),
    "stop_words": " ".join(f"alpha{i} beta gamma delta epsilon" for i in range(20)),
}


@pytest.mark.parametrize("rule", sorted(GOPHER_CASES))
def test_each_gopher_quality_rule_is_counted_by_name(rule):
    kept, counters = run("gopher_quality", [Document(rule, GOPHER_CASES[rule]), Document("ok", ENGLISH)])
    assert [d.id for d in kept] == ["ok"]
    assert counters[f"dropped:{rule}"] == 1


def test_gopher_repetition_rules():
    lines = "\n".join(["Click here to subscribe to our newsletter today."] * 6 + [ARTICLE[0]])
    paragraphs = "\n\n".join([ARTICLE[0]] * 3 + [ARTICLE[1]])
    top_bigram = " ".join(["hot dog"] * 30 + ARTICLE[0].split())
    cases = [Document("lines", lines), Document("paras", paragraphs), Document("bigram", top_bigram),
             Document("ok", ENGLISH)]
    kept, counters = run("gopher_repetition", cases)
    assert [d.id for d in kept] == ["ok"]
    assert counters["dropped:dup_lines"] == 1 and counters["dropped:dup_paragraphs"] == 1
    assert counters["dropped:top_2gram"] == 1
    # Thresholds are parameters: a lenient stage keeps the repeated lines.
    kept, _ = run("gopher_repetition", [Document("lines", lines)], max_dup_line_frac=0.9,
                  max_dup_line_char_frac=0.9, top_ngram_max={2: 0.99, 3: 0.99, 4: 0.99},
                  dup_ngram_max={5: 0.99})
    assert len(kept) == 1


def test_c4_line_rules_remove_lines_and_drop_documents():
    page = "\n".join([
        "Home", "Please enable JavaScript to view the comments.", "This site uses cookies to help us.",
        *ARTICLE, "The decoder is fast and safe to use.", "It has many options for you.", "Share this"])
    cases = [Document("page", page), Document("lorem", "Lorem ipsum dolor sit amet. " * 10),
             Document("code", "def f(): return {1: 2}. " * 10), Document("thin", "One line only here.")]
    kept, counters = run("c4_lines", cases)
    assert [d.id for d in kept] == ["page"]
    assert kept[0].text.split("\n") == [*ARTICLE, "The decoder is fast and safe to use.",
                                        "It has many options for you."]
    assert counters["lines_removed:javascript"] == 1 and counters["lines_removed:policy"] == 1
    assert counters["lines_removed:no_terminal_punct"] == 2
    assert counters["dropped:lorem_ipsum"] == 1 and counters["dropped:curly_bracket"] == 1
    assert counters["dropped:too_few_sentences"] == 1


def test_unknown_stage_and_parameter_are_config_errors():
    with pytest.raises(CurateError, match="unknown stage 'nope'.*known stages:.*extract"):
        build_stage("nope", {})
    with pytest.raises(CurateError, match=r"stage 'langid': unknown parameter\(s\) \['treshold'\]"):
        build_stage("langid", {"treshold": 0.3})


def test_holdout_keeps_one_document_in_n_out_whatever_the_sharding_with_its_text_for_evaluation(tmp_path):
    import json

    from trident.curate.filters.holdout import held_out_texts
    from trident.curate.run.pipeline import run_pipeline
    from trident.curate.read.shards import read_shard

    inputs = []
    for name in ("a", "b", "c"):
        inputs.append(tmp_path / f"{name}.jsonl")
        inputs[-1].write_text("".join(json.dumps({"text": f"{name} document {i}"}) + "\n" for i in range(20)))
    config = {"stages": [{"stage": "holdout", "every": 4, "seed": 1}, {"stage": "exact_dedup"}]}
    runs = [run_pipeline({**config, "shard_bytes": size}, inputs, tmp_path / f"out{size}") for size in (0, 1 << 20)]
    held = [sorted(held_out_texts(tmp_path / f"out{size}")) for size in (0, 1 << 20)]
    assert held[0] == held[1] and 6 <= len(held[0]) <= 24  # about 60 / 4, the same on 3 shards as on 1
    for stats, texts in zip(runs, held):
        counters = stats["stages"][1]["counters"]
        assert counters["dropped:held_out"] == len(texts) and stats["accounting"]["ok"]
        kept = {doc.text for shard in stats["output"]["shards"] for doc in read_shard(shard)}
        assert len(kept) == 60 - len(texts) and not kept & set(texts)
    with pytest.raises(CurateError, match="every must be >= 2"):
        build_stage("holdout", {"every": 1})

