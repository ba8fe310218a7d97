"""The model's chat template: found, compiled and rendered as transformers renders it.

Where from, first found wins (as vLLM's `--chat-template`): the file given with `--chat-template`;
the checkpoint's `chat_template.jinja` (where newer transformers save it); the `chat_template` key of
its `tokenizer_config.json` (Hugging Face's own file: a string, or a list of {"name", "template"}
of which "default" is used). The template sees what `apply_chat_template` gives it: `messages`,
`add_generation_prompt`, `tools`/`documents` (None here), the tokenizer's special tokens
(`bos_token`, `eos_token`, ... from tokenizer_config.json, strings or {"content": ...}), and any
`chat_template_kwargs`; jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
`raise_exception`, a `tojson` that does not escape HTML, `strftime_now`, loop controls and the
`{% generation %}` tag (rendered as its body).
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from trident.data.tokenizer import EOD_TOKEN

TEMPLATE_FILE = "chat_template.jinja"
CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class TemplateProblem(ValueError):
    """A template that cannot be used (named file, why): refused at start, exit 2."""


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (transformers marks assistant text with it): its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    return datetime.now().strftime(format)


def compile_template(source: str, where: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as error:
        raise TemplateProblem(f"{where}: not a valid jinja2 chat template "
                              f"(line {error.lineno}: {error.message})") from None


def _token_text(value, where: str, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    raise TemplateProblem(f"{where}: {key} must be a string or {{\"content\": ...}}, got {value!r}")


def _config_template(value, where: str) -> tuple[str | None, str]:
    """(template, why none) from tokenizer_config.json's chat_template."""
    if value is None:
        return None, f"{where} has no chat_template"
    if isinstance(value, str):
        return value, ""
    if isinstance(value, list) and all(isinstance(t, dict) and {"name", "template"} <= t.keys() for t in value):
        named = {t["name"]: t["template"] for t in value}
        if isinstance(named.get("default"), str):
            return named["default"], ""
        return None, f"{where}'s chat_template names {sorted(named)} but no 'default'"
    raise TemplateProblem(f"{where}: chat_template must be a string or a list of {{\"name\", \"template\"}}")


class ChatTemplate:
    """The compiled template (None when the model has none: `missing` says why) and its special tokens."""

    def __init__(self, source: str | None, where: str, special: dict[str, str], missing: str = ""):
        self.where, self.special, self.missing = where, special, missing
        self.template = compile_template(source, where) if source is not None else None

    @classmethod
    def load(cls, checkpoint: Path, option: str | None = None) -> "ChatTemplate":
        config_path = checkpoint / CONFIG_FILE
        config = {}
        if config_path.is_file():
            try:
                config = json.loads(config_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise TemplateProblem(f"{config_path}: unreadable ({error})") from None
            if not isinstance(config, dict):
                raise TemplateProblem(f"{config_path}: must hold a JSON object")
        special = {"eos_token": EOD_TOKEN}  # trident's end of document, when the config names no eos
        for key in SPECIAL_TOKENS:
            value = _token_text(config.get(key), str(config_path), key)
            if value is not None:
                special[key] = value
        if option is not None:
            path = Path(option)
            if not path.is_file():
                raise TemplateProblem(f"--chat-template {option}: no such file")
            return cls(path.read_text(encoding="utf-8"), str(path), special)
        if (checkpoint / TEMPLATE_FILE).is_file():
            path = checkpoint / TEMPLATE_FILE
            return cls(path.read_text(encoding="utf-8"), str(path), special)
        source, why = _config_template(config.get("chat_template"), str(config_path))
        if not config_path.is_file():
            why = f"{checkpoint} holds neither {TEMPLATE_FILE} nor {CONFIG_FILE}"
        return cls(source, str(config_path), special, missing=why)

    def render(self, messages: list[dict], add_generation_prompt: bool = True, extra: dict | None = None) -> str:
        """The prompt text; jinja2.TemplateError (raise_exception, or any failure) for the caller to report."""
        values = {**self.special, **(extra or {})}
        return self.template.render(messages=messages, tools=None, documents=None,
                                    add_generation_prompt=add_generation_prompt, **values)
