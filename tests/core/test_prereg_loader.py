"""core.prereg: a pre-registration is read, validated and hashed; malformed files name the field."""

from __future__ import annotations

import hashlib

import pytest

from agentmill.core.prereg import PreregError, load_prereg, parse_prereg

GOOD = b'version: "1"\nthresholds:\n  a.max: 0.05\n  b.band: [40, 60]\n  c.flag: true\n'


def test_load_hashes_the_exact_bytes(tmp_path) -> None:
    p = tmp_path / "prereg.yaml"
    p.write_bytes(GOOD)
    pr = load_prereg(p)
    assert pr.sha256 == hashlib.sha256(GOOD).hexdigest()
    assert pr.threshold("a.max") == 0.05 and pr.threshold("b.band") == [40, 60] and pr.version == "1"
    with pytest.raises(KeyError, match="no threshold"):
        pr.threshold("zzz")
    p.write_bytes(GOOD.replace(b"0.05", b"0.06"))
    assert load_prereg(p).sha256 != pr.sha256


@pytest.mark.parametrize("text, match", [
    (b"- 1\n", "mapping"), (b"thresholds: {a: 1}\n", "version"), (b'version: "1"\n', "thresholds"),
    (b'version: "1"\nthresholds: {a: [3, 1]}\n', "lo > hi"), (b'version: "1"\nthresholds: {a: "x"}\n', "threshold"),
    (b'version: "1"\nthresholds: {a: .nan}\n', "NaN"), (b"version: [\n", "invalid YAML")])
def test_malformed_files_are_refused(text: bytes, match: str) -> None:
    with pytest.raises(PreregError, match=match):
        parse_prereg(text, path="x.yaml")


def test_the_forensics_prereg_loads() -> None:
    from importlib import resources

    pr = load_prereg(str(resources.files("agentmill.methods.forensics").joinpath("prereg.yaml")))
    assert pr.threshold("FO-5.budget_max") == 600
