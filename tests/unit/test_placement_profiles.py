"""Engine profiles as placement engine costs: lookups by model and device kind, chunked
prefill, the decode line, and the errors that name the file."""

import json
import shutil

import pytest

from services.placement.config import BUNDLED_PROFILES
from strata.core.profile import StepShape, load_profile, prefill_keys
from strata.policy.placement.profiles import ProfileCosts, device_kind, load_profiles


def test_bundled_profiles_are_found_by_model_and_device_kind():
    table = load_profiles(BUNDLED_PROFILES)
    assert table("dummy-tiny", "cpu") is not None
    assert table("dummy-tiny", "cuda:0") is None and table("mystery", "cpu") is None
    assert "dummy-tiny on cpu" in table.describe()
    assert (device_kind("cuda:1"), device_kind("cpu"), device_kind("")) == ("cuda", "cpu", "cpu")


def test_profile_costs_follow_the_fitted_step_line():
    profile = load_profile(f"{BUNDLED_PROFILES}/dummy-tiny-cpu.json")
    costs = ProfileCosts(profile)
    line = profile.costs
    assert costs.max_batch == profile.engine["max_seqs"]
    assert costs.decode_step_s(8, 99) == line.decode_seconds(8, 8 * 100)
    one_chunk = line.seconds(
        StepShape(
            tokens=100,
            sampled=1,
            prefill_keys=prefill_keys(1, 100, 100, 16),
            prefill_longest=100,
            prefill_context=0,
        )
    )
    assert costs.prefill_s(100) == one_chunk
    chunk = profile.engine["max_batched_tokens"]
    first = line.seconds(
        StepShape(
            tokens=chunk,
            sampled=0,
            prefill_keys=prefill_keys(1, chunk, chunk, 16),
            prefill_longest=chunk,
            prefill_context=0,
        )
    )
    rest = line.seconds(
        StepShape(
            tokens=10,
            sampled=1,
            prefill_keys=prefill_keys(1, 10, chunk + 10, 16),
            prefill_longest=10,
            prefill_context=chunk,
        )
    )
    assert costs.prefill_s(chunk + 10) == first + rest


def test_profile_errors_name_the_files(tmp_path):
    assert load_profiles("none").describe() == "none"
    with pytest.raises(ValueError, match=r"no engine profile file or folder at '/nope'"):
        load_profiles("/nope")
    shutil.copy(f"{BUNDLED_PROFILES}/dummy-tiny-cpu.json", tmp_path / "a.json")
    shutil.copy(f"{BUNDLED_PROFILES}/dummy-tiny-cpu.json", tmp_path / "b.json")
    with pytest.raises(ValueError, match=r"b.json and .*a.json both profile dummy-tiny on cpu"):
        load_profiles(str(tmp_path))
    (tmp_path / "b.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not an engine profile of format"):
        load_profiles(str(tmp_path))
