"""Learned credit, learning: the hindsight models converge to KeyChain's exact hindsight
distributions, the return predictor to the perfect predictor's redistribution, and each
learned-credit feature (RUDDER, HCA, COCOA) learns KeyChain inside the REINFORCE recipe
and inside PPO on whole episodes (`rollout = "episodes"`), seeded, with thresholds."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.addons import hindsight_credit, rudder
from credit_jax.experiments.learned_credit import exact_hindsight as keychain_hindsight
from credit_jax.experiments.learned_credit import probe as learned_probe
from credit_jax.algos import make_train, ppo, reinforce

from test_learned_credit import A, K, PARAMS, T, _obs, logits_fn

CONTEXTS = [(t, piv, cue) for t in range(T) for piv, cue in ((False, 0), (True, 0),
                                                              (True, 1))]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hca", "cocoa"])
def test_learned_hindsight_converges_to_the_exact_one(kind):
  env, params = envs.make("KeyChain-v0", horizon=T, num_pivotal=K, num_actions=A)
  cfg = hindsight_credit.add_config(ml_collections.ConfigDict(), kind, hidden_sizes=(32,),
                                    train_steps=8)[kind]
  model = hindsight_credit.Hindsight(kind, cfg, A, A + 2, (1.0,))

  @jax.jit
  def train(carry, key):
    traj = learned_probe.collect(env, params, logits_fn, PARAMS, key, 256)
    return model.train(carry, traj, 1.0, 1e-2, key, logits_fn(PARAMS, traj.obs))[0]

  carry = model.init(jax.random.key(0))
  for i in range(100):
    carry = train(carry, jax.random.key(i + 1))
  obs = jnp.asarray(np.stack([_obs(*c) for c in CONTEXTS]))
  success, failure = keychain_hindsight.keychain_hindsight(env, logits_fn, PARAMS, obs)
  prior = jax.nn.log_softmax(logits_fn(PARAMS, obs))
  learned = lambda z: jax.nn.softmax(model.net.apply(
      carry[model.owns[0]], obs, jnp.full((len(CONTEXTS), 1), z)) + prior)
  errors = [np.abs(learned(1.0) - success).max()]
  if kind == "hca":
    errors.append(np.abs(learned(0.0) - failure).max())
  # Measured: 0.071 (HCA), 0.09 (COCOA), the worst context of 12 (24 for HCA).
  assert max(errors) < 0.15, errors


@pytest.mark.slow
def test_learned_predictor_redistributes_like_the_perfect_one():
  horizon = 8
  env, params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=1, num_actions=2)
  cfg = rudder.add_config(ml_collections.ConfigDict()).rudder
  model = rudder.Rudder(cfg, 2, 4, horizon)
  policy = rollout.uniform_random_policy(2)

  @jax.jit
  def step(carry, key, u):
    k1, k2 = jax.random.split(key)
    traj = rollout.collect_episodes(env, params, policy, None, k1, 64, horizon)
    cols = rudder.columns_of(traj, 2, True)
    shaped, carry, metrics = model.step(carry, cols, 3e-3, 0.5, k2, u)
    return carry, metrics, shaped, traj

  carry = model.init(jax.random.key(0))
  for u in range(150):
    carry, metrics, shaped, traj = step(carry, jax.random.key(u + 1), u)
  # The perfect predictor (uniform policy, one pivotal step p): 1/2 before p, G from p on:
  # r'_0 = 1/2 (p > 0), r'_p = G - 1/2, 0 elsewhere.
  piv = np.asarray(traj.info["pivotal"])
  ret = np.asarray(traj.rewards).sum(0)
  exact = np.where(piv, ret[None] - 0.5, 0.0)
  exact[0] = np.where(piv[0], ret, 0.5)
  err = np.abs(np.asarray(shaped) - exact)
  # Measured: pivotal-step errors <= 0.05, distractor steps 0.01 on average.
  assert err[piv].max() < 0.15 and err[~piv].mean() < 0.05, (err[piv].max(),
                                                               err[~piv].mean())
  assert float(metrics["rudder_pivotal_share"]) > 0.7, metrics   # measured 0.80
  assert float(metrics["rudder_explained"]) > 0.95, metrics


def _config(option: str, objective: str):
  # HCA learns with a slower policy (its hindsight model must keep up): lr 3e-3.
  updates, lr = (100, 3e-3) if option == "hca" else (60, 1e-2)
  if objective == "ppo":   # PPO's epochs on whole episodes, GAE under its value head
    c = ppo.default_config()
    c.rollout, c.num_envs, c.num_steps = "episodes", 32, 10
    c.total_timesteps = updates * 32 * 10
    c.update_epochs, c.num_minibatches, c.clip_value_loss = 4, 1, False
    c.gamma, c.gae_lambda, c.ent_coef, c.anneal_lr, c.max_grad_norm = \
        1.0, 0.95, 0.0, False, 1.0
  else:
    c = reinforce.default_config()
    c.num_envs, c.num_updates, c.horizon = 32, updates, 10
  c.env_name = "KeyChain-v0"
  c.env_kwargs = ml_collections.ConfigDict({"horizon": 10, "num_pivotal": 2,
                                            "num_actions": 2, "cue_delay": 0})
  c.lr = lr
  if option == "rudder":
    rudder.add_config(c)
  else:
    hindsight_credit.add_config(c, option)
  return c


def _final_success(config, option, seeds=2):
  """Final success per seed; also checks what the feature reports (its loss, finite, and
  its parameters in the state), which tests/test_features_api.py checks for the other
  recipe / network pairs."""
  train = make_train(config)
  keys = jax.random.split(jax.random.key(0), seeds)
  state, metrics = jax.jit(jax.vmap(train))(keys)
  assert np.isfinite(np.asarray(metrics["loss"])).all()
  assert np.isfinite(np.asarray(metrics[f"{option}_loss"])).all()
  assert f"{option}_params" in state.aux
  return np.asarray(metrics["success"])[:, -10:].mean(axis=1)   # [seeds]


# KeyChain T = 10, k = 2, A = 2 (random success 1/4), 60 updates of 32 episodes (HCA 100).
@pytest.mark.slow
@pytest.mark.parametrize("option,objective,threshold", [
    ("rudder", "reinforce", 0.8), ("rudder", "ppo", 0.8), ("hca", "reinforce", 0.6),
    ("hca", "ppo", 0.6), ("cocoa", "reinforce", 0.8), ("cocoa", "ppo", 0.8)])
def test_each_option_learns_keychain(option, objective, threshold):
  success = _final_success(_config(option, objective), option)
  assert success.min() >= threshold, success
