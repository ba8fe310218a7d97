"""What ZeRO stages 2 and 3 hold during a step beyond their sharded state, from the config alone (no
torch), as parallel/data.py and parallel/param_gather.py allocate it:
- gradient staging (stages 2, 3): each bucket's fp32 gradient is staged until every parameter of the
  bucket has added to it, then reduce-scattered into a 1/dp output; REDUCTIONS_IN_FLIGHT reductions
  stay in flight (staging + output) while the next buckets fill, across micro-batches: the last ones
  of a backward are still in flight when it ends, through the next micro-batch's forward;
- gathered weights (stage 3): a chunk's root (embedding, final norm, head) through its forward and
  its backward, beside the block computing and the next block's all-gather.
Buckets are cut by the trainer's own rule (parallel/buckets.py): parameters in reverse creation
order, a bucket closed once it holds bucket_size_mb of fp32 gradient (a tied embedding copy alone; at
stage 3 never across two units), each padded to a multiple of 128 x K.
"""
from __future__ import annotations

from trident.config import Config
from trident.parallel.buckets import cut_buckets
from trident.parallel.layout_rules import REDUCTIONS_IN_FLIGHT
from trident.parallel.pipeline.schedules import partition_layers

ROOT = "root"


def norm_tensors(config: Config) -> list[int]:
    m = config.model
    return [m.hidden_size] * (2 if m.norm == "layernorm" and m.bias else 1)


def linear_tensors(rows: float, columns: float, bias: bool, bias_rows: float) -> list[float]:
    return [rows * columns] + ([bias_rows] if bias else [])


def layer_tensors(config: Config, tp: int) -> list[float]:
    """One transformer layer's parameters on one TP rank, in creation order (model/gpt.py Block)."""
    m = config.model
    h, f, b = m.hidden_size, m.ffn_size, m.bias
    if m.kv_heads != m.num_heads:  # grouped-query: q, then the key/value heads (sharded or replicated)
        kv_rows = 2 * m.kv_heads * m.head_dim / (tp if m.kv_heads % tp == 0 else m.kv_heads)
        attention = linear_tensors(h / tp, h, b, h / tp) + linear_tensors(kv_rows, h, b, kv_rows)
    else:
        attention = linear_tensors(3 * h / tp, h, b, 3 * h / tp)
    attention += linear_tensors(h, h / tp, b, h)  # proj: its bias replicated
    mlp = linear_tensors(f / tp, h, b, f / tp) * (2 if m.mlp == "swiglu" else 1) + linear_tensors(h, f / tp, b, h)
    return norm_tensors(config) + attention + norm_tensors(config) + mlp


def rank_tensors(config: Config, layout, stage: int) -> list[tuple[tuple, float, bool]]:
    """(unit, elements, alone) of each parameter of pipeline rank `stage`, in creation order."""
    m, p = config.model, config.parallel
    vocab = m.padded_vocab_size(layout.tp) * m.hidden_size / layout.tp
    tied_apart = layout.pp > 1 and m.tie_embeddings  # the first and last stages' copies are summed
    chunks = partition_layers(m.num_layers, layout.pp, layout.virtual_stages,
                              list(p.layer_partition) if p.layer_partition else None)[stage]
    tensors = []
    for c, layers in enumerate(chunks):
        root = (c, ROOT)
        first, last = stage == 0 and c == 0, stage == layout.pp - 1 and c == layout.virtual_stages - 1
        if first or (last and m.tie_embeddings):
            tensors.append((root, vocab, tied_apart))
            if first and m.position == "learned":
                tensors.append((root, m.seq_length * m.hidden_size, False))
        tensors += [((c, layer), n, False) for layer in layers for n in layer_tensors(config, layout.tp)]
        if last:
            tensors += [(root, n, False) for n in norm_tensors(config)]
            tensors += [] if m.tie_embeddings else [(root, vocab, False)]
    return tensors


_CUTS: dict[tuple, list] = {}  # buckets by what they depend on: a search costs thousands of layouts of one model


def buckets(config: Config, layout, stage: int) -> list[tuple[tuple, float]]:
    """(unit of its first parameter, padded elements) of each bucket of rank `stage`, in flat order."""
    p = config.parallel
    key = (repr(config.model), repr(p.layer_partition), p.bucket_size_mb, layout.tp, layout.pp,
           layout.virtual_stages, stage, layout.zero_effective == 3, layout.shard)
    if key not in _CUTS:
        if len(_CUTS) > 4096:
            _CUTS.clear()
        _CUTS[key] = _cut(config, layout, stage)
    return _CUTS[key]


def _cut(config: Config, layout, stage: int) -> list[tuple[tuple, float]]:
    keys, sizes, alone = zip(*reversed(rank_tensors(config, layout, stage)))
    units = list(keys) if layout.zero_effective == 3 else None  # ZeRO-3 gathers a unit's buckets alone
    cuts, _ = cut_buckets(list(sizes), config.parallel.bucket_size_mb * 2**20, layout.shard, units, list(alone))
    return [(keys[cut.members[0]], cut.end - cut.start) for cut in cuts]


def flat_elements(config: Config, layout, stage: int) -> float:
    """The length of rank `stage`'s flat weight and gradient buffers: its parameters plus each
    bucket's padding (parallel/buckets.py aligns every bucket and shard to 128 elements)."""
    return sum(elements for _, elements in buckets(config, layout, stage))


def completion_order(config: Config, layout, stage: int) -> list[float]:
    """Bucket sizes (elements) in the order a backward completes them: flat order, except that the last
    stage's copy of a tied embedding (created first, so last in flat order) is the head, done first."""
    cut = buckets(config, layout, stage)
    if stage == layout.pp - 1 and layout.pp > 1 and config.model.tie_embeddings:
        cut = cut[-1:] + cut[:-1]
    return [elements for _, elements in cut]


def staging_bytes(config: Config, layout, stage: int, micro_batches: int, flight: float,
                  activations_at) -> tuple[float, float]:
    """(what staging adds to the activation peak, what is still in flight when the backward ends): each
    bucket's fp32 staging plus its 1/dp output, REDUCTIONS_IN_FLIGHT in flight. Backward j begins with
    min(flight, micro_batches - j) micro-batches' activations held (`activations_at(n)`: their bytes,
    never fewer for more micro-batches) beside the reductions still in flight from the backwards before
    it (the first: beside its first bucket filling); the highest of those sums, above the activation
    peak, is what staging adds. Once REDUCTIONS_IN_FLIGHT launches precede a backward, the ones in flight
    no longer grow while the activations held only shrink: no later backward is higher, none is costed
    (a search costs thousands of layouts; walking every micro-batch was most of its time)."""
    order = completion_order(config, layout, stage)
    share = 4 * (1 + 1 / layout.shard)  # fp32 staging plus its 1/K output

    def in_flight_before(end: int) -> float:  # launches before `end` (bucket by bucket, micro-batch by micro-batch)
        return sum(share * order[k % len(order)] for k in range(max(0, end - REDUCTIONS_IN_FLIGHT), end))

    peak = activations_at(flight)
    highest = peak + 4 * order[0]
    held_bytes = {flight: peak}  # activations_at by micro-batches held (few distinct counts)
    for j in range(1, min(micro_batches - 1, -(-REDUCTIONS_IN_FLIGHT // len(order))) + 1):
        held = min(flight, micro_batches - j)
        if held not in held_bytes:
            held_bytes[held] = activations_at(held)
        highest = max(highest, held_bytes[held] + in_flight_before(j * len(order)))
    return highest - peak, in_flight_before(max(micro_batches, 1) * len(order))


def gathered_bytes(config: Config, layout, stage: int, element_bytes: int) -> float:
    """Stage 3: a chunk's root, the block computing and the next block's all-gather (the largest)."""
    units: dict[tuple, float] = {}
    for key, elements in buckets(config, layout, stage):
        units[key] = units.get(key, 0.0) + elements
    roots = [n for key, n in units.items() if key[1] == ROOT]
    blocks = sorted((n for key, n in units.items() if key[1] != ROOT), reverse=True)
    return element_bytes * (max(roots, default=0.0) + sum(blocks[:2]))
