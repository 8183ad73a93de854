"""The replay's OpenAI-HTTP target (strata.client.openai_target): which error answers are the
server shedding the request."""

from __future__ import annotations

import json

from strata.client.openai_target import _failure, shed


def test_the_openai_target_counts_a_shed_request_as_refused():
    assert shed(429, None) and shed(429, "2")
    assert shed(503, "2")  # no replica can meet the class's target now: retry later
    assert not shed(503, None)  # unavailable: a failure, not a refusal
    assert not shed(400, "2") and not shed(500, None)


def test_an_infeasible_refusal_is_recorded_as_the_grpc_target_records_it():
    def body(code: str | None) -> str:
        return json.dumps({"error": {"message": "m", "type": "invalid_request_error",
                                     "param": None, "code": code}})  # fmt: skip

    assert _failure(400, body("sla_infeasible"), False) == ("FAILED_PRECONDITION", "m")
    assert _failure(400, body(None), False) == ("HTTP_400", "m")
    assert _failure(429, body(None), True) == ("RESOURCE_EXHAUSTED", "m")
    page = "<html>bad gateway</html>"
    assert _failure(502, page, False) == ("HTTP_502", page)
