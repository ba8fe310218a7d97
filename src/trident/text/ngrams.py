"""Words and hashed word n-grams, the unit of decontamination and of contamination reports.

Words are the regex ``\\w+`` matches of a text, lower-cased (punctuation and spacing are ignored);
a word is hashed with xxh3_64 and an n-gram is a polynomial hash of its word hashes, salted by n.
"""
from __future__ import annotations

import re

import numpy as np
import xxhash

_WORD = re.compile(r"\w+")
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd: the polynomial n-gram hash stays injective-ish
_LENGTH_SALT = 0xC2B2AE3D27D4EB4F  # keeps n-grams of different n apart


def words_of(text: str) -> list[str]:
    """Lower-cased words of ``text`` (the same list ``words_with_spans`` returns, faster)."""
    found = _WORD.findall(text)
    # One lower() over the joined words: same result as lowering each (no word holds a space).
    return " ".join(found).lower().split(" ") if found else []


def word_spans(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Character (start, end) offsets of the words of ``text``, as ``words_of`` lists them."""
    if not text:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    # `\w+` matches maximal runs of word characters, so classify each distinct code point once
    # and find the runs with numpy (a match object per word is slow on multi-MB documents).
    points = np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
    distinct, inverse = np.unique(points, return_inverse=True)
    is_word = np.array([_WORD.fullmatch(chr(c)) is not None for c in distinct.tolist()])[inverse]
    edges = np.diff(np.r_[0, is_word.astype(np.int8), 0])
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


def words_with_spans(text: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Lower-cased words of ``text`` with their character start and end offsets in ``text``."""
    return (words_of(text), *word_spans(text))


def word_hashes(words: list[str]) -> np.ndarray:
    """xxh3_64 of each word's UTF-8 bytes (uint64)."""
    return np.fromiter((xxhash.xxh3_64_intdigest(w.encode("utf-8")) for w in words),
                       dtype=np.uint64, count=len(words))


def ngram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """Hash of every run of ``n`` consecutive words (index i = words i..i+n-1), uint64."""
    count = len(hashes) - n + 1
    if n < 1 or count <= 0:
        return np.zeros(0, dtype=np.uint64)
    acc = hashes[:count].copy()
    for j in range(1, n):
        acc *= _MULTIPLIER  # uint64 wraps modulo 2**64: a polynomial hash of the word hashes
        acc += hashes[j : j + count]
    return acc ^ np.uint64((n * _LENGTH_SALT) & 0xFFFFFFFFFFFFFFFF)
