"""verl / TRL progress-advantage metrics on hand-checkable (B, L) batches; the TRL contract against the installed
TRL."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from agentmill.methods.progress_advantage.adapters import row_progress_advantage, token_progress_metrics
from agentmill.methods.progress_advantage.adapters.trl_metrics import check_trl_contract, trl_progress_metrics
from agentmill.methods.progress_advantage.adapters.verl_metrics import step_progress_advantage

LP = np.array([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5], [-1.0, -1.0, -1.0]])
REF = np.array([[-2.0, -2.0, 0.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
MASK = np.array([[1, 1, 0], [1, 1, 1], [0, 0, 0]])


def test_rows_by_hand():
    r = row_progress_advantage(LP, REF, MASK, beta=0.5)
    assert r[:2].tolist() == [0.5, 0.75] and math.isnan(r[2])  # padding ignored; an empty row is NaN, not 0
    m = token_progress_metrics(LP, REF, MASK, 0.5, traj_ids=["a", "a", "b"])
    assert m["pa/row_mean"] == 0.625 and m["pa/n_missing"] == 1.0
    assert m["pa/traj_sum"] == 1.25 and m["pa/traj_min"] == 0.5 and m["pa/traj_last"] == 0.75


def test_verl_batch_layout():
    import torch

    data = SimpleNamespace(batch={"old_log_probs": torch.tensor(LP), "ref_log_prob": torch.tensor(REF),
                                  "response_mask": torch.tensor(MASK)},
                           non_tensor_batch={"traj_uid": np.array(["a", "b", "b"], dtype=object)})
    m = step_progress_advantage(data, beta=1.0)
    assert m["pa/traj_sum"] == pytest.approx((1.0 + 1.5) / 2)
    with pytest.raises(ValueError, match="ref_log_prob"):
        step_progress_advantage(SimpleNamespace(batch={"old_log_probs": LP}), beta=1.0)


def test_trl_batch_layout_and_beta_zero():
    inputs = {"old_per_token_logps": LP, "ref_per_token_logps": REF, "completion_mask": MASK}
    assert trl_progress_metrics(inputs, beta=1.0)["pa/row_max"] == 1.5
    with pytest.raises(ValueError, match="no reference model"):
        trl_progress_metrics(inputs, beta=0.0)
    with pytest.raises(ValueError, match="no reference model"):
        trl_progress_metrics({"old_per_token_logps": LP, "completion_mask": MASK}, beta=0.1)


@pytest.mark.slow
def test_trl_contract_holds_for_the_installed_trl():
    check_trl_contract()
