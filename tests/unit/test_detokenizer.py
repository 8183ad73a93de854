"""Incremental detokenization: UTF-8 never split, stop strings never leaked."""

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.detokenizer import Detokenizer


def _feed(text, stop=()):
    tok = ByteTokenizer()
    d = Detokenizer(tok, tuple(stop))
    pieces = [d.add(i) for i in tok.encode(text)]
    return pieces, d.flush(), d


def test_multibyte_characters_are_released_whole():
    pieces, tail, _ = _feed("héllo €")
    assert "".join(pieces) + tail == "héllo €"
    assert all("\ufffd" not in p for p in pieces)
    assert "€" in pieces  # released in one piece once its third byte arrived


def test_stop_string_truncates_and_is_not_emitted():
    pieces, tail, d = _feed("abc STOP def", stop=["STOP"])
    assert "".join(pieces) + tail == "abc "
    assert d.stopped


def test_partial_stop_match_is_held_then_released():
    pieces, tail, d = _feed("abc ST", stop=["STOP"])
    assert "".join(pieces) == "abc "
    assert tail == "ST" and not d.stopped
