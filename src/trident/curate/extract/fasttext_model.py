"""A supervised fastText model file (.bin or .ftz, fastText 0.9's format version 12) read into numpy
arrays, for trident.curate.extract.fasttext_loops to classify with: the same numbers as fastText's
own predict, without its per-n-gram costs (a hash-map look-up for each pruned n-gram and a product-
quantizer decode for each row).

What is kept (fastText's src/args.cc, dictionary.cc, quantmatrix.cc, productquantizer.cc, loss.cc):
- `rows` (float32, one per input row): the row as fastText adds it, a quantized row decoded once
  (each sub-vector's centroid times the row's norm, the product fastText forms on every add);
- `bucket_rows` (int32, per n-gram bucket): the input row of that bucket (`nwords + pruneidx[b]`),
  or -1 where the bucket was pruned away;
- the words (UTF-8 bytes, for the exact look-up fastText makes) in an open-addressing table keyed
  by fastText's FNV-1a hash;
- the output rows and the hierarchical-softmax tree (fastText builds it from the label counts)."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trident.curate.compiled import CompiledLoops

FASTTEXT_MAGIC, FASTTEXT_VERSION = 793712314, 12
LOSS_HS = 1  # fastText's loss_name: hs = 1, ns, softmax, ova
LABEL_PREFIX = b"__label__"
EOS = b"</s>"
PREDICT_LOOPS = CompiledLoops("fasttext", "trident.curate.extract.fasttext_loops", {
    "classify_texts": "Tuple((i4[:, ::1], f4[:, ::1]))(u1[::1], i8[::1], f4[:, ::1], i4[::1], u1[::1], i8[::1], "
                      "i4[::1], i8, i8, i8, i8, f4[:, ::1], i4[::1], i4[::1])"})


@dataclass(frozen=True)
class FastTextModel:
    labels: list[str]
    minn: int
    maxn: int
    bucket: int
    nwords: int
    eos_row: int
    rows: np.ndarray  # float32 [input rows, dim]
    bucket_rows: np.ndarray  # int32 [bucket]
    word_bytes: np.ndarray  # uint8: every word's UTF-8 bytes, one after another
    word_starts: np.ndarray  # int64 [nwords + 1]
    word_slots: np.ndarray  # int32 [power of two]: word id or -1, probed from hash & (size - 1)
    output: np.ndarray  # float32 [labels, dim]: the tree's inner node n - labels is row n
    tree_left: np.ndarray  # int32 [2 * labels - 1]
    tree_right: np.ndarray

    def predict_two(self, texts: list[str]) -> list[list[tuple[str, float]]]:
        """fastText's predict(text, k=2) of each text, a line ("\\n" read as a space): [(label,
        probability)], best first (one where the runner-up's probability is under 1e-5)."""
        encoded = [text.replace("\n", " ").encode("utf-8") for text in texts]
        starts = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(text) for text in encoded], out=starts[1:])
        joined = np.frombuffer(bytearray(b"".join(encoded)), dtype=np.uint8)
        labels, probabilities = PREDICT_LOOPS.kernels().classify_texts(
            joined, starts, self.rows, self.bucket_rows, self.word_bytes, self.word_starts, self.word_slots,
            self.minn, self.maxn, self.bucket, self.eos_row, self.output, self.tree_left, self.tree_right)
        return [[(self.labels[label], float(p)) for label, p in zip(row, row_p) if label >= 0]
                for row, row_p in zip(labels.tolist(), probabilities.tolist())]


class _Reader:
    def __init__(self, data: bytes, path: Path) -> None:
        self.data, self.offset, self.path = data, 0, path

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.data, self.offset)
        self.offset += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        values = np.frombuffer(self.data, dtype, count, self.offset)
        self.offset += values.nbytes
        return values

    def word(self) -> bytes:
        end = self.data.index(b"\0", self.offset)
        word, self.offset = self.data[self.offset:end], end + 1
        return word


def fasttext_hash(word: bytes) -> int:
    """fastText's Dictionary::hash: FNV-1a over the bytes taken as signed chars."""
    h = 2166136261
    for byte in word:
        h = ((h ^ (byte | 0xFFFFFF00 if byte >= 128 else byte)) * 16777619) & 0xFFFFFFFF
    return h


def load_fasttext(path: Path) -> FastTextModel:
    """The model at `path`; ValueError naming the file for anything this reader does not handle."""
    reader = _Reader(Path(path).read_bytes(), Path(path))
    magic, version = reader.take("ii")
    if (magic, version) != (FASTTEXT_MAGIC, FASTTEXT_VERSION):
        raise ValueError(f"{path}: not a fastText model of format version {FASTTEXT_VERSION}")
    dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, model, bucket, minn, maxn, _rate, _t = reader.take("12id")
    if model != 3 or loss != LOSS_HS or word_ngrams != 1:
        raise ValueError(f"{path}: only supervised models with hierarchical softmax and no word n-grams "
                         f"are read here (model {model}, loss {loss}, wordNgrams {word_ngrams})")
    size, nwords, nlabels, _ntokens, prune_size = reader.take("iiiqq")
    entries = [(reader.word(), *reader.take("qb")) for _ in range(size)]
    prune = reader.array("<i4", 2 * prune_size).reshape(-1, 2)
    bucket_rows = np.full(bucket, -1, dtype=np.int32)
    bucket_rows[prune[:, 0]] = nwords + prune[:, 1]
    rows = _input_rows(reader, dim)
    quantized_output, = reader.take("?")
    if quantized_output:
        raise ValueError(f"{path}: a quantized output matrix is not read here")
    out_rows, out_dim = reader.take("qq")
    output = reader.array("<f4", out_rows * out_dim).reshape(out_rows, out_dim).copy()
    words = [word for word, _count, kind in entries[:nwords]]
    if kind_of_labels := {kind for _w, _c, kind in entries[nwords:]} - {1}:
        raise ValueError(f"{path}: unexpected entry kinds {kind_of_labels} after the words")
    left, right = _hs_tree([count for _word, count, _kind in entries[nwords:]])
    word_bytes, word_starts, word_slots = _word_table(words)
    return FastTextModel(labels=[word[len(LABEL_PREFIX):].decode() for word, _c, _k in entries[nwords:]],
                         minn=minn, maxn=maxn, bucket=bucket, nwords=nwords, eos_row=words.index(EOS),
                         rows=rows, bucket_rows=bucket_rows, word_bytes=word_bytes, word_starts=word_starts,
                         word_slots=word_slots, output=output, tree_left=left, tree_right=right)


def _input_rows(reader: _Reader, dim: int) -> np.ndarray:
    """The input matrix, dense or decoded from its product quantization (with quantized norms)."""
    quantized, = reader.take("?")
    if not quantized:
        rows, cols = reader.take("qq")
        return reader.array("<f4", rows * cols).reshape(rows, cols).copy()
    qnorm, = reader.take("?")
    rows, cols = reader.take("qq")
    codesize, = reader.take("i")
    codes = reader.array("u1", codesize)
    centroids, nsubq, dsub, lastdsub = _product_quantizer(reader)
    norms = np.ones(rows, dtype=np.float32)
    if qnorm:
        norm_codes = reader.array("u1", rows)
        norm_centroids, _, _, _ = _product_quantizer(reader)
        norms = norm_centroids[0][norm_codes, 0]
    codes = codes.reshape(rows, nsubq)
    decoded = np.empty((rows, cols), dtype=np.float32)
    for m in range(nsubq):  # ProductQuantizer::addcode: x[m * dsub + n] += norm * centroid[n]
        width = lastdsub if m == nsubq - 1 else dsub
        decoded[:, m * dsub:m * dsub + width] = norms[:, None] * centroids[m][codes[:, m], :width]
    return decoded


def _product_quantizer(reader: _Reader) -> tuple[list[np.ndarray], int, int, int]:
    """(centroids per sub-quantizer [256, its width], nsubq, dsub, lastdsub) of a ProductQuantizer."""
    dim, nsubq, dsub, lastdsub = reader.take("iiii")
    flat = reader.array("<f4", dim * 256)
    tables, start = [], 0
    for m in range(nsubq):
        width = lastdsub if m == nsubq - 1 else dsub
        tables.append(flat[start:start + 256 * width].reshape(256, width))
        start += 256 * width
    return tables, nsubq, dsub, lastdsub


def _hs_tree(counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """HierarchicalSoftmaxLoss::buildTree: the Huffman tree of the labels (leaves 0..n-1, sorted
    by count descending as fastText stores them), as left and right child arrays."""
    n = len(counts)
    count = [float(c) for c in counts] + [1e15] * (n - 1)
    left, right = np.full(2 * n - 1, -1, dtype=np.int32), np.full(2 * n - 1, -1, dtype=np.int32)
    leaf, node = n - 1, n
    for i in range(n, 2 * n - 1):
        chosen = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                chosen.append(leaf)
                leaf -= 1
            else:
                chosen.append(node)
                node += 1
        left[i], right[i] = chosen
        count[i] = count[chosen[0]] + count[chosen[1]]
    return left, right


def _word_table(words: list[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the words' bytes, their starts, a table of word ids probed linearly from hash & mask)."""
    starts = np.zeros(len(words) + 1, dtype=np.int64)
    starts[1:] = np.cumsum([len(word) for word in words])
    size = 1 << max(4, (2 * len(words)).bit_length())
    slots = np.full(size, -1, dtype=np.int32)
    for index, word in enumerate(words):
        slot = fasttext_hash(word) & (size - 1)
        while slots[slot] >= 0:
            slot = (slot + 1) & (size - 1)
        slots[slot] = index
    return np.frombuffer(b"".join(words), dtype=np.uint8).copy(), starts, slots
