"""Megatron indexed dataset: PREFIX.bin (raw tokens) + PREFIX.idx (sizes, pointers, documents).

The .idx layout, byte for byte as Megatron-LM's MMapIndexedDataset (little-endian):

    b"MMIDIDX\\x00\\x00"          9-byte magic
    u64  version = 1
    u8   dtype code              1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16
    u64  sequence count          N
    u64  document-index count    D + 1 (the document indices start with 0)
    i32  sizes[N]                tokens per sequence
    i64  pointers[N]             byte offset of each sequence in the .bin
    i64  doc_idx[D + 1]          sequence index where each document starts, then N

The .bin is the sequences' tokens back to back in `dtype`. trident writes one sequence per
document (the JSONL record plus its EOD token), so doc_idx is 0, 1, ..., N.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from trident.text.storage import BlockCachedFile, is_remote, local_copy, location, require_local, size

INDEX_HEADER = b"MMIDIDX\x00\x00"
BIN_BLOCK = 8 << 20  # bytes of a remote .bin fetched at a time (samples are read in order within a block)
INDEX_VERSION = 1
DTYPE_CODES = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
_CODE_OF = {np.dtype(t): code for code, t in DTYPE_CODES.items()}


def dtype_code(dtype) -> int:
    """The Megatron code of a numpy dtype; ValueError for dtypes the format cannot hold."""
    try:
        return _CODE_OF[np.dtype(dtype)]
    except KeyError:
        raise ValueError(f"dtype {np.dtype(dtype)} has no Megatron indexed-dataset code") from None


def best_dtype(vocab_size: int):
    """uint16 while every token id fits with room to spare (Megatron's rule), else int32."""
    return np.uint16 if vocab_size < 65500 else np.int32


def data_file(prefix) -> Path:
    return location(f"{prefix}.bin")


def index_file(prefix) -> Path:
    return location(f"{prefix}.idx")


def encode_index(sizes, doc_idx, dtype) -> bytes:
    """The complete .idx file contents for these sequence sizes and document indices."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if (sizes < 0).any() or (sizes > np.iinfo(np.int32).max).any():
        raise ValueError("sequence sizes must lie in [0, 2**31)")
    itemsize = np.dtype(dtype).itemsize
    pointers = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1] * itemsize, out=pointers[1:])
    doc_idx = np.asarray(doc_idx, dtype=np.int64)
    header = INDEX_HEADER + struct.pack("<Q", INDEX_VERSION) + struct.pack("<B", dtype_code(dtype))
    header += struct.pack("<Q", len(sizes)) + struct.pack("<Q", len(doc_idx))
    return b"".join([
        header,
        sizes.astype("<i4").tobytes(),
        pointers.astype("<i8").tobytes(),
        doc_idx.astype("<i8").tobytes(),
    ])


class IndexedDatasetBuilder:
    """Streams documents into PREFIX.bin; `finalize()` writes PREFIX.idx.

    Both files are written under temporary names and renamed at the end, so a crash never leaves
    a .bin/.idx pair that looks complete but is not.
    """

    def __init__(self, prefix, dtype=np.uint16):
        require_local(prefix, "dataset prefix", "the builder writes local files; `trident tokenize` stages a URL "
                                                "prefix locally and uploads it")
        self.prefix = Path(prefix)
        self.dtype = np.dtype(dtype)
        dtype_code(self.dtype)  # fail now, not after hours of tokenizing
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        self._bin_tmp = Path(f"{data_file(prefix)}.tmp")
        self._bin = open(self._bin_tmp, "wb")
        self._sizes: list[int] = []
        self._doc_idx: list[int] = [0]
        self._limit = np.iinfo(self.dtype).max if self.dtype.kind in "iu" else None

    def add_document(self, tokens) -> None:
        """Append one document (one sequence) of token ids."""
        array = np.asarray(tokens)
        if array.ndim != 1:
            raise ValueError(f"a document must be a 1-D token sequence, got shape {array.shape}")
        if array.size and self._limit is not None and (array.max() > self._limit or array.min() < 0):
            raise ValueError(f"token id outside the range of {self.dtype} (max {array.max()})")
        self._bin.write(array.astype(self.dtype, copy=False).tobytes(order="C"))
        self._sizes.append(int(array.size))
        self._doc_idx.append(len(self._sizes))

    def add_documents(self, tokens: np.ndarray, sizes: list[int]) -> None:
        """Append several documents at once: ``tokens`` is their ids back to back, ``sizes`` their lengths."""
        array = np.asarray(tokens)
        if array.ndim != 1 or array.size != sum(sizes):
            raise ValueError(f"{len(sizes)} documents of {sum(sizes)} tokens, got an array of shape {array.shape}")
        if array.size and self._limit is not None and (array.max() > self._limit or array.min() < 0):
            raise ValueError(f"token id outside the range of {self.dtype} (max {array.max()})")
        self._bin.write(array.astype(self.dtype, copy=False).tobytes(order="C"))
        for length in sizes:
            self._sizes.append(int(length))
            self._doc_idx.append(len(self._sizes))

    @property
    def num_documents(self) -> int:
        return len(self._sizes)

    @property
    def num_tokens(self) -> int:
        return int(sum(self._sizes))

    def finalize(self) -> None:
        """Close the .bin and write the .idx; the pair appears under its final names only now."""
        self._bin.close()
        idx_tmp = Path(f"{index_file(self.prefix)}.tmp")
        idx_tmp.write_bytes(encode_index(self._sizes, self._doc_idx, self.dtype))
        os.replace(self._bin_tmp, data_file(self.prefix))
        os.replace(idx_tmp, index_file(self.prefix))

    def abort(self) -> None:
        """Drop the partial output."""
        self._bin.close()
        self._bin_tmp.unlink(missing_ok=True)


class IndexedDataset:
    """Memory-mapped reader of a Megatron indexed dataset; `ds[i]` is sequence i's tokens.

    A prefix on an object store (s3://...) works too: its .idx is copied once into the local cache
    (storage.cache_root(), as Megatron's object-storage reader does) and mapped from there; the .bin
    is read through an LRU cache of BIN_BLOCK blocks, fetched as samples need them."""

    def __init__(self, prefix):
        self.prefix = location(prefix)
        idx_path, bin_path = index_file(prefix), data_file(prefix)
        for path in (idx_path, bin_path):
            if not path.exists():
                raise FileNotFoundError(f"{path}: missing (expected PREFIX.bin and PREFIX.idx "
                                        f"written by `trident tokenize`)")
        self._index = np.memmap(local_copy(idx_path, "index"), dtype=np.uint8, mode="r")
        raw = self._index
        header_len = len(INDEX_HEADER) + 8 + 1 + 8 + 8
        if raw.size < header_len or bytes(raw[: len(INDEX_HEADER)]) != INDEX_HEADER:
            raise ValueError(f"{idx_path}: not a Megatron indexed dataset (bad magic header)")
        pos = len(INDEX_HEADER)
        (version,) = struct.unpack("<Q", bytes(raw[pos : pos + 8]))
        if version != INDEX_VERSION:
            raise ValueError(f"{idx_path}: unsupported index version {version} (expected 1)")
        (code,) = struct.unpack("<B", bytes(raw[pos + 8 : pos + 9]))
        if code not in DTYPE_CODES:
            raise ValueError(f"{idx_path}: unknown dtype code {code}")
        self.dtype = np.dtype(DTYPE_CODES[code])
        n_seq, n_doc_idx = struct.unpack("<QQ", bytes(raw[pos + 9 : pos + 25]))
        offset = header_len
        expected = offset + 4 * n_seq + 8 * n_seq + 8 * n_doc_idx
        if raw.size != expected:
            raise ValueError(f"{idx_path}: {raw.size} bytes, header promises {expected}")
        self.sizes = np.frombuffer(raw, dtype="<i4", count=n_seq, offset=offset)
        self.pointers = np.frombuffer(raw, dtype="<i8", count=n_seq, offset=offset + 4 * n_seq)
        self.doc_idx = np.frombuffer(raw, dtype="<i8", count=n_doc_idx, offset=offset + 12 * n_seq)
        bin_bytes = size(bin_path)
        need = int(self.pointers[-1]) + int(self.sizes[-1]) * self.dtype.itemsize if n_seq else 0
        if bin_bytes < need:
            raise ValueError(f"{bin_path}: {bin_bytes} bytes, index needs {need} (truncated file?)")
        if is_remote(bin_path):
            self._bin, self._tokens = BlockCachedFile(bin_path, BIN_BLOCK), self._fetched_tokens
        else:  # np.memmap refuses empty files; an empty dataset has nothing to map
            self._bin = np.memmap(bin_path, dtype=np.uint8, mode="r") if bin_bytes else np.zeros(0, np.uint8)
            self._tokens = self._mapped_tokens

    def _mapped_tokens(self, start: int, count: int) -> np.ndarray:
        return np.frombuffer(self._bin, dtype=self.dtype, count=count, offset=start)

    def _fetched_tokens(self, start: int, count: int) -> np.ndarray:
        return np.frombuffer(self._bin.read_at(start, count * self.dtype.itemsize), dtype=self.dtype)

    def __len__(self) -> int:
        return len(self.sizes)

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens [offset, offset+length) of sequence i, as a read-only view of the mapped file."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"sequence {i} out of range for {len(self)} sequences in {self.prefix}")
        i %= len(self)
        size = int(self.sizes[i])
        length = size - offset if length is None else length
        if offset < 0 or length < 0 or offset + length > size:
            raise IndexError(f"range [{offset}, {offset + length}) outside sequence {i} of length {size}")
        start = int(self.pointers[i]) + offset * self.dtype.itemsize
        return self._tokens(start, length)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.get(i)

    @property
    def num_tokens(self) -> int:
        return int(self.sizes.sum(dtype=np.int64))
