"""Chat templates render in a sandbox, as transformers renders them, with ChatML as the fallback."""

import pytest

from strata.engine.chat_template import CHATML_TEMPLATE, ChatTemplate


def test_missing_template_falls_back_to_chatml():
    for source in (None, ""):
        template = ChatTemplate(source)
        assert template.source == CHATML_TEMPLATE
        assert template.render([("user", "Hi")]) == (
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        )


def test_template_sees_special_tokens_and_generation_flag():
    template = ChatTemplate(
        "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}",
        bos_token="<s>",
        eos_token="</s>",
    )
    assert template.render([("user", "a"), ("assistant", "b")]) == (
        "<s>user: a\nassistant: b\nassistant:"
    )


def test_blocks_are_trimmed_like_transformers():
    template = ChatTemplate("{% for m in messages %}\n    {{ m.content }}\n{% endfor %}")
    assert template.render([("user", "x"), ("user", "y")]) == "    x\n    y\n"


def test_tojson_does_not_escape_html():
    template = ChatTemplate("{{ messages[0].content | tojson }}")
    assert template.render([("user", '<b>"é"</b>')]) == '"<b>\\"é\\"</b>"'


def test_raise_exception_becomes_a_value_error():
    template = ChatTemplate(
        "{% if messages[0].role != 'user' %}"
        "{{ raise_exception('conversation must start with the user') }}{% endif %}"
    )
    assert template.render([("user", "x")]) == ""
    with pytest.raises(ValueError, match="conversation must start with the user"):
        template.render([("assistant", "x")])


def test_sandbox_blocks_python_internals():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ValueError, match="the chat template rejected these messages"):
        template.render([("user", "x")])


def test_bad_syntax_and_empty_conversation_are_refused():
    with pytest.raises(ValueError, match="chat template does not parse"):
        ChatTemplate("{% for m in messages %}")
    with pytest.raises(ValueError, match="at least one message"):
        ChatTemplate(None).render([])
