"""The activation store: position/layer specs, bad rollouts named by line, a write/read round trip with hand-built
activations, tampering refused, and train/test rows read back for probe fitting (numpy only, no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentmill.methods.first_token_probe.capture import ActivationSet
from agentmill.methods.first_token_probe.store import (StoreError, load_train_test, parse_layers, parse_positions,
                                                       read_rollout_rows, read_store, select_positions, write_store)


def _row(i: int, split: str = "probe_test") -> dict:
    return {"rollout_id": f"C-x-{i}/0", "template_id": f"t{i % 2}", "category": "C", "q": 1.0, "split": split,
            "lm_spec": "tiny:x", "prompt_ids": [256, 65 + i], "sampled_ids": [66, 67], "text": "Hmm. So I decline.",
            "finish": "eos", "labels": {"rule:lexicon_a": 1}, "vote": i % 2, "truth": i % 2}


def _acts(n: int) -> ActivationSet:
    H = np.arange(n * 2 * 3 * 4, dtype=np.float32).reshape(n, 2, 3, 4) / 7
    H[0, 1] = np.nan  # row 0 lacks position 1
    mask = ~np.isnan(H[:, :, 0, 0])
    tok = np.where(mask, 5, -1)
    return ActivationSet(H, mask, tok, ["think_open", "frac:0.5"], [0, 2, 3],
                         [{"think_open": 1, "frac:0.5": None if i == 0 else 2} for i in range(n)])


def test_position_and_layer_specs() -> None:
    assert parse_positions("think_open, frac:0:1:0.25") == ["think_open", "frac:0", "frac:0.25", "frac:0.5",
                                                            "frac:0.75", "frac:1"]
    assert parse_positions("frac:0:1:0.05")[-1] == "frac:1" and len(parse_positions("frac:0:1:0.05")) == 21
    for bad in ("frac:0.5:0.2:0.1", "frac:0:1:0", "frac:a:1:0.1", "think_open,think_open", " , "):
        with pytest.raises(StoreError):
            parse_positions(bad)
    assert parse_layers("all", 4) == [0, 1, 2, 3] and parse_layers("1,3", 4) == [1, 3]
    for bad in ("4", "x", ""):
        with pytest.raises(StoreError):
            parse_layers(bad, 4)


def test_bad_rollout_rows_are_named_by_line(tmp_path) -> None:
    f = tmp_path / "r.jsonl"
    good = json.dumps(_row(0))
    cases = {"{not json": "line 2 is not JSON", json.dumps({"rollout_id": "a", "text": ""}): "line 2 lacks",
             json.dumps({**_row(1), "sampled_ids": [1, "a"]}): "line 2: 'sampled_ids' must be a list",
             json.dumps({**_row(1), "prompt_ids": [300]}): "line 2: 'prompt_ids' holds a token id outside",
             json.dumps({**_row(1), "prompt_ids": list(range(9))}): "line 2: 11 tokens, over",
             json.dumps(_row(0)): "line 2: rollout_id 'C-x-0/0' repeats"}
    for line, msg in cases.items():
        f.write_text(good + "\n" + line + "\n")
        with pytest.raises(StoreError, match=msg):
            read_rollout_rows(f, vocab=259, max_positions=10)
    f.write_text("\n")
    with pytest.raises(StoreError, match="no rollouts"):
        read_rollout_rows(f)


def test_round_trip_in_shards_and_tampering_is_refused(tmp_path) -> None:
    rows = [_row(i) for i in range(5)]
    acts = _acts(5)
    out = tmp_path / "acts"
    write_store(out, acts, rows, model="tiny:x", model_digest="abc", source="r.jsonl", shard_rows=2)
    back, rows2, m = read_store(out)
    assert len(m["shards"]) == 3 and m["positions"] == acts.positions and m["layers"] == [0, 2, 3]
    assert np.allclose(back.H, acts.H, rtol=1e-3, equal_nan=True) and np.isnan(back.H[0, 1]).all()
    assert back.mask.tolist() == acts.mask.tolist() and back.tokens.tolist() == acts.tokens.tolist()
    assert [r["rollout_id"] for r in rows2] == [r["rollout_id"] for r in rows] and back.index == acts.index
    assert select_positions(back, ["frac:0.5"]).H.shape == (5, 1, 3, 4)
    with pytest.raises(StoreError, match="not in the store"):
        select_positions(back, ["think_close"])
    with pytest.raises(StoreError, match="not empty"):
        write_store(out, acts, rows, model="tiny:x", model_digest="abc")
    # a changed rollout line, then a changed shard
    lines = (out / "rollouts.jsonl").read_text().splitlines()
    lines[3] = lines[3].replace("So I decline.", "So I help.")
    (out / "rollouts.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(StoreError, match="line 4 .*differs"):
        read_store(out)
    with open(out / "shard-00001.npz", "ab") as fh:
        fh.write(b"x")
    with pytest.raises(StoreError, match="shard-00001.npz: sha256 differs"):
        read_store(out)
    with pytest.raises(StoreError, match="not an activation store"):
        read_store(tmp_path)


def test_train_test_split_for_fitting(tmp_path) -> None:
    rows = [_row(i, "probe_train") for i in range(3)] + [_row(i + 3) for i in range(2)]
    write_store(tmp_path / "a", _acts(5), rows, model="tiny:x", model_digest="abc")
    train, test, a_tr, a_te, _ = load_train_test([tmp_path / "a"])
    assert [r.item.split for r in train] == ["probe_train"] * 3 and len(test) == 2
    assert a_tr.H.shape[0] == 3 and np.allclose(a_te.H, _acts(5).H[3:], rtol=1e-3)
    assert [r.outcome for r in test] == [1, 0] and train[0].item.template_id == "t0"
    write_store(tmp_path / "b", _acts(3), rows[:3], model="tiny:x", model_digest="abc")
    with pytest.raises(StoreError, match="both probe_train and probe_test"):
        load_train_test([tmp_path / "b"])
    with pytest.raises(StoreError, match="same rollout twice"):
        load_train_test([tmp_path / "a", tmp_path / "b"])
    write_store(tmp_path / "c", _acts(2), rows[3:], model="tiny:y", model_digest="other")
    with pytest.raises(StoreError, match="model_digest differs"):
        load_train_test([tmp_path / "b", tmp_path / "c"])


def test_probes_fit_on_a_store_find_the_planted_layer(tmp_path) -> None:
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.core import probe_study

    rng = np.random.default_rng(0)
    n = 48
    y = np.arange(n) % 2
    H = rng.normal(size=(n, 1, 2, 8)).astype(np.float32)
    H[:, 0, 1, 0] += 3.0 * (2 * y - 1)  # the label lives in layer 1 only
    rows = [{**_row(i, "probe_train" if i < 24 else "probe_test"), "template_id": f"t{i // 4}", "vote": int(y[i]),
             "text": "Hmm.\n</think>\nSorry."} for i in range(n)]
    acts = ActivationSet(H, np.ones((n, 1), bool), np.full((n, 1), 5), ["think_open"], [0, 1],
                         [{"think_open": 1}] * n)
    write_store(tmp_path / "s", acts, rows, model="tiny:x", model_digest="abc")
    train, test, a_tr, a_te, _ = load_train_test([tmp_path / "s"])
    res = probe_study(None, train, test, positions=["think_open"], acts=(a_tr, a_te), shuffle_cells=False,
                      cfg=ProbeConfig(min_per_class=5, n_shuffles=0, bootstrap=20))
    assert res.grid.auroc[0, 1] > 0.95 and res.grid.auroc[0, 0] < 0.8
