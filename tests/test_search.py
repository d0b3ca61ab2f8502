"""Tests for credit_jax.search (batched tree search) and its mctx adapter.

Two tiny deterministic gymnax-style environments with known optima:
  * Bandit: one step, reward `arm_rewards[a]`.
  * Tree: depth 3, 3 actions; action 0 at the root pays a 0.1 lure at once, the only
    path (2, 1, 2) pays 1.0 at the end. Greedy on immediate reward fails; a search of
    the 39-node tree finds it.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment

from credit_jax import envs
from credit_jax import search as search_lib

@struct.dataclass
class BanditState(environment.EnvState):
  pass


@struct.dataclass
class BanditParams(environment.EnvParams):
  arm_rewards: jax.Array = struct.field(
      default_factory=lambda: jnp.array([0.1, 0.9, 0.3, 0.5], jnp.float32))
  max_steps_in_episode: int = 10


class Bandit(environment.Environment):
  """A one-step bandit; the observation is a constant."""

  def __init__(self, num_arms: int = 4):
    super().__init__()
    self.num_arms = num_arms

  @property
  def default_params(self):
    return BanditParams()

  def reset_env(self, key, params):
    return jnp.zeros((1,), jnp.float32), BanditState(time=jnp.int32(0))

  def step_env(self, key, state, action, params):
    reward = params.arm_rewards[action]
    next_state = BanditState(time=state.time + 1)
    return jnp.ones((1,), jnp.float32), next_state, reward, jnp.bool_(True), {}

  @property
  def num_actions(self):
    return self.num_arms


@struct.dataclass
class TreeState(environment.EnvState):
  depth: jax.Array
  code: jax.Array


@struct.dataclass
class TreeParams(environment.EnvParams):
  best_path: jax.Array = struct.field(default_factory=lambda: jnp.array([2, 1, 2], jnp.int32))
  lure: float = 0.1
  max_steps_in_episode: int = 100


class DeterministicTree(environment.Environment):
  """Depth-3 ternary tree: 1.0 at the end of `best_path`, a 0.1 lure for action 0 first."""

  depth = 3

  @property
  def default_params(self):
    return TreeParams()

  def _obs(self, state):
    return jnp.stack([state.depth, state.code]).astype(jnp.float32)

  def reset_env(self, key, params):
    state = TreeState(time=jnp.int32(0), depth=jnp.int32(0), code=jnp.int32(0))
    return self._obs(state), state

  def step_env(self, key, state, action, params):
    best_code = (params.best_path[0] * 3 + params.best_path[1]) * 3 + params.best_path[2]
    code = state.code * 3 + action
    depth = state.depth + 1
    terminated = depth >= self.depth
    reward = (jnp.where(terminated & (code == best_code), 1.0, 0.0)
              + jnp.where((state.depth == 0) & (action == 0), params.lure, 0.0))
    new = TreeState(time=state.time + 1, depth=depth, code=code)
    return self._obs(new), new, reward.astype(jnp.float32), terminated, {"code": code}

  @property
  def num_actions(self):
    return 3


def uniform_logits(params, obs):
  del params, obs
  return jnp.zeros((3,), jnp.float32)


def no_action_2_at_root(state):
  return jnp.where(state.depth == 0, jnp.array([True, True, False]), True)


def hinted_logits(params, obs):
  """A mildly informative prior: +0.3 on the best path's action at each depth."""
  del params
  best = jnp.array([2, 1, 2, 0])[obs[0].astype(jnp.int32)]
  return jnp.zeros((3,), jnp.float32).at[best].set(0.3)


def _roots(env, params, batch):
  keys = jax.random.split(jax.random.PRNGKey(0), batch)
  obs, states = jax.vmap(env.reset, (0, None))(keys, params)
  return obs, states


def _run(env, logits_fn, batch=2, key=0, exploration=1.25, **kwargs):
  params = env.default_params
  obs, states = _roots(env, params, batch)
  fn = jax.jit(search_lib.make_search(env, logits_fn, **kwargs))
  out = fn(None, params, jax.random.PRNGKey(key), states, obs, exploration=exploration)
  return out, obs, states


def _replay_reward(env, params, state, actions, length):
  """Plays `actions[:length]` with env.step (auto-reset) and returns the summed reward."""
  total, done = 0.0, False
  key = jax.random.PRNGKey(123)
  for t in range(int(length)):
    assert not done, "the trajectory continues past the end of its episode"
    _, state, reward, term, trunc, _ = env.step(key, state, int(actions[t]), params)
    total += float(reward)
    done = bool(term | trunc)
  return total, done


def test_bandit_finds_best_arm_and_replays():
  env = Bandit()
  out, _, states = _run(env, lambda p, o: jnp.zeros((4,)), num_simulations=8, max_depth=2)
  np.testing.assert_array_equal(out.root_action, [1, 1])
  np.testing.assert_array_equal(out.trajectory.actions[0], [1, 1])
  np.testing.assert_allclose(out.total_reward, [0.9, 0.9], rtol=1e-6)
  np.testing.assert_array_equal(out.length, [1, 1])
  assert bool(out.complete.all())
  np.testing.assert_array_equal(out.stats.success, [False, False])  # 0.9 < default threshold 1
  np.testing.assert_array_equal(out.stats.nodes_expanded, [4, 4])  # 4 arms, each once
  np.testing.assert_allclose(out.root_q[0], [0.1, 0.9, 0.3, 0.5], rtol=1e-6)
  state0 = jax.tree.map(lambda x: x[0], states)
  total, done = _replay_reward(env, env.default_params, state0, out.trajectory.actions[:, 0],
                               1)
  assert done and total == pytest.approx(float(out.total_reward[0]))


@pytest.mark.parametrize("selection", ["puct", "ucb1"])
def test_tree_finds_best_path_and_replays(selection):
  env = DeterministicTree()
  out, obs, states = _run(env, uniform_logits, num_simulations=64, max_depth=4,
                          selection=selection, rollout="greedy")
  for b in range(2):
    np.testing.assert_array_equal(out.trajectory.actions[:3, b], [2, 1, 2])
    assert float(out.total_reward[b]) == pytest.approx(1.0)
    assert int(out.length[b]) == 3 and bool(out.complete[b]) and bool(out.stats.success[b])
    state0 = jax.tree.map(lambda x: x[b], states)
    total, done = _replay_reward(env, env.default_params, state0, out.trajectory.actions[:, b],
                                 out.length[b])
    assert done and total == pytest.approx(float(out.total_reward[b]))
  # The replay records the observation acted on at each step and masks the tail.
  np.testing.assert_allclose(out.trajectory.obs[0], obs)
  np.testing.assert_allclose(out.trajectory.obs[1:3, 0], [[1.0, 2.0], [2.0, 7.0]])
  np.testing.assert_array_equal(out.trajectory.valid[:, 0], [True, True, True, False])
  np.testing.assert_array_equal(out.trajectory.terminated[:, 0], [False, False, True, False])
  np.testing.assert_allclose(out.trajectory.log_probs[:3, 0], np.log(1 / 3) * np.ones(3),
                             rtol=1e-5)
  # Every expansion adds a distinct node of the 39 below the root; env steps add rollouts.
  assert (out.stats.nodes_expanded <= 39).all()
  assert (out.stats.env_steps >= out.stats.nodes_expanded).all()
  assert (out.stats.tree_depth == 3).all()


def test_tree_value_only_leaves_count_steps_exactly():
  env = DeterministicTree()
  # A large UCB1 constant visits the whole tree (a small one leaves value-0 subtrees alone).
  out, _, _ = _run(env, uniform_logits, num_simulations=120, max_depth=3, selection="ucb1",
                   rollout_depth=0, exploration=10.0)
  np.testing.assert_array_equal(out.stats.nodes_expanded, [39, 39])  # all of it, once
  np.testing.assert_array_equal(out.stats.env_steps, out.stats.nodes_expanded)
  np.testing.assert_array_equal(out.trajectory.actions[:3, 0], [2, 1, 2])
  # Mean backups with a large constant spread visits: the lure's sure 0.1 can out-draw the
  # best path at the root, so the best trajectory (a max), not root_action, is the answer.
  np.testing.assert_allclose(out.root_q[:, 0], [0.1, 0.1], rtol=1e-6)
  np.testing.assert_array_equal(out.tree.num_nodes, [40, 40])


def test_action_mask_keeps_search_off_invalid_actions():
  env = DeterministicTree()
  out, _, _ = _run(env, uniform_logits, num_simulations=64, max_depth=3,
                   action_mask_fn=no_action_2_at_root)
  # Without action 2 at the root, the lure (0.1) is the best any episode can do.
  assert (out.trajectory.actions[0] != 2).all()
  np.testing.assert_allclose(out.total_reward, [0.1, 0.1], rtol=1e-6)
  assert (out.root_visits[:, 2] == 0).all()


def test_sampled_branching_expands_only_policy_proposals():
  env = Bandit(num_arms=32)
  rewards = jnp.zeros((32,)).at[7].set(1.0).at[20].set(0.4)
  params = BanditParams(arm_rewards=rewards)
  favoured = jnp.zeros((32,)).at[jnp.array([3, 7, 12, 20])].set(20.0)
  fn = jax.jit(search_lib.make_search(env, lambda p, o: favoured, num_simulations=6,
                                      max_depth=1, branching=4, selection="ucb1"))
  obs, states = _roots(env, params, 3)
  out = fn(None, params, jax.random.key(1), states, obs)  # typed keys work too
  np.testing.assert_array_equal(out.root_action, [7, 7, 7])
  assert bool(out.stats.success.all())
  visited = np.asarray(out.root_visits) > 0
  assert visited.sum(1).max() <= 4  # only 4 slots per node
  assert not visited[:, [a for a in range(32) if a not in (3, 7, 12, 20)]].any()


def test_jit_compiles_once_and_keys_change_sampled_rollouts():
  env = DeterministicTree()
  traces = []

  def logits_fn(params, obs):
    traces.append(1)
    return params * obs[0]  # traced params: a sweepable policy, no retrace
  fn = jax.jit(search_lib.make_search(env, logits_fn, num_simulations=16, max_depth=3,
                                      rollout="sample"))
  obs, states = _roots(env, env.default_params, 2)
  out1 = fn(jnp.zeros((3,)), env.default_params, jax.random.PRNGKey(0), states, obs,
            exploration=1.25)
  n_traces = len(traces)
  out2 = fn(jnp.ones((3,)), env.default_params, jax.random.PRNGKey(1), states, obs,
            exploration=2.0)
  assert len(traces) == n_traces
  for out in (out1, out2):
    for b in range(2):
      state0 = jax.tree.map(lambda x: x[b], states)
      total, _ = _replay_reward(env, env.default_params, state0,
                                out.trajectory.actions[:, b], out.length[b])
      assert total == pytest.approx(float(out.total_reward[b]))


def test_keychain_sampled_rollouts_find_successes_that_replay():
  # T=6, k=2, A=4: a random episode succeeds with probability 1/16.
  env, params = envs.make("KeyChain-v0", horizon=6, num_pivotal=2, num_actions=4)
  obs, states = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.PRNGKey(3), 4),
                                                params)
  fn = jax.jit(search_lib.make_search(env, lambda p, o: jnp.zeros((4,)), num_simulations=48,
                                      max_depth=6, rollout="sample"))
  out = fn(None, params, jax.random.PRNGKey(0), states, obs)
  assert int(out.stats.success.sum()) >= 3
  np.testing.assert_array_equal(out.stats.success, out.total_reward == 1.0)
  assert (out.length == 6).all() and out.complete.all()
  assert out.trajectory.info["pivotal"].sum(0).tolist() == [2, 2, 2, 2]
  assert (out.stats.env_steps > out.stats.nodes_expanded).all()  # rollouts are counted
  for b in range(4):
    state0 = jax.tree.map(lambda x: x[b], states)
    total, done = _replay_reward(env, params, state0, out.trajectory.actions[:, b], 6)
    assert done and total == float(out.total_reward[b])


def test_no_whole_tree_copy_inside_the_simulation_loop():
  """Each simulation must cost O(depth): no copy of a [B, N, ...] tree array per step."""
  env = DeterministicTree()
  num_simulations = 45  # N = 47, a dimension nothing else has
  obs, states = _roots(env, env.default_params, 3)
  for branching in (None, 2):
    fn = jax.jit(search_lib.make_search(env, uniform_logits, num_simulations=num_simulations,
                                        max_depth=3, branching=branching, rollout="sample"))
    hlo = fn.lower(None, env.default_params, jax.random.PRNGKey(0), states,
                   obs).compile().as_text()
    loop_code = [c for c in re.split(r"\n(?=\S.*\{\n)", hlo) if not c.startswith("ENTRY")]
    copies = [line.strip() for c in loop_code for line in c.splitlines()
              if re.search(r"= \S*\[3,47\S* copy(-start)?\(", line)]
    assert not copies, copies


def test_bad_roots_raise():
  env = DeterministicTree()
  obs, states = _roots(env, env.default_params, 2)
  for make in (search_lib.make_search, search_lib.make_mctx_search):
    fn = make(env, uniform_logits, num_simulations=4, max_depth=3)
    with pytest.raises(ValueError, match="leading batch dim"):
      fn(None, env.default_params, jax.random.PRNGKey(0), states, obs[:1])
  with pytest.raises(ValueError, match="branching"):
    search_lib.make_search(env, uniform_logits, num_simulations=4, max_depth=3, branching=5)
  with pytest.raises(ValueError, match="logits"):
    search_lib.make_search(env, lambda p, o: jnp.zeros((4,)), num_simulations=4,
                           max_depth=3)(None, env.default_params, jax.random.PRNGKey(0),
                                        states, obs)


def _mctx_action(env, logits_fn, num_simulations, max_depth, batch=2):
  fn = jax.jit(search_lib.make_mctx_search(env, logits_fn, num_simulations=num_simulations,
                                          max_depth=max_depth))
  obs, states = _roots(env, env.default_params, batch)
  # gumbel_scale=0: compare the searches, not Gumbel MuZero's exploration noise.
  out = fn(None, env.default_params, jax.random.PRNGKey(0), states, obs, gumbel_scale=0.0)
  assert out.action_weights.shape == (batch, env.num_actions)
  return np.asarray(out.action)


def test_mctx_and_ours_agree_on_bandit():
  env = Bandit()
  logits_fn = lambda p, o: jnp.zeros((4,))  # noqa: E731
  ours, _, _ = _run(env, logits_fn, num_simulations=8, max_depth=2)
  np.testing.assert_array_equal(_mctx_action(env, logits_fn, 8, 2), ours.root_action)
  np.testing.assert_array_equal(ours.root_action, [1, 1])


def test_mctx_and_ours_agree_on_tree():
  # Leaves valued by the (absent) value fn only: both must find the 1.0 by tree search.
  env = DeterministicTree()
  ours, _, _ = _run(env, hinted_logits, num_simulations=32, max_depth=3, rollout_depth=0)
  np.testing.assert_array_equal(ours.root_action, [2, 2])
  np.testing.assert_array_equal(ours.trajectory.actions[0], [2, 2])
  np.testing.assert_array_equal(_mctx_action(env, hinted_logits, 32, 3), [2, 2])


def test_mctx_adapter_respects_the_root_action_mask():
  env = DeterministicTree()
  fn = jax.jit(search_lib.make_mctx_search(env, hinted_logits, num_simulations=16,
                                          max_depth=3, action_mask_fn=no_action_2_at_root))
  obs, states = _roots(env, env.default_params, 2)
  out = fn(None, env.default_params, jax.random.PRNGKey(0), states, obs)
  assert (out.action != 2).all()
  np.testing.assert_allclose(out.action_weights[:, 2], 0.0, atol=1e-6)
