"""`strata profile`: writes a loadable profile of the named model, says what it fitted, and
refuses bad arguments with exit 2."""

import torch

from strata.client import cli
from strata.sim.profile import load_profile


def test_profile_writes_a_loadable_profile(tmp_path, capsys):
    out = tmp_path / "p" / "tiny.json"
    assert cli.main(["profile", "--model", "dummy-tiny", "--quick", "--max-batched-tokens",
                     "128", "--out", str(out)]) == 0
    assert torch.get_num_threads() == 1
    profile = load_profile(out)
    assert (profile.model, profile.threads, profile.engine["max_batched_tokens"]) == \
        ("dummy-tiny", 1, 128)
    # the quick grid without the 512-token prefills a 128-token step budget cannot run
    assert sorted({m.tokens for m in profile.measurements if m.kind == "prefill"}) == [16, 128]
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].startswith("fit: ") and "error mean" in lines[-2]
    assert lines[-1].startswith(f"profile of dummy-tiny (float32, 1 threads) written to {out}")


def test_profile_refuses_bad_arguments(tmp_path, capsys):
    assert cli.main(["profile", "--model", "no-such-model", "--out",
                     str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert cli.main(["profile", "--threads", "0", "--out", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err == "error: --threads must be at least 1, got 0\n"
    assert not (tmp_path / "x.json").exists()
