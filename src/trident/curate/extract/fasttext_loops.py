"""fastText's predict (k = 2, threshold 0) as numba loops over the arrays of
trident.curate.extract.fasttext_model: a text's rows averaged in float32 in fastText's order, then
the hierarchical-softmax search with fastText's own float and double steps, so that the labels and
probabilities are fastText's (tests compare them on thousands of texts).

Each text is one line as fastText reads it: words split at ASCII space, tab, line feed, carriage
return, vertical tab, form feed and NUL; a word is its row (when in the vocabulary) and then the
rows of its character n-grams of `minn`..`maxn` code points, of "<" + word + ">"; a word that
starts with "__label__" is a label, not read; the line ends with the end-of-sentence row (a word
"</s>" in the text ends the line there)."""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_FNV_OFFSET, _FNV_PRIME, _MASK32 = 2166136261, 16777619, 0xFFFFFFFF
_LABEL_PREFIX = np.frombuffer(b"__label__", dtype=np.uint8).copy()
_EOS_WORD = np.frombuffer(b"</s>", dtype=np.uint8).copy()


@njit(cache=True, inline="always")
def _fnv(h, byte):
    signed = byte | 0xFFFFFF00 if byte >= 128 else byte  # fastText hashes bytes as signed chars
    return ((h ^ signed) * _FNV_PRIME) & _MASK32


@njit(cache=True)
def _is_space(byte) -> bool:
    return byte == 32 or byte == 10 or byte == 13 or byte == 9 or byte == 11 or byte == 12 or byte == 0


@njit(cache=True)
def _starts_with(text, start, end, prefix) -> bool:
    if end - start < prefix.shape[0]:
        return False
    for i in range(prefix.shape[0]):
        if text[start + i] != prefix[i]:
            return False
    return True


@njit(cache=True)
def _word_id(text, start, end, word_bytes, word_starts, word_slots) -> int:
    h = _FNV_OFFSET
    for i in range(start, end):
        h = _fnv(h, text[i])
    mask = word_slots.shape[0] - 1
    slot = h & mask
    while word_slots[slot] >= 0:
        word = word_slots[slot]
        lo, hi = word_starts[word], word_starts[word + 1]
        if hi - lo == end - start:
            same = True
            for i in range(end - start):
                if word_bytes[lo + i] != text[start + i]:
                    same = False
                    break
            if same:
                return word
        slot = (slot + 1) & mask
    return -1


@njit(cache=True, inline="always")
def _add_row(hidden, rows, row) -> None:
    source = rows[row]  # the row once, then its floats: inlined, the adds vectorise (~8% of the predict)
    for d in range(hidden.shape[0]):
        hidden[d] += source[d]


@njit(cache=True)
def _add_ngrams(hidden, wrapped, length, minn, maxn, bucket, bucket_rows, rows) -> int:
    """Adds the rows of the n-grams of wrapped[:length] ("<" + word + ">"); how many were added."""
    added = 0
    for i in range(length):
        if (wrapped[i] & 0xC0) == 0x80:
            continue  # not the first byte of a code point
        h = _FNV_OFFSET
        j, n = i, 1
        while j < length and n <= maxn:
            h = _fnv(h, wrapped[j])
            j += 1
            while j < length and (wrapped[j] & 0xC0) == 0x80:
                h = _fnv(h, wrapped[j])
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == length)):
                row = bucket_rows[np.uint32(h) % np.uint32(bucket)]  # both < 2**32: a 32-bit division, ~7% faster
                if row >= 0:
                    _add_row(hidden, rows, row)
                    added += 1
            n += 1
    return added


@njit(cache=True)
def hidden_of(text, start, end, rows, bucket_rows, word_bytes, word_starts, word_slots, minn, maxn, bucket,
              eos_row, hidden, wrapped) -> None:
    """fastText's hidden vector of text[start:end] (its rows' float32 mean) into `hidden`."""
    hidden[:] = 0
    count = 0
    i = start
    while i < end:
        while i < end and _is_space(text[i]):
            i += 1
        word_start = i
        while i < end and not _is_space(text[i]):
            i += 1
        if i == word_start or _starts_with(text, word_start, i, _LABEL_PREFIX):
            continue
        if i - word_start == 4 and _starts_with(text, word_start, i, _EOS_WORD):
            break  # fastText reads "</s>" as the end of the line
        word = _word_id(text, word_start, i, word_bytes, word_starts, word_slots)
        if word >= 0:
            _add_row(hidden, rows, word)
            count += 1
        length = i - word_start + 2
        wrapped[0] = 60  # "<"
        wrapped[1:length - 1] = text[word_start:i]
        wrapped[length - 1] = 62  # ">"
        count += _add_ngrams(hidden, wrapped, length, minn, maxn, bucket, bucket_rows, rows)
    _add_row(hidden, rows, eos_row)
    count += 1
    scale = np.float32(1.0 / count)
    for d in range(hidden.shape[0]):
        hidden[d] = hidden[d] * scale


@njit(cache=True)
def _std_log(x):
    """fastText's std_log(real x): log(x + 1e-5) in double, returned as float."""
    return np.float32(math.log(np.float64(x) + 1e-5))


@njit(cache=True)
def best_two(hidden, output, left, right, best_labels, best_scores) -> None:
    """HierarchicalSoftmaxLoss::dfs with k = 2 and threshold 0, left child first: the two best
    leaves (label -1 where fewer) and their log-probabilities, best first."""
    n_labels = output.shape[0]
    floor = _std_log(np.float32(0.0))
    best_labels[:] = -1
    best_scores[:] = -np.inf
    stack_nodes = np.empty(2 * n_labels, dtype=np.int32)
    stack_scores = np.empty(2 * n_labels, dtype=np.float32)
    stack_nodes[0], stack_scores[0] = 2 * n_labels - 2, np.float32(0.0)
    top, held = 1, 0
    while top > 0:
        top -= 1
        node, score = stack_nodes[top], stack_scores[top]
        if score < floor or (held == 2 and score < best_scores[1]):
            continue
        if left[node] == -1 and right[node] == -1:
            if held == 0 or score > best_scores[0]:
                best_labels[1], best_scores[1] = best_labels[0], best_scores[0]
                best_labels[0], best_scores[0] = node, score
            elif held == 1 or score > best_scores[1]:
                best_labels[1], best_scores[1] = node, score
            held = min(held + 1, 2)
            continue
        f = np.float32(0.0)
        for d in range(hidden.shape[0]):
            f += output[node - n_labels, d] * hidden[d]
        f = np.float32(1.0 / np.float64(np.float32(1.0) + np.float32(math.exp(-f))))
        stack_nodes[top], stack_scores[top] = right[node], np.float32(score + _std_log(f))
        stack_nodes[top + 1] = left[node]
        stack_scores[top + 1] = np.float32(score + _std_log(np.float32(1.0 - np.float64(f))))
        top += 2


@njit(cache=True)
def classify_texts(text, starts, rows, bucket_rows, word_bytes, word_starts, word_slots, minn, maxn, bucket,
                   eos_row, output, left, right):
    """(labels int32 [n, 2], probabilities float32 [n, 2]) of the n texts text[starts[i]:starts[i+1]]."""
    n = starts.shape[0] - 1
    labels = np.full((n, 2), -1, dtype=np.int32)
    probabilities = np.zeros((n, 2), dtype=np.float32)
    hidden = np.zeros(rows.shape[1], dtype=np.float32)
    longest = 0
    for t in range(n):
        longest = max(longest, starts[t + 1] - starts[t])
    wrapped = np.empty(longest + 2, dtype=np.uint8)
    scores = np.empty(2, dtype=np.float32)
    for t in range(n):
        hidden_of(text, starts[t], starts[t + 1], rows, bucket_rows, word_bytes, word_starts, word_slots, minn,
                  maxn, bucket, eos_row, hidden, wrapped)
        best_two(hidden, output, left, right, labels[t], scores)
        for j in range(2):
            if labels[t, j] >= 0:
                probabilities[t, j] = np.float32(math.exp(scores[j]))
    return labels, probabilities
