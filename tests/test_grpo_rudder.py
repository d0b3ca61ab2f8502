"""RUDDER in GRPO (issue 45): every step scored by its redistributed return-to-go and
normalised within its group at that step (`hooks.Signal.step_scores`,
`grpo.step_advantages`), against a NumPy loop; the recipe end to end with an MLP and a
GRU; the refusals. Plain GRPO's bits: tests/test_grpo_identity.py."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import algos, baselines, envs
from credit_jax.addons import hooks, prm, rudder
from credit_jax.algos import grpo
from credit_jax.config import ConfigError
from credit_jax.types import Trajectory

T, N, K = 6, 3, 4


def _config(kind="mlp"):
  c = grpo.default_config()
  c.env_kwargs.horizon, c.horizon, c.env_kwargs.num_pivotal = T, T, 1
  c.num_updates, c.num_tasks, c.group_size, c.num_minibatches = 2, N, K, 1
  c.network.hidden_sizes = (8,)
  c.network.kind = kind
  if kind == "gru":
    c.network.gru_size = 8
  return rudder.add_config(c, hidden_size=8, encoder_sizes=(8,), replay_episodes=4,
                           capacity=8, train_steps=1)


def _trajectory(env, env_params, key):
  """A synthetic group rollout `[T, N, K]`: random observations, actions and rewards,
  episodes of 2..T steps (terminated at their last), group 0 all scoring 0."""
  k_obs, k_act, k_rew, k_len = jax.random.split(key, 4)
  obs_shape = env.observation_space(env_params).shape
  obs = jax.random.uniform(k_obs, (T, N, K) + obs_shape)
  actions = jax.random.randint(k_act, (T, N, K), 0, env.num_actions)
  lengths = jax.random.randint(k_len, (N, K), 2, T + 1)
  t = jnp.arange(T)[:, None, None]
  valid = t < lengths
  rewards = jnp.where(valid, jax.random.normal(k_rew, (T, N, K)), 0.0).at[:, 0].set(0.0)
  terminated = t == lengths - 1
  return Trajectory(obs=obs, actions=actions, rewards=rewards, terminated=terminated,
                    truncated=jnp.zeros_like(terminated), log_probs=jnp.zeros((T, N, K)),
                    final_obs=obs, valid=valid, info={}, extras={})


def _numpy_step_advantages(shaped, valid, eps=1e-6):
  """The oracle: returns-to-go of `shaped [T, N, K]` over valid steps, normalised within
  each group at each step (grpo: sample std), 0 at invalid steps and in groups whose K
  values agree (to float32 rounding)."""
  r = np.where(valid, np.asarray(shaped, np.float64), 0.0)
  togo = np.zeros((T + 1, N, K))
  for t in reversed(range(T)):
    togo[t] = np.where(valid[t], r[t] + togo[t + 1], 0.0)
  adv = np.zeros((T, N, K))
  for t in range(T):
    for n in range(N):
      x = togo[t, n]
      if np.ptp(x) > 1e-5:
        adv[t, n] = (x - x.mean()) / (x.std(ddof=1) + eps)
  return np.where(valid, adv, 0.0)


def test_step_advantages_are_each_steps_group_advantage_of_the_redistributed_return_to_go():
  config = _config()
  env, env_params = envs.make(config.env_name, **config.env_kwargs)
  context = hooks.Context(config=config, recipe=grpo.RECIPE, env=env,
                          env_params=env_params, policy=None, network=None,
                          logits=None, discount=hooks.undiscounted, batch=N * K)
  bound = rudder.RudderFeature().bind(context)
  hk = hooks.Hooks([("rudder", bound)])
  aux = hk.init(jax.random.key(0))
  traj = _trajectory(env, env_params, jax.random.key(1))
  # lr 0: the predictor stays at its initial parameters, so the redistribution is known.
  hp = {"rudder.lr": jnp.float32(0.0), "rudder.aux_weight": jnp.float32(0.5)}
  step_adv, degenerate, returns, signal, aux, metrics = jax.jit(
      lambda aux, traj, hp: grpo.step_advantages(hk, aux, traj, "grpo", hp,
                                                 jax.random.key(2), 0, None))(aux, traj, hp)
  cols = rudder.columns_of(traj, env.num_actions, True)
  expected = rudder.redistribute(bound.rudder.predict(aux["rudder_params"], cols.tokens),
                                 cols.rewards, cols.dones, cols.valid)
  np.testing.assert_allclose(signal.rewards, np.reshape(expected, (T, N, K)), atol=1e-6)
  np.testing.assert_allclose(signal.rewards.sum(0), returns, atol=1e-5)  # returns kept
  valid = np.asarray(traj.valid)
  np.testing.assert_allclose(step_adv, _numpy_step_advantages(signal.rewards, valid),
                             atol=2e-4)
  # Step 0 is GRPO's own: the scores to the bit, the same advantages and degenerate groups.
  np.testing.assert_array_equal(signal.step_scores[0], returns)
  plain, plain_degenerate = baselines.group_advantages(returns, kind="grpo")
  np.testing.assert_allclose(step_adv[0], plain, atol=1e-6)
  np.testing.assert_array_equal(degenerate, plain_degenerate)
  assert bool(degenerate[0]) and np.abs(np.asarray(step_adv[1:, 0])).max() > 0.1
  assert {"rudder_loss", "rudder_explained"} <= set(metrics)


@pytest.mark.parametrize("kind", ["mlp", "gru"])
def test_grpo_with_rudder_trains_end_to_end(kind):
  train = algos.make_train(_config(kind))
  assert {"rudder.lr", "rudder.aux_weight"} <= set(train.default_hparams)
  state, metrics = jax.jit(train)(jax.random.PRNGKey(0))
  for name in ("loss", "rudder_loss", "rudder_explained", "rudder_pivotal_share"):
    assert np.isfinite(np.asarray(metrics[name])).all(), (name, metrics[name])
  assert "rudder_params" in state.aux and int(state.update) == 2


def test_rudder_beside_a_hook_that_rewrites_the_scores_is_refused_in_one_line():
  c = _config()
  c.prm = prm.default_config()
  with pytest.raises(ConfigError, match=r"^config\.rudder\.enabled: in the grpo recipe "
                     r"RUDDER scores each step") as e:
    algos.validate_config(c)
  assert "\n" not in str(e.value)
  # A fork's pair: per-step scores from one hook, rewritten scores from another.
  class Steps(hooks.Bound):
    def shape_rewards(self, carry, signal, traj, hp, key, update, params):
      return signal._replace(step_scores=jnp.cumsum(signal.rewards, 0)), carry, {}

  class Rescore(hooks.Bound):
    def shape_rewards(self, carry, signal, traj, hp, key, update, params):
      return signal._replace(scores=2.0 * signal.scores), carry, {}

  env, env_params = envs.make(c.env_name, **c.env_kwargs)
  traj = _trajectory(env, env_params, jax.random.key(1))
  with pytest.raises(ValueError, match="GRPO cannot credit both") as e:
    grpo.step_advantages(hooks.Hooks([("steps", Steps()), ("rescore", Rescore())]), {},
                         traj, "grpo", {}, jax.random.key(0), 0, None)
  assert "\n" not in str(e.value)
