"""Engine cost profiles: the fitted line, the prefill residual grid, the JSON format."""

import json

import pytest

from strata.core.profile import (
    EngineProfile,
    Measurement,
    RequestOverheads,
    StepCosts,
    StepShape,
    fit,
    load_profile,
    prefill_keys,
)

TRUE = StepCosts(
    step_s=1e-3,
    token_s=2e-5,
    sample_s=5e-5,
    prefill_attend_s=1e-8,
    decode_attend_s=3e-8,
    group_s=4e-4,
)


def _measured(kind, tokens, sampled, pkeys, dkeys, batch=0, context=0, extra=0.0):
    m = Measurement(kind, tokens, sampled, pkeys, dkeys, 0.0, batch=batch, context=context)
    m.seconds = TRUE.line_seconds(m.shape) + extra
    return m


def _grid(extra=lambda n, c: 0.0):
    points = []
    for n in (16, 64, 256):
        for c in (0, 512):
            points.append(
                _measured(
                    "prefill",
                    n,
                    0,
                    prefill_keys(1, n, c + n, 16),
                    0.0,
                    context=c,
                    extra=extra(n, c),
                )
            )
    for b in (1, 8, 32):
        for c in (16, 512):
            points.append(_measured("decode", b, b, 0.0, b * (c + 3.0), batch=b, context=c + 3))
    points.append(
        _measured("mixed", 8 + 64, 8, prefill_keys(1, 64, 64, 16), 8 * 257.0, batch=8, context=256)
    )
    return points


def _profile(costs, error, **more) -> EngineProfile:
    """A profile of model m on one CPU thread with the grid's measurements."""
    fields = dict(machine={}, engine={"block_size": 16}, kv_bytes_per_token=1024)
    fields.update(more)
    return EngineProfile(
        model="m",
        dtype="float32",
        device="cpu",
        threads=1,
        max_context=2048,
        costs=costs,
        fit_error=error,
        measurements=_grid(),
        **fields,
    )


def test_prefill_keys_are_the_padded_rectangle():
    # 3 chunks, the longest 10 tokens, the widest context 33 tokens = 3 blocks of 16
    assert prefill_keys(3, 10, 33, 16) == 3 * 10 * 48
    assert prefill_keys(1, 16, 16, 16) == 256


def test_fit_recovers_an_exact_line():
    costs, error = fit(_grid())
    for name in ("step_s", "token_s", "sample_s", "prefill_attend_s", "decode_attend_s", "group_s"):
        assert getattr(costs, name) == pytest.approx(getattr(TRUE, name), rel=1e-6), name
    assert error.points == 13 and error.max_abs_rel < 1e-9


def test_prefill_residuals_are_exact_at_the_grid_and_bilinear_between():
    # A cache cliff the line cannot follow: chunks of 256 cost 2 ms more at context 512.
    costs, error = fit(_grid(lambda n, c: 2e-3 if (n, c) == (256, 512) else 0.0))
    assert error.max_abs_rel > 0.01  # the line alone misses the cliff
    assert costs.grid_tokens == (16, 64, 256) and costs.grid_contexts == (0, 512)
    cliff = StepShape(256, 0, prefill_keys(1, 256, 768, 16), 0.0, 1, 256, 512)
    assert costs.seconds(cliff) == pytest.approx(TRUE.line_seconds(cliff) + 2e-3, rel=1e-6)
    # halfway along the context axis, at the grid's largest chunk: half of the residual
    mid = StepShape(256, 0, prefill_keys(1, 256, 512, 16), 0.0, 1, 256, 256)
    grid_part = costs.seconds(mid) - costs.line_seconds(mid)
    corner = costs.grid_residual_s[2]
    assert grid_part == pytest.approx((corner[0] + corner[1]) / 2)
    # beyond the grid the edge value holds
    far = StepShape(256, 0, prefill_keys(1, 256, 4352, 16), 0.0, 1, 256, 4096)
    assert costs.seconds(far) - costs.line_seconds(far) == pytest.approx(corner[1])


def test_decode_residuals_by_batch_are_exact_on_average_and_linear_between():
    # Batch 8 costs 1 ms more than the line at both contexts: a concave batch curve.
    points = [m for m in _grid() if m.kind != "decode"]
    for b in (1, 8, 32):
        for c in (16, 512):
            points.append(
                _measured(
                    "decode",
                    b,
                    b,
                    0.0,
                    b * (c + 3.0),
                    batch=b,
                    context=c + 3,
                    extra=1e-3 if b == 8 else 0.0,
                )
            )
    costs, _ = fit(points)
    assert costs.decode_batches == (1, 8, 32)
    for b in (1, 8, 32):
        mine = [m for m in points if m.kind == "decode" and m.batch == b]
        errors = [costs.seconds(m.shape) - m.seconds for m in mine]
        assert sum(errors) == pytest.approx(0.0, abs=1e-12)  # over the batch's contexts
        for m in mine:
            assert costs.decode_seconds(b, m.decode_keys) == pytest.approx(
                costs.seconds(m.shape), rel=1e-12
            )
    r = costs.decode_residual_s
    assert costs.decode_residual(20) == pytest.approx((r[1] + r[2]) / 2)
    assert costs.decode_residual(64) == r[2] and costs.decode_residual(1) == r[0]
    # prefill and mixed steps never take a decode residual
    mixed = next(m for m in points if m.kind == "mixed")
    assert costs.seconds(mixed.shape) == pytest.approx(
        costs.line_seconds(mixed.shape) + costs.grid_residual_s[1][0]
    )


def test_fit_needs_enough_points_and_positive_times():
    with pytest.raises(ValueError, match="at least 6 measurements"):
        fit(_grid()[:3])
    bad = _grid()
    bad[0].seconds = 0.0
    with pytest.raises(ValueError, match="positive time"):
        fit(bad)


def test_profile_round_trips_through_json(tmp_path):
    costs, error = fit(_grid(lambda n, c: 1e-3 if n == 64 else 0.0))
    profile = _profile(
        costs,
        error,
        machine={"cpu": "x"},
        overheads=RequestOverheads(1e-4, 2e-3, 3e-3),
        created_unix_s=5.0,
        notes=["n"],
    )
    path = tmp_path / "p.json"
    profile.save(path)
    assert json.loads(path.read_text())["format"] == "strata-engine-profile/2"
    assert load_profile(path) == profile


def test_load_profile_names_what_is_wrong(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not an engine profile of format strata-engine-profile/2"):
        load_profile(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_profile(path)
    path.write_text('{"format": "strata-engine-profile/1"}')
    with pytest.raises(ValueError, match="malformed engine profile"):
        load_profile(path)


def test_a_format_1_profile_is_refitted_from_its_measurements(tmp_path):
    """Format 1 counted the decodes' group in the group feature: its line means another thing,
    so loading refits it from the raw measurements."""
    costs, error = fit(_grid())
    profile = _profile(costs, error)
    path = tmp_path / "p.json"
    profile.save(path)
    doc = json.loads(path.read_text())
    doc["format"] = "strata-engine-profile/1"
    doc["costs"]["group_s"] = 1.0  # what format 1's fit might say; not this format's meaning
    path.write_text(json.dumps(doc))
    loaded = load_profile(path)
    assert loaded.costs == costs and loaded.fit_error == error
