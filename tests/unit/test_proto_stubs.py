"""The committed stubs in libs/strata/v1/ are exactly what `make proto` generates now."""

from strata.rpc import codegen


def test_generated_stubs_are_fresh(tmp_path):
    fresh = {p.name: p.read_text() for p in codegen.generate(tmp_path)}
    committed = {p.name: p.read_text() for p in codegen.OUT_DIR.iterdir() if p.is_file()}
    stale = sorted(name for name in fresh if committed.get(name) != fresh[name])
    extra = sorted(set(committed) - set(fresh))
    assert not stale, f"stubs out of date with proto/ (run `make proto`): {stale}"
    assert not extra, f"stubs without a .proto file (delete them or run `make proto`): {extra}"


def test_every_service_contract_has_a_stub():
    names = {p.stem for p in codegen.proto_files()}
    assert names == {
        "common",
        "gateway",
        "scheduler",
        "node",
        "worker",
        "kvstore",
        "placement",
        "metrics",
        "admin",
        "mux",
    }
