"""Chat: turn a conversation into tokens with the model's own chat template (or the user's).

The template is Jinja text written by whoever made the GGUF file, so it is rendered in Jinja2's
immutable sandbox: a template that reaches for Python internals fails with a clear message and
runs nothing. The user's own words are tokenized *without* special-token parsing, so typing
``<|im_end|>`` in a message stays text and cannot forge a turn boundary.
"""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import dataclass, field

import jinja2
from jinja2.sandbox import SecurityError

from .errors import TokenstepError
from .template_sandbox import BUDGET_S, GuardedEnvironment
from .tokens import Vocab


@dataclass
class Message:
    role: str
    content: str
    # The model's own token ids for a reply. The same text can tokenize differently ("Sun" +
    # "sets" sampled, "S" + "uns" + "ets" retokenized): the next prompt keeps these, as
    # llama-server's cache does for a client that sends tokens, so the prefix is reused whole.
    tokens: tuple[int, ...] | None = None


class TemplateError(TokenstepError):
    """A chat template could not be rendered safely."""


class Template(str):
    """A chat template's text that knows where it came from, so a message about it names it:
    a user's ``--chat-template FILE`` is that file, not "the model's chat template"."""

    origin: str

    def __new__(cls, text: str, origin: str) -> Template:
        obj = super().__new__(cls, text)
        obj.origin = origin
        return obj


def template_name(template: str) -> str:
    """How messages name ``template``: its origin, else the model's own (from the GGUF)."""
    return getattr(template, "origin", "the model's chat template")


def _sentence(text: object) -> str:
    """An exception's text as the tail of one sentence: one line, one final period."""
    return " ".join(str(text).split()).rstrip(".") + "."


def _raiser(name: str) -> object:
    def raise_exception(message: str) -> None:
        raise TemplateError(f"{name} raised an error: {_sentence(message)}")

    return raise_exception


# Jinja2 compiles a template to Python before it renders anything, and the sandbox's time
# budget cannot interrupt that: parsing costs about 7 microseconds a character here (a 14 MB
# template took 90 s and 673 MB). Real chat templates are 1 to 20 kB, so this cap bounds the
# parse to about a second on a loaded 2-core machine.
MAX_TEMPLATE_CHARS = 128 * 1024


@functools.lru_cache(maxsize=4)
def _compiled(template: str) -> jinja2.Template:
    """A template is parsed once per process, not once per chat turn."""
    return _env(template_name(template)).from_string(template)


def _env(name: str) -> GuardedEnvironment:
    env = GuardedEnvironment(
        trim_blocks=True, lstrip_blocks=True, undefined=jinja2.ChainableUndefined
    )
    env.globals["raise_exception"] = _raiser(name)
    return env


def render_template(
    template: str,
    messages: list[Message],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
) -> str:
    """Render ``template`` for ``messages`` in the sandbox (see ``template_sandbox``)."""
    name = template_name(template)
    if len(template) > MAX_TEMPLATE_CHARS:
        raise TemplateError(
            f"{name} is {len(template):,} characters long; tokenstep reads "
            f"templates of at most {MAX_TEMPLATE_CHARS:,} (real ones are a few thousand)."
        )
    try:
        tmpl = _compiled(template)
        tmpl.environment.deadline = time.thread_time() + BUDGET_S  # type: ignore[attr-defined]
        return tmpl.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except SecurityError as exc:
        raise TemplateError(
            f"{name} tried something unsafe and was stopped: {_sentence(exc)}"
        ) from exc
    except TemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise TemplateError(f"{name} is broken: {_sentence(exc)}") from exc
    except RecursionError as exc:
        raise TemplateError(f"{name} recursed too deeply.") from exc
    except Exception as exc:  # a template can raise anything while rendering
        raise TemplateError(f"{name} failed: {_sentence(exc)}") from exc


@dataclass
class ChatPrompt:
    text: str
    tokens: list[int]
    user_spans: list[tuple[int, int]] = field(default_factory=list)  # token ranges of user text


def chat_tokens(
    vocab: Vocab,
    template: str,
    messages: list[Message],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_bos: bool = False,
) -> ChatPrompt:
    """Render with sentinels in place of the messages, then tokenize template text with special
    parsing and message text without it."""
    marks = [f"\u0001{uuid.uuid4().hex}\u0002" for _ in messages]
    stand_in = [Message(m.role, mark) for m, mark in zip(messages, marks, strict=True)]
    rendered = render_template(template, stand_in, bos_token=bos_token, eos_token=eos_token)
    tokens: list[int] = []
    spans: list[tuple[int, int]] = []
    text_parts: list[str] = []
    at = 0  # where the text after the last message starts (slicing ``rest`` was n^2)
    first = True
    for m, mark in zip(messages, marks, strict=True):
        found = rendered.find(mark, at)
        if found < 0:
            raise TemplateError(f"{template_name(template)} dropped a message; it cannot be used.")
        before, at = rendered[at:found], found + len(mark)
        tokens += vocab.tokenize(before, add_special=first and add_bos, parse_special=True)
        first = False
        start = len(tokens)
        if m.tokens is not None:
            tokens += m.tokens
        else:
            tokens += vocab.tokenize(m.content, add_special=False, parse_special=False)
        spans.append((start, len(tokens)))
        text_parts += [before, m.content]
    rest = rendered[at:]
    tokens += vocab.tokenize(rest, add_special=False, parse_special=True)
    text_parts.append(rest)
    return ChatPrompt("".join(text_parts), tokens, spans)


# llama.cpp's fallback when a model has no template (llama-server uses ChatML then), written as
# the Jinja every chatml model ships.
CHATML = Template(
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "ChatML (llama.cpp's fallback template)",
)
NAMED_TEMPLATES = {"chatml": CHATML}


def template_from(name_or_path: str) -> str:
    """``--chat-template NAME|FILE``: a template llama.cpp names (chatml), or a Jinja file."""
    if name_or_path.lower() in NAMED_TEMPLATES:
        return Template(NAMED_TEMPLATES[name_or_path.lower()], f"the {name_or_path.lower()} template")
    try:
        with open(name_or_path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        names = ", ".join(NAMED_TEMPLATES)
        raise TokenstepError(
            f"--chat-template {name_or_path!r} is neither a template name ({names}) nor a readable "
            f"UTF-8 file ({getattr(exc, 'strerror', None) or exc})."
        ) from exc
    if not text.strip():
        raise TokenstepError(f"--chat-template file {name_or_path} is empty.")
    return Template(text, f"the chat template in {name_or_path} (--chat-template)")
