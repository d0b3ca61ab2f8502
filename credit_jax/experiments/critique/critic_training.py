"""Training and scoring the learned critic of the critique study (credit_jax/experiments/
critique/study.py): `CriticNet` reads an attempt and `learned_critic` is its critique, a
critic `critique.RetryWrapper` takes (credit_jax/addons/critique.py); `train_critic` fits it
to the oracle's labels, `train_critic_by_improvement` trains it without labels by REINFORCE
on whether the retry its critique guided succeeded, `localisation_accuracy` scores it
against the oracle, and `attempt_success` / `cumulative_success` read a batch of retry
episodes."""
from __future__ import annotations

from typing import Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from credit_jax.addons import critique

Array = jax.Array


def keychain_observations(env, start_state) -> Array:
  """[T, D] the observations of a KeyChain attempt from `start_state` (they do not depend
  on the actions: KeyChain's observation is a function of the step)."""
  times = jnp.arange(env.horizon, dtype=jnp.int32)
  return jax.vmap(lambda t: env.get_obs(start_state.replace(time=t)))(times)


class CriticNet(nn.Module):
  """Reads an attempt; returns (step logits [T + 1] (index T: nothing wrong), suggestion
  logits [T, A])."""
  horizon: int
  num_actions: int
  hidden: int = 128

  @nn.compact
  def __call__(self, obs: Array, actions: Array) -> Tuple[Array, Array]:
    t, a = self.horizon, self.num_actions
    x = jnp.concatenate([obs.reshape(t, -1), jax.nn.one_hot(actions, a)], axis=-1)
    x = nn.relu(nn.Dense(self.hidden)(x.reshape(-1)))
    x = nn.relu(nn.Dense(self.hidden)(x))
    return nn.Dense(t + 1)(x), nn.Dense(t * a)(x).reshape(t, a)


def learned_critic(env, start_state, actions, length, key, params) -> Array:
  """The critique `[3]` of `CriticNet` with parameters `params.critic_params`: the step it
  names, its suggestion there, and its probability of that step as the confidence."""
  del key
  net = CriticNet(env.horizon, env.num_actions)
  step_logits, suggest_logits = net.apply(params.critic_params,
                                          keychain_observations(env, start_state), actions)
  steps = jnp.arange(env.horizon + 1)
  step_logits = jnp.where((steps < length) | (steps == env.horizon), step_logits, -jnp.inf)
  probs = jax.nn.softmax(step_logits)
  t = jnp.argmax(probs)
  crit = jnp.stack([t.astype(jnp.float32),
                    jnp.argmax(suggest_logits[jnp.minimum(t, env.horizon - 1)]).astype(
                        jnp.float32), probs[t]])
  return jnp.where(t < env.horizon, crit, critique.no_critique())


def critic_labels(env, start_state, actions, length) -> Tuple[Array, Array, Array]:
  """(step [] int32 in [0, T], T for none; suggestion [] int32; critique [3]) of the oracle."""
  crit = critique.keychain_oracle(env, start_state, actions, length, None, None)
  step = jnp.where(crit[2] > 0, crit[0], env.horizon).astype(jnp.int32)
  return step, jnp.maximum(crit[1], 0).astype(jnp.int32), crit


def _random_attempts(env, env_params, key, batch):
  k_reset, k_act = jax.random.split(key)
  _, starts = jax.vmap(env.reset_env, (0, None))(jax.random.split(k_reset, batch), env_params)
  actions = jax.random.randint(k_act, (batch, env.horizon), 0, env.num_actions)
  return starts, actions


def train_critic(env, env_params, key, steps: int, batch: int = 256, lr: float = 1e-3,
                 hidden: int = 128):
  """Fits `CriticNet` to the oracle's labels on uniform-policy KeyChain attempts.

  Pure and jittable (vmap it over seeds); `steps` and `batch` are static.
  Returns:
    (params, losses [steps]).
  """
  net = CriticNet(env.horizon, env.num_actions, hidden)
  k_init, k_data = jax.random.split(key)
  t = env.horizon
  params = net.init(k_init, jnp.zeros((t,) + tuple(env.obs_shape)), jnp.zeros((t,), jnp.int32))
  opt = optax.adam(lr)

  def loss_fn(p, starts, actions):
    obs = jax.vmap(lambda s: keychain_observations(env, s))(starts)
    step, sugg, crit = jax.vmap(lambda s, a: critic_labels(env, s, a, t))(starts, actions)
    step_logits, suggest_logits = jax.vmap(lambda o, a: net.apply(p, o, a))(obs, actions)
    ce_step = optax.softmax_cross_entropy_with_integer_labels(step_logits, step)
    at = jnp.take_along_axis(suggest_logits, jnp.minimum(step, t - 1)[:, None, None],
                             axis=1)[:, 0]
    ce_sugg = optax.softmax_cross_entropy_with_integer_labels(at, sugg) * (crit[:, 2] > 0)
    return jnp.mean(ce_step + ce_sugg)

  def update(carry, k):
    p, o = carry
    loss, g = jax.value_and_grad(loss_fn)(p, *_random_attempts(env, env_params, k, batch))
    upd, o = opt.update(g, o, p)
    return (optax.apply_updates(p, upd), o), loss

  (params, _), losses = jax.lax.scan(update, (params, opt.init(params)),
                                     jax.random.split(k_data, steps))
  return params, losses


def train_critic_by_improvement(env, env_params, act_fn, policy_params, key, steps: int,
                                batch: int = 256, lr: float = 1e-3, hidden: int = 128):
  """Fits `CriticNet` by REINFORCE with the next attempt's improvement as its reward.

  Retroformer's signal (arXiv 2308.02151): no oracle labels. For failed uniform-policy
  KeyChain attempts the critic samples a critique (a step or "nothing", then a
  suggestion); the policy `act_fn(policy_params, obs, key) -> action` (one that reads a
  `critique.RetryWrapper`'s observation) retries the task once with it, and the critique's
  reward is whether that retry succeeded (the first attempt scored 0, so this is the change in
  success), minus the batch mean. Pure and jittable; `steps`, `batch` static.
  Returns:
    (params, rewards [steps]): the mean retry success per step.
  """
  net = CriticNet(env.horizon, env.num_actions, hidden)
  wrapper = critique.RetryWrapper(env, 2, critique.no_critic)
  params_w = critique.RetryParams(inner=env_params)
  t_max = env.horizon
  k_init, k_data = jax.random.split(key)
  params = net.init(k_init, jnp.zeros((t_max,) + tuple(env.obs_shape)),
                    jnp.zeros((t_max,), jnp.int32))
  opt = optax.adam(lr)

  def retry(start, crit, k):
    """[] float32: the second attempt from `start` with `crit` stored succeeds."""
    obs0 = jnp.asarray(env.get_obs(start), jnp.float32)
    state = critique.RetryState(inner=start, start=start, start_obs=obs0, attempt=jnp.int32(1),
                       t=jnp.int32(0), actions=jnp.full((t_max,), -1, jnp.int32),
                       critiques=crit[None], time=jnp.int32(0))
    obs = wrapper._obs(  # pylint: disable=protected-access
        obs0, state.critiques, state.t, state.attempt)

    def step(c, kk):
      state, obs, ok = c
      k_act, k_env = jax.random.split(kk)
      obs, state, _, _, info = wrapper.step_env(
          k_env, state, act_fn(policy_params, obs, k_act), params_w)
      return (state, obs, ok | info["attempt_success"]), None

    (_, _, ok), _ = jax.lax.scan(step, (state, obs, jnp.zeros((), bool)),
                                 jax.random.split(k, t_max))
    return ok.astype(jnp.float32)

  def loss_fn(p, k):
    k_att, k_step, k_sugg, k_retry = jax.random.split(k, 4)
    starts, actions = _random_attempts(env, env_params, k_att, batch)
    failed = jax.vmap(lambda s, a: critique.keychain_oracle(env, s, a, t_max, None, None))(
        starts, actions)[:, 2] > 0
    obs = jax.vmap(lambda s: keychain_observations(env, s))(starts)
    step_logits, sugg_logits = jax.vmap(lambda o, a: net.apply(p, o, a))(obs, actions)
    t = jax.random.categorical(k_step, step_logits)                          # [B]
    at = jnp.take_along_axis(sugg_logits, jnp.minimum(t, t_max - 1)[:, None, None],
                             axis=1)[:, 0]                                     # [B, A]
    sugg = jax.random.categorical(k_sugg, at)
    named = t < t_max
    logp = (jnp.take_along_axis(jax.nn.log_softmax(step_logits), t[:, None], 1)[:, 0]
            + named * jnp.take_along_axis(jax.nn.log_softmax(at), sugg[:, None], 1)[:, 0])
    crit = jnp.where(named[:, None], jnp.stack(
        [t.astype(jnp.float32), sugg.astype(jnp.float32), jnp.ones_like(logp)], -1),
        critique.no_critique())
    reward = jax.vmap(retry)(starts, crit, jax.random.split(k_retry, batch))
    w = failed.astype(jnp.float32)
    mean = jnp.sum(reward * w) / jnp.maximum(jnp.sum(w), 1.0)
    adv = jax.lax.stop_gradient(reward - mean)
    return -jnp.sum(w * adv * logp) / jnp.maximum(jnp.sum(w), 1.0), mean

  def update(carry, k):
    p, o = carry
    (_, mean), g = jax.value_and_grad(loss_fn, has_aux=True)(p, k)
    upd, o = opt.update(g, o, p)
    return (optax.apply_updates(p, upd), o), mean

  (params, _), rewards = jax.lax.scan(update, (params, opt.init(params)),
                                      jax.random.split(k_data, steps))
  return params, rewards


def localisation_accuracy(env, env_params, critic_params, key, batch: int = 1024):
  """([] step accuracy, [] step-and-suggestion accuracy) of the learned critic against the
  oracle on failed uniform-policy attempts (those the oracle has a critique for)."""
  starts, actions = _random_attempts(env, env_params, key, batch)
  params = critique.RetryParams(inner=env_params, critic_params=critic_params)
  t = env.horizon
  learned = jax.vmap(lambda s, a: learned_critic(env, s, a, t, None, params))(
      starts, actions)
  truth = jax.vmap(lambda s, a: critique.keychain_oracle(env, s, a, t, None, None))(starts, actions)
  failed = truth[:, 2] > 0
  step_ok = (learned[:, 0] == truth[:, 0]) & failed
  both = step_ok & (learned[:, 1] == truth[:, 1])
  n = jnp.maximum(jnp.sum(failed), 1)
  return jnp.sum(step_ok) / n, jnp.sum(both) / n


def attempt_success(traj, attempts: int) -> Array:
  """[R, B] float32: whether each attempt of each retry episode solved the task.

  Args:
    traj: a Trajectory `[T, B]` of `critique.RetryWrapper` episodes (`collect_episodes`),
      whose `info` holds `attempt`, `attempt_end` and `attempt_success`.
    attempts: R.
  Returns:
    `[R, B]`: 1.0 where attempt r ended in success (0.0 if it failed or never ran).
  """
  ok = traj.info["attempt_success"] & traj.valid                       # [T, B]
  onehot = jax.nn.one_hot(traj.info["attempt"], attempts, dtype=jnp.float32)  # [T, B, R]
  return jnp.moveaxis(jnp.max(onehot * ok[..., None], axis=0), -1, 0)


def cumulative_success(per_attempt: Array) -> Array:
  """[R, B] -> [R, B]: solved within the first r + 1 attempts (a running max)."""
  return jax.lax.cummax(per_attempt, axis=0)
