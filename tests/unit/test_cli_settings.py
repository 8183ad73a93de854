"""Where the SDK and CLI get addresses and keys, and the requests they build from arguments."""

from __future__ import annotations

import os

import pytest

from strata.client import settings
from strata.client.cli import build_parser
from strata.client.sdk import build_request
from strata.core import defaults
from strata.v1 import common_pb2


def test_addresses_prefer_argument_then_environment_then_shared_default() -> None:
    # STRATA_METRICS_ADDR is the services' (the internal collector): clients read reports
    # through the gateway unless told otherwise.
    env = {"STRATA_GATEWAY_ADDR": "gw:1", "STRATA_METRICS_ADDR": "mx:2"}
    assert settings.gateway_address("arg:9", env) == "arg:9"
    assert settings.gateway_address(None, env) == "gw:1"
    assert settings.gateway_address(None, {}) == defaults.GATEWAY_ADDR
    assert settings.metrics_address("arg:8", env) == "arg:8"
    assert settings.metrics_address(None, env) == "gw:1"
    assert settings.metrics_address(None, {}) == defaults.GATEWAY_ADDR


def test_api_key_prefers_argument_then_environment_then_demo_key_file(tmp_path) -> None:
    (tmp_path / defaults.DEMO_KEY_FILE).write_text("demo-key-123\n")
    env = {"STRATA_DATA_DIR": str(tmp_path)}
    assert settings.api_key("explicit", {**env, "STRATA_API_KEY": "from-env"}) == "explicit"
    assert settings.api_key(None, {**env, "STRATA_API_KEY": "from-env"}) == "from-env"
    assert settings.api_key(None, env) == "demo-key-123"


def test_demo_key_file_defaults_to_dot_strata_in_the_working_directory() -> None:
    assert settings.demo_key_path({}) == os.path.join(os.getcwd(), ".strata", "demo_api_key")


def test_missing_key_names_both_ways_to_provide_one(tmp_path) -> None:
    with pytest.raises(settings.MissingApiKey) as err:
        settings.api_key(None, {"STRATA_DATA_DIR": str(tmp_path)})
    assert str(err.value) == (
        "no API key: set STRATA_API_KEY, or start the stack (make run) so that the metrics "
        f"service writes the demo key to {tmp_path / 'demo_api_key'}"
    )


def test_request_carries_every_sampling_argument() -> None:
    request = build_request(
        "m",
        prompt="hi",
        max_tokens=16,
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        seed=7,
        stop=["\n\n", "END"],
        prefix_public=True,
    )
    assert request.model == "m"
    assert request.prompt == "hi"
    assert list(request.messages) == []
    assert request.max_tokens == 16
    assert (
        request.sampling.temperature,
        round(request.sampling.top_p, 6),
        request.sampling.top_k,
        request.sampling.seed,
    ) == (0.5, 0.9, 40, 7)
    assert list(request.stop) == ["\n\n", "END"]
    assert request.prefix_public is True


def test_seed_is_absent_unless_given_so_sampling_stays_random() -> None:
    assert not build_request("m", prompt="hi").sampling.HasField("seed")
    assert build_request("m", prompt="hi", seed=0).sampling.HasField("seed")


def test_messages_accept_tuples_dicts_and_protobuf() -> None:
    request = build_request(
        "m",
        messages=[
            ("system", "be brief"),
            {"role": "user", "content": "hi"},
            common_pb2.ChatMessage(role="assistant", content="hello"),
        ],
    )
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "be brief"),
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    assert request.prompt == ""


@pytest.mark.parametrize("kwargs", [{}, {"prompt": "a", "messages": [("user", "b")]}])
def test_exactly_one_of_prompt_and_messages(kwargs) -> None:
    with pytest.raises(ValueError, match="exactly one of prompt"):
        build_request("m", **kwargs)


def test_generate_arguments_parse_with_repeatable_stop_and_defaults() -> None:
    args = build_parser().parse_args(
        ["generate", "--chat", "--max-tokens", "8", "--stop", "a", "--stop", "b", "hello"]
    )
    assert (
        args.model,
        args.chat,
        args.max_tokens,
        args.temperature,
        args.seed,
        args.stop,
        args.prompt,
    ) == (defaults.DEFAULT_MODEL, True, 8, 0.0, None, ["a", "b"], "hello")
    assert build_parser().parse_args(["report"]).tenant == ""
    assert build_parser().parse_args(["--metrics", "m:1", "trace", "ab"]).metrics == "m:1"


def test_every_engine_sampling_option_reaches_the_request():
    s = build_request(
        "m",
        prompt="hi",
        min_p=0.05,
        repetition_penalty=1.1,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        logprobs=3,
        stop_token_ids=[7, 9],
        ignore_eos=True,
    ).sampling
    assert (
        round(s.min_p, 6),
        round(s.repetition_penalty, 6),
        s.frequency_penalty,
        s.presence_penalty,
        s.logprobs,
        list(s.stop_token_ids),
        s.ignore_eos,
    ) == (0.05, 1.1, 0.5, -0.5, 3, [7, 9], True)
