"""bsuite's three chains as bsuite defines them, on top of gymnax's JAX versions.

bsuite (Osband et al., "Behaviour Suite for Reinforcement Learning", ICLR 2020) probes
credit assignment with `umbrella_length` and `discounting_chain` and memory with
`memory_len`. gymnax ships the three environments (`UmbrellaChain-bsuite`,
`MemoryChain-bsuite`, `DiscountingChain-bsuite`); these adapters subclass them and fix
where gymnax's version departs from bsuite's definition (bsuite's
`environments/umbrella_chain.py`, `memory_chain.py`, `discounting_chain.py` and the
experiments' `sweep.py`), so that a result here is a result on bsuite's task. These
ids are the ones to use for bsuite's tasks; gymnax's ids still reach gymnax's versions,
listed as variants (`credit_jax.envs.GYMNAX_VARIANTS`, `describe_env`):

  id                           experiment          bsuite setting swept
  "bsuite/UmbrellaChain-v0"    umbrella_length     chain_length (params), n_distractor 20
  "bsuite/MemoryChain-v0"      memory_len          memory_length (params), num_bits 1
  "bsuite/DiscountingChain-v0" discounting_chain   mapping_seed (params) 0..19

What each adapter changes, and why:

  * UmbrellaChain. (1) `n_distractor` defaults to 20, bsuite's umbrella_length setting
    (gymnax: 0, so its observation has none of the 20 iid Bernoulli(1/2) bits that make
    the problem one of credit assignment under noise). (2) No time limit by default
    (gymnax: `max_steps_in_episode = 100`, so a chain longer than 100 steps is truncated
    before its final, only informative reward; bsuite has no limit). (3) The final step
    is a termination only (gymnax at chain_length 100 flags it as terminated *and*
    truncated). Unchanged: the umbrella is taken at step 1, the first observation shows
    a random `has_umbrella`, every step but the last pays a random +-1, the last pays +1
    for the right umbrella and -1 otherwise, the episode lasts `chain_length` steps.
  * MemoryChain. gymnax's dynamics are bsuite's, checked line by line: bsuite's `_step`
    returns the observation of the step's *starting* time, so the context (+-1, bit
    i at index 2 + i) is seen twice (in the reset observation and in the first step's),
    the query at the step that returns time `memory_length - 1`, and an episode lasts
    `memory_length + 1` steps, the last one answered (+1 right, -1 wrong, 0 before).
    These are bsuite's, kept as they are. What changes: no time limit by default
    (gymnax: 1000, which truncates `memory_length >= 1000` before the answer), and the
    observation space is [-1, 1] (the context is -1 or +1; gymnax declares [0, 2 n]).
  * DiscountingChain. (1) The bonus chain is `mapping_seed % n_actions`, as bsuite's
    `mapping_seed % 5` (gymnax indexes the reward array with `mapping_seed` itself: 0,
    its default, puts the bonus on the horizon-1 chain, and a value >= 5 silently
    drops it, so 15 of bsuite's 20 settings would have no bonus at all); it is a params
    field, so the 20 settings vmap. (2) The episode *terminates* at step 100 (gymnax's
    never terminates and ends by truncation at its time limit, so a bootstrapping
    learner would add the value of a state after the end). (3) The time feature is
    `t / episode length`, independent of any time limit a user sets. Unchanged: the
    first action picks one of 5 chains with reward horizons (1, 3, 10, 30, 100); the
    chain pays its reward, 1 or 1.1 for the bonus chain, once, at that step; the
    observation is (context: -1 then the chosen chain, t / 100).

Observations are flat `[D]` float32 vectors (bsuite's are `[1, D]`). Episodes never
truncate unless `max_steps_in_episode` is set below their length (then truncation, as
everywhere in credit_jax, never coincides with a termination).

Success (`info["success"]`, bool, True only at an episode's last step; what recipes
report as `success`, see `credit_jax/episodes.py`): umbrella, the umbrella was
right (the final reward is +1; the return is no guide, the distractor rewards add to
it); memory, the recall was right; discounting, the bonus chain was chosen (return 1.1;
every chain pays 1, so a positive return is no guide either).

Beyond bsuite: any `chain_length` / `memory_length` >= 1 (bsuite's sweeps stop at 100),
and `DiscountingChain(reward_horizons=...)` for chains past 100 steps (the episode then
lasts `max(reward_horizons)` steps).

umbrella_distract (chain_length 20, n_distractor swept) and memory_size (memory_length
2, num_bits swept) change the observation's size; so that their settings share one
program, `UmbrellaParams.active_distractors` and `MemoryParams.active_bits` (traced,
default: all of `n_distractor` / `num_bits`, which is bsuite's chain unchanged) show only
the first bits and set the rest to 0, and MemoryChain draws its query among the active
bits. The same draws as the chain of that size: the bits are drawn for the largest size,
and a prefix of a draw is the draw of the prefix (JAX's partitionable threefry).

Each chain's `padding_observation()` is what the bsuite study's `PaddedChain`
(credit_jax/experiments/bsuite/padded.py) shows on a padding step: a chain whose swept
setting is data and whose episodes are padded to a fixed length, so that a sweep's
settings run in one compiled program.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces
from gymnax.environments.bsuite import discounting_chain as gx_discounting
from gymnax.environments.bsuite import memory_chain as gx_memory
from gymnax.environments.bsuite import umbrella_chain as gx_umbrella

from credit_jax.envs import base

BSUITE_HORIZONS = (1, 3, 10, 30, 100)   # discounting_chain's reward horizons
_BONUS = 0.1                              # the bonus chain pays 1 + BONUS


@struct.dataclass
class UmbrellaParams(environment.EnvParams):
  chain_length: int = 10                         # steps per episode (bsuite: 1..100)
  max_steps_in_episode: int = base.MAX_STEPS     # no time limit (gymnax: 100)
  active_distractors: int = 20                   # distractor bits shown (<= n_distractor;
                                                 # the rest read 0: umbrella_distract's
                                                 # settings padded into one program)


@struct.dataclass
class MemoryParams(environment.EnvParams):
  memory_length: int = 5                         # steps between context and query
  max_steps_in_episode: int = base.MAX_STEPS     # no time limit (gymnax: 1000)
  active_bits: int = 1                           # context bits drawn and queried (<=
                                                 # num_bits; the rest read 0: memory_size's
                                                 # settings padded into one program)


@struct.dataclass
class DiscountingParams(environment.EnvParams):
  reward_timestep: Any = None                    # [n_actions] int32 each chain's horizon
                                                 # (default_params fills it in)
  mapping_seed: int = 0                          # bonus chain = mapping_seed % n_actions
  optimal_return: float = 1.0 + _BONUS            # the bonus chain's reward
  max_steps_in_episode: int = base.MAX_STEPS     # no time limit (episodes end at the
                                                 # longest horizon)


class UmbrellaChain(base.CreditEnv, gx_umbrella.UmbrellaChain):
  """bsuite's UmbrellaChain (umbrella_length): see the module docstring."""

  name = "bsuite/UmbrellaChain-v0"

  def __init__(self, n_distractor: int = 20):
    gx_umbrella.UmbrellaChain.__init__(
        self, base.check_int("n_distractor", n_distractor, minimum=0))
    self.obs_shape = (3 + self.n_distractor,)

  @property
  def default_params(self) -> UmbrellaParams:
    return UmbrellaParams(active_distractors=self.n_distractor)

  def validate_params(self, params: UmbrellaParams) -> None:
    super().validate_params(params)
    base.check_param_range("chain_length", params.chain_length, 1, base.MAX_STEPS,
                           integral=True)
    base.check_param_range("active_distractors", params.active_distractors, 0,
                           self.n_distractor, integral=True)

  def get_obs(self, state: Any, key: jax.Array, params: UmbrellaParams) -> jax.Array:
    """[3 + n_distractor] float32: gymnax's (need, has, 1 - t / L, the bits), the bits
    past `params.active_distractors` set to 0."""
    obs = gx_umbrella.UmbrellaChain.get_obs(self, state, key, params)
    shown = jnp.arange(self.n_distractor) < params.active_distractors
    return obs.at[3:].set(jnp.where(shown, obs[3:], 0.0))

  def episode_length(self, params: UmbrellaParams) -> jax.Array:
    """[] int32: steps per episode (`chain_length`)."""
    return jnp.asarray(params.chain_length, jnp.int32)

  def padding_observation(self) -> jax.Array:
    """[3 + n_distractor] float32 shown on a padding step (`PaddedChain`): zeros with
    the time feature at -1, a value no real step shows (it lies in [0, 1])."""
    return jnp.zeros(self.obs_shape, jnp.float32).at[2].set(-1.0)

  def step_env(self, key: jax.Array, state: Any, action: Any, params: UmbrellaParams
               ) -> Tuple[jax.Array, Any, jax.Array, jax.Array, Dict[str, Any]]:
    obs, state, reward, terminated, info = gx_umbrella.UmbrellaChain.step_env(
        self, key, state, jnp.asarray(action, jnp.int32), params)
    right = state.has_umbrella == state.need_umbrella
    info = {**info, "success": jnp.logical_and(terminated, right)}
    return obs, state, jnp.asarray(reward, jnp.float32), terminated, info


class MemoryChain(base.CreditEnv, gx_memory.MemoryChain):
  """bsuite's MemoryChain (memory_len): see the module docstring."""

  name = "bsuite/MemoryChain-v0"
  deterministic_transitions = True   # step_env ignores its key

  def __init__(self, num_bits: int = 1):
    gx_memory.MemoryChain.__init__(self, base.check_int("num_bits", num_bits, minimum=1))
    self.obs_shape = (self.num_bits + 2,)

  @property
  def default_params(self) -> MemoryParams:
    return MemoryParams(active_bits=self.num_bits)

  def validate_params(self, params: MemoryParams) -> None:
    super().validate_params(params)
    base.check_param_range("memory_length", params.memory_length, 1,
                           base.MAX_STEPS - 1, integral=True)
    base.check_param_range("active_bits", params.active_bits, 1, self.num_bits,
                           integral=True)

  def observation_space(self, params: Any = None) -> spaces.Box:
    # (time left, query index, context +-1): the query is an index < num_bits
    return spaces.Box(-1.0, float(max(1, self.num_bits - 1)), self.obs_shape, jnp.float32)

  def reset_env(self, key: jax.Array, params: MemoryParams) -> Tuple[jax.Array, Any]:
    """gymnax's reset (the same draws), the query drawn among the first
    `params.active_bits` bits (gymnax: all `num_bits`; equal at the default)."""
    key_context, key_query = jax.random.split(key)
    context = jax.random.bernoulli(key_context, p=0.5, shape=(self.num_bits,))
    query = jax.random.randint(key_query, minval=0, maxval=params.active_bits, shape=())
    state = gx_memory.EnvState(context=jnp.int32(context), query=jnp.int32(query),
                               total_perfect=jnp.int32(0), total_regret=jnp.float32(0),
                               time=jnp.int32(0))
    return self.get_obs(state, params), state

  def get_obs(self, state: Any, params: MemoryParams, key: Any = None) -> jax.Array:
    """[num_bits + 2] float32: gymnax's (time left, query, context), the context bits
    past `params.active_bits` set to 0."""
    obs = gx_memory.MemoryChain.get_obs(self, state, params)
    shown = jnp.arange(self.num_bits) < params.active_bits
    return obs.at[2:].set(jnp.where(shown, obs[2:], 0.0))

  def episode_length(self, params: MemoryParams) -> jax.Array:
    """[] int32: steps per episode (`memory_length + 1`, bsuite's)."""
    return jnp.asarray(params.memory_length, jnp.int32) + 1

  def padding_observation(self) -> jax.Array:
    """[num_bits + 2] float32 shown on a padding step (`PaddedChain`): zeros with the
    time feature at -1 (a real step's lies in [0, 1])."""
    return jnp.zeros(self.obs_shape, jnp.float32).at[0].set(-1.0)

  def step_env(self, key: jax.Array, state: Any, action: Any, params: MemoryParams
               ) -> Tuple[jax.Array, Any, jax.Array, jax.Array, Dict[str, Any]]:
    action = jnp.asarray(action, jnp.int32)
    right = action == state.context[state.query]
    obs, state, reward, terminated, info = gx_memory.MemoryChain.step_env(
        self, key, state, action, params)
    info = {**info, "success": jnp.logical_and(terminated, right)}
    return obs, state, jnp.asarray(reward, jnp.float32), terminated, info


class DiscountingChain(base.CreditEnv, gx_discounting.DiscountingChain):
  """bsuite's DiscountingChain (discounting_chain): see the module docstring.

  Args:
    reward_horizons: the step at which each chain pays (static: it fixes the number of
      actions and the episode length `max(reward_horizons)`); bsuite's (1, 3, 10, 30,
      100) by default.
  """

  name = "bsuite/DiscountingChain-v0"
  deterministic_transitions = True   # step_env ignores its key

  def __init__(self, reward_horizons: Sequence[int] = BSUITE_HORIZONS):
    horizons = tuple(base.check_int("reward_horizons", h, minimum=1)
                     for h in reward_horizons)
    if len(horizons) < 2 or len(set(horizons)) != len(horizons):
      raise ValueError(f"reward_horizons must be >= 2 distinct steps, got {horizons}")
    gx_discounting.DiscountingChain.__init__(self, n_actions=len(horizons))
    self.reward_horizons = horizons
    self.episode_len = max(horizons)
    self.obs_shape = (2,)

  @property
  def default_params(self) -> DiscountingParams:
    return DiscountingParams(reward_timestep=jnp.asarray(self.reward_horizons, jnp.int32))

  def validate_params(self, params: DiscountingParams) -> None:
    super().validate_params(params)
    base.check_param_range("mapping_seed", params.mapping_seed, 0, base.MAX_STEPS,
                           integral=True)

  def observation_space(self, params: Any = None) -> spaces.Box:
    return spaces.Box(-1.0, float(self.n_actions), self.obs_shape, jnp.float32)

  def episode_length(self, params: DiscountingParams) -> jax.Array:
    """[] int32: steps per episode (the longest reward horizon)."""
    return jnp.int32(self.episode_len)

  def padding_observation(self) -> jax.Array:
    """[2] float32 shown on a padding step (`PaddedChain`): time feature -1."""
    return jnp.asarray([-1.0, -1.0], jnp.float32)

  def bonus_chain(self, params: DiscountingParams) -> jax.Array:
    """[] int32: the chain that pays 1 + BONUS (bsuite: `mapping_seed % n_actions`)."""
    return jnp.asarray(params.mapping_seed, jnp.int32) % self.n_actions

  def reset_env(self, key: jax.Array, params: DiscountingParams
                ) -> Tuple[jax.Array, Any]:
    del key
    chains = jnp.arange(self.n_actions)
    rewards = jnp.where(chains == self.bonus_chain(params),
                        jnp.float32(params.optimal_return), jnp.float32(1.0))
    state = gx_discounting.EnvState(rewards=rewards, context=jnp.int32(-1),
                                    time=jnp.int32(0))
    return self.get_obs(state, params), state

  def get_obs(self, state: Any, params: Any = None, key: Any = None) -> jax.Array:
    """[2] float32: (context: -1 before the first action, then the chain; t / length)."""
    return jnp.stack([jnp.asarray(state.context, jnp.float32),
                      jnp.asarray(state.time, jnp.float32) / self.episode_len])

  def is_terminated(self, state: Any, params: Any) -> jax.Array:
    return state.time >= self.episode_len

  def step_env(self, key: jax.Array, state: Any, action: Any, params: DiscountingParams
               ) -> Tuple[jax.Array, Any, jax.Array, jax.Array, Dict[str, Any]]:
    action = jnp.clip(jnp.asarray(action, jnp.int32), 0, self.n_actions - 1)
    obs, state, reward, terminated, info = gx_discounting.DiscountingChain.step_env(
        self, key, state, action, params)
    state = state.replace(context=jnp.asarray(state.context, jnp.int32))
    bonus = state.context == self.bonus_chain(params)
    info = {**info, "success": jnp.logical_and(terminated, bonus)}
    return obs, state, jnp.asarray(reward, jnp.float32), terminated, info


__all__ = ["BSUITE_HORIZONS", "DiscountingChain", "DiscountingParams", "MemoryChain",
           "MemoryParams", "UmbrellaChain", "UmbrellaParams"]
