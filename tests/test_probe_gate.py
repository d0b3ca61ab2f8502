"""The learnability gate at small size (issue 47): on the credit probe at T = 10 a tabular
REINFORCE learns in every seed (exact J >= 0.9 by the DP), and the study's gate table
counts the seeds that pass."""
import numpy as np

from credit_jax.experiments import probes
from credit_jax.experiments.probes import credit_horizon


def test_tabular_reinforce_passes_the_gate_on_the_credit_probe():
  c = probes.default_config()
  c.seeds, c.max_updates, c.check_every = 4, 300, 10
  rec = credit_horizon.train_horizon(c, 10, log=lambda _: None)
  # Issue 47 measured 83-86 updates at T = 10 (Adam 0.05, 64 episodes per update).
  assert all(rec["events"]), rec["times"]
  assert max(rec["times"]) <= 300
  assert np.all(np.asarray(rec["curve"][-1]) >= 0.9)


def test_gate_table_counts_seeds_at_threshold():
  c = probes.default_config()
  c.horizons, c.settings = (10,), ("credit_probe",)
  c.methods = ("grpo_k8", "reinforce-tabular")
  recs = [{"cell": "keychain/credit_probe/T10/grpo_k8", "success": 0.5,
           "success_ci": [0.4, 0.6], "random_success": 1 / 64,
           "success_per_seed": [0.95, 0.2, 0.9, 0.89]},
          {"cell": "keychain/credit_probe/T10/reinforce-tabular", "success": 1.0,
           "success_ci": [0.9, 1.0], "random_success": 1 / 64,
           "success_per_seed": [1.0, 1.0, 0.99, 0.97]}]
  lines = probes.markdown(recs, c)
  assert "| credit_probe T=10 | 2/4 | 4/4 |" in lines
  assert probes.switch_kwargs(c, "credit_probe") == {
      "segment_cue_onehot": True, "distinct_rules": True, "distractor_cues": True,
      "pivotal_flag": False}
  assert probes.switch_kwargs(c, "credit_probe_noise")["episode_noise_std"] == 1.0
