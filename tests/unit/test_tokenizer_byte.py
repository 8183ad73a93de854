"""ByteTokenizer: UTF-8 bytes as ids, four specials, ChatML."""

import pytest

from strata.engine.byte_tokenizer import ByteTokenizer


def test_bytes_are_their_own_ids_and_round_trip():
    tok = ByteTokenizer()
    assert tok.encode("Hi é") == [72, 105, 32, 0xC3, 0xA9]
    for text in ["", "plain ascii", "naïve 中文 🤖\n\t", "\x00\x7f"]:
        assert tok.decode(tok.encode(text)) == text


def test_specials_are_single_ids():
    tok = ByteTokenizer()
    assert tok.encode("<|bos|><|eos|><|im_start|><|im_end|>") == [256, 257, 258, 259]
    assert tok.encode("a<|im_end|>b") == [97, 259, 98]
    assert tok.encode("<|im_end") == list(b"<|im_end")
    assert tok.decode([258, 104, 105, 259]) == "<|im_start|>hi<|im_end|>"
    assert tok.eos_token_ids == (257, 259)
    assert tok.bos_token_id == 256


def test_vocab_size_and_padding_ids():
    tok = ByteTokenizer(300)
    assert tok.vocab_size == 300
    assert tok.decode([104, 299, 105]) == "hi"  # padding rows carry no text
    with pytest.raises(ValueError, match=r"token id 300 is outside the vocabulary \(0..299\)"):
        tok.decode([300])
    with pytest.raises(ValueError, match="vocab_size >= 260 .* got 259"):
        ByteTokenizer(259)


def test_incomplete_utf8_decodes_to_replacement_character():
    tok = ByteTokenizer()
    euro = tok.encode("€")
    assert tok.decode(euro[:2]) == "\ufffd"
    assert tok.decode(euro) == "€"


def test_chatml_template():
    tok = ByteTokenizer()
    prompt = tok.apply_chat_template([("system", "Be brief."), ("user", "Hi")])
    assert prompt == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tok.encode(prompt)
    assert ids[0] == 258 and ids[-11:] == [258, *b"assistant\n"]
    assert ids.count(259) == 2
