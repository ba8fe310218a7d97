"""Text generation from a trident GPT: KV-cached decoding with greedy, temperature, top-k, top-p.

`sample_next` is a pure function of logits (and a seeded generator) so each rule is unit-tested on
its own; `generate_tokens` runs the model: one forward pass over the prompt fills the KV cache,
then one token at a time. Logit columns at ids >= the tokenizer's vocabulary (the padded rows of a
Megatron-style embedding) are never sampled. The model has learned positions for only
`cfg.seq_length` tokens: when the window is full, generation either stops (`context="stop"`) or
slides (`context="slide"`: keep the newest half of the window, rebuild the cache, continue), and
says which it did in the result's notes.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

CONTEXT_MODES = ("slide", "stop")


@dataclass
class Generation:
    """What one generate call produced, and why it stopped."""
    text: str  # the continuation only (the prompt is not repeated)
    prompt_ids: list[int]
    new_ids: list[int]  # generated tokens; a final <|endoftext|> that stopped generation is not included
    stop_reason: str  # max_new_tokens | eod | context_full
    seed: int | None  # the sampling seed used (None for greedy); pass it again to reproduce the text
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return len(self.new_ids) / self.seconds if self.seconds > 0 else 0.0


def check_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Reject settings that have no meaning, naming the setting."""
    if not temperature >= 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1] (1 disables it), got {top_p}")


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """logits [..., V] with every id outside the kept set replaced by -inf.

    top_k > 0 keeps exactly k ids (ties at the k-th value broken by torch.topk's order); top_p < 1
    then keeps the smallest set of most likely ids whose cumulative probability is >= top_p."""
    check_sampling(1.0, top_k, top_p)
    out = logits.clone()
    if 0 < top_k < out.shape[-1]:
        keep = torch.zeros_like(out, dtype=torch.bool)
        keep.scatter_(-1, out.topk(top_k, dim=-1).indices, True)
        out = out.masked_fill(~keep, float("-inf"))
    if top_p < 1.0:
        # float64 so a cumulative sum that should equal top_p does not land just below it
        probs, order = out.double().softmax(-1).sort(dim=-1, descending=True)
        before = probs.cumsum(-1) - probs  # probability mass of the ids ranked above each one
        drop_sorted = before >= top_p  # the first id always has 0 before it, so it is always kept
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        out = out.masked_fill(drop, float("-inf"))
    return out


def sampling_bias(counts: Counter, presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                  logit_bias: dict[int, float] | None = None) -> dict[int, float]:
    """What to add to each token's logit before choosing, as the OpenAI API defines its penalties:
    logit[j] + logit_bias[j] - counts[j] * frequency_penalty - (counts[j] > 0) * presence_penalty,
    counts[j] being how often token j was generated so far (the prompt does not count)."""
    bias = dict(logit_bias or {})
    if presence_penalty or frequency_penalty:
        for token, count in counts.items():
            if count > 0:
                bias[token] = bias.get(token, 0.0) - count * frequency_penalty - presence_penalty
    return bias


def apply_bias(logits: torch.Tensor, ids: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """logits [b, V] plus values [b, k] at ids [b, k] (a new tensor; padding entries are id 0 with 0.0)."""
    return logits.scatter_add(-1, ids.to(logits.device), values.to(logits.device, logits.dtype))


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                generator: torch.Generator | None = None, greedy: bool = False) -> torch.Tensor:
    """Next token ids [b] from logits [b, V] (or [V] -> a 0-d tensor).

    greedy (or temperature 0) is argmax; otherwise logits / temperature, then top-k, then top-p,
    then one draw from the remaining distribution with `generator` (a CPU generator: the same seed
    gives the same draw on any device)."""
    check_sampling(temperature, top_k, top_p)
    if greedy or temperature == 0:
        return logits.argmax(-1)
    scaled = filter_logits(logits.double().cpu() / temperature, top_k, top_p)
    probs = scaled.softmax(-1)
    flat = probs.reshape(-1, probs.shape[-1])
    ids = torch.multinomial(flat, 1, generator=generator).view(probs.shape[:-1])
    return ids.to(logits.device)


def _forward_last(model, ids: list[int], cache: list[dict], offset: int, device) -> torch.Tensor:
    tokens = torch.tensor([ids], dtype=torch.long, device=device)
    return model(tokens, cache=cache, position_offset=offset)[0, -1].float()


def _check_request(model, max_new_tokens: int, context: str) -> None:
    if context not in CONTEXT_MODES:
        raise ValueError(f"context must be one of {CONTEXT_MODES}, got {context!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if not (getattr(model, "pre_process", True) and getattr(model, "post_process", True)):
        raise ValueError("generation needs the whole model (embedding to head), not one pipeline stage; "
                         "load it with trident.checkpoint.reader.load_for_inference")


def _first_window(prompt_ids: list[int], eod_id: int | None, seq: int, context: str, notes: list[str]) -> list[int]:
    """The tokens the first forward pass sees: the prompt (or <|endoftext|> for an empty one), cut
    to its last `seq` tokens when it is longer and context is 'slide' (saying so in `notes`)."""
    window = list(prompt_ids)
    if not window:
        if eod_id is None:
            raise ValueError("an empty prompt needs the tokenizer's <|endoftext|> id to start from")
        window = [eod_id]
    if len(window) > seq:
        if context == "stop":
            raise ValueError(f"prompt of {len(window)} tokens exceeds model.seq_length={seq}; shorten it "
                             f"or use context='slide' to keep only its last {seq} tokens")
        notes.append(f"prompt of {len(window)} tokens truncated to its last {seq} (model.seq_length)")
        window = window[-seq:]
    return window


@torch.inference_mode()
def generate_tokens(model, prompt_ids: list[int], max_new_tokens: int, vocab_size: int, eod_id: int | None = None,
                    *, greedy: bool = False, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                    seed: int | None = None, stop_at_eod: bool = True, context: str = "slide",
                    decode=None) -> Generation:
    """Continue `prompt_ids` by up to `max_new_tokens` tokens drawn from ids < vocab_size.

    An empty prompt starts from `eod_id` (a document boundary), as GPT-2 does."""
    check_sampling(temperature, top_k, top_p)
    _check_request(model, max_new_tokens, context)
    seq = model.cfg.seq_length
    device = next(model.parameters()).device
    greedy = greedy or temperature == 0
    if not greedy and seed is None:
        seed = random.SystemRandom().randrange(2**63)
    generator = None if greedy else torch.Generator().manual_seed(seed)
    notes: list[str] = []
    window = _first_window(prompt_ids, eod_id, seq, context, notes)
    was_training = model.training
    model.eval()
    start = time.perf_counter()
    new_ids: list[int] = []
    stop_reason, slides = "max_new_tokens", 0
    try:
        cache = model.new_cache()
        logits = _forward_last(model, window, cache, 0, device) if max_new_tokens else None
        while len(new_ids) < max_new_tokens:
            if logits.shape[-1] < vocab_size:
                raise ValueError(f"model gives {logits.shape[-1]} logits but the tokenizer has {vocab_size} ids")
            # padded embedding rows are not tokens: never sample them
            next_id = int(sample_next(logits[:vocab_size], temperature, top_k, top_p, generator, greedy))
            if stop_at_eod and next_id == eod_id:
                stop_reason = "eod"
                break
            new_ids.append(next_id)
            if len(new_ids) == max_new_tokens:
                break
            if len(window) < seq:
                window.append(next_id)
                logits = _forward_last(model, [next_id], cache, len(window) - 1, device)
                continue
            if context == "stop":
                stop_reason = "context_full"
                notes.append(f"stopped: the context window of model.seq_length={seq} tokens is full")
                break
            # positions are absolute: the kept half is re-encoded from position 0 with a fresh cache
            window = (window + [next_id])[-max(1, seq // 2):]
            cache = model.new_cache()
            logits = _forward_last(model, window, cache, 0, device)
            slides += 1
    finally:
        model.train(was_training)
    if slides:
        notes.append(f"context window of {seq} tokens was full {slides} time(s); kept the newest "
                     f"{max(1, seq // 2)} tokens each time, so earlier text no longer conditions the output")
    text = decode(new_ids) if decode is not None else ""
    return Generation(text, list(prompt_ids), new_ids, stop_reason, None if greedy else seed,
                      time.perf_counter() - start, notes)


def generate_result(model, tokenizer, prompt: str, max_new_tokens: int, greedy: bool = False,
                    temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed: int | None = None,
                    stop_at_eod: bool = True, context: str = "slide") -> Generation:
    """`generate`, returning the full record (ids, stop reason, notes, seed, timing)."""
    return generate_tokens(model, tokenizer.encode(prompt), max_new_tokens, tokenizer.vocab_size, tokenizer.eod_id,
                           greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                           stop_at_eod=stop_at_eod, context=context, decode=tokenizer.decode)


def generate(model, tokenizer, prompt: str, max_new_tokens: int, greedy: bool = False, temperature: float = 1.0,
             top_k: int = 0, top_p: float = 1.0, seed: int | None = None, stop_at_eod: bool = True) -> str:
    """The text that `model` writes after `prompt` (the continuation only), KV-cached.

    Stops after `max_new_tokens`, or at `<|endoftext|>` when stop_at_eod; slides the context
    window when it fills (see generate_result for the notes saying so)."""
    return generate_result(model, tokenizer, prompt, max_new_tokens, greedy, temperature, top_k, top_p, seed,
                           stop_at_eod).text
