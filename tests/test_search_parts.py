"""Tests for the parts of credit_jax.search on their own: selection rules on hand-computed
scores (Gumbel's root schedule included), the descent on a hand-built tree, backup against a plain NumPy walk up random
trees, and best-trajectory tracking, path extraction and replay on hand-built trees."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import search as search_lib
from credit_jax.search import extract, selection
from credit_jax.search.model import make_env_model
from credit_jax.search.tree import (CHILD, PRIOR, UNEXPANDED, VALUE_SUM, VISITS, SearchTree,
                                    child_code)
from test_search import Bandit, DeterministicTree, hinted_logits, uniform_logits

# One node's slots: visits [2, 0, 1], summed returns [1.0, 0, 0.9] (q = 0.5, -, 0.9).
VISITS_3 = jnp.array([2.0, 0.0, 1.0])
VALUE_SUM_3 = jnp.array([1.0, 0.0, 0.9])
PRIOR_3 = jnp.array([0.5, 0.3, 0.2])


def test_puct_scores_by_hand():
  # N = 3; unvisited q = 1.9 / 3; bonus = prior * sqrt(1 + 3) / (1 + n).
  scores = selection.puct(VISITS_3, VALUE_SUM_3, PRIOR_3, jnp.float32(1.0))
  np.testing.assert_allclose(scores, [0.5 + 1 / 3, 1.9 / 3 + 0.6, 0.9 + 0.2], rtol=1e-6)


def test_ucb1_scores_by_hand():
  # Unvisited slots first (1e9 + prior); else q + sqrt(ln 3 / n).
  scores = selection.ucb1(VISITS_3, VALUE_SUM_3, PRIOR_3, jnp.float32(1.0))
  np.testing.assert_allclose(scores, [1.2411519, 1e9 + 0.3, 1.9481471], rtol=1e-6)


def test_gumbel_scores_by_hand():
  # Completed q: the unvisited slot gets the prior-weighted mean of the visited ones,
  # (0.5 * 0.5 + 0.2 * 0.9) / 0.7 = 0.6142857; min-max normalised [0, 0.2857143, 1];
  # sigma = (50 + max n = 2) * 0.1 * that = [0, 1.4857143, 5.2]; improved policy
  # softmax(log prior + sigma) = [0.0131303, 0.0348067, 0.9520630]; score = pi' - n / 4.
  scores = selection.gumbel(VISITS_3, VALUE_SUM_3, PRIOR_3, jnp.float32(123.0))
  np.testing.assert_allclose(scores, [0.0131303 - 0.5, 0.0348067, 0.9520630 - 0.25],
                             rtol=1e-5)
  # Nothing visited: all completed q equal, sigma = 0, the scores are the prior.
  fresh = selection.gumbel(jnp.zeros(3), jnp.zeros(3), PRIOR_3, jnp.float32(1.0))
  np.testing.assert_allclose(fresh, PRIOR_3, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(selection.RULES))
def test_invalid_slots_score_minus_inf(name):
  edges = jnp.stack([VISITS_3, VALUE_SUM_3, PRIOR_3.at[1].set(-1.0),
                     jnp.full((3,), UNEXPANDED)], -1)
  scores = np.asarray(selection.slot_scores(selection.RULES[name], edges, jnp.float32(1.0)))
  assert np.isneginf(scores[1]) and np.isfinite(scores[[0, 2]]).all()


def test_unknown_rule_is_named():
  with pytest.raises(ValueError, match="selection must be one of"):
    selection.get_rule("alphazero")
  env = DeterministicTree()
  with pytest.raises(ValueError, match="'puct', 'ucb1', 'gumbel'"):
    search_lib.make_search(env, uniform_logits, num_simulations=2, max_depth=2,
                           selection="nope")


def _edges(rows):
  """[N, K, 4] edge records from rows of (prior, child code) pairs per slot."""
  return jnp.array([[[0.0, 0.0, p, c] for p, c in row] for row in rows], jnp.float32)


def test_descent_follows_the_rule_to_an_unexpanded_slot_or_an_ended_leaf():
  by_prior = lambda n, w, p, c: p  # noqa: E731, a pluggable rule: highest prior
  done_2 = float(child_code(jnp.int32(2), jnp.bool_(True)))  # -4
  # Root -> slot 0 -> node 1 -> slot 1 -> node 2, which cannot be expanded.
  edges = _edges([[(0.7, 1.0), (0.3, UNEXPANDED)], [(0.2, UNEXPANDED), (0.8, done_2)],
                  [(0.5, UNEXPANDED), (0.5, UNEXPANDED)], [(0.5, UNEXPANDED)] * 2])
  edge_action = jnp.array([[5, 6], [7, 8], [0, 0], [0, 0]], jnp.int32)
  out = selection.select(by_prior, edge_action, edges, jnp.bool_(False), jnp.float32(1.0),
                         sampled_slots=True)
  assert [int(x) for x in out] == [2, 1, 8, 0]  # node 2 reached again, not expandable
  # Node 1 preferring its unexpanded slot 0: expand it; slot k is action k unless sampled.
  edges = edges.at[1, 0, PRIOR].set(0.9)
  for sampled, action in ((True, 7), (False, 0)):
    out = selection.select(by_prior, edge_action, edges, jnp.bool_(False), jnp.float32(1.0),
                           sampled_slots=sampled)
    assert [int(x) for x in out] == [1, 0, action, 1]
  # A root that cannot be expanded stops at once.
  out = selection.select(by_prior, edge_action, edges, jnp.bool_(True), jnp.float32(1.0),
                         sampled_slots=False)
  assert int(out[0]) == 0 and not bool(out[3])


def _random_tree(rng, batch, num_nodes, num_slots):
  """Random trees: node n > 0 hangs from a free slot of an earlier node (scratch unused)."""
  up = np.full((batch, num_nodes, 2), 0, np.int32)
  up[..., 0] = -1
  edges = np.zeros((batch, num_nodes, num_slots, 4), np.float32)
  edges[..., CHILD] = UNEXPANDED
  edges[..., VISITS] = rng.integers(0, 5, edges.shape[:3])
  edges[..., VALUE_SUM] = rng.normal(size=edges.shape[:3])
  depth = np.zeros((batch, num_nodes), np.int32)
  for b in range(batch):
    for n in range(1, num_nodes - 1):
      while True:
        parent, slot = rng.integers(0, n), rng.integers(0, num_slots)
        if edges[b, parent, slot, CHILD] == UNEXPANDED:
          break
      edges[b, parent, slot, CHILD] = n
      up[b, n, 0] = parent * num_slots + slot
      up[b, n, 1] = np.float32(rng.normal()).view(np.int32)
      depth[b, n] = depth[b, parent] + 1
  per_node = np.zeros((batch, num_nodes))
  return SearchTree(up=jnp.asarray(up), action=jnp.asarray(per_node, jnp.int32),
                    depth=jnp.asarray(depth), path_reward=jnp.asarray(per_node, jnp.float32),
                    terminated=jnp.asarray(per_node, bool), done=jnp.asarray(per_node, bool),
                    value=jnp.asarray(per_node, jnp.float32), state=(),
                    edge_action=jnp.zeros((batch, num_nodes, num_slots), jnp.int32),
                    edges=jnp.asarray(edges),
                    num_nodes=jnp.full((batch,), num_nodes - 1, jnp.int32))


def test_backup_by_hand():
  # One chain: root -(slot 1, r=0.5)-> 1 -(slot 0, r=1.0)-> 2 -(slot 1, r=-0.25)-> 3.
  tree = _random_tree(np.random.default_rng(0), 1, 5, 2)
  up = np.array([[-1, 0], [1, 0], [2, 0], [5, 0], [-1, 0]], np.int32)
  up[1:4, 1] = np.array([0.5, 1.0, -0.25], np.float32).view(np.int32)
  edges = jnp.zeros((1, 5, 2, 4))
  tree = tree._replace(up=jnp.asarray(up)[None], edges=edges)
  out = search_lib.backup(tree, jnp.array([3]), jnp.array([2.0]), jnp.float32(0.9))
  g3 = -0.25 + 0.9 * 2.0
  g2 = 1.0 + 0.9 * g3
  g1 = 0.5 + 0.9 * g2
  expected = np.zeros((5, 2, 2))
  expected[2, 1], expected[1, 0], expected[0, 1] = (1, g3), (1, g2), (1, g1)
  np.testing.assert_allclose(out.edges[0, ..., :2], expected, rtol=1e-6)


def test_backup_matches_a_numpy_walk_on_random_trees():
  rng = np.random.default_rng(1)
  batch, num_nodes, num_slots = 4, 14, 3
  tree = _random_tree(rng, batch, num_nodes, num_slots)
  leaf = np.array([0, 5, 12, int(np.argmax(tree.depth[3]))])  # the root adds nothing
  value = rng.normal(size=batch).astype(np.float32)
  discount = np.array([1.0, 0.9, 0.5, 0.97], np.float32)
  out = jax.jit(search_lib.backup)(tree, jnp.asarray(leaf), jnp.asarray(value),
                                   jnp.asarray(discount))
  expected = np.array(tree.edges)
  up, reward = np.asarray(tree.up[..., 0]), np.asarray(tree.reward)
  for b in range(batch):
    n, g = leaf[b], value[b]
    while n > 0:
      parent, slot = divmod(up[b, n], num_slots)
      g = reward[b, n] + discount[b] * g
      expected[b, parent, slot, VISITS] += 1
      expected[b, parent, slot, VALUE_SUM] += g
      n = parent
  assert int(tree.depth[3].max()) > 4  # deeper than the unrolled levels
  np.testing.assert_allclose(out.edges, expected, rtol=1e-5, atol=1e-6)


def test_keep_better_prefers_complete_then_larger_total():
  key = jax.random.split(jax.random.PRNGKey(0), 4)
  best = extract.BestEpisode(jnp.array([1, 1, 1, 1]), key, jnp.array([5.0, 1.0, 1.0, 1.0]),
                             jnp.array([False, True, True, True]))
  cand = extract.BestEpisode(jnp.array([2, 2, 2, 2]), key[::-1],
                             jnp.array([0.5, 2.0, 1.0, 3.0]), jnp.array([True, True, True, True]))
  out = extract.keep_better(best, cand, jnp.array([True, True, True, False]))
  # complete beats incomplete; larger total wins; a tie keeps the old; invalid never wins.
  np.testing.assert_array_equal(out.node, [2, 2, 1, 1])
  np.testing.assert_array_equal(out.rollout_key, np.stack([key[3], key[2], key[2], key[3]]))
  np.testing.assert_allclose(out.total, [0.5, 2.0, 1.0, 1.0])
  initial = extract.no_episode(key)
  assert np.isneginf(initial.total).all() and not initial.complete.any()


def _tree_with_path(env, params, actions):
  """One hand-built tree of DeterministicTree: a chain root -> ... along `actions`."""
  _, root = env.reset(jax.random.PRNGKey(0), params)
  num_nodes, num_slots = len(actions) + 2, 3
  up = np.full((num_nodes, 2), -1, np.int32)
  depth = np.zeros(num_nodes, np.int32)
  action = np.full(num_nodes, -1, np.int32)
  for n, a in enumerate(actions, start=1):
    up[n] = ((n - 1) * num_slots + a, 0)
    depth[n], action[n] = n, a
  zeros = jnp.zeros((num_nodes,))
  return SearchTree(up=jnp.asarray(up), action=jnp.asarray(action), depth=jnp.asarray(depth),
                    path_reward=zeros, terminated=zeros.astype(bool), done=zeros.astype(bool),
                    value=zeros,
                    state=jax.tree.map(lambda x: jnp.broadcast_to(x, (num_nodes,)), root),
                    edge_action=jnp.zeros((num_nodes, num_slots), jnp.int32),
                    edges=jnp.zeros((num_nodes, num_slots, 4)),
                    num_nodes=jnp.int32(num_nodes - 1))


def test_path_actions_and_replay_on_a_hand_built_tree():
  env = DeterministicTree()
  params = env.default_params
  tree = _tree_with_path(env, params, [2, 1])
  np.testing.assert_array_equal(extract.path_actions(tree, jnp.int32(2), 4), [2, 1, 0, 0])
  np.testing.assert_array_equal(extract.path_actions(tree, jnp.int32(1), 4), [2, 0, 0, 0])
  np.testing.assert_array_equal(extract.path_actions(tree, jnp.int32(0), 4), [0, 0, 0, 0])
  # Replay from node 2: the path (2, 1), then the greedy rollout under hinted_logits
  # (action 2 at depth 2) ends the episode on the best path with reward 1.
  model = make_env_model(env, hinted_logits, None, None, max_depth=4, rollout="greedy",
                         rollout_depth=4)
  root_obs = env.reset(jax.random.PRNGKey(0), params)[0]
  out = extract.replay_episode(model, None, params, tree, jax.random.PRNGKey(1),
                               jnp.int32(2), jax.random.PRNGKey(2), root_obs)
  obs, actions, rewards, term, trunc, log_probs, next_obs, valid, info = out
  np.testing.assert_array_equal(actions[:3], [2, 1, 2])
  np.testing.assert_allclose(rewards, [0, 0, 1, 0])
  np.testing.assert_array_equal(valid, [True, True, True, False])
  np.testing.assert_array_equal(term, [False, False, True, False])
  np.testing.assert_allclose(obs[:3], [[0, 0], [1, 2], [2, 7]])
  np.testing.assert_allclose(next_obs[2], [3, 23])
  np.testing.assert_array_equal(info["code"][:3], [2, 7, 23])
  # A rollout depth of 0: the episode stops where it leaves the tree.
  model0 = model._replace(rollout_depth=0)
  out0 = extract.replay_episode(model0, None, params, tree, jax.random.PRNGKey(1),
                                jnp.int32(2), jax.random.PRNGKey(2), root_obs)
  np.testing.assert_array_equal(out0[7], [True, True, False, False])


def test_a_rule_passed_as_a_function_is_the_named_rule():
  env = DeterministicTree()
  obs, states = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.PRNGKey(0), 2),
                                                env.default_params)
  outs = [jax.jit(search_lib.make_search(env, hinted_logits, num_simulations=24, max_depth=3,
                                         selection=rule, rollout="sample"))(
              None, env.default_params, jax.random.PRNGKey(0), states, obs)
          for rule in ("puct", selection.puct)]
  jax.tree.map(np.testing.assert_array_equal, outs[0], outs[1])
  np.testing.assert_array_equal(outs[0].trajectory.actions, [[2, 2], [1, 1], [2, 2]])


def test_sequential_halving_schedule_by_hand():
  table = selection.considered_visits(4, 16)
  # m = 4: ceil(log2 4) = 2 rounds; 16 // (2 * 4) = 2 visits each to all 4, then
  # 16 // (2 * 2) = 4 visits each to the best 2 (visits 2..5), in turn.
  np.testing.assert_array_equal(table[4], [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5])
  # m = 3: 16 // 6 = 2 visits each to 3, then 4 each to the best 2, cut at 16.
  np.testing.assert_array_equal(table[3], [0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6])
  np.testing.assert_array_equal(table[1], np.arange(16))  # one slot: every visit its own


def test_gumbel_root_scores_by_hand():
  root = selection.gumbel.root
  prior = jnp.full((4,), 0.25)
  value_sum = jnp.array([0.1, 0.9, 0.3, 0.5])
  noise = jnp.array([0.0, 0.5, 0.0, 3.0])
  # Simulation 4 of 12 (schedule [0, 0, 0, 0, 1, 1, 2, 2, ...]): every slot with 1 visit
  # is eligible; q normalised [0, 1, .25, .5], sigma = (50 + 1) * 0.1 * that.
  scores = root(jnp.ones(4), value_sum, prior, noise, jnp.int32(4), 12)
  np.testing.assert_allclose(
      scores, noise + np.log(0.25) + 5.1 * np.array([0, 1, 0.25, 0.5]), rtol=1e-5)
  # Simulation 11 (schedule value 4): only the slot with 4 visits may be visited.
  visits = jnp.array([1.0, 5.0, 1.0, 4.0])
  scores = np.asarray(root(visits, value_sum * visits, prior, noise, jnp.int32(11), 12))
  assert np.isneginf(scores[[0, 1, 2]]).all() and np.isfinite(scores[3])
  # After the search (simulation = 12): the best of the most visited slots.
  scores = np.asarray(root(visits, value_sum * visits, prior, noise, 12, 12))
  assert np.isfinite(scores[1]) and np.isneginf(scores[[0, 2, 3]]).all()


def test_gumbel_search_halves_at_the_root_and_finds_the_best():
  bandit = Bandit()
  obs, states = jax.vmap(bandit.reset, (0, None))(jax.random.split(jax.random.PRNGKey(0), 2),
                                                   bandit.default_params)
  fn = jax.jit(search_lib.make_search(bandit, lambda p, o: jnp.zeros((4,)), num_simulations=12,
                                      max_depth=1, selection="gumbel"))
  out = fn(None, bandit.default_params, jax.random.PRNGKey(0), states, obs)
  # 12 simulations over 4 arms: one visit each, then the best two by g + log prior +
  # sigma(q) get 4 more each (schedule [0]*4 + [1, 1, 2, 2, 3, 3, 4, 4]).
  np.testing.assert_array_equal(np.sort(out.root_visits, 1), [[1, 1, 5, 5]] * 2)
  np.testing.assert_array_equal(out.root_visits[:, 1], [5, 5])
  np.testing.assert_array_equal(out.root_action, [1, 1])
  # The tree with value-only leaves: the root keeps two slots to the end, so the lure
  # (0.1 at once for action 0) cannot take every visit, and the 1.0 path is found.
  env = DeterministicTree()
  obs, states = jax.vmap(env.reset, (0, None))(jax.random.split(jax.random.PRNGKey(0), 2),
                                                env.default_params)
  fn = jax.jit(search_lib.make_search(env, hinted_logits, num_simulations=32, max_depth=3,
                                      selection="gumbel", rollout_depth=0))
  out = fn(None, env.default_params, jax.random.PRNGKey(0), states, obs)
  np.testing.assert_array_equal(out.trajectory.actions, [[2, 2], [1, 1], [2, 2]])
  np.testing.assert_array_equal(out.root_action, [2, 2])
