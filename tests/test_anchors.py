"""Tests for GiGPO's estimator (credit_jax/addons/gigpo.py): GiGPO's anchor groups and step advantages against a
brute-force NumPy grouping (random states with many repeats, KeyChain groups by state
and by observation), forced hash collisions, jit/vmap, the combination with GRPO's."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import baselines, envs, returns, rollout
from credit_jax.addons import gigpo


def _brute_force(leaves, step_returns, valid, kind, eps=1e-6):
  """Groups by comparing every pair of valid steps' leaves; advantages per group."""
  horizon, k = valid.shape
  cells = [(t, j) for t in range(horizon) for j in range(k) if valid[t, j]]
  same = lambda a, b: all(np.atleast_1d(x[a]).tobytes() == np.atleast_1d(x[b]).tobytes()
                          for x in leaves)
  label = {}
  reps = []
  for c in cells:
    for r_i, r in enumerate(reps):
      if same(c, r):
        label[c] = r_i
        break
    else:
      label[c] = len(reps)
      reps.append(c)
  adv = np.zeros((horizon, k))
  degenerate = anchored = 0
  for g in range(len(reps)):
    members = [c for c in cells if label[c] == g]
    g_ret = np.array([step_returns[c] for c in members], np.float64)
    if len(members) < 2 or np.all(g_ret == g_ret[0]):
      degenerate += 1
      continue
    anchored += len(members)
    centred = g_ret - g_ret.mean()
    if kind == "grpo":
      centred = centred / (g_ret.std(ddof=1) + eps)
    for c, a in zip(members, centred):
      adv[c] = a
  return label, adv, len(reps), degenerate, anchored


def _random_case(seed, horizon=12, k=6):
  rng = np.random.default_rng(seed)
  leaves = [rng.integers(0, 2, (horizon, k, 2)).astype(np.int32),
            rng.choice(np.float32([0.0, 0.5]), (horizon, k)),
            rng.random((horizon, k)) < 0.5]
  step_returns = rng.integers(0, 3, (horizon, k)).astype(np.float32)
  lengths = rng.integers(horizon // 2, horizon + 1, k)
  valid = np.arange(horizon)[:, None] < lengths[None]
  return leaves, step_returns, valid


def _check_partition(group, label, valid):
  cells = list(label)
  for a in cells:
    for b in cells:
      assert (group[a] == group[b]) == (label[a] == label[b]), (a, b)


@pytest.mark.parametrize("method", gigpo.METHODS)
@pytest.mark.parametrize("kind", gigpo.KINDS)
@pytest.mark.parametrize("seed", [0, 1])
def test_groups_and_advantages_equal_brute_force(kind, seed, method):
  leaves, step_returns, valid = _random_case(seed)
  tree = {"a": jnp.asarray(leaves[0]), "b": jnp.asarray(leaves[1]),
          "c": jnp.asarray(leaves[2])}
  groups = jax.jit(gigpo.anchor_groups, static_argnames=("method",))(
      tree, jnp.asarray(valid), method=method)
  adv, stats = jax.jit(gigpo.anchor_advantages, static_argnames=("kind", "method"))(
      tree, jnp.asarray(step_returns), jnp.asarray(valid), kind=kind, method=method)
  label, want, num_groups, degenerate, anchored = _brute_force(leaves, step_returns,
                                                               valid, kind)
  group = np.asarray(groups.group)
  _check_partition(group, label, valid)
  # Each group is named by its first step (index t K + k); invalid steps by -1.
  k = valid.shape[1]
  for c in label:
    first = min(d for d in label if label[d] == label[c])
    assert group[c] == first[0] * k + first[1]
  assert np.all(group[~valid] == -1)
  sizes = {g: sum(1 for c in label if label[c] == g) for g in set(label.values())}
  for c in label:
    assert int(groups.size[c]) == sizes[label[c]]
  assert np.all(np.asarray(groups.size)[~valid] == 0)
  np.testing.assert_allclose(adv, want, rtol=1e-5, atol=1e-6)
  assert int(stats["num_groups"]) == num_groups == int(groups.num_groups)
  assert int(stats["degenerate"]) == degenerate
  assert int(stats["anchored_steps"]) == anchored
  assert int(stats["unresolved"]) == 0


def test_collisions_are_resolved_by_equality():
  leaves, step_returns, valid = _random_case(2)
  tree = tuple(jnp.asarray(x) for x in leaves)
  collide = lambda words: jnp.zeros(words.shape[:1], jnp.uint32)    # every hash equal
  parity = lambda words: jnp.sum(words, axis=-1) % 2                 # half collide
  base = jax.jit(gigpo.anchor_advantages)(tree, jnp.asarray(step_returns),
                                            jnp.asarray(valid))
  label = _brute_force(leaves, step_returns, valid, "grpo")[0]
  distinct = len(set(label.values()))
  for fn in (collide, parity):
    for method, probes in (("sort", 1), ("table", distinct)):
      adv, stats = jax.jit(functools.partial(
          gigpo.anchor_advantages, method=method, probes=probes, hash_fn=fn))(
              tree, jnp.asarray(step_returns), jnp.asarray(valid))
      groups = jax.jit(functools.partial(gigpo.anchor_groups, method=method,
                                         probes=probes, hash_fn=fn))(tree, jnp.asarray(valid))
      _check_partition(np.asarray(groups.group), label, valid)
      np.testing.assert_allclose(adv, base[0], rtol=1e-6, atol=1e-7)
  # Too few probes for a constant hash: the states left over become groups of one,
  # counted, and no two different states ever share a group.
  groups = jax.jit(functools.partial(gigpo.anchor_groups, probes=3, hash_fn=collide))(
      tree, jnp.asarray(valid))
  group = np.asarray(groups.group)
  assert int(groups.unresolved) > 0 and int(groups.num_groups) > distinct
  for a in label:
    for b in label:
      if group[a] == group[b]:
        assert label[a] == label[b]


def test_floats_compare_by_their_bits():
  tree = jnp.array([[0.0, -0.0, 0.0]], jnp.float32)     # [T = 1, K = 3]
  for method in gigpo.METHODS:
    groups = gigpo.anchor_groups(tree, jnp.ones((1, 3), bool), method=method)
    g = np.asarray(groups.group)[0]
    assert g[0] == g[2] != g[1] and int(groups.num_groups) == 2


def test_keychain_groups_by_state_and_observation_batched_and_vmapped():
  env, params = envs.make("KeyChain-v0", horizon=6, num_pivotal=2, num_actions=2)
  collect = jax.jit(rollout.collect_groups, static_argnums=(0, 2, 5, 6, 7),
                    static_argnames=("keep_states",))
  traj, states = collect(env, params, rollout.uniform_random_policy(2), None,
                         jax.random.key(0), 3, 8, 6, keep_states=True)
  valid = traj.valid
  to_go = returns.discounted_returns(jnp.where(valid, traj.rewards, 0.0), 0.9,
                                     terminated=traj.dones)           # [T, N, K]
  batched = jax.jit(gigpo.anchor_advantages)
  for keys in (states.env_state, traj.obs):
    adv, stats = batched(keys, to_go, valid)                          # [T, N, K], [N]
    for n in range(3):
      leaves = [np.asarray(x[:, n]) for x in jax.tree.leaves(keys)]
      _, want, num_groups, degenerate, _ = _brute_force(
          leaves, np.asarray(to_go[:, n]), np.asarray(valid[:, n]), "grpo")
      np.testing.assert_allclose(adv[:, n], want, rtol=1e-5, atol=1e-6)
      assert int(stats["num_groups"][n]) == num_groups
      assert int(stats["degenerate"][n]) == degenerate
  # KeyChain's observation does not depend on the actions: by observation every step t
  # of a group is one anchor (T groups); states split them by `all_correct`.
  _, by_obs = batched(traj.obs, to_go, valid)
  _, by_state = batched(states.env_state, to_go, valid)
  np.testing.assert_array_equal(by_obs["num_groups"], 6)
  assert np.all(np.asarray(by_state["num_groups"]) > 6)
  # vmap over seeds folds the seed axis into the groups: the same as one call per seed,
  # with task-group dims ([S, T, N, K]) and without ([S, T, K]), and with an unbatched
  # argument.
  seeds = jax.vmap(lambda key: collect(env, params, rollout.uniform_random_policy(2), None,
                                       key, 3, 8, 6, keep_states=True))(
      jax.random.split(jax.random.key(1), 2))
  s_traj, s_states = seeds
  s_to_go = jax.vmap(lambda r, v, d: returns.discounted_returns(
      jnp.where(v, r, 0.0), 0.9, terminated=d))(s_traj.rewards, s_traj.valid,
                                                s_traj.dones)
  for select in (lambda x: x, lambda x: x[:, :, 1]):
    st, rt, vt = (jax.tree.map(select, x) for x in (s_states.env_state, s_to_go,
                                                     s_traj.valid))
    adv, stats = jax.jit(jax.vmap(gigpo.anchor_advantages))(st, rt, vt)
    for i in range(2):
      one = batched(jax.tree.map(lambda x: x[i], st), rt[i], vt[i])
      np.testing.assert_allclose(adv[i], one[0], rtol=1e-6)
      for name in one[1]:
        np.testing.assert_array_equal(stats[name][i], one[1][name])
  shared = jax.jit(jax.vmap(functools.partial(gigpo.anchor_advantages, kind="mean"),
                            in_axes=(None, 0, None)))(
      states.env_state, jnp.stack([to_go, 2 * to_go]), valid)
  np.testing.assert_allclose(shared[0][1], 2 * np.asarray(shared[0][0]), rtol=1e-5,
                             atol=1e-6)


def test_gigpo_combination():
  rng = np.random.default_rng(3)
  episode = jnp.asarray(rng.normal(size=(2, 4)), jnp.float32)
  step = jnp.asarray(rng.normal(size=(5, 2, 4)), jnp.float32)
  valid = jnp.asarray(rng.random((5, 2, 4)) < 0.8)
  got = gigpo.gigpo_advantages(episode, step, valid, 0.5)
  want = np.where(valid, np.asarray(episode)[None] + 0.5 * np.asarray(step), 0.0)
  np.testing.assert_allclose(got, want, rtol=1e-6)
  # With a weight of 0 it is GRPO's advantage at every valid step.
  adv, _ = baselines.group_advantages(episode)
  np.testing.assert_allclose(gigpo.gigpo_advantages(adv, step, valid, 0.0),
                             np.where(valid, np.asarray(adv)[None], 0.0))
  with pytest.raises(ValueError, match="step_advantages"):
    gigpo.gigpo_advantages(episode, step[:, :1], valid, 0.5)


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="valid"):
    gigpo.anchor_groups(jnp.zeros((3, 2)), jnp.ones((3, 2), jnp.int32))
  with pytest.raises(ValueError, match="kind"):
    gigpo.anchor_advantages(jnp.zeros((3, 2)), jnp.zeros((3, 2)),
                              jnp.ones((3, 2), bool), kind="ppo")
  with pytest.raises(ValueError, match="step dims"):
    gigpo.state_words({"a": jnp.zeros((3, 2)), "b": jnp.zeros((3, 3))}, 2)
