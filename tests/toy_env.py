"""A user's own environment, as the README's "Add an environment" writes it (for
tests/test_own_env.py): the target is shown, reward 1 iff the action names it."""
import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment

import credit_jax as cj


@struct.dataclass
class State(environment.EnvState):
  target: jax.Array


class Guess(cj.envs.CreditEnv):   # CreditEnv: a positive return counts as success
  num_actions = 4                  # a plain attribute in place of gymnax's property

  def __init__(self, num_actions: int = 4):
    self.num_actions, self.obs_shape = num_actions, (num_actions,)

  @property
  def default_params(self):
    return environment.EnvParams(max_steps_in_episode=1)

  def reset_env(self, key, params):
    state = State(time=0, target=jax.random.randint(key, (), 0, self.num_actions))
    return self.get_obs(state), state

  def get_obs(self, state, params=None, key=None):
    return jax.nn.one_hot(state.target, self.num_actions)

  def is_terminated(self, state, params):
    return state.time >= 1

  def step_env(self, key, state, action, params):
    reward = (action == state.target).astype(jnp.float32)
    state = state.replace(time=state.time + 1)
    return self.get_obs(state), state, reward, self.is_terminated(state, params), {}
