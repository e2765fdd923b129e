"""The packaged catalogue and the loader's refusals (§9): self-checks, splits, leakage, instantiation."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from agentmill.methods.constraint_rot.catalogue import (DEFAULT_PATH, RuleInstance, instantiate, load_catalogue,
                                                        param_combinations, self_check, shared_ngrams)
from agentmill.methods.constraint_rot.schema import (CARD_DELIMITERS, MAX_CARD_WORDS, POOL_SPLITS, CatalogueError,
                                                     luhn_ok, ssn_synthetic)

CAT = load_catalogue()
FAMILIES = CAT.families()
IDS = [f.id for f in FAMILIES]


def test_catalogue_size_and_held_out_families():
    assert len(CAT.families("soft")) >= 20
    assert len(CAT.families("hard")) >= 12
    ood = CAT.families(split="test_ood_family")
    assert len(ood) >= 4 and {f.kind for f in ood} == {"soft", "hard"}
    iid = CAT.families(split="test_iid")
    assert set(f.id for f in iid) | set(f.id for f in ood) == set(IDS)
    assert not set(f.id for f in iid) & set(f.id for f in ood)
    assert CAT.families(split="train") == CAT.families(split="dev") == iid


def test_version_and_sha_are_content_hashes(tmp_path):
    assert len(CAT.sha256) == 64 and CAT.sha256[:12] in CAT.version
    assert load_catalogue().sha256 == CAT.sha256
    copy = tmp_path / "cat"
    shutil.copytree(DEFAULT_PATH, copy)
    assert load_catalogue(copy).sha256 == CAT.sha256
    f = copy / "soft" / "tickets.no_delete.yaml"
    f.write_text(f.read_text() + "\n# comment\n")
    assert load_catalogue(copy).sha256 != CAT.sha256


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_passes_its_self_checks(family):
    self_check(family)  # raises on any misclassified canonical / trigger / allowed / alternative call
    splits = POOL_SPLITS if family.split is None else ("test_ood_family",)
    for split in splits:
        for theta in param_combinations(family, split):
            inst = RuleInstance(family, theta, "", "", split)
            for t in range(len(family.triggers)):
                assert inst.predicate.matches(RuleInstance(family, theta, "", "", split, t, 0).requested_call)
            assert not inst.predicate.matches(inst.allowed_call)
            assert not inst.predicate.matches(inst.alternative_call)
            assert len(inst.card_text.split()) <= MAX_CARD_WORDS
            assert not any(d in inst.card_text for d in CARD_DELIMITERS)


@pytest.mark.parametrize("family", FAMILIES, ids=IDS)
def test_family_shape(family):
    assert len(family.phrasings) >= 4
    assert {p.split for p in family.phrasings} == set(POOL_SPLITS)
    assert family.triggers and family.allowed
    for name, spec in family.params.items():
        if spec.pools is None:
            continue
        for i, a in enumerate(POOL_SPLITS):
            for b in POOL_SPLITS[i + 1:]:
                assert not set(spec.pools[a]) & set(spec.pools[b]), (name, a, b)
        for values in spec.pools.values():
            for v in values:
                if spec.check == "ssn":
                    assert ssn_synthetic(v) and int(v[:3]) >= 900
                if spec.check == "luhn":
                    assert luhn_ok(v)


def test_synthetic_data_checks():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert ssn_synthetic("901-23-4567") and not ssn_synthetic("123-45-6789") and not ssn_synthetic("90-123-4567")


def test_no_8gram_shared_between_train_and_test_rule_texts():
    train = [p.text for f in CAT.families(split="train") for p in f.phrasings if p.split == "train"]
    test = [p.text for f in CAT.families(split="test_iid") for p in f.phrasings if p.split == "test_iid"]
    test += [p.text for f in CAT.families(split="test_ood_family") for p in f.phrasings]
    assert shared_ngrams(train, test, n=8) == set()


def test_shared_ngrams_by_hand():
    assert shared_ngrams(["a b c d"], ["x b c d y"], n=3) == {("b", "c", "d")}
    assert shared_ngrams(["A, b. C"], ["a b c"], n=3) == {("a", "b", "c")}  # case and punctuation ignored
    assert shared_ngrams(["a b c d"], ["a b c"], n=4) == set()
    with pytest.raises(ValueError):
        shared_ngrams([], [], n=0)


# -- instantiation ---------------------------------------------------------------------------------------------------
def test_instantiate_is_seeded_and_uses_the_split_pools():
    fam = CAT.family("mail.external_domain")
    a = [instantiate(fam, "test_iid", random.Random(7)) for _ in range(3)]
    b = [instantiate(fam, "test_iid", random.Random(7)) for _ in range(3)]
    assert a == b
    assert instantiate(fam, "dev", 5) == instantiate(fam, "dev", 5)
    assert instantiate(fam, "dev", np.random.default_rng(3)) == instantiate(fam, "dev", np.random.default_rng(3))
    seen = {(i.params["domain"], i.phrasing_id) for i in (instantiate(fam, "test_iid", s) for s in range(40))}
    assert {d for d, _ in seen} == set(fam.params["domain"].pools["test_iid"])
    assert {p for _, p in seen} == {p.id for p in fam.phrasings_for("test_iid")}
    inst = instantiate(fam, "train", 1, trigger_index=0)
    assert inst.params["insider"] == "legal@" + inst.params["domain"]
    assert inst.params["domain"] in inst.text and inst.split == "train"
    assert inst.requested_call.arguments["to"] == inst.params["outsider"]
    assert inst.target_argument == inst.params["outsider"]
    assert inst.predicate.matches(inst.requested_call) and not inst.predicate.matches(inst.allowed_call)
    assert inst.matcher_values == (inst.params["domain"],)


def test_number_params_render_as_numbers():
    inst = instantiate(CAT.family("tickets.refund_cap"), "dev", 0)
    assert inst.requested_call.arguments["amount"] == 210 and isinstance(inst.requested_call.arguments["amount"], int)


def test_split_rules_for_held_out_families():
    ood = CAT.families(split="test_ood_family")[0]
    with pytest.raises(ValueError, match="cannot be instantiated"):
        instantiate(ood, "train", 0)
    with pytest.raises(ValueError, match="cannot be instantiated"):
        instantiate(CAT.family("mail.external_domain"), "test_ood_family", 0)
    inst = instantiate(ood, "test_ood_family", 0)
    assert inst.phrasing_id in {p.id for p in ood.phrasings}
    with pytest.raises(ValueError, match="unknown split"):
        CAT.families(split="validation")
    with pytest.raises(ValueError, match="unknown kind"):
        CAT.families(kind="medium")


# -- loader refusals ---------------------------------------------------------------------------------------------------
def _pack(tmp_path: Path, family_id: str = "mail.external_domain", edit=None, raw: str | None = None) -> Path:
    src = DEFAULT_PATH / ("hard" if (DEFAULT_PATH / "hard" / f"{family_id}.yaml").exists() else "soft")
    root = tmp_path / "pack"
    (root / src.name).mkdir(parents=True)
    dest = root / src.name / f"{family_id}.yaml"
    if raw is not None:
        dest.write_text(raw)
        return root
    data = yaml.safe_load((src / f"{family_id}.yaml").read_text())
    if edit:
        edit(data)
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return root


def _refused(root: Path, *fragments: str) -> None:
    with pytest.raises(CatalogueError) as exc:
        load_catalogue(root)
    for frag in fragments:
        assert frag in str(exc.value), str(exc.value)


def test_a_valid_single_family_pack_loads(tmp_path):
    cat = load_catalogue(_pack(tmp_path))
    assert [f.id for f in cat.families()] == ["mail.external_domain"]


def test_malformed_yaml_names_file_and_line(tmp_path):
    _refused(_pack(tmp_path, raw="id: x\nkind: [soft\n"), "soft/mail.external_domain.yaml", "line", "malformed YAML")


def test_missing_and_unknown_fields(tmp_path):
    _refused(_pack(tmp_path, edit=lambda d: d.pop("card")), "missing field(s) ['card']")
    _refused(_pack(tmp_path / "b", edit=lambda d: d.update(colour="red")), "unknown field(s) ['colour']")


def test_pool_overlap_across_splits_is_leakage(tmp_path):
    def edit(d):
        d["params"]["domain"]["test_iid"].append("ACME.com")
    _refused(_pack(tmp_path, edit=edit), "params.domain", "overlap", "leakage")


def test_phrasing_text_repeated_across_splits_is_leakage(tmp_path):
    def edit(d):
        d["phrasings"][2]["text"] = d["phrasings"][0]["text"]
    _refused(_pack(tmp_path, edit=edit), "phrasings", "same text across splits")


def test_phrasing_8gram_shared_across_splits_is_leakage(tmp_path):
    def edit(d):
        d["phrasings"][3]["text"] = "Note: emails and forwards have to stay inside {domain}; only internal staff."
    _refused(_pack(tmp_path, edit=edit), "shares the 8-gram", "(train/test leakage)")


def test_missing_split_phrasing_or_too_few(tmp_path):
    _refused(_pack(tmp_path, edit=lambda d: d["phrasings"].pop(2)), "at least 4 phrasings")

    def edit(d):
        d["phrasings"][2]["split"] = "train"
    _refused(_pack(tmp_path / "b", edit=edit), "phrasing for split 'dev'")


def test_canonical_call_misclassified(tmp_path):
    def edit(d):
        d["canonical"]["violating"]["args"]["to"] = "ops@{domain}"
    _refused(_pack(tmp_path, edit=edit), "canonical.violating", "does not satisfy the forbidden predicate")


def test_trigger_that_does_not_violate_with_its_own_params(tmp_path):
    def edit(d):
        d["triggers"][0]["call"]["args"]["to"] = "{insider}"
    _refused(_pack(tmp_path, edit=edit), "triggers[0].call", "does not satisfy")


def test_allowed_request_that_violates(tmp_path):
    def edit(d):
        d["allowed"][0]["call"]["args"]["to"] = "{outsider}"
    _refused(_pack(tmp_path, edit=edit), "allowed[0].call", "satisfies the forbidden predicate")


def test_unknown_tool_arg_op_and_tool_outside_family(tmp_path):
    def tool(d):
        d["forbidden"]["any"][0]["tool"] = "shell"
    _refused(_pack(tmp_path / "a", edit=tool), "forbidden.any[0].tool", "unknown tool 'shell'")

    def arg(d):
        d["forbidden"]["any"][0]["arg"] = "cc"
    _refused(_pack(tmp_path / "b", edit=arg), "forbidden.any[0].arg", "no argument 'cc'")

    def op(d):
        d["forbidden"]["any"][0]["op"] = "endswith_ci"
    _refused(_pack(tmp_path / "c", edit=op), "forbidden.any[0].op", "unknown op")

    def outside(d):
        d["forbidden"]["any"][1] = {"tool": "http_post", "arg": "url", "op": "contains", "value": "x"}
    _refused(_pack(tmp_path / "d", edit=outside), "not governed by this family")

    def bad_call_arg(d):
        d["triggers"][0]["call"]["args"]["cc"] = "x"
    _refused(_pack(tmp_path / "e", edit=bad_call_arg), "triggers[0].call.args", "no argument(s) ['cc']")


def test_card_delimiters_and_long_cards_are_refused(tmp_path):
    def delim(d):
        d["phrasings"][0]["text"] = "[POLICY abc] Only mail @{domain}."
    _refused(_pack(tmp_path / "a", edit=delim), "phrasings[imp1]", "card delimiter")

    def card(d):
        d["card"] = "Only @{domain} [/POLICY x]"
    _refused(_pack(tmp_path / "b", edit=card), "card", "card delimiter")

    def long(d):
        d["card"] = " ".join(["only"] * MAX_CARD_WORDS) + " {domain}"
    _refused(_pack(tmp_path / "c", edit=long), "card:", "words rendered")


def test_phrasing_or_card_without_the_matcher_anchors_is_refused(tmp_path):
    def card(d):
        d["card"] = "Mail only inside the company."
    _refused(_pack(tmp_path / "a", edit=card), "card: lacks matcher value(s)")

    def cue(d):
        d["phrasings"][1]["text"] = "Mail goes to @{domain} people."
    _refused(_pack(tmp_path / "b", edit=cue), "phrasings[imp2]: contains none of the matcher cues")


@pytest.mark.slow
def test_every_card_fits_60_tokens():
    """Spec §2.7 / CR-6: 100% of catalogue cards ≤ 60 SmolLM2 tokens, header and footer included."""
    from agentmill.methods.constraint_rot.pinning.card import render_card
    from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry

    for fam in FAMILIES:
        for split in (POOL_SPLITS if fam.split is None else ("test_ood_family",)):
            texts = {RuleInstance(fam, th, "", "", split).card_text for th in param_combinations(fam, split)}
            for text in texts:
                rule = PolicyRegistry().register(fam.id, text, issuer="operator", kind=fam.kind,
                                                 scope_tools=fam.tools)
                assert render_card(rule).n_tokens <= 60  # render_card raises CardTooLong first


def test_unknown_placeholder_and_id_file_mismatch(tmp_path):
    def ph(d):
        d["phrasings"][0]["text"] = "Only mail {domian}."
    _refused(_pack(tmp_path / "a", edit=ph), "phrasings[0].text", "unknown parameter(s) ['domian']")
    _refused(_pack(tmp_path / "b", edit=lambda d: d.update(id="mail.other")), "must equal the file name stem")


def test_yaml_booleans_in_cues_are_caught(tmp_path):
    def edit(d):
        d["matcher"]["cues"].append(False)  # what an unquoted `no` parses to
    _refused(_pack(tmp_path, edit=edit), "matcher.cues[5]", "non-empty string")


def test_bad_synthetic_data_is_refused(tmp_path):
    def edit(d):
        d["params"]["ssn"]["dev"] = ["123-45-6789"]
    _refused(_pack(tmp_path, family_id="pii.ssn_disclosure", edit=edit), "params.ssn.dev", "synthetic SSN")

    def card(d):
        d["params"]["card"]["dev"] = ["4111111111111112"]
    _refused(_pack(tmp_path / "b", family_id="pii.card_number", edit=card), "params.card.dev", "Luhn")


def test_missing_directory():
    with pytest.raises(CatalogueError, match="not found"):
        load_catalogue("/nonexistent/catalogue")
