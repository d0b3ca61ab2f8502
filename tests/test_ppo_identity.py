"""PPO's fixed-seed numbers, pinned: every network kind, critic variant, rollout mode and
hook slot trains to the same bits as the code these hashes were recorded from.

Issue 45 merges PPO's programs (`ppo.py`, `ppo_sequence.py`, `ppo_critics.py`) into one;
this file holds what they computed before, at tiny shapes (2-3 updates): the sha256 of
the final parameters, of the whole final `TrainState` and of every metric
(`tests/data/ppo_identity.json`, recorded on the code before the merge). A change that
moves a number fails here naming the case and the metric.

Bits are those of one XLA build on one platform (tests/identity.py: the digests, the
comparison, the script form). To (re)record:

  PYTHONPATH=$PWD JAX_PLATFORMS=cpu python3 tests/test_ppo_identity.py --write
  PYTHONPATH=$PWD JAX_PLATFORMS=cpu python3 tests/test_ppo_identity.py   # compare, all cases
"""
import os
import sys

import ml_collections
import numpy as np
import pytest

from credit_jax import fast_paths
from credit_jax.addons import curriculum, hindsight_credit, rudder
from credit_jax.algos import ppo
import identity

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                    "ppo_identity.json")


def _base(env="KeyChain-v0", updates=3):
  c = ppo.default_config()
  c.env_name = env
  if env == "KeyChain-v0":
    c.env_kwargs = ml_collections.ConfigDict(
        {"horizon": 6, "num_pivotal": 1, "num_actions": 2, "cue_delay": 0})
  c.num_envs, c.num_steps = 4, 12
  c.total_timesteps = updates * 4 * 12
  c.num_minibatches, c.update_epochs = 2, 2
  c.network.hidden_sizes = (8,)
  c.network.gru_size, c.network.d_model, c.network.num_heads = 8, 8, 2
  c.network.max_len = 16
  c.chunk_updates = 1
  return c


def _kind(kind, **net):
  def make():
    c = _base()
    c.network.kind = kind
    for k, v in net.items():
      c.network[k] = v
    return c
  return make


def _critic(actor, critic="same", oracle=False):
  def make():
    c = _base()
    c.network.kind, c.network.critic_kind, c.network.critic_oracle = actor, critic, oracle
    return c
  return make


def _episodes(name):
  def make():
    c = _base()
    c.rollout, c.num_steps, c.num_minibatches = "episodes", 6, 1
    c.total_timesteps = 2 * 4 * 6
    if name == "rudder":
      rudder.add_config(c, hidden_size=8, encoder_sizes=(8,), replay_episodes=4,
                        capacity=8, train_steps=1)
    else:
      hindsight_credit.add_config(c, name, hidden_sizes=(8,), train_steps=1)
    return c
  return make


def _curriculum():
  c = curriculum.add_config(_base())
  c.env_kwargs.horizon = 12
  c.curriculum.kind, c.curriculum.stages, c.curriculum.stage_updates = (
      "fixed", (3, 6, 12), (1, 1))
  return c


def _prm():
  from configs import ppo_prm
  c = ppo_prm.get_config("small")
  c.num_envs, c.num_steps, c.num_minibatches, c.update_epochs = 4, 12, 2, 1
  c.total_timesteps = 2 * 4 * 12
  c.prm.demo_episodes, c.prm.train_steps = 8, 2
  c.prm.retrain_every, c.prm.retrain_mc_states, c.prm.retrain_steps = 1, 4, 1
  c.network.hidden_sizes = (8,)
  return c


def _cartpole():
  c = _base("CartPole-v1")
  c.env_kwargs = ml_collections.ConfigDict({"max_steps_in_episode": 7})
  return c


def _gae_gradient(kind="same"):
  def make():
    c = _critic("mlp", kind)()
    c.gae_gradient_every, c.gae_gradient_episodes = 1, 8
    return c
  return make


# name -> (config maker, fast paths on, seeds vmapped (0: one key, no vmap))
CASES = {
    "mlp": (_base, False, 0),
    "mlp_cartpole_truncated": (_cartpole, False, 0),
    "mlp_vmap2": (_base, False, 2),
    "mlp_fast": (_base, True, 0),
    "tabular": (_kind("tabular"), False, 0),
    "linear": (_kind("linear"), False, 0),
    "gru": (_kind("gru"), False, 0),
    "gru_fast": (_kind("gru"), True, 0),
    "gru_bptt": (_kind("gru", bptt_chunk=4), True, 0),
    "transformer": (_kind("transformer"), False, 0),
    "critic_mlp_mlp": (_critic("mlp", "mlp"), False, 0),
    "critic_mlp_gru": (_critic("mlp", "gru"), False, 0),
    "critic_gru_mlp": (_critic("gru", "mlp"), False, 0),
    "critic_mlp_transformer": (_critic("mlp", "transformer"), False, 0),
    "critic_oracle_mlp": (_critic("mlp", "same", True), False, 0),
    "critic_oracle_gru": (_critic("gru", "same", True), False, 0),
    "episodes_hca": (_episodes("hca"), False, 0),
    "episodes_cocoa": (_episodes("cocoa"), False, 0),
    "episodes_rudder": (_episodes("rudder"), False, 0),
    "curriculum_fixed": (_curriculum, False, 0),
    "prm": (_prm, False, 0),
    "gae_gradient": (_gae_gradient(), False, 0),
    "gae_gradient_critic": (_gae_gradient("mlp"), False, 0),
}
# The cases the test suite runs (the script runs all): one per program of the code the
# hashes were recorded from, and the episodic rollout with a learned-credit feature.
FAST = ("mlp", "gru_fast", "critic_mlp_gru", "episodes_hca")


def run_case(name):
  make, fast, seeds = CASES[name]
  with fast_paths.use(fast):
    return identity.run(ppo.make_train(make()), seeds)


@pytest.mark.parametrize("name", FAST)
def test_ppo_numbers_are_the_recorded_ones(name):
  identity.check(name, run_case, DATA)


def test_the_digest_sees_every_bit():
  a = {"w": np.zeros((2, 3), np.float32)}
  b = {"w": np.zeros((2, 3), np.float32)}
  b["w"][1, 2] = np.float32(1e-45)   # the smallest subnormal: one bit
  digest = identity.digest
  assert digest(a) != digest(b) and digest(a) == digest({"w": np.zeros((2, 3), np.float32)})
  assert identity.compare("x", {"params": "1", "state": "2", "metrics": {"loss": "3"}},
                          {"params": "1", "state": "2", "metrics": {"loss": "4"}}) == [
                              "x: metric loss differs (4 recorded, 3 now)"]


if __name__ == "__main__":
  sys.exit(identity.main(CASES, run_case, DATA))
