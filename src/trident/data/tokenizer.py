"""GPT-2-style byte-level BPE, on Hugging Face `tokenizers`: train, save, load, encode, decode.

Byte-level means every string round-trips: text is mapped to bytes, bytes to 256 printable
symbols, and BPE merges those, so no input is ever "unknown". `<|endoftext|>` is the special
token that separates documents (Megatron's EOD); a Hugging Face model's tokenizer (any tokenizer.json:
Llama's, Qwen's, ...) separates them with its own end-of-text token, the `eos_token` of the
tokenizer_config.json beside it.

`fingerprint()` names a tokenizer by what decides its ids (model type, vocabulary, merges, added
and special tokens), so datasets, models and exports can be checked to share one.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from trident.text.storage import local_copy, location, make_folder, staged_folder

EOD_TOKEN = "<|endoftext|>"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"  # Hugging Face's: special tokens, chat template


def tokenizer_file(path) -> Path:
    """Where Tokenizer.save writes for `path`: into it when it is a folder or has no suffix."""
    path = location(path)
    return path / TOKENIZER_FILE if path.is_dir() or not path.suffix else path


def _byte_level(tokenizer: HFTokenizer) -> HFTokenizer:
    # GPT-2: no prefix space (so decode(encode(x)) == x), regex pre-split, byte-level decoding
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


class Tokenizer:
    """A loaded tokenizer. `vocab_size` counts the special tokens; `eod_id` is `<|endoftext|>`."""

    def __init__(self, hf: HFTokenizer, source: str = "", eod_token: str = EOD_TOKEN):
        self.hf = hf
        self.source = source
        eod = hf.token_to_id(eod_token)
        if eod is None:
            raise ValueError(f"{source or 'tokenizer'}: has no {eod_token} token, which trident "
                             f"uses to separate documents; retrain with `trident tokenizer train`")
        self.eod_id, self.eod_token = int(eod), eod_token
        self._fingerprint: str | None = None

    @classmethod
    def load(cls, path) -> "Tokenizer":
        """From a tokenizer.json, or a directory holding tokenizer.json or GPT-2 vocab.json + merges.txt
        (local, or an fsspec URL)."""
        path = location(path)
        if path.is_dir():
            if (path / TOKENIZER_FILE).is_file():
                path = path / TOKENIZER_FILE
            elif (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
                return cls.from_gpt2_files(*(local_copy(path / name, "tokenizers")
                                             for name in ("vocab.json", "merges.txt")))
            else:
                raise FileNotFoundError(f"{path}: no {TOKENIZER_FILE} and no vocab.json + merges.txt "
                                        f"in this directory")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: tokenizer file not found (train one with "
                                    f"`trident tokenizer train --input FILE --vocab-size N --out {path}`)")
        try:
            hf = HFTokenizer.from_str(path.read_text(encoding="utf-8"))
        except Exception as err:  # the Rust side raises a bare Exception on parse errors
            raise ValueError(f"{path}: not a valid Hugging Face tokenizer.json ({err})") from err
        return cls(hf, source=str(path), eod_token=end_of_text_token(path.parent))

    @classmethod
    def from_gpt2_files(cls, vocab_json, merges_txt) -> "Tokenizer":
        """GPT-2 format: vocab.json (token -> id) and merges.txt (one merge a line)."""
        try:
            model = models.BPE.from_file(str(vocab_json), str(merges_txt))
        except Exception as err:
            raise ValueError(f"{vocab_json} / {merges_txt}: cannot be read as GPT-2 BPE files ({err})") from err
        hf = _byte_level(HFTokenizer(model))
        # GPT-2's vocab.json already holds <|endoftext|> (id 50256); then this only marks it special
        hf.add_special_tokens([EOD_TOKEN])
        return cls(hf, source=str(vocab_json))

    def fingerprint(self) -> str:
        """sha256 of what decides the ids: model type, vocabulary, merges, added and special tokens
        (whitespace and key order of the file do not count); computed once (a 128k vocabulary parses in ~0.1 s)."""
        if self._fingerprint is None:
            self._fingerprint = self._digest_of_ids()
        return self._fingerprint

    def _digest_of_ids(self) -> str:
        tree = json.loads(self.hf.to_str())
        model = tree.get("model") or {}
        decisive = {"type": model.get("type"), "vocab": model.get("vocab"), "merges": model.get("merges"),
                    "added_tokens": [(t.get("id"), t.get("content"), t.get("special"))
                                     for t in tree.get("added_tokens") or []], "eod": self.eod_token}
        return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()

    def sha256(self) -> str:
        """Digest of the tokenizer's full definition: equal digests encode text identically."""
        return hashlib.sha256(self.hf.to_str().encode()).hexdigest()

    @property
    def vocab_size(self) -> int:
        return int(self.hf.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, path) -> Path:
        """Write tokenizer.json (into `path` if it is a directory or has no suffix; local or a URL);
        returns the file."""
        path = tokenizer_file(path)
        make_folder(path.parent)
        path.write_text(self.hf.to_str(pretty=True), encoding="utf-8")  # the bytes hf.save writes
        return path

    def save_gpt2_files(self, directory) -> tuple[Path, Path]:
        """Export the BPE model as GPT-2 vocab.json + merges.txt (into a local folder or a URL)."""
        with staged_folder(directory) as folder:  # the BPE model writes local files only
            vocab, merges = self.hf.model.save(str(folder))
        return location(directory) / Path(vocab).name, location(directory) / Path(merges).name


def end_of_text_token(folder) -> str:
    """The token that ends a text for the tokenizer in `folder`: its tokenizer_config.json's eos_token
    (Hugging Face models), else trident's <|endoftext|>."""
    config_file = location(folder) / TOKENIZER_CONFIG
    if not config_file.is_file():
        return EOD_TOKEN
    try:
        eos = json.loads(config_file.read_text(encoding="utf-8")).get("eos_token")
    except (ValueError, AttributeError) as err:
        raise ValueError(f"{config_file}: not a valid tokenizer_config.json ({err})") from None
    eos = eos.get("content") if isinstance(eos, dict) else eos
    return eos if isinstance(eos, str) and eos else EOD_TOKEN


def train_tokenizer(files: list, vocab_size: int, out, json_key: str = "text",
                    show_progress: bool = False, max_doc_bytes: int | None = None,
                    skipped: Counter | None = None, damaged: dict | None = None) -> Tokenizer:
    """Train byte-level BPE on .txt files (plain text) or .jsonl/.jsonl.gz/.jsonl.zst (`json_key`).

    The result has at most `vocab_size` tokens including `<|endoftext|>` (fewer when the corpus
    runs out of pairs to merge) and is saved to `out` (a tokenizer.json path or a directory).
    Bad JSONL lines, lines over `max_doc_bytes` and the rest of a file that breaks off are skipped,
    never fatal, and counted in `skipped` as `skipped_lines:<reason>`; `damaged` gets each damaged
    file's {reason: lines, "lines_before": N} (trident.text.damage.damage_summary prints it).
    """
    from trident.text.jsonl import iter_texts

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + 1:
        raise ValueError(f"vocab_size {vocab_size} is too small: byte-level BPE needs at least "
                         f"{len(alphabet) + 1} (256 bytes + {EOD_TOKEN})")
    if max_doc_bytes is not None and max_doc_bytes < 1:
        raise ValueError(f"max_doc_bytes must be positive, got {max_doc_bytes}")
    paths = [location(f) for f in files]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"tokenizer training input not found: {', '.join(missing)}")
    hf = _byte_level(HFTokenizer(models.BPE()))
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOD_TOKEN],
                                  initial_alphabet=alphabet, show_progress=show_progress)

    def texts():
        for path in paths:
            yield from iter_texts(path, json_key, skipped, max_doc_bytes, damaged)

    hf.train_from_iterator(texts(), trainer=trainer)
    tokenizer = Tokenizer(hf, source="trained")
    tokenizer.source = str(tokenizer.save(out))
    return tokenizer


def describe(tokenizer: Tokenizer) -> dict:
    """Numbers a command prints about a tokenizer."""
    return {"path": tokenizer.source, "vocab_size": tokenizer.vocab_size, "eod_id": tokenizer.eod_id,
            "model": json.loads(tokenizer.hf.to_str())["model"]["type"]}
