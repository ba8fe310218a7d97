"""The chat template as `trident serve` finds and renders it: the same text as transformers'
`apply_chat_template` on the same tokenizer files (Hub-style templates: special tokens as strings
or {"content"} dicts, tojson, namespace, loop controls, raise_exception, the generation tag), and
the order of sources: --chat-template, then chat_template.jinja, then tokenizer_config.json."""
from __future__ import annotations

import json

import jinja2
import pytest

from eval_fixtures import tiny_tokenizer
from serve_fixtures import CHAT_TEMPLATE
from trident.serve.chat_template import ChatTemplate, TemplateProblem

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
# whitespace control (trim_blocks / lstrip_blocks), namespace, loop controls, tojson of non-ASCII, the generation tag
FANCY = """{{ bos_token }}
{% set ns = namespace(system='') %}
{% for message in messages %}
    {% if message.role == 'system' %}
        {% set ns.system = message.content %}
        {% continue %}
    {% endif %}
    [{{ loop.index0 }}] {{ message.role }} {{ message.content | tojson }}
    {% if message.role == 'assistant' %}{% generation %}{{ message.content }}{{ eos_token }}{% endgeneration %}{% endif %}
{% endfor %}
{% if ns.system %}system was: {{ ns.system }}{% endif %}
{% if add_generation_prompt %}assistant:{% endif %}"""
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Qu'est-ce que c'est ? \u00e9\u00e8"},
            {"role": "assistant", "content": "Un \"test\" <b>"}, {"role": "user", "content": "Merci"}]


def _folder(tmp_path, config: dict | None = None, jinja: str | None = None):
    folder = tmp_path / "step_1"
    folder.mkdir(exist_ok=True)
    tiny_tokenizer(tmp_path).save(folder / "tokenizer.json")
    if config is not None:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if jinja is not None:
        (folder / "chat_template.jinja").write_text(jinja)
    return folder


@pytest.mark.timeout(60)
@pytest.mark.parametrize("template", [CHAT_TEMPLATE, CHATML, FANCY], ids=["roles", "chatml", "hub-features"])
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_renders_as_transformers_apply_chat_template(tmp_path, template, generation_prompt):
    from transformers import PreTrainedTokenizerFast

    config = {"bos_token": {"content": "<|endoftext|>", "lstrip": False}, "eos_token": "<|endoftext|>",
              "unk_token": "<|endoftext|>", "chat_template": template}
    folder = _folder(tmp_path, config)
    hf = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"), bos_token="<|endoftext|>",
                                 eos_token="<|endoftext|>", unk_token="<|endoftext|>", chat_template=template)
    want = hf.apply_chat_template(MESSAGES, add_generation_prompt=generation_prompt, tokenize=False)
    ours = ChatTemplate.load(folder)
    assert ours.render(MESSAGES, generation_prompt) == want
    assert ours.render(MESSAGES, generation_prompt).startswith("<|endoftext|>") == ("bos_token" in template)


@pytest.mark.timeout(30)
def test_sources_in_order_option_then_jinja_file_then_tokenizer_config(tmp_path):
    folder = _folder(tmp_path, {"chat_template": "config {{ messages[0].content }}"}, "jinja {{ messages[0].content }}")
    option = tmp_path / "mine.jinja"
    option.write_text("option {{ messages[0].content }}")
    hello = [{"role": "user", "content": "hi"}]
    assert ChatTemplate.load(folder, str(option)).render(hello) == "option hi"
    assert ChatTemplate.load(folder).render(hello) == "jinja hi"
    (folder / "chat_template.jinja").unlink()
    assert ChatTemplate.load(folder).render(hello) == "config hi"
    named = [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "default {{ eos_token }}"}]
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": named, "eos_token": {"content": "</s>"}}))
    assert ChatTemplate.load(folder).render(hello) == "default </s>"


@pytest.mark.timeout(30)
def test_missing_and_broken_templates_say_what_and_where(tmp_path):
    folder = _folder(tmp_path)
    missing = ChatTemplate.load(folder)
    assert missing.template is None and "neither chat_template.jinja nor tokenizer_config.json" in missing.missing
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    assert "has no chat_template" in ChatTemplate.load(folder).missing
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{"name": "rag", "template": "x"}]}))
    assert "no 'default'" in ChatTemplate.load(folder).missing
    (folder / "chat_template.jinja").write_text("{% for m in messages %}never closed")
    with pytest.raises(TemplateProblem, match="chat_template.jinja: not a valid jinja2 chat template"):
        ChatTemplate.load(folder)
    with pytest.raises(TemplateProblem, match="--chat-template nowhere.jinja: no such file"):
        ChatTemplate.load(folder, "nowhere.jinja")
    (folder / "chat_template.jinja").write_text("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(jinja2.TemplateError, match="roles must alternate"):
        ChatTemplate.load(folder).render([{"role": "user", "content": "x"}])
    (folder / "chat_template.jinja").write_text("{{ messages.__class__.__mro__ }}")  # the sandbox holds
    with pytest.raises(jinja2.exceptions.SecurityError):
        ChatTemplate.load(folder).render([{"role": "user", "content": "x"}])
