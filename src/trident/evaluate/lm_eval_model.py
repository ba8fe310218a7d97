"""trident as an EleutherAI lm-evaluation-harness model: `lm_eval --model trident`.

Importing this module registers the model under the name "trident" in the harness's registry;
`trident lm-eval ...` imports it and runs the harness's own command line, so

    trident lm-eval --model trident --model_args checkpoint=RUN/checkpoints,device=cpu --tasks lambada_openai

runs any harness task on a trident checkpoint (in Python: `import trident.evaluate.lm_eval_model`
before `lm_eval.simple_evaluate(model="trident", ...)`). The three request types map onto
trident's CausalLM (the scorer `trident eval` uses):
  loglikelihood          (context, continuation) pairs, split into tokens as the harness does,
                         batched, contexts left-truncated to the model's window;
  loglikelihood_rolling  the harness's own rolling windows (`get_rolling_token_windows`, context 1,
                         made disjoint), so every token is predicted once with the most context;
  generate_until         greedy (or sampled with `temperature`) KV-cached decoding, cut at the first
                         `until` string, the context left-truncated to leave room for `max_gen_toks`;
                         greedy requests go through CausalLM.generate_until, the decoding trident's
                         own generation tasks use (at most half the window generated).
Needs `pip install 'trident-lm[lm-eval]'`.
"""
from __future__ import annotations

import logging

import lm_eval.models  # noqa: F401  (the built-in models first: the registry loads them only while empty)
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from trident.evaluate.requests import TokenRequest

DEFAULT_MAX_GEN_TOKS = 256
HARNESS_KEYS = ("device", "batch_size")  # what the harness passes every model besides model_args


@register_model("trident")
class TridentLM(LM):
    """`--model_args checkpoint=PATH[,device=cpu][,batch_size=8][,dtype=fp32][,tokenizer=PATH]`.

    device and batch_size may also come as the harness's `--device` / `--batch_size` (or
    simple_evaluate's arguments); where both are given, model_args win, because the harness always
    passes its own values, defaults included (batch_size 1, device cuda:0 in lm-eval 0.4.13)."""

    def __init__(self, checkpoint: str, device: str = "cpu", batch_size: int | str = 8, dtype: str = "fp32",
                 tokenizer: str | None = None, **_ignored):
        super().__init__()
        from trident.evaluate.lm import load_trident

        self.scorer = load_trident(checkpoint, batch_size=_whole_number(batch_size), device=_usable(device),
                                   tokenizer_path=tokenizer, dtype=dtype)

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "TridentLM":
        from lm_eval.utils import simple_parse_args_string

        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> "TridentLM":
        harness = {k: v for k, v in (additional_config or {}).items() if k in HARNESS_KEYS and v is not None}
        return cls(**(harness | dict(arg_dict)))

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        return self.scorer.loglikelihood([request.args for request in requests])

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        lm = self.scorer
        token_requests, owner = [], []
        for index, request in enumerate(requests):
            ids = list(lm.codec.encode(request.args[0]))
            for context, continuation in map(make_disjoint_window, get_rolling_token_windows(
                    ids, prefix_token=lm.eod_id, max_seq_len=lm.max_length, context_len=1)):
                token_requests.append(TokenRequest(len(token_requests), tuple(context), tuple(continuation)))
                owner.append(index)
        totals = [0.0] * len(requests)
        for request, score in zip(token_requests, lm.score_tokens(token_requests, desc="rolling")):
            totals[owner[request.index]] += score.logprob
        return totals

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        return [self._generate(*request.args) for request in requests]

    def _generate(self, context: str, gen_kwargs: dict) -> str:
        from trident.infer.generate import generate_tokens

        lm = self.scorer
        until = gen_kwargs.get("until") or []
        until = [until] if isinstance(until, str) else list(until)
        max_new = int(gen_kwargs.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
        temperature = float(gen_kwargs.get("temperature", 0.0)) if gen_kwargs.get("do_sample", False) else 0.0
        if temperature == 0:  # trident's own generation tasks decode the same way (evaluate/lm.py)
            return lm.generate_until([context], tuple(until), max_new)[0]
        prompt = list(lm.codec.encode(context))[-max(1, lm.max_length - max_new):]
        result = generate_tokens(lm.forward, prompt, max_new, lm.vocab_size, lm.eod_id, greedy=temperature == 0,
                                 temperature=temperature or 1.0, seed=int(gen_kwargs.get("seed", 1234)),
                                 decode=lm.codec.decode)
        text = result.text
        cuts = [text.index(stop) for stop in until if stop and stop in text]
        return text[: min(cuts)] if cuts else text


def _whole_number(batch_size: int | str) -> int:
    try:
        return int(batch_size)
    except ValueError:
        raise ValueError(f"trident: batch_size must be a whole number (the harness's 'auto' sizing is not "
                         f"supported), got {batch_size!r}") from None


def _usable(device: str) -> str:
    """device, or cpu when it names CUDA on a machine without it (as the harness's hf model does)."""
    import torch

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        logging.getLogger(__name__).warning("trident: %s requested but CUDA is not available; using cpu", device)
        return "cpu"
    return str(device)
