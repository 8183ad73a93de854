"""Failover resume of the text stream: a detokenizer primed with the tokens a failed worker
streamed continues its text exactly (multi-byte characters and stop strings split at the failure
point included), and strata.engine.resume extends the request or finishes it at once."""

import pytest

from strata.engine.byte_tokenizer import ByteTokenizer
from strata.engine.detokenizer import Detokenizer
from strata.engine.engine import EngineRequest, RequestOutput
from strata.engine.resume import resume
from strata.engine.sequence import FinishReason, SamplingParams

TOK = ByteTokenizer()


def _stream(ids, stop=(), primed=()):
    """What one worker releases for `ids`: per token, then the final flush."""
    d = Detokenizer(TOK, tuple(stop))
    d.prime(primed)
    return [d.add(i) for i in ids], d.flush()


def _failover(text, at, stop=()):
    """Client text when worker A dies after `at` tokens and worker B resumes after them."""
    ids = TOK.encode(text)
    a = Detokenizer(TOK, tuple(stop))
    before = [a.add(i) for i in ids[:at]]
    after, tail = _stream(ids[at:], stop, primed=ids[:at])
    return before, after, tail


@pytest.mark.parametrize(
    "text,stop",
    [("héllo € wörld 😀!", ()), ("abc STOP def", ("STOP",)), ("x€STOP€", ("STOP", "€S"))],
)
def test_every_failure_point_gives_the_uninterrupted_text(text, stop):
    pieces, tail = _stream(TOK.encode(text), stop)
    whole = "".join(pieces) + tail
    for at in range(len(TOK.encode(text)) + 1):
        before, after, resumed_tail = _failover(text, at, stop)
        assert "".join(before) + "".join(after) + resumed_tail == whole, at
        assert before == pieces[:at] and after == pieces[at:] and resumed_tail == tail, at


def test_a_three_byte_character_split_by_the_failure_is_released_once_whole():
    ids = TOK.encode("hé €x")
    euro = ids.index(0xE2)  # "€" is E2 82 AC
    assert ids[euro : euro + 3] == [0xE2, 0x82, 0xAC]
    before, after, tail = _failover("hé €x", euro + 1)  # worker A streamed only E2
    assert before == ["h", "", "é", " ", ""]  # é (2 bytes) whole; E2 held back
    assert after == ["", "€", "x"] and tail == ""


def test_a_stop_string_prefix_held_back_at_the_failure_stays_held():
    before, after, tail = _failover("abc STOP def", 6, stop=("STOP",))  # A streamed "abc ST"
    assert "".join(before) == "abc "
    assert after == ["", "", "", "", "", ""] and tail == ""


def _request(max_tokens=10, stop=()):
    return EngineRequest("r1", [1, 2, 3], SamplingParams(max_tokens=max_tokens, stop=stop))


def test_resume_extends_the_prompt_and_reduces_max_tokens():
    out = resume(_request(), [104, 105], TOK.vocab_size, TOK)
    assert isinstance(out, EngineRequest)
    assert (out.prompt_ids, out.params.max_tokens, out.num_resumed) == ([1, 2, 3, 104, 105], 8, 2)
    assert (out.request_id, out.params.stop) == ("r1", ())


def test_resume_that_reached_max_tokens_finishes_at_once_with_length_and_held_text():
    ids = TOK.encode("ok ST")
    out = resume(_request(max_tokens=5, stop=("STOP",)), ids, TOK.vocab_size, TOK)
    assert out == RequestOutput(
        request_id="r1",
        text="ST",
        token_ids=[],
        finished=True,
        finish_reason=FinishReason.LENGTH,
        prompt_tokens=3,
        completion_tokens=5,
    )


def test_resume_refuses_ids_outside_the_vocabulary():
    with pytest.raises(ValueError) as err:
        resume(_request(), [5, 512], TOK.vocab_size, TOK)
    assert str(err.value) == (
        "resume_output_ids holds token id 512, outside the model's vocabulary (0..511)"
    )
    with pytest.raises(ValueError) as err:
        resume(_request(max_tokens=0), [5], TOK.vocab_size, TOK)
    assert str(err.value) == "max_tokens must be at least 1, got 0"
