"""The curriculum from PPO (its hook in credit_jax/algos/ppo.py), the value-loss PLR
scores, and the recipes that refuse a curriculum block."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.addons import curriculum as cur
from credit_jax.algos import ConfigError, grpo, grpo_relabel, ppo, search_then_train


def ppo_config(kind, **kw):
  c = cur.add_config(ppo.default_config())
  c.env_name = "KeyChain-v0"
  c.env_kwargs = {"horizon": 12, "num_pivotal": 1, "num_actions": 2}
  c.num_envs, c.num_steps, c.total_timesteps = 2, 12, 2 * 12 * 6
  c.update_epochs, c.num_minibatches = 1, 2
  c.network.hidden_sizes = (8,)
  c.curriculum.kind, c.curriculum.stages, c.curriculum.stage_updates = kind, (3, 6, 12), (2, 2)
  for k, v in kw.items():
    c.curriculum[k] = v
  return c


def episodes_ended_reference(values, num_steps):
  """Plain loop: episodes ending in each update when an episode's length is the value of
  the update it started in (a reset at a rollout's last step belongs to that update)."""
  left, counts = values[0], []
  for v in values:
    n = 0
    for _ in range(num_steps):
      left -= 1
      if left == 0:
        n, left = n + 1, v
    counts.append(n)
  return counts


def test_ppo_fixed_schedule_sets_the_length_of_new_episodes():
  _, m = jax.jit(ppo.make_train(ppo_config("fixed")))(jax.random.PRNGKey(0))
  values = [3, 3, 6, 6, 12, 12]
  np.testing.assert_array_equal(m["curriculum_value"], values)
  # Two environments; an episode keeps the length it started with across updates.
  np.testing.assert_array_equal(m["episodes"],
                                2 * np.array(episodes_ended_reference(values, 12)))
  np.testing.assert_array_equal(m["env_steps"], 24.0)


def test_ppo_gated_and_value_loss_plr_run():
  _, m = jax.jit(ppo.make_train(ppo_config("gated", threshold=0.0, window=1)))(
      jax.random.PRNGKey(1))
  np.testing.assert_array_equal(m["curriculum_value"], [3, 6, 12, 12, 12, 12])
  for score in ("value_loss", "positive_value_loss"):
    state, m = jax.jit(ppo.make_train(ppo_config("plr", plr_score=score)))(
        jax.random.PRNGKey(2))
    assert set(np.asarray(m["curriculum_value"]).tolist()) <= {3.0, 6.0, 12.0}
    c = state.aux["curriculum"]
    visited = np.asarray(c["visited"])
    assert visited.any()
    assert np.all(np.asarray(c["score_est"])[visited] > 0)
    assert np.all(np.asarray(c["score_est"])[~visited] == 0)


def test_value_loss_scores_by_hand():
  a = jnp.array([[1.0, -2.0], [0.5, 0.0], [-1.0, 3.0]])
  np.testing.assert_allclose(cur.value_loss_score(a, "value_loss"), 7.5 / 6, rtol=1e-6)
  np.testing.assert_allclose(cur.value_loss_score(a, "positive_value_loss"), 4.5 / 6,
                             rtol=1e-6)
  with pytest.raises(ValueError, match="advantages"):
    cur.value_loss_score(a[0], "value_loss")
  # Probabilities: scores relative to the largest visited one; an unvisited value gets
  # the top weight; temperature 0.5 squares; explore mixes in a uniform draw.
  s, v = jnp.array([0.2, 0.1, 0.0, 0.0]), jnp.array([True, True, True, False])
  w = np.array([1.0, 0.5, 0.0, 1.0]) + 1e-6
  w = w ** 2
  np.testing.assert_allclose(cur.score_probs(s, v, 0.5, 0.2), 0.8 * w / w.sum() + 0.05,
                             rtol=1e-5)
  np.testing.assert_allclose(cur.score_probs(s, jnp.zeros(4, bool), 1.0, 0.0), 0.25,
                             rtol=1e-5)


def test_value_loss_score_observe():
  c = ppo_config("plr", plr_score="value_loss", plr_ema=0.5)
  obj = cur.Curriculum(c, cur.make_env(c)[1])
  carry = obj.init()
  carry = obj.observe(carry, jnp.int32(1), jnp.float32(0.0), jnp.float32(0.4))
  np.testing.assert_allclose(carry["score_est"], [0.0, 0.4, 0.0])   # first visit: as is
  carry = obj.observe(carry, jnp.int32(1), jnp.float32(0.0), jnp.float32(0.8))
  np.testing.assert_allclose(carry["score_est"], [0.0, 0.6, 0.0], rtol=1e-6)
  np.testing.assert_array_equal(carry["visited"], [False, True, False])
  with pytest.raises(ValueError, match="score"):
    obj.observe(carry, jnp.int32(0), jnp.float32(0.0))


def test_value_loss_score_needs_a_critic_and_ppo_needs_horizon():
  c = cur.add_config(grpo.default_config())
  c.curriculum.kind, c.curriculum.stages, c.curriculum.plr_score = "plr", (10, 50), "value_loss"
  with pytest.raises(ConfigError, match="curriculum.plr_score"):
    grpo.validate_config(c)
  c = ppo_config("plr", plr_score="regret")
  with pytest.raises(ConfigError, match="curriculum.plr_score"):
    ppo.validate_config(c)
  c = ppo_config("fixed", param="distractor_length")
  with pytest.raises(ConfigError, match="curriculum.param"):
    ppo.validate_config(c)
  c = ppo_config("fixed", stages=(3, 6, 13))
  with pytest.raises(ConfigError, match="curriculum.stages"):
    ppo.validate_config(c)
  ppo.validate_config(ppo_config("plr", plr_score="positive_value_loss"))
  c = ppo_config("fixed")
  c.network.critic_kind = "gru"   # a critic of its own takes the curriculum
  ppo.validate_config(c)
  c.network.critic_oracle = True  # whose environment the curriculum would replace
  with pytest.raises(ConfigError, match=r"^config\.network\.critic_oracle: "):
    ppo.validate_config(c)


@pytest.mark.parametrize("module", [grpo_relabel, search_then_train])
def test_recipes_without_a_curriculum_refuse_the_block(module):
  c = cur.add_config(module.default_config())
  module.validate_config(c)                      # kind "none": accepted
  c.curriculum.kind = "gated"
  with pytest.raises(ConfigError, match="curriculum.kind"):
    module.validate_config(c)


def test_ppo_gated_curriculum_learns_keychain():
  """Seeded learning test: PPO, gated 5 -> 15 -> 30 on KeyChain (k=2, A=4, random 6%)."""
  c = cur.add_config(ppo.default_config())
  c.env_name = "KeyChain-v0"
  c.env_kwargs = {"horizon": 30, "num_pivotal": 2, "num_actions": 4}
  c.num_envs, c.num_steps, c.total_timesteps = 8, 32, 8 * 32 * 60
  c.lr, c.anneal_lr, c.ent_coef = 3e-3, False, 0.01
  c.curriculum.kind, c.curriculum.stages = "gated", (5, 15, 30)
  c.curriculum.threshold, c.curriculum.window = 0.8, 2
  _, m = jax.jit(ppo.make_train(c))(jax.random.PRNGKey(0))
  assert float(m["curriculum_value"][-1]) == 30.0
  assert float(np.mean(m["success"][-5:])) >= 0.8
