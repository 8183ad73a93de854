"""Rendering chat messages into one prompt with a checkpoint's Jinja2 chat template.

Templates come from the checkpoint (GGUF `tokenizer.chat_template`, `tokenizer_config.json`), so
they are untrusted code: they run in Jinja2's immutable sandbox, set up the way Hugging Face
transformers sets it up (trim_blocks, lstrip_blocks, `raise_exception`, a non-escaping `tojson`),
so a template renders here exactly as `apply_chat_template` renders it there. A checkpoint
without a template gets ChatML.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes quotes and angle brackets, which would change the prompt.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template plus the special-token strings templates may refer to.

    `render` always asks for the generation prompt, so the result ends where the assistant's
    reply begins.
    """

    __slots__ = ("source", "_compiled", "_special_tokens")

    def __init__(
        self, source: str | None, bos_token: str | None = None, eos_token: str | None = None
    ) -> None:
        self.source = source if source else CHATML_TEMPLATE
        try:
            self._compiled = _environment().from_string(self.source)
        except jinja2.exceptions.TemplateSyntaxError as err:
            raise ValueError(
                f"the checkpoint's chat template does not parse (line {err.lineno}: {err.message})"
            ) from err
        self._special_tokens = {"bos_token": bos_token or "", "eos_token": eos_token or ""}

    def render(self, messages: Sequence[tuple[str, str]]) -> str:
        if not messages:
            raise ValueError("a chat prompt needs at least one message")
        chat = [{"role": role, "content": content} for role, content in messages]
        try:
            return self._compiled.render(
                messages=chat, add_generation_prompt=True, **self._special_tokens
            )
        except jinja2.exceptions.TemplateError as err:
            raise ValueError(f"the chat template rejected these messages: {err}") from err
