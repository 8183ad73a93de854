"""The replay's OpenAI-HTTP target (strata.client.openai_target): which error answers are the
server shedding the request."""

from __future__ import annotations

from strata.client.openai_target import shed


def test_the_openai_target_counts_a_shed_request_as_refused():
    assert shed(429, None) and shed(429, "2")
    assert shed(503, "2")  # no replica can meet the class's target now: retry later
    assert not shed(503, None)  # unavailable: a failure, not a refusal
    assert not shed(400, "2") and not shed(500, None)
