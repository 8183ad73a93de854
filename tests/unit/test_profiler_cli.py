"""`strata profile`: writes a loadable profile of the named model, says what it fitted, and
refuses bad arguments with exit 2."""

import torch

from strata.client import cli
from strata.core.profile import load_profile


def test_profile_writes_a_loadable_profile(tmp_path, capsys):
    out = tmp_path / "p" / "tiny.json"
    assert (
        cli.main(
            [
                "profile",
                "--model",
                "dummy-tiny",
                "--quick",
                "--max-batched-tokens",
                "128",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert torch.get_num_threads() == 1
    profile = load_profile(out)
    assert (profile.model, profile.threads, profile.engine["max_batched_tokens"]) == (
        "dummy-tiny",
        1,
        128,
    )
    # the quick grid without the 512-token prefills a 128-token step budget cannot run
    assert sorted({m.tokens for m in profile.measurements if m.kind == "prefill"}) == [16, 128]
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("fit: ") and "error mean" in lines[-2]
    assert lines[-1].startswith(f"profile of dummy-tiny (float32, 1 threads) written to {out}")


def test_profile_refuses_bad_arguments(tmp_path, capsys):
    assert cli.main(["profile", "--model", "no-such-model", "--out", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert cli.main(["profile", "--threads", "0", "--out", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err == "error: --threads must be at least 1, got 0\n"
    assert not (tmp_path / "x.json").exists()


def test_profile_with_co_located_engines_keeps_their_points(tmp_path, capsys):
    # python -m strata.client.profile_cli: the same command without the rest of the CLI
    from strata.client import profile_cli

    out = tmp_path / "tiny.json"
    assert (
        profile_cli.main(
            [
                "--model",
                "dummy-tiny",
                "--quick",
                "--max-batched-tokens",
                "128",
                "--colocate",
                "2",
                "--colocate-batches",
                "2",
                "--colocate-seconds",
                "0.3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    profile = load_profile(out)
    [point] = profile.colocation
    assert (point.kind, point.engines, point.batch, point.context) == ("decode", 2, 2, 512)
    assert point.alone_s > 0 and point.together_s > 0
    assert point.alone_steps > 0 and point.together_steps > 0
    assert 0.0 <= profile.colocation_share <= 1.0
    assert profile.prefill_colocation_share == 1.0  # not measured: strict turns
    printed = capsys.readouterr().out
    assert "co-location decode batch 2 at 512 tokens: alone " in printed
    assert f"co-location share: {profile.colocation_share:.3f} of a neighbour's step" in printed


def test_profile_refuses_a_co_location_of_one_engine(tmp_path, capsys):
    from strata.client import profile_cli

    assert (
        profile_cli.main(
            ["--model", "dummy-tiny", "--colocate", "1", "--out", str(tmp_path / "x.json")]
        )
        == 2
    )
    assert capsys.readouterr().err == "error: co-location needs at least 2 engines, got 1\n"
    assert (
        profile_cli.main(
            [
                "--model",
                "dummy-tiny",
                "--colocate",
                "2",
                "--colocate-batches",
                "0",
                "--out",
                str(tmp_path / "x.json"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err.startswith("error: batches must be positive sizes")
    assert not (tmp_path / "x.json").exists()
