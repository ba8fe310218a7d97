"""The model interface the evaluation harness scores against, and its trident / transformers adapters.

`LM.loglikelihood([(context, continuation), ...])` returns, for each pair, the summed
log-probability of the continuation given the context and whether the continuation is the greedy
(argmax) choice at every one of its tokens. Any causal LM that maps token ids [batch, seq] to
logits [batch, seq, vocab] is scored by the same code (`CausalLM`), so a trident checkpoint and a
Hugging Face model are compared on exactly the same token rows.

Tokenisation (as lm-evaluation-harness v0.4): trailing whitespace of the context moves to the
continuation, then `context + continuation` is encoded as one string and split at the length of
the encoded context. Encoding the whole string is what the model saw in training (BPE merges never
straddle a boundary that was not in the text), while the split keeps the scored tokens exactly the
continuation's. An empty context is replaced by the end-of-document token.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Callable, Protocol, Sequence

import torch

from trident.evaluate.requests import Row, TokenRequest, batches, plan_rows
from trident.infer.generate import sample_next
from trident.parallel.precision import DTYPES
from trident.tasks.types import Loglikelihood
from trident.text.progress import progress_bar
from trident.text.storage import is_remote, location


class TextCodec(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class LM(ABC):
    """What the harness needs from a model."""

    batch_size: int = 1

    @abstractmethod
    def loglikelihood_detailed(self, requests: list[tuple[str, str]], desc: str = "") -> list[Loglikelihood]:
        """Score each (context, continuation) pair; also returns the continuation's token count."""

    def loglikelihood(self, requests: list[tuple[str, str]]) -> list[tuple[float, bool]]:
        """(sum log p(continuation | context), continuation is greedy at every token) per request."""
        return [(r.logprob, r.is_greedy) for r in self.loglikelihood_detailed(requests)]

    @abstractmethod
    def loglikelihood_rolling(self, texts: list[str]) -> list[tuple[float, int]]:
        """(total log-likelihood, token count) of each whole text, from the end-of-document token on."""

    @abstractmethod
    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, seed: int = 1234, top_p: float = 1.0) -> list[str]:
        """Continuations of each prompt (greedy when temperature == 0, else sampled after top-k and
        top-p filtering), stopping at end-of-document."""

    def generate_until(self, prompts: list[str], until: tuple[str, ...], max_new_tokens: int) -> list[str]:
        """Greedy continuations of each prompt, cut at the first of the `until` strings (generation tasks)."""
        raise NotImplementedError(f"{type(self).__name__} cannot score generation tasks")

    @abstractmethod
    def describe(self) -> dict:
        """JSON-able facts about the model for results.json (kind, name, checkpoint, sizes)."""


class CausalLM(LM):
    """Scores requests with any `forward(ids[b, t]) -> logits[b, t, >= vocab_size]` callable.

    Logit columns at ids >= vocab_size (the padded part of a Megatron-style embedding) are ignored,
    which is the same as masking them to -inf before the softmax and the argmax.
    """

    def __init__(self, forward: Callable[[torch.Tensor], torch.Tensor], codec: TextCodec, *, vocab_size: int,
                 eod_id: int, max_length: int, batch_size: int = 8, device: str | torch.device = "cpu",
                 info: dict | None = None, progress: bool = False):
        if max_length < 2:
            raise ValueError(f"max_length must be >= 2, got {max_length}")
        self.forward = forward
        self.codec = codec
        self.vocab_size = vocab_size
        self.eod_id = eod_id
        self.max_length = max_length
        self.batch_size = batch_size
        self.device = torch.device(device)
        self.info = dict(info or {})
        self.progress = progress
        self._context_cache: dict[str, tuple[int, ...]] = {}

    # ---- tokenisation -------------------------------------------------------------------
    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.codec.encode(text))

    def encode_pair(self, context: str, continuation: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Token ids of (context, continuation) as the harness splits them (see module docstring)."""
        if not context:
            return (self.eod_id,), self._encode(continuation)
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        if context not in self._context_cache:
            self._context_cache[context] = self._encode(context)
        context_ids = self._context_cache[context]
        whole = self._encode(context + continuation)
        return whole[: len(context_ids)], whole[len(context_ids):]

    # ---- scoring --------------------------------------------------------------------------
    def loglikelihood_detailed(self, requests: list[tuple[str, str]], desc: str = "") -> list[Loglikelihood]:
        token_requests = []
        for i, (context, continuation) in enumerate(requests):
            ctx, cont = self.encode_pair(context, continuation)
            if not cont:
                raise ValueError(f"request {i}: continuation {continuation!r} encodes to no tokens")
            token_requests.append(TokenRequest(i, ctx, cont))
        return self.score_tokens(token_requests, desc=desc)

    def score_tokens(self, requests: list[TokenRequest], desc: str = "") -> list[Loglikelihood]:
        """Score token-level requests in length-sorted, right-padded batches (one forward per batch)."""
        results: list[Loglikelihood | None] = [None] * len(requests)
        rows = plan_rows(requests, self.max_length)
        bar = progress_bar(batches(rows, self.batch_size), desc=desc or "loglikelihood", unit="batch",
                       enabled=self.progress, leave=False)
        for batch in bar:
            for index, score in self._score_batch(batch):
                results[index] = score
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            raise RuntimeError(f"internal error: requests {missing[:5]} were never scored")
        return results  # type: ignore[return-value]

    @torch.inference_mode()
    def _score_batch(self, batch: list[Row]) -> list[tuple[int, Loglikelihood]]:
        width = max(len(row.tokens) for row in batch)
        # right padding: a causal model's logits at real positions never see the pad tokens
        ids = torch.full((len(batch), width), self.eod_id, dtype=torch.long)
        for b, row in enumerate(batch):
            ids[b, : len(row.tokens)] = torch.tensor(row.tokens, dtype=torch.long)
        logits = self.forward(ids.to(self.device))
        if logits.shape[:2] != ids.shape or logits.shape[-1] < self.vocab_size:
            raise RuntimeError(f"model returned logits of shape {tuple(logits.shape)} for input "
                               f"{tuple(ids.shape)}; expected [batch, seq, >= {self.vocab_size}]")
        out = []
        for b, row in enumerate(batch):
            lo, hi = row.first_read, len(row.tokens)
            logprobs = logits[b, lo:hi, : self.vocab_size].float().log_softmax(-1).cpu()
            greedy = logprobs.argmax(-1)
            for index, start, cont in row.readers:
                target = torch.tensor(cont, dtype=torch.long)
                span = slice(start - lo, start - lo + len(cont))
                lp = logprobs[span].gather(-1, target[:, None]).sum().item()
                out.append((index, Loglikelihood(lp, bool((greedy[span] == target).all()), len(cont))))
        return out

    def loglikelihood_rolling(self, texts: list[str]) -> list[tuple[float, int]]:
        # disjoint windows of max_length predicted tokens, each with as much left context as fits
        requests, owner = [], []
        for t, text in enumerate(texts):
            ids = self._encode(text)
            for start in range(0, len(ids), self.max_length):
                end = min(start + self.max_length, len(ids))
                context = (self.eod_id,) if start == 0 else ids[max(0, end - self.max_length - 1): start]
                requests.append(TokenRequest(len(requests), context, ids[start:end]))
                owner.append(t)
        totals = [[0.0, 0] for _ in texts]
        for request, score in zip(requests, self.score_tokens(requests, desc="rolling")):
            totals[owner[request.index]][0] += score.logprob
            totals[owner[request.index]][1] += score.num_tokens
        return [(lp, n) for lp, n in totals]

    # ---- generation -------------------------------------------------------------------------
    @torch.inference_mode()
    def generate(self, prompts: list[str], max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, seed: int = 1234, top_p: float = 1.0) -> list[str]:
        """Recomputes the prefix every step (no KV cache): the harness uses it only for short probes."""
        generator = torch.Generator().manual_seed(seed)
        outputs = []
        for chunk_start in range(0, len(prompts), self.batch_size):
            chunk = [list(self._encode(p) or (self.eod_id,)) for p in prompts[chunk_start: chunk_start + self.batch_size]]
            new: list[list[int]] = [[] for _ in chunk]
            done = [False] * len(chunk)
            for _ in range(max_new_tokens):
                rows = [tuple((c + n)[-self.max_length:]) for c, n in zip(chunk, new)]
                next_ids = self._choose(self.next_token_logits(rows), temperature, top_k, generator, top_p)
                for b, token in enumerate(next_ids.tolist()):
                    if not done[b]:
                        done[b] = token == self.eod_id
                        if not done[b]:
                            new[b].append(token)
                if all(done):
                    break
            outputs.extend(self.codec.decode(n) for n in new)
        return outputs

    def generate_until(self, prompts: list[str], until: tuple[str, ...], max_new_tokens: int) -> list[str]:
        """Greedy continuations cut at the first `until` string, as lm-evaluation-harness's generate_until.

        At most half the window is generated and each prompt keeps its last tokens that leave room for
        that (the harness's left truncation), so prompt + generation always fit and no window slides.
        Tokens are generated in rounds of growing budget (16, 32, ... up to max_new_tokens): greedy
        decoding is deterministic, so a longer round repeats a shorter one's text, and prompts whose
        text holds a stop string after a round are done."""
        max_new = max(1, min(max_new_tokens, self.max_length // 2))
        fitted = [self._fit_prompt(p, self.max_length - max_new) for p in prompts]
        outputs: list[str] = [""] * len(prompts)
        pending, budget = list(range(len(prompts))), min(GENERATION_ROUND, max_new)
        while pending:
            texts, ended = self._greedy([fitted[i] for i in pending], budget)
            still = []
            for i, text, eod in zip(pending, texts, ended):
                if eod or budget == max_new or any(stop and stop in text for stop in until):
                    outputs[i] = cut_at_stop(text, until)
                else:
                    still.append(i)
            pending, budget = still, min(2 * budget, max_new)
        return outputs

    def _fit_prompt(self, prompt: str, room: int) -> str:
        """prompt, or its end that encodes to at most `room` tokens."""
        ids, keep = self._encode(prompt), room
        fitted = prompt
        while len(self._encode(fitted)) > room:  # decoded tokens may re-encode to more: keep fewer
            fitted, keep = self.codec.decode(ids[len(ids) - keep:]), keep - 1
        return fitted

    def _greedy(self, prompts: list[str], budget: int) -> tuple[list[str], list[bool]]:
        """(texts, whether each ended at end-of-document): KV-cached through trident.infer.generate
        when the model is a trident GPT, else through `generate` (recomputing the prefix)."""
        if not hasattr(self.forward, "new_cache"):
            return self.generate(prompts, budget, temperature=0.0), [False] * len(prompts)
        from trident.infer.generate import generate_tokens

        done = [generate_tokens(self.forward, list(self._encode(p)), budget, self.vocab_size, self.eod_id,
                                greedy=True, decode=self.codec.decode) for p in prompts]
        return [g.text for g in done], [g.stop_reason == "eod" for g in done]

    def next_token_logits(self, rows: list[tuple[int, ...]]) -> torch.Tensor:
        """[len(rows), vocab_size] logits after the last token of each row (right-padded batch)."""
        ids = torch.full((len(rows), max(map(len, rows))), self.eod_id, dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, : len(r)] = torch.tensor(r)
        logits = self.forward(ids.to(self.device))
        ends = torch.tensor([len(r) - 1 for r in rows], device=logits.device)
        # each row's last position picked on the device: [b, V] reach the host, not [b, s, V]
        return logits[torch.arange(len(rows), device=logits.device), ends, : self.vocab_size].float().cpu()

    def _choose(self, logits: torch.Tensor, temperature: float, top_k: int | None, generator,
                top_p: float = 1.0) -> torch.Tensor:
        return sample_next(logits, max(temperature, 0.0), top_k or 0, top_p, generator=generator)

    def describe(self) -> dict:
        return {**self.info, "max_length": self.max_length, "vocab_size": self.vocab_size,
                "batch_size": self.batch_size, "device": str(self.device)}


GENERATION_ROUND = 16  # tokens of generate_until's first round


def cut_at_stop(text: str, until: tuple[str, ...]) -> str:
    """text up to the first occurrence of any stop string (the harness splits at each in turn: the same)."""
    cuts = [text.index(stop) for stop in until if stop and stop in text]
    return text[: min(cuts)] if cuts else text


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def trident_lm(model: torch.nn.Module, tokenizer, max_length: int, *, batch_size: int = 8, device: str = "cpu",
               checkpoint: str | None = None, name: str = "trident-gpt", dtype: str = "fp32") -> CausalLM:
    """Wrap a trident GPT (`model(ids) -> logits` over the padded vocabulary) and its Tokenizer.

    The model is put in eval mode and moved to `device` / `dtype` in place."""
    model.eval().to(device=device, dtype=DTYPES[dtype])  # log-softmax is always taken in fp32
    info = {"kind": "trident", "name": name, "checkpoint": checkpoint, "parameters": count_parameters(model),
            "dtype": dtype}
    return CausalLM(model, tokenizer, vocab_size=tokenizer.vocab_size, eod_id=tokenizer.eod_id,
                    max_length=max_length, batch_size=batch_size, device=device, info=info)


def load_trident(checkpoint: str | Path, *, batch_size: int = 8, device: str = "cpu",
                 tokenizer_path: str | Path | None = None, dtype: str = "fp32") -> CausalLM:
    """Load a trident checkpoint (trident.checkpoint.reader.load_for_inference) for scoring.

    The tokenizer is the checkpoint's own tokenizer.json, else `tokenizer_path`, else the
    config's data.tokenizer; without any of them the checkpoint cannot be evaluated on text.
    """
    from trident.checkpoint.reader import load_for_inference, resolve_checkpoint
    from trident.data.tokenizer import Tokenizer

    model, tokenizer, config = load_for_inference(str(checkpoint), device=device)
    if tokenizer_path is not None:
        tokenizer = Tokenizer.load(tokenizer_path)
    elif tokenizer is None and config.data.tokenizer:
        tokenizer = Tokenizer.load(config.data.tokenizer)
    if tokenizer is None:
        raise FileNotFoundError(f"{checkpoint}: no tokenizer.json in the checkpoint and no data.tokenizer in "
                                f"its config; pass --tokenizer PATH")
    # a run's checkpoints/ folder stands for its newest complete step: record which one was used
    resolved = resolve_checkpoint(str(checkpoint), location(checkpoint)) or location(checkpoint)
    resolved = resolved.resolve() if not is_remote(resolved) else resolved
    return trident_lm(model, tokenizer, config.model.seq_length, batch_size=batch_size, device=device,
                      checkpoint=str(resolved), name=f"{resolved.parent.parent.name}/{resolved.name}", dtype=dtype)


class _HFCodec:
    """Plain text <-> ids with a transformers tokenizer, never adding special tokens."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids))


def hf_lm(model, tokenizer, *, batch_size: int = 8, device: str = "cpu", name: str = "hf-model",
          checkpoint: str | None = None, dtype: str = "fp32") -> CausalLM:
    """Wrap a transformers causal LM (`model(input_ids=...).logits`) and its tokenizer."""
    model.eval().to(device=device, dtype=DTYPES[dtype])
    config = model.config
    max_length = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    if not max_length:
        raise ValueError(f"{name}: model config has neither n_positions nor max_position_embeddings")
    eod = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else config.eos_token_id
    if eod is None:
        raise ValueError(f"{name}: neither the tokenizer nor the model config defines an eos token id")
    info = {"kind": "transformers", "name": name, "checkpoint": checkpoint, "parameters": count_parameters(model),
            "architecture": type(model).__name__, "dtype": dtype}
    return CausalLM(lambda ids: model(input_ids=ids).logits, _HFCodec(tokenizer), vocab_size=len(tokenizer),
                    eod_id=eod, max_length=int(max_length), batch_size=batch_size, device=device, info=info)


def load_hf(model_dir: str | Path, *, batch_size: int = 8, device: str = "cpu", dtype: str = "fp32") -> CausalLM:
    """Load a local Hugging Face causal LM directory (AutoModelForCausalLM + AutoTokenizer)."""
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ImportError("evaluating a Hugging Face model needs `transformers`: "
                          "pip install 'trident-lm[hf]' (or pip install 'transformers>=4.40')") from exc
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise FileNotFoundError(f"--hf {model_dir}: not a directory with a saved Hugging Face model")
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return hf_lm(model, tokenizer, batch_size=batch_size, device=device, name=model_dir.name,
                 checkpoint=str(model_dir.resolve()), dtype=dtype)
