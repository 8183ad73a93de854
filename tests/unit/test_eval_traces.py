"""Trace readers on the fixture files: exact rows, BurstGPT failures, Mooncake shared prefixes."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata.eval.traces import (
    TraceRequest,
    read_azure,
    read_burstgpt,
    read_mooncake,
    read_trace,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
AZURE = FIXTURES / "azure_conv.csv"
BURSTGPT = FIXTURES / "burstgpt.csv"
MOONCAKE = FIXTURES / "mooncake.jsonl"


def test_azure_rows_relative_to_the_first_at_100ns_resolution():
    trace = read_azure(AZURE)
    assert (trace.format, trace.path, trace.skipped_failures) == ("azure", str(AZURE), 0)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in trace.requests] == [
        (0.0, 374, 44),
        (4.314579, 396, 109),
        (4.541877, 879, 55),
        (4.710427, 91, 16),
        (6.31941, 1200, 300),
        (6.3194101, 64, 8),
        (8.81941, 2048, 12),
        (13.3194099, 17, 1),
        (13.4428667, 512, 128),
        (15.31941, 4808, 10),
        (16.81941, 100, 0),
        (19.0, 333, 77),
    ]
    assert {(r.hash_ids, r.tenant, r.model, r.sla_class) for r in trace.requests} == {
        ((), "", "", "")
    }


def test_azure_limit_and_dispatch_by_format_name():
    assert read_trace(AZURE, "azure", limit=2).requests == [
        TraceRequest(0.0, 374, 44),
        TraceRequest(4.314579, 396, 109),
    ]
    with pytest.raises(
        ValueError, match="unknown trace format 'sharegpt'; known: azure, burstgpt, mooncake"
    ):
        read_trace(AZURE, "sharegpt")


def test_azure_errors_name_the_file_and_line(tmp_path):
    bad_time = tmp_path / "t.csv"
    bad_time.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,1,2\n2023-11-16T18:15:47Z,3,4\n"
    )
    with pytest.raises(
        ValueError,
        match=rf"^{bad_time}, line 3: TIMESTAMP must look like "
        r"2023-11-16 18:15:46.6805900, got "
        r"'2023-11-16T18:15:47Z'$",
    ):
        read_azure(bad_time)
    bad_count = tmp_path / "c.csv"
    bad_count.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,-5,2\n"
    )
    with pytest.raises(
        ValueError,
        match=rf"^{bad_count}, line 2: ContextTokens must be "
        r"non-negative, got -5$",
    ):
        read_azure(bad_count)
    no_time = tmp_path / "h.csv"
    no_time.write_text("ContextTokens,GeneratedTokens\n1,2\n")
    with pytest.raises(ValueError, match="the header lacks TIMESTAMP"):
        read_azure(no_time)


def test_burstgpt_skips_and_counts_failed_rows():
    trace = read_burstgpt(BURSTGPT)
    assert trace.skipped_failures == 3
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.model) for r in trace.requests] == [
        (0.0, 472, 18, "ChatGPT"),
        (113.0, 417, 276, "GPT-4"),
        (145.0, 34, 62, "ChatGPT"),
        (145.0, 2003, 411, "GPT-4"),
        (196.5, 788, 145, "ChatGPT"),
        (328.0, 256, 64, "ChatGPT"),
        (395.0, 1500, 900, "ChatGPT"),
    ]


def test_burstgpt_header_with_spaces_and_a_bad_timestamp(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text(
        "Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type\n"
        "10, GPT-4, 5, 6, 11, API log\n"
        "later, GPT-4, 5, 6, 11, API log\n"
    )
    with pytest.raises(
        ValueError,
        match=rf"^{path}, line 3: Timestamp must be a number, "
        r"got 'later'$",
    ):
        read_burstgpt(path)
    assert read_burstgpt(path, limit=1).requests == [TraceRequest(0.0, 5, 6, model="GPT-4")]


def test_mooncake_rows_in_seconds_with_shared_prefix_ids():
    trace = read_mooncake(MOONCAKE)
    requests = trace.requests
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == [
        (0.0, 1200, 6),
        (0.0, 700, 40),
        (0.25, 1500, 12),
        (1.0, 300, 300),
        (1.75, 1024, 3),
        (2.5, 2000, 90),
        (4.02, 512, 1),
        (5.0, 1536, 64),
    ]
    assert [r.hash_ids for r in requests] == [
        (0, 1, 2),
        (3, 4),
        (0, 1, 5),
        (6,),
        (3, 4),
        (0, 1, 2, 7),
        (8,),
        (0, 9, 10),
    ]


def test_mooncake_errors_name_the_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [0]}\n'
        '{"timestamp": 3, "input_length": 5.5, "output_length": 1}\n'
    )
    with pytest.raises(
        ValueError,
        match=rf"^{path}, line 2: input_length must be an integer, "
        r"got 5.5$",
    ):
        read_mooncake(path)
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": ["a"]}\n')
    with pytest.raises(
        ValueError,
        match=rf"^{path}, line 1: hash_ids must be a list of "
        r"integers",
    ):
        read_mooncake(path)
    path.write_text('{"timestamp": 0, "output_length": 1}\n')
    with pytest.raises(ValueError, match=rf"^{path}, line 1: missing input_length"):
        read_mooncake(path)
    path.write_text('\n{"timestamp": 0,\n')
    with pytest.raises(ValueError, match=rf"^{path}, line 2: not a JSON object"):
        read_mooncake(path)


def test_unsorted_rows_are_ordered_by_time_keeping_ties_in_file_order(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 900, "input_length": 1, "output_length": 1}\n'
        '{"timestamp": 400, "input_length": 2, "output_length": 1}\n'
        '{"timestamp": 900, "input_length": 3, "output_length": 1}\n'
    )
    assert [(r.arrival_s, r.prompt_tokens) for r in read_mooncake(path).requests] == [
        (0.0, 2),
        (0.5, 1),
        (0.5, 3),
    ]
