"""One program per bsuite sweep (the bsuite study, credit_jax/experiments/bsuite/): a chain
of credit_jax/envs/bsuite.py whose swept setting is data and whose episodes are padded to a
fixed length (`PaddedChain`), and its three registered forms (`PaddedUmbrellaChain`,
`PaddedMemoryChain`, `PaddedDiscountingChain`, registered by specs.py)."""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Sequence, Tuple

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces

from credit_jax.envs import base, bsuite, wrappers


@struct.dataclass
class PaddedState:
  inner: Any            # the chain's state (during padding: the finished episode's)
  setting: jax.Array    # [] int32 the swept field's value, kept across resets
  reset_key: jax.Array  # the key the current episode's start was drawn from
  t: jax.Array          # [] int32 steps taken in the current (real or padding) episode
  pad_left: jax.Array   # [] int32 padding steps left; 0: a real episode is running
  next_inner: Any       # the next real episode's start, drawn when the last one ended
  next_obs: jax.Array   # its first observation
  next_key: jax.Array   # the key it was drawn from


class PaddedChain(base.CreditEnv, wrappers.Wrapper):
  """One of bsuite's chains with the swept setting as data, so that the settings of a
  sweep (chain lengths, distractor counts, ...) run side by side in one compiled
  program, every episode lasting `pad_to` steps.

  The setting (`field`, a params field of the chain: `chain_length`, `memory_length`,
  `active_distractors`, `active_bits`, `mapping_seed`) is read from `params` at
  `reset` and then rides in the state (`PaddedState.setting`), kept through every
  auto-reset, so it can be set per run either in the params a recipe resets with or in
  a reset state (`with_setting`). A real episode is the chain's own, step for step (the
  same transitions, rewards, termination and `info["success"]`, from the same keys as
  gymnax's auto-reset `step` divides them); when it ends after `n < pad_to` steps, a
  padding episode of `pad_to - n` steps follows (observation `padding_observation()`,
  reward 0, the action ignored, no success, terminated at its last step), so one real
  and one padding episode fill exactly `pad_to` steps. The next real episode's start is
  drawn when the real one ends, from that step's reset key, as the unpadded chain's
  auto-reset draws it, so a rollout of `pad_to` steps per real episode meets the same
  episodes as the unpadded chain's rollout of `n` steps (tests/test_bsuite_padded.py).

  Episode end is data: episodic collectors (`rollout.collect_episodes`, `_groups`)
  mask everything after the real episode's end; continuing ones (PPO) see the padding
  episode as an episode of its own that pays 0.

  Args:
    inner: a chain of credit_jax/envs/bsuite.py (UmbrellaChain, MemoryChain,
      DiscountingChain).
    field: the params field swept.
    pad_to: steps per padded episode (>= the longest real episode it is used with).
  """

  wraps_state = True   # the chain's state rides in PaddedState.inner

  def __init__(self, inner: base.CreditEnv, field: str, pad_to: int):
    names = [f.name for f in dataclasses.fields(inner.default_params)]
    if field not in names:
      raise ValueError(f"field {field!r} is not a params field of {inner.name}: {names}")
    wrappers.Wrapper.__init__(self, inner)
    self.field = field
    self.pad_to = base.check_int("pad_to", pad_to, minimum=1)
    self.obs_shape = tuple(inner.obs_shape)
    self.deterministic_transitions = inner.deterministic_transitions

  @property
  def name(self) -> str:
    return f"{self.inner.name}/padded"

  def observation_space(self, params: Any = None) -> spaces.Box:
    space = self.inner.observation_space(params)
    return spaces.Box(-1.0, space.high, self.obs_shape, jnp.float32)

  def validate_params(self, params: Any) -> None:
    self.inner.validate_params(params)
    n = self.inner.episode_length(params)
    try:
      n = int(n)
    except (TypeError, jax.errors.ConcretizationTypeError):
      return
    if n > self.pad_to:
      raise ValueError(f"pad_to: {self.pad_to} is shorter than the episode of "
                       f"{self.field}={getattr(params, self.field)} ({n} steps)")

  def _params(self, params: Any, setting: jax.Array) -> Any:
    return params.replace(**{self.field: setting})

  def _divide(self, key: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """(transition key, reset key), as gymnax's auto-reset `step` (and CreditEnv's, for
    deterministic transitions) divide a step's key."""
    if self.deterministic_transitions:
      return key, key
    k = jax.random.split(key)
    return k[0], k[1]

  def reset_env(self, key: jax.Array, params: Any) -> Tuple[jax.Array, PaddedState]:
    setting = jnp.asarray(getattr(params, self.field), jnp.int32)
    obs, inner = self.inner.reset_env(key, self._params(params, setting))
    zero = jnp.zeros((), jnp.int32)
    return obs, PaddedState(inner=inner, setting=setting, reset_key=key, t=zero,
                            pad_left=zero, next_inner=inner, next_obs=obs, next_key=key)

  def with_setting(self, key_state: PaddedState, params: Any, setting: Any
                   ) -> Tuple[jax.Array, PaddedState]:
    """`(obs, state)`: the episode start `key_state` was drawn from, drawn again (same
    key) with the field set to `setting` ([] int); what `reset` with that setting in
    the params gives. For one state: vmap it over a batch."""
    params = self._params(params, jnp.asarray(setting, jnp.int32))
    return self.reset_env(key_state.reset_key, params)

  def is_terminated(self, state: PaddedState, params: Any) -> jax.Array:
    return jnp.zeros((), bool)

  def is_truncated(self, state: PaddedState, params: Any) -> jax.Array:
    return jnp.zeros((), bool)

  def step_env(self, key, state, action, params):
    raise NotImplementedError("PaddedChain steps with `step` (its auto-reset is its own)")

  def step(self, key: jax.Array, state: PaddedState, action: Any, params: Any = None
           ) -> Tuple[jax.Array, PaddedState, jax.Array, jax.Array, jax.Array,
                      Dict[str, Any]]:
    """gymnax's six values; see the class docstring for the padding episode."""
    if params is None:
      params = self.default_params
    p = self._params(params, state.setting)
    k_step, k_reset = self._divide(key)
    obs_st, inner_st, reward, ended, info = self.inner.step_env(k_step, state.inner,
                                                                action, p)
    obs_re, inner_re = self.inner.reset_env(k_reset, p)
    padding = state.pad_left > 0
    t = state.t + 1
    pad_obs = self.padding_observation()
    # a real step: the chain's own; at its end, padding for the steps left (if any)
    real_left = jnp.maximum(self.pad_to - t, 0)
    real_ended = jnp.logical_and(jnp.logical_not(padding), ended)
    to_pad = jnp.logical_and(real_ended, real_left > 0)
    # a padding step: at its last, the drawn next episode starts
    pad_ended = jnp.logical_and(padding, state.pad_left == 1)
    terminated = jnp.logical_or(real_ended, pad_ended)

    def pick(a, b, c):   # a: a real step continues, b: a fresh start, c: padding
      return jax.tree.map(
          lambda x, y, z: jnp.where(
              jnp.logical_or(pad_ended, jnp.logical_and(real_ended, ~to_pad)), y,
              jnp.where(jnp.logical_or(to_pad, jnp.logical_and(padding, ~pad_ended)),
                        z, x)), a, b, c)

    # the fresh start: after padding, the episode drawn at the real end; else this
    # step's reset
    start_inner = jax.tree.map(lambda a, b: jnp.where(padding, a, b), state.next_inner,
                               inner_re)
    start_obs = jnp.where(padding, state.next_obs, obs_re)
    start_key = jnp.where(padding, state.next_key, k_reset)
    inner = pick(inner_st, start_inner, state.inner)
    obs = pick(obs_st, start_obs, pad_obs)
    reset_key = pick(state.reset_key, start_key, state.reset_key)
    zero = jnp.zeros((), jnp.int32)
    new_t = jnp.where(terminated, zero, t)
    pad_left = jnp.where(to_pad, real_left,
                         jnp.where(padding, state.pad_left - 1, zero)).astype(jnp.int32)
    keep = jnp.logical_not(to_pad)
    next_inner = jax.tree.map(lambda old, new: jnp.where(keep, old, new),
                              state.next_inner, inner_re)
    next_obs = jnp.where(keep, state.next_obs, obs_re)
    next_key = jnp.where(keep, state.next_key, k_reset)
    new_state = PaddedState(inner=inner, setting=state.setting, reset_key=reset_key,
                            t=new_t, pad_left=pad_left, next_inner=next_inner,
                            next_obs=next_obs, next_key=next_key)
    final_obs = jnp.where(padding, pad_obs, obs_st)
    success = jnp.logical_and(jnp.logical_not(padding), info.get("success", False))
    out_info = {**{k: v for k, v in info.items() if k != "success"},
                "success": success, "padding": padding,
                "terminated": terminated, "truncated": jnp.zeros((), bool),
                "final_observation": final_obs}
    reward = jnp.where(padding, 0.0, reward).astype(jnp.float32)
    return obs, new_state, reward, terminated, jnp.zeros((), bool), out_info

  def padding_observation(self) -> jax.Array:
    return self.inner.padding_observation()


class PaddedUmbrellaChain(PaddedChain):
  """`PaddedChain` of UmbrellaChain: `field` "chain_length" (umbrella_length) or
  "active_distractors" (umbrella_distract, `n_distractor` the sweep's largest)."""

  def __init__(self, pad_to: int = 10, field: str = "chain_length",
               n_distractor: int = 20):
    super().__init__(bsuite.UmbrellaChain(n_distractor), field, pad_to)


class PaddedMemoryChain(PaddedChain):
  """`PaddedChain` of MemoryChain: `field` "memory_length" (memory_len) or
  "active_bits" (memory_size, `num_bits` the sweep's largest)."""

  def __init__(self, pad_to: int = 11, field: str = "memory_length", num_bits: int = 1):
    super().__init__(bsuite.MemoryChain(num_bits), field, pad_to)


class PaddedDiscountingChain(PaddedChain):
  """`PaddedChain` of DiscountingChain over `mapping_seed` (no padding: every episode
  lasts the longest horizon; the mapping seeds of all five bonus chains run in one
  program)."""

  def __init__(self, pad_to: int = 100, field: str = "mapping_seed",
               reward_horizons: Sequence[int] = bsuite.BSUITE_HORIZONS):
    super().__init__(bsuite.DiscountingChain(reward_horizons), field, pad_to)
