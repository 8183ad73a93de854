"""Azure trace length reader: exact rows, limits, and errors that name file and line."""

import pytest

from strata.eval.trace_lengths import RequestLengths, read_azure_lengths

CSV = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:51.2224670,879,55\n"
)


def _write(tmp_path, text):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_reads_every_row(tmp_path):
    assert read_azure_lengths(_write(tmp_path, CSV)) == [
        RequestLengths(374, 44),
        RequestLengths(396, 109),
        RequestLengths(879, 55),
    ]


def test_limit(tmp_path):
    path = _write(tmp_path, CSV)
    assert read_azure_lengths(path, limit=2) == [RequestLengths(374, 44), RequestLengths(396, 109)]
    assert read_azure_lengths(path, limit=0) == []


def test_missing_column_is_named(tmp_path):
    path = _write(tmp_path, "TIMESTAMP,ContextTokens\nx,1\n")
    with pytest.raises(ValueError, match="the header lacks GeneratedTokens"):
        read_azure_lengths(path)


def test_bad_value_names_the_line(tmp_path):
    path = _write(tmp_path, CSV + "2023-11-16 18:15:52,12,abc\n")
    with pytest.raises(ValueError, match=r"line 5: GeneratedTokens must be an integer, got 'abc'"):
        read_azure_lengths(path)


def test_negative_value_is_rejected(tmp_path):
    path = _write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\nx,-3,4\n")
    with pytest.raises(ValueError, match="line 2: ContextTokens must be non-negative, got -3"):
        read_azure_lengths(path)
