"""Features: hashed n-grams (deterministic, unit norm, sparse) and hidden states through a scripted white box."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.router.features import HiddenStateFeatures, NgramFeatures, make_features


def test_ngram_features() -> None:
    f = NgramFeatures(dim=2**10)
    X = f.transform(["What is 3 + 4?", "What is 3 + 4?", "reverse the word 'cat'", ""])
    D = X.toarray()
    assert D.shape == (4, 1024) and np.allclose(np.linalg.norm(D[:3], axis=1), 1.0) and not D[3].any()
    assert np.array_equal(D[0], D[1]) and D[0] @ D[2] < 0.5
    # "ab" has word 1-gram w:ab and char 2-gram c2:ab: two distinct tokens, each counted once
    assert sorted(f.indices("ab")) == sorted([f._h("w:ab"), f._h("c2:ab")])
    with pytest.raises(ValueError):
        NgramFeatures(dim=1)


def test_make_features_specs() -> None:
    assert make_features("ngram").dim == 2**14 and make_features("ngram:64").dim == 64
    with pytest.raises(ValueError, match="unknown features"):
        make_features("tfidf")


@pytest.mark.slow
def test_hidden_state_features_on_a_scripted_white_box() -> None:
    from agentmill.lm import load_lm
    lm = load_lm("scripted:whitebox")
    f = HiddenStateFeatures("scripted:whitebox", "last", lm=lm)
    X = f.transform(["hello world", "what is 3 + 4?"])
    assert X.shape[0] == 2 and np.allclose(np.linalg.norm(X, axis=1), 1.0) and f.spec.endswith(":last")
    with pytest.raises(TypeError, match="internals"):
        HiddenStateFeatures("scripted:echo", lm=load_lm("scripted:echo"))
