"""GRPO's fixed-seed numbers, pinned: every network kind, advantage, loss aggregation, the
reference KL and every hook slot trains to the same bits as the code these hashes were
recorded from.

Issue 45 merges GRPO's two programs (`grpo.py` for memoryless networks and
`grpo_sequence.py` for GRU / transformer policies, with `group_update.py` between them)
into one; this file holds what they computed before, at tiny shapes (3 updates,
KeyChain T=6): the sha256 of the final parameters, of the whole final `TrainState` and
of every metric (`tests/data/grpo_identity.json`, recorded on the code before the
merge). A change that moves a number fails here naming the case and the metric. RUDDER
is absent: GRPO took it after the merge (tests/test_grpo_rudder.py).

Bits are those of one XLA build on one platform (tests/identity.py: the digests, the
comparison, the script form). To (re)record:

  PYTHONPATH=$PWD JAX_PLATFORMS=cpu python3 tests/test_grpo_identity.py --write
  PYTHONPATH=$PWD JAX_PLATFORMS=cpu python3 tests/test_grpo_identity.py   # compare, all cases
"""
import os
import sys

import ml_collections
import pytest

from credit_jax.addons import (curriculum, gigpo, hindsight_credit, tree_groups,
                               vine_ppo)
from credit_jax.algos import grpo
import identity

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                    "grpo_identity.json")


def _base(kind="mlp", advantage="grpo", agg="token_mean", kl=False):
  c = grpo.default_config()
  c.env_kwargs = ml_collections.ConfigDict(
      {"horizon": 6, "num_pivotal": 1, "num_actions": 2, "cue_delay": 0})
  c.horizon = 6
  c.num_updates, c.num_tasks, c.group_size = 3, 4, 3
  c.num_minibatches, c.update_epochs = 2, 2
  c.advantage, c.loss_aggregation = advantage, agg
  c.use_reference_kl, c.kl_coef = kl, (0.1 if kl else 0.0)
  c.network.kind = kind
  c.network.hidden_sizes = (8,)
  c.network.gru_size, c.network.d_model, c.network.num_heads = 8, 8, 2
  c.network.max_len = 8
  c.chunk_updates = 1
  return c


def _variant(**kw):
  return lambda: _base(**kw)


def _annealed():
  c = _base("mlp", "drgrpo", "constant")
  c.anneal_lr, c.ent_coef = True, 0.01
  return c


def _prm(kind="mlp", form="sum"):
  def make():
    from configs import prm as prm_configs  # pylint: disable=import-outside-toplevel
    c = prm_configs.get_config("tiny").grpo
    c.num_updates, c.prm.demo_episodes, c.prm.train_steps = 2, 8, 2
    c.prm.batch_size = 8
    c.network.hidden_sizes = (8,)
    c.network.kind, c.network.gru_size = kind, 8
    if form == "step":
      c.prm.form = "step"
      c.prm.retrain_every, c.prm.retrain_mc_states, c.prm.retrain_steps = 1, 4, 1
    return c
  return make


def _curriculum(kind="mlp"):
  def make():
    c = curriculum.add_config(_base(kind))
    c.env_kwargs.horizon = c.horizon = 8
    c.curriculum.kind, c.curriculum.stages, c.curriculum.stage_updates = (
        "fixed", (3, 6, 8), (1, 1))
    return c
  return make


def _hook(name):
  def make():
    c = _base()
    if name == "gigpo":
      gigpo.add_config(c, step_weight=0.5)
    elif name == "vine":
      vine_ppo.add_config(c, num_vines=2, every=2)
    else:
      tree_groups.add_config(c, branch=3, branch_steps=(0, 2))
      c.group_size = 9
    return c
  return make


def _learned(name, kind="mlp"):
  def make():
    return hindsight_credit.add_config(_base(kind), name, hidden_sizes=(8,), train_steps=1)
  return make


# name -> (config maker, seeds vmapped (0: one key, no vmap))
CASES = {
    "mlp": (_base, 0),
    "mlp_vmap2": (_base, 2),
    "mlp_rloo_sequence_mean": (_variant(advantage="rloo", agg="sequence_mean"), 0),
    "mlp_drgrpo_constant_annealed": (_annealed, 0),
    "mlp_kl": (_variant(kl=True), 0),
    "tabular": (_variant(kind="tabular"), 0),
    "gru": (_variant(kind="gru"), 0),
    "gru_vmap2": (_variant(kind="gru"), 2),
    "gru_kl_rloo_sequence_mean": (_variant(kind="gru", advantage="rloo",
                                           agg="sequence_mean", kl=True), 0),
    "transformer_drgrpo_constant": (_variant(kind="transformer", advantage="drgrpo",
                                             agg="constant"), 0),
    "transformer_kl": (_variant(kind="transformer", kl=True), 0),
    "prm": (_prm(), 0),
    "prm_step_retrained": (_prm(form="step"), 0),
    "prm_gru": (_prm("gru"), 0),
    "curriculum": (_curriculum(), 0),
    "curriculum_gru": (_curriculum("gru"), 0),
    "gigpo": (_hook("gigpo"), 0),
    "vine": (_hook("vine"), 0),
    "tree": (_hook("tree"), 0),
    "hca": (_learned("hca"), 0),
    "cocoa": (_learned("cocoa"), 0),
    "hca_gru": (_learned("hca", "gru"), 0),
    "cocoa_gru": (_learned("cocoa", "gru"), 0),
}
# The cases the test suite runs (the script runs all; each compiles for ~10 s of CPU):
# each program of the code the hashes were recorded from, with the reference KL, and a
# step-credit hook; recorded under the suite's XLA_FLAGS too (tests/identity.py).
FAST = ("mlp_kl", "gru_kl_rloo_sequence_mean", "gigpo")


def run_case(name):
  make, seeds = CASES[name]
  return identity.run(grpo.make_train(make()), seeds)


@pytest.mark.parametrize("name", FAST)
def test_grpo_numbers_are_the_recorded_ones(name):
  identity.check(name, run_case, DATA)


if __name__ == "__main__":
  sys.exit(identity.main(CASES, run_case, DATA))
