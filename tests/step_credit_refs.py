"""NumPy references for the step-credit tests: KeyChain's transitions rewritten from its
documented semantics, exact state values by enumerating every action sequence, and the
small policies and environments the tests share."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment

from credit_jax import nets
from credit_jax.envs import base
from credit_jax.types import PresampledPolicy, SequencePolicy


def keychain_obs(positions, cues, time, horizon, num_actions):
  """KeyChain's observation with cue_delay 0: [one-hot cue, pivotal flag, t / T]."""
  obs = np.zeros(num_actions + 2, np.float64)
  hit = np.flatnonzero(np.asarray(positions) == time)
  if hit.size:
    obs[int(cues[hit[0]])] = 1.0
    obs[num_actions] = 1.0
  obs[num_actions + 1] = time / horizon
  return obs


def softmax(z):
  z = z - np.max(z)
  e = np.exp(z)
  return e / e.sum()


def keychain_value(positions, cues, all_correct, time, horizon, num_actions, probs_fn,
                   memory=None, memory_fn=None, gamma=1.0):
  """Exact expected discounted return from a KeyChain state, by enumerating actions.

  `probs_fn(obs, memory) -> [A]` is the policy; `memory_fn(memory, obs, action,
  reward) -> memory` its carry update (None: no memory).
  """
  if time >= horizon:
    return 0.0
  obs = keychain_obs(positions, cues, time, horizon, num_actions)
  probs = probs_fn(obs, memory)
  hit = np.flatnonzero(np.asarray(positions) == time)
  value = 0.0
  for a in range(num_actions):
    right = all_correct and (not hit.size or int(cues[hit[0]]) == a)
    last = time + 1 >= horizon
    reward = float(last and right)
    nxt = memory_fn(memory, obs, a, reward) if memory_fn is not None else None
    future = 0.0 if last else keychain_value(positions, cues, right, time + 1, horizon,
                                             num_actions, probs_fn, nxt, memory_fn, gamma)
    value += probs[a] * (reward + gamma * future)
  return value


def linear_logits(weights):
  """A stateless policy `softmax(W obs)`: (PresampledPolicy, NumPy probs_fn)."""
  w = jnp.asarray(weights, jnp.float32)

  def act(params, obs, noise):
    logits = w @ obs
    action = nets.categorical_sample_with_noise(logits, noise)
    return action, nets.categorical_log_prob(logits, action), {}

  policy = PresampledPolicy(
      draw=lambda key: nets.categorical_noise(key, w.shape[0]), act=act)
  return policy, lambda obs, memory: softmax(np.asarray(weights, np.float64) @ obs)


def memory_policy(weights, memory_weights, carry_extras=False):
  """A `SequencePolicy` whose carry is the sum of the cues seen so far and whose logits
  are `W obs + U carry + prev_action bonus`, so its values depend on the restored carry.
  With `carry_extras` the carry after each step is stored in `extras["carry"]`.
  Returns (policy, probs_fn, memory_fn) for `keychain_value`."""
  w = jnp.asarray(weights, jnp.float32)
  u = jnp.asarray(memory_weights, jnp.float32)
  num_actions = w.shape[0]

  def act(params, carry, obs, prev_action, prev_reward, noise):
    logits = w @ obs + u @ carry + 0.5 * (jnp.arange(num_actions) == prev_action)
    action = nets.categorical_sample_with_noise(logits, noise)
    carry = carry + obs[:num_actions]
    extras = {"carry": carry} if carry_extras else {}
    return carry, action, nets.categorical_log_prob(logits, action), extras

  policy = SequencePolicy(
      initial_carry=lambda: jnp.zeros((num_actions,), jnp.float32),
      draw=lambda key: nets.categorical_noise(key, num_actions), act=act)

  def probs_fn(obs, memory):
    carry, prev = memory
    bonus = 0.5 * (np.arange(num_actions) == prev)
    return softmax(np.asarray(weights, np.float64) @ obs
                   + np.asarray(memory_weights, np.float64) @ carry + bonus)

  def memory_fn(memory, obs, action, reward):
    return (memory[0] + obs[:num_actions], action)

  return policy, probs_fn, memory_fn


@struct.dataclass
class SlipState(environment.EnvState):
  pos: jax.Array
  time: jax.Array


@struct.dataclass
class SlipParams(environment.EnvParams):
  max_steps_in_episode: int = 5
  slip: float = 0.25


class SlipChain(base.CreditEnv):
  """A chain 0..n with random transitions: action 1 moves right, 0 left, and with
  probability `slip` the move goes the other way; reaching n terminates with reward 1;
  the time limit truncates. Exercises the vines' environment keys and truncation."""

  def __init__(self, length: int = 3):
    super().__init__()
    self.length = length
    self.obs_shape = (length + 1,)

  @property
  def num_actions(self):
    return 2

  @property
  def default_params(self):
    return SlipParams()

  def reset_env(self, key, params):
    state = SlipState(pos=jnp.zeros((), jnp.int32), time=jnp.zeros((), jnp.int32))
    return self.get_obs(state), state

  def step_env(self, key, state, action, params):
    slip = jax.random.uniform(key) < params.slip
    move = jnp.where(jnp.logical_xor(action == 1, slip), 1, -1)
    pos = jnp.clip(state.pos + move, 0, self.length)
    state = SlipState(pos=pos, time=state.time + 1)
    terminated = pos == self.length
    return self.get_obs(state), state, terminated.astype(jnp.float32), terminated, {}

  def is_terminated(self, state, params):
    return state.pos == self.length

  def get_obs(self, state, params=None, key=None):
    return (jnp.arange(self.length + 1) == state.pos).astype(jnp.float32)


@functools.lru_cache
def _slip_table(length, limit, slip, p_right, gamma):
  """V[pos, time] of SlipChain under a policy going right with probability p_right."""
  value = np.zeros((length + 1, limit + 1))
  for time in range(limit - 1, -1, -1):
    for pos in range(length):
      v = 0.0
      for action, pa in ((1, p_right), (0, 1.0 - p_right)):
        for slipped, ps in ((False, 1 - slip), (True, slip)):
          step = 1 if (action == 1) != slipped else -1
          nxt = min(max(pos + step, 0), length)
          v += pa * ps * (1.0 if nxt == length else gamma * value[nxt, time + 1])
      value[pos, time] = v
  return value


def slip_value(pos, time, length, limit, slip, p_right, gamma=1.0):
  return _slip_table(length, limit, slip, p_right, gamma)[pos, time]
