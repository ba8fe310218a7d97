"""Connected components of a graph too large for one machine: alternating large-star / small-star.

The graph is held as neighbour records: an (k, 2) uint64 array of (node, neighbour) rows holding
each undirected edge in both directions. Records are hash-partitioned by ``node``, so every
node's whole neighbourhood lies in one partition and each step below is a pure function of one
partition (Kiveris et al., "Connected Components in Map Reduce and Beyond", SoCC 2014):

- large-star: each node u links every neighbour v > u to m(u) = min(u, neighbours of u);
- small-star: each node u links itself and every neighbour v < u to m = min(u, those neighbours).

Both keep the components; alternating them reaches, in O(log^2 n) rounds, a forest of stars each
centred on its component's smallest node. ``unstable_nodes`` counts, per partition, the nodes
that still break the star shape, so the sum of per-partition counts is the convergence check.
On a graph of stars both steps return the same edges, so the round that finds 0 unstable
nodes has already written the final graph.

``component_labels`` is the single-machine counterpart, for a graph held in one array: the same
labels (each component's smallest node) by min-label propagation with pointer jumping.
"""
from __future__ import annotations

import numpy as np

_EMPTY_EDGES = np.zeros((0, 2), dtype=np.uint64)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: spreads consecutive doc keys


def node_partition(nodes: np.ndarray, partitions: int) -> np.ndarray:
    """The partition (0..partitions-1) a node's records live in: a multiplicative hash of its key."""
    mixed = np.asarray(nodes, dtype=np.uint64) * _MIX  # wraps modulo 2**64 by design
    return ((mixed >> np.uint64(32)) % np.uint64(partitions)).astype(np.int64)


def sorted_distinct(values: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array in ascending order: np.unique's result through one sort.
    (np.unique without its return options first asks numpy.ma whether the array is masked, and
    importing numpy.ma costs ~13 ms of a run's start.)"""
    values = np.sort(values)
    first = np.empty(values.size, dtype=bool)
    first[:1] = True
    np.not_equal(values[1:], values[:-1], out=first[1:])
    return values[first]


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """``np.unique(pairs, axis=0)`` of (k, 2) uint64 pairs, in the same (first, second) order, through
    1-D sorts: numpy sorts rows as structured records, ~3x slower (a serial step of fuzzy dedup)."""
    pairs = np.asarray(pairs, dtype=np.uint64).reshape(-1, 2)
    nodes, inverse = np.unique(pairs, return_inverse=True)
    if len(nodes) >= 1 << 32:  # pair codes would not fit in 64 bits
        return np.unique(pairs, axis=0)
    count = np.uint64(len(nodes))
    ranks = inverse.reshape(pairs.shape).astype(np.uint64)
    codes = sorted_distinct(ranks[:, 0] * count + ranks[:, 1])
    return np.stack([nodes[codes // count], nodes[codes % count]], axis=1) if len(codes) else _EMPTY_EDGES


def both_directions(pairs: np.ndarray) -> np.ndarray:
    """Neighbour records (u, v) and (v, u) for every undirected pair, without self-loops or repeats."""
    pairs = np.asarray(pairs, dtype=np.uint64).reshape(-1, 2)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    if len(pairs) == 0:
        return _EMPTY_EDGES
    return unique_pairs(np.concatenate([pairs, pairs[:, ::-1]]))


def _neighbourhoods(records: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(sorted unique records, node of each record, index of its node's group, smallest neighbour
    of each group); records are sorted by (node, neighbour), so a group's first row has its minimum."""
    records = unique_pairs(records)
    node = records[:, 0]
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]]) if len(records) else np.zeros(0, np.int64)
    group = np.cumsum(np.r_[False, node[1:] != node[:-1]]) if len(records) else np.zeros(0, np.int64)
    return records, node, group, records[starts, 1]


def large_star(records: np.ndarray) -> np.ndarray:
    """Undirected pairs (v, m(u)) for every record (u, v) with v > u, m(u) = min(u, min neighbour of u)."""
    records, node, group, smallest = _neighbourhoods(records)
    if len(records) == 0:
        return _EMPTY_EDGES
    centre = np.minimum(node, smallest[group])
    larger = records[:, 1] > node
    return unique_pairs(np.stack([records[larger, 1], centre[larger]], axis=1))


def small_star(records: np.ndarray) -> np.ndarray:
    """Undirected pairs linking each node u and its neighbours v < u to m = the smallest of them."""
    records, node, group, smallest = _neighbourhoods(records)
    if len(records) == 0:
        return _EMPTY_EDGES
    centre = np.minimum(node, smallest[group])
    smaller = records[:, 1] < node
    members = np.concatenate([records[smaller, 1], node])  # neighbours below u, and u itself
    centres = np.concatenate([centre[smaller], centre])
    pairs = np.stack([members, centres], axis=1)
    return unique_pairs(pairs[pairs[:, 0] != pairs[:, 1]])


def unstable_nodes(records: np.ndarray) -> int:
    """Nodes that are not yet a star centre (only larger neighbours) or a leaf (exactly one neighbour,
    smaller). 0 over every partition means each component is a star around its smallest node."""
    records, node, group, _ = _neighbourhoods(records)
    if len(records) == 0:
        return 0
    groups = int(group[-1]) + 1
    below = np.bincount(group, weights=records[:, 1] < node, minlength=groups)
    above = np.bincount(group, weights=records[:, 1] > node, minlength=groups)
    return int(np.count_nonzero(((below > 0) & (above > 0)) | (below > 1)))


def star_labels(records: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, component labels) of a converged partition: each node's label is its star's centre,
    the smallest node of its component (a centre is its own label)."""
    records, node, group, smallest = _neighbourhoods(records)
    if len(records) == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)
    starts = np.flatnonzero(np.r_[True, node[1:] != node[:-1]])
    nodes = node[starts]
    return nodes, np.minimum(nodes, smallest)


def component_labels(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, labels): the distinct items of the (k, 2) edge array ``pairs``, sorted, and for each
    the index in ``nodes`` of its component's smallest item (min-label propagation with pointer
    jumping, vectorised: a Python union-find's per-pair loop was a serial part of every run)."""
    nodes, inverse = np.unique(pairs, return_inverse=True)
    first, second = inverse.reshape(-1, 2).T
    labels = np.arange(len(nodes))
    while True:
        low = np.minimum(labels[first], labels[second])
        lowered = labels.copy()
        np.minimum.at(lowered, first, low)
        np.minimum.at(lowered, second, low)
        lowered = lowered[lowered]  # a label's own label is smaller or equal: jump to it
        if np.array_equal(lowered, labels):
            return nodes, labels
        labels = lowered


def cluster_size_bin(size: int) -> str:
    """Histogram bin of a duplicate-cluster size: "02".."19", then "20+"."""
    return "20+" if size >= 20 else f"{size:02d}"
