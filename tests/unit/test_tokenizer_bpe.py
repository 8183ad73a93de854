"""The GGUF byte-level BPE tokenizer: exact ids against transformers, and its construction rules."""

import json

import pytest

from strata.engine.bpe_tokenizer import BpeTokenizer, _bytes_to_unicode
from strata.engine.gguf_loader import GGUFReader, _metadata, default_model_path

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BYTES = [_bytes_to_unicode()[b] for b in range(256)]


def _toy_metadata(**overrides):
    """A vocabulary of the 256 bytes plus 'he' and 'Ġt', behind three control tokens."""
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": SPECIALS + BYTES + ["he", "Ġt"],
        "tokenizer.ggml.merges": ["h e", "Ġ t"],
        "tokenizer.ggml.token_type": [3, 3, 3] + [1] * 258,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    meta.update(overrides)
    return meta


def _byte(ch: str) -> int:
    return 3 + ord(ch)


def test_merges_apply_and_specials_stay_whole():
    tok = BpeTokenizer.from_gguf_metadata(_toy_metadata())
    assert tok.vocab_size == 261
    assert tok.encode("he t") == [259, 260]
    assert tok.encode("<|im_start|>the<|im_end|>") == [1, _byte("t"), 259, 2]
    assert tok.encode("<|im_start") == [_byte(c) for c in "<|im_start"]
    assert tok.decode([1, _byte("t"), 259, 2]) == "<|im_start|>the<|im_end|>"
    assert tok.decode(tok.encode("é ü\n")) == "é ü\n"


def test_end_tokens_and_bos_rules():
    tok = BpeTokenizer.from_gguf_metadata(_toy_metadata())
    assert tok.eos_token_ids == (2, 0)  # the file's EOS first, then <|endoftext|>
    assert tok.bos_token_id is None  # the file does not ask for a BOS
    with_bos = BpeTokenizer.from_gguf_metadata(
        _toy_metadata(**{"tokenizer.ggml.add_bos_token": True})
    )
    assert with_bos.bos_token_id == 1
    assert with_bos.encode("he") == [259]  # encode itself never adds it


def test_pre_tokenizer_follows_the_pre_type():
    text = "abc 12345"
    gpt2 = BpeTokenizer.from_gguf_metadata(_toy_metadata())
    llama3 = BpeTokenizer.from_gguf_metadata(_toy_metadata(**{"tokenizer.ggml.pre": "llama-bpe"}))
    # no merge touches these characters: every byte is its own token whatever the split
    assert gpt2.encode(text) == llama3.encode(text) == [_byte(c) for c in text]
    split = llama3._backend.pre_tokenizer.pre_tokenize_str(text)
    assert [piece for piece, _ in split] == ["abc", "Ġ", "123", "45"]
    split = gpt2._backend.pre_tokenizer.pre_tokenize_str(text)
    assert [piece for piece, _ in split] == ["abc", "Ġ12345"]


def test_unsupported_pre_and_model_kinds_are_refused():
    with pytest.raises(ValueError, match="tokenizer.ggml.pre 'mystery' is not supported"):
        BpeTokenizer.from_gguf_metadata(_toy_metadata(**{"tokenizer.ggml.pre": "mystery"}))
    with pytest.raises(ValueError, match="this checkpoint has 'llama'"):
        BpeTokenizer.from_gguf_metadata(_toy_metadata(**{"tokenizer.ggml.model": "llama"}))


def test_chat_template_from_metadata_or_chatml():
    plain = BpeTokenizer.from_gguf_metadata(_toy_metadata())
    assert plain.apply_chat_template([("user", "hi")]) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    custom = BpeTokenizer.from_gguf_metadata(
        _toy_metadata(
            **{
                "tokenizer.chat_template": "{{ bos_token }}{% for m in messages %}"
                "{{ m['content'] }}"
                "{{ eos_token }}{% endfor %}"
            }
        )
    )
    assert custom.apply_chat_template([("user", "a"), ("assistant", "b")]) == (
        "<|im_start|>a<|im_end|>b<|im_end|>"
    )


def test_tokenizer_json_folder_round_trip(tmp_path):
    source = BpeTokenizer.from_gguf_metadata(_toy_metadata())
    source.save(tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "eos_token": {"content": "<|im_end|>"},
                "bos_token": "<|im_start|>",
                "add_bos_token": True,
                "chat_template": "{% for m in messages %}<{{ m['role'] }}>{% endfor %}",
            }
        )
    )
    tok = BpeTokenizer.from_tokenizer_json(tmp_path)
    assert tok.encode("<|im_start|>the he") == [1, _byte("t"), 259, _byte(" "), 259]
    assert (tok.vocab_size, tok.eos_token_ids, tok.bos_token_id) == (261, (2, 0), 1)
    assert tok.apply_chat_template([("user", "x"), ("assistant", "y")]) == "<user><assistant>"
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        BpeTokenizer.from_tokenizer_json(tmp_path / "missing")


# The real SmolLM2 tokenizer against transformers' GGUF tokenizer (slow: both parse 49k tokens).

PARITY_TEXTS = [
    "Hello, world!",
    "What is the capital of France?",
    "The year 2024 had 366 days; pi is about 3.14159 and 1e10 > -17.",
    "naïve café, Ünïcödé ñ, 中文, 日本語, 한국어, Ελληνικά, русский",
    "emoji 🤖🎉, a family 👩‍👩‍👧‍👦 and a flag 🇫🇷",
    "def square(x):\n\treturn x ** 2  # comment\n\n\nclass A: pass\n",
    "   leading and trailing   ",
    "tabs\t\tand\r\nnewlines\n\n\nand    runs",
    "don't won't I'M you'll they've",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>text<|im_end|>x<|im_start|>",
    "<|im_start almost special",
    "<repo_name>strata<file_sep>main.py",
    "\u00a0non-breaking\u2009thin\u200bzero-width",
    " ",
    "",
]


@pytest.fixture(scope="module")
def real_pair():
    transformers = pytest.importorskip("transformers")
    path = default_model_path()
    ours = BpeTokenizer.from_gguf_metadata(_metadata(GGUFReader(path)))
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return ours, reference


@pytest.mark.slow
@pytest.mark.parametrize("text", PARITY_TEXTS)
def test_ids_match_transformers_and_decode_round_trips(real_pair, text):
    ours, reference = real_pair
    ids = ours.encode(text)
    assert ids == reference.encode(text, add_special_tokens=False)
    assert ours.decode(ids) == reference.decode(ids) == text


@pytest.mark.slow
def test_special_tokens_and_end_of_turn(real_pair):
    ours, _ = real_pair
    assert ours.encode("<|im_start|>") == [1]
    assert ours.encode("<|im_end|>") == [2]
    assert ours.encode("<|endoftext|>") == [0]
    assert ours.eos_token_ids == (2, 0)
    assert ours.bos_token_id is None
    assert ours.vocab_size == 49152


@pytest.mark.slow
def test_chat_template_matches_transformers(real_pair):
    ours, reference = real_pair
    expected = reference.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    rendered = ours.apply_chat_template([("user", "What is the capital of France?")])
    assert (
        rendered
        == expected
        == (
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
            "trained by Hugging Face"
            "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
    )
    with_system = [
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello"),
        ("user", "2+2?"),
    ]
    assert ours.apply_chat_template(with_system) == reference.apply_chat_template(
        [{"role": r, "content": c} for r, c in with_system],
        add_generation_prompt=True,
        tokenize=False,
    )
