"""Tests for credit_jax.experiments.tree_search.decoding against plain NumPy enumeration of tiny trees:
greedy is the argmax walk, beam search the NumPy beam (and exhaustive search at full
width), sampling without replacement never repeats and has the exact inclusion
probabilities, best-of-M samples the tempered policy, and dedup is a Viterbi over states."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from gymnax.environments import environment

from credit_jax.experiments.tree_search import decoding as baselines

A, T = 3, 3
NUM_NODES = sum(A ** t for t in range(T + 1))


@struct.dataclass
class SeqState(environment.EnvState):
  depth: jax.Array
  code: jax.Array      # the prefix as a base-A number (or, merging, the count of 1s)


@struct.dataclass
class SeqParams(environment.EnvParams):
  leaf_reward: jax.Array = struct.field(
      default_factory=lambda: jnp.asarray(np.random.RandomState(1).rand(A ** T), jnp.float32))
  max_steps_in_episode: int = T


class SeqEnv(environment.Environment):
  """A depth-T, A-ary tree of action sequences. Action 0 at the root ends the episode at
  once with reward 0.25; other leaves pay `leaf_reward[code]`. With `merge=True` the
  state keeps only how many 1s were played (many prefixes share a state)."""

  def __init__(self, merge: bool = False):
    super().__init__()
    self.merge = merge

  @property
  def default_params(self):
    return SeqParams()

  @property
  def num_actions(self):
    return A

  def _obs(self, state):
    offset = (A ** state.depth - 1) // (A - 1)   # first node index of this depth
    return jax.nn.one_hot(offset + state.code, NUM_NODES)

  def reset_env(self, key, params):
    state = SeqState(time=jnp.int32(0), depth=jnp.int32(0), code=jnp.int32(0))
    return self._obs(state), state

  def step_env(self, key, state, action, params):
    action = jnp.asarray(action, jnp.int32)
    code = state.code + (action == 1) if self.merge else state.code * A + action
    depth = state.depth + 1
    early = (state.depth == 0) & (action == 0) & ~self.merge
    terminated = early | (depth >= T)
    leaf = params.leaf_reward[jnp.minimum(code, A ** T - 1)]
    reward = jnp.where(early, 0.25, jnp.where(depth >= T, leaf, 0.0))
    new = SeqState(time=state.time + 1, depth=depth, code=code)
    return self._obs(new), new, reward.astype(jnp.float32), terminated, {}


def table_logits(table, obs):
  return obs @ table


TABLE = np.random.RandomState(0).randn(NUM_NODES, A).astype(np.float32)


def _log_softmax(x):
  x = x - x.max()
  return x - np.log(np.exp(x).sum())


def np_walk(actions, table, temperature=1.0, rewards=None):
  """(log-prob, return, ended) of playing `actions` in SeqEnv (no merge), in NumPy."""
  rewards = np.asarray(SeqParams().leaf_reward) if rewards is None else rewards
  code, logp = 0, 0.0
  for t, a in enumerate(actions):
    node = (A ** t - 1) // (A - 1) + code
    logp += _log_softmax(table[node] / temperature)[a]
    code = code * A + a
    if t == 0 and a == 0:
      return logp, 0.25, True
  return logp, float(rewards[code]), True


def np_episodes(table, temperature=1.0):
  """{actions tuple: (log-prob, return)} of every episode of SeqEnv."""
  out = {(0,): np_walk((0,), table, temperature)[:2]}
  for seq in itertools.product(range(A), repeat=T):
    if seq[0] != 0:
      out[seq] = np_walk(seq, table, temperature)[:2]
  return out


def _roots(env, batch):
  params = env.default_params
  keys = jax.random.split(jax.random.PRNGKey(0), batch)
  obs, states = jax.vmap(env.reset, (0, None))(keys, params)
  return params, obs, states


def _candidates(out, b=0):
  """{actions tuple (cut at its end): (log-prob, return)} of root b's valid candidates."""
  res = {}
  for m in np.flatnonzero(np.asarray(out.valid[b])):
    acts = tuple(int(a) for a in np.asarray(out.actions[b, m]))
    acts = acts[:1] if acts[0] == 0 else acts
    assert acts not in res, f"candidate {acts} repeated"
    res[acts] = (float(out.log_probs[b, m]), float(out.returns[b, m]))
  return res


def test_greedy_is_the_argmax_walk():
  env = SeqEnv()
  params, obs, states = _roots(env, 2)
  out = jax.jit(baselines.make_greedy(env, table_logits, max_depth=T))(
      jnp.asarray(TABLE), params, jax.random.PRNGKey(0), states, obs)
  code, acts = 0, []
  for t in range(T):
    a = int(np.argmax(TABLE[(A ** t - 1) // (A - 1) + code]))
    acts.append(a)
    code = code * A + a
    if t == 0 and a == 0:
      break
  logp, ret, _ = np_walk(acts, TABLE)
  assert out.actions.shape == (2, 1, T)
  np.testing.assert_array_equal(out.actions[:, 0, :len(acts)], [acts, acts])
  np.testing.assert_allclose(out.log_probs[:, 0], logp, rtol=1e-5)
  np.testing.assert_allclose(out.total_reward, ret, rtol=1e-6)
  np.testing.assert_array_equal(out.env_steps, len(acts))
  np.testing.assert_array_equal(out.policy_evals, len(acts))


def np_beam(table, width, temperature=1.0):
  """NumPy beam search on SeqEnv: (kept prefixes after T depths, env steps, evals)."""
  beam, steps, evals = [((), 0.0, False)], 0, 0
  for t in range(T):
    children = []
    for acts, phi, ended in beam:
      if ended:
        children.append((acts, phi, True))
        continue
      evals += 1
      code = sum(a * A ** (len(acts) - 1 - i) for i, a in enumerate(acts))
      lp = _log_softmax(table[(A ** t - 1) // (A - 1) + code] / temperature)
      for a in range(A):
        children.append((acts + (a,), phi + lp[a], t == 0 and a == 0))
    order = sorted(range(len(children)), key=lambda i: -children[i][1])  # stable
    beam = [children[i] for i in order[:width]]
    steps += sum(len(acts) == t + 1 for acts, _, _ in beam)
  return beam, steps, evals


@pytest.mark.parametrize("width,temperature", [(2, 1.0), (5, 0.5), (A ** T, 1.0)])
def test_beam_search_matches_the_numpy_beam(width, temperature):
  env = SeqEnv()
  params, obs, states = _roots(env, 1)
  fn = jax.jit(baselines.make_beam_search(env, table_logits, width=width, max_depth=T))
  out = fn(jnp.asarray(TABLE), params, jax.random.PRNGKey(0), states, obs,
           temperature=temperature)
  expected, steps, evals = np_beam(TABLE, width, temperature)
  got = _candidates(out)
  assert set(got) == {acts for acts, _, _ in expected}
  every = np_episodes(TABLE, temperature)
  for acts, (logp, ret) in got.items():
    np.testing.assert_allclose(logp, every[acts][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, every[acts][1], rtol=1e-6)
  np.testing.assert_allclose(out.total_reward[0], max(got[a][1] for a in got), rtol=1e-6)
  if width == A ** T:   # exhaustive: every episode, and the best return of all
    assert set(got) == set(every)
    np.testing.assert_allclose(out.total_reward[0], max(r for _, r in every.values()))
  assert (int(out.env_steps[0]), int(out.policy_evals[0])) == (steps, evals)


def _episode_probs(temperature):
  every = np_episodes(TABLE, temperature)
  keys = sorted(every)
  return keys, np.exp([every[k][0] for k in keys])


def _within(freq, prob, n, sigmas=5.0):
  tol = sigmas * np.sqrt(prob * (1 - prob) / n) + 2.0 / n
  assert np.all(np.abs(freq - prob) <= tol), (freq, prob, tol)


def test_sampling_without_replacement_has_the_exact_inclusion_probabilities():
  env = SeqEnv()
  n = 20000
  params, obs, states = _roots(env, n)
  out = jax.jit(baselines.make_sampling_without_replacement(
      env, table_logits, num_samples=2, max_depth=T))(
          jnp.asarray(TABLE), params, jax.random.PRNGKey(3), states, obs, temperature=0.7)
  keys, p = _episode_probs(0.7)
  np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-5)
  # Drawn one by one without replacement: P(i in S) = p_i + sum_{j != i} p_j p_i / (1 - p_j).
  inclusion = p + p * (np.sum(p / (1 - p)) - p / (1 - p))
  index = {k: i for i, k in enumerate(keys)}
  acts = np.asarray(out.actions)
  counts, first = np.zeros(len(keys)), np.zeros(len(keys))
  for b in range(n):
    seqs = [tuple(a[:1]) if a[0] == 0 else tuple(a) for a in acts[b].tolist()]
    assert seqs[0] != seqs[1]
    for m, s in enumerate(seqs):
      counts[index[s]] += 1
      first[index[s]] += m == 0
  assert np.asarray(out.valid).all()
  _within(counts / n, inclusion, n)
  _within(first / n, p, n)     # the top key is an ordinary sample


@pytest.mark.parametrize("num_samples", [5, 25])
def test_sampling_without_replacement_never_repeats(num_samples):
  env = SeqEnv()
  params, obs, states = _roots(env, 16)
  out = jax.jit(baselines.make_sampling_without_replacement(
      env, table_logits, num_samples=num_samples, max_depth=T))(
          jnp.asarray(TABLE), params, jax.random.PRNGKey(4), states, obs)
  every = np_episodes(TABLE)
  for b in range(16):
    got = _candidates(out, b)           # asserts no candidate repeats
    assert len(got) == min(num_samples, len(every))
    for acts, (logp, ret) in got.items():
      np.testing.assert_allclose(logp, every[acts][0], rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(ret, every[acts][1], rtol=1e-6)


def test_best_of_m_samples_the_tempered_policy():
  env = SeqEnv()
  batch, m = 4, 5000
  params, obs, states = _roots(env, batch)
  out = jax.jit(baselines.make_best_of_m(env, table_logits, num_samples=m, max_depth=T))(
      jnp.asarray(TABLE), params, jax.random.PRNGKey(5), states, obs, temperature=0.7,
      success_threshold=0.9)
  keys, p = _episode_probs(0.7)
  index = {k: i for i, k in enumerate(keys)}
  acts = np.asarray(out.actions).reshape(-1, T)
  seqs = [tuple(a[:1]) if a[0] == 0 else tuple(a) for a in acts.tolist()]
  freq = np.bincount([index[s] for s in seqs], minlength=len(keys)) / len(seqs)
  _within(freq, p, len(seqs))
  lengths = np.array([len(s) for s in seqs]).reshape(batch, m)
  np.testing.assert_array_equal(out.env_steps, lengths.sum(1))
  np.testing.assert_array_equal(out.policy_evals, lengths.sum(1))
  np.testing.assert_array_equal(out.success, np.asarray(out.returns >= 0.9).any(1))
  np.testing.assert_allclose(out.total_reward, np.asarray(out.returns).max(1))


def test_best_of_m_under_vmap_equals_a_loop_over_keys():
  env = SeqEnv()
  params, obs, states = _roots(env, 2)
  fn = baselines.make_best_of_m(env, table_logits, num_samples=3, max_depth=T)
  keys = jax.random.split(jax.random.PRNGKey(6), 3)
  batched = jax.jit(jax.vmap(lambda k: fn(jnp.asarray(TABLE), params, k, states, obs)))(keys)
  for i, k in enumerate(keys):
    single = jax.jit(fn)(jnp.asarray(TABLE), params, k, states, obs)
    np.testing.assert_array_equal(batched.actions[i], single.actions)
    np.testing.assert_allclose(batched.returns[i], single.returns)


def np_dedup_beam(table, width):
  """NumPy beam over SeqEnv(merge=True) states: best prefix per state, top `width`."""
  beam, steps, evals = [((), 0.0, 0)], 0, 0   # (actions, log-prob, count of 1s)
  for t in range(T):
    best = {}
    for acts, phi, ones in beam:
      evals += 1
      steps += A
      lp = _log_softmax(table[(A ** t - 1) // (A - 1) + ones])
      for a in range(A):
        child = (acts + (a,), phi + lp[a], ones + (a == 1))
        if child[2] not in best or child[1] > best[child[2]][1]:
          best[child[2]] = child
    beam = sorted(best.values(), key=lambda c: -c[1])[:width]
  return beam, steps, evals


@pytest.mark.parametrize("width", [2, T + 1])
def test_dedup_beam_is_a_beam_over_states(width):
  env = SeqEnv(merge=True)
  params, obs, states = _roots(env, 1)
  out = jax.jit(baselines.make_beam_search(env, table_logits, width=width, max_depth=T,
                                           dedup=True))(
      jnp.asarray(TABLE), params, jax.random.PRNGKey(0), states, obs)
  expected, steps, evals = np_dedup_beam(TABLE, width)
  valid = np.flatnonzero(np.asarray(out.valid[0]))
  got = {tuple(np.asarray(out.actions[0, m]).tolist()): float(out.log_probs[0, m])
         for m in valid}
  assert {c[0]: c[1] for c in expected}.keys() == got.keys()
  for acts, phi, _ in expected:
    np.testing.assert_allclose(got[acts], phi, rtol=1e-5)
  assert (int(out.env_steps[0]), int(out.policy_evals[0])) == (steps, evals)
  if width == T + 1:   # every final state, each reached by its most probable sequence
    for ones in range(T + 1):
      seqs = [s for s in itertools.product(range(A), repeat=T) if s.count(1) == ones]
      logps = [sum(_log_softmax(TABLE[(A ** t - 1) // (A - 1) + s[:t].count(1)])[s[t]]
                   for t in range(T)) for s in seqs]
      assert seqs[int(np.argmax(logps))] in got


def test_truncated_gumbel_and_log1mexp_by_hand():
  x = np.array([-1e-6, -0.1, -0.7, -5.0, -40.0])
  np.testing.assert_allclose(baselines.log1mexp(jnp.asarray(x, jnp.float32)),
                             np.log(-np.expm1(x)), rtol=1e-4, atol=1e-12)
  g = np.array([0.3, -1.2, 2.0, -np.inf])
  out = np.asarray(baselines.truncated_gumbel(jnp.float32(0.5), jnp.float32(2.0),
                                              jnp.asarray(g, jnp.float32)))
  naive = -np.log(np.exp(-0.5) - np.exp(-2.0) + np.exp(-g[:3]))
  np.testing.assert_allclose(out[:3], naive, rtol=1e-5)
  assert out[2] == pytest.approx(0.5) and out[3] == -np.inf


def test_state_hash_groups_equal_states():
  s = lambda d, c: SeqState(time=jnp.int32(d), depth=jnp.int32(d), code=jnp.int32(c))
  hashes = [int(baselines.state_hash(s(d, c))) for d in range(3) for c in range(4)]
  assert len(set(hashes)) == len(hashes)
  assert int(baselines.state_hash(s(1, 2))) == hashes[6]


def test_shapes_are_checked():
  env = SeqEnv()
  params, obs, states = _roots(env, 2)
  fn = baselines.make_greedy(env, table_logits, max_depth=T)
  with pytest.raises(ValueError, match="leading batch dim"):
    fn(jnp.asarray(TABLE), params, jax.random.PRNGKey(0), states, obs[:1])
  with pytest.raises(ValueError, match="width must be"):
    baselines.make_beam_search(env, table_logits, width=0, max_depth=T)
  with pytest.raises(ValueError, match="num_samples must be"):
    baselines.make_best_of_m(env, table_logits, num_samples=2.5, max_depth=T)
  with pytest.raises(ValueError, match=r"logits_fn must return \[3\]"):
    baselines.make_greedy(env, lambda p, o: jnp.zeros(4), max_depth=T)(
        None, params, jax.random.PRNGKey(0), states, obs)


def test_streamed_best_of_m_is_the_best_over_its_chunks():
  env = SeqEnv()
  params, obs, states = _roots(env, 3)
  table, key = jnp.asarray(TABLE), jax.random.PRNGKey(7)
  streamed = jax.jit(baselines.make_best_of_m_streamed(env, table_logits, max_depth=T,
                                                       chunk=2))
  chunk = jax.jit(baselines.make_best_of_m(env, table_logits, num_samples=2, max_depth=T))
  for num_chunks in (1, 4):
    out = streamed(table, params, key, states, obs, num_chunks, temperature=0.8,
                   success_threshold=0.5)
    parts = [chunk(table, params, jax.random.fold_in(key, i), states, obs, temperature=0.8)
             for i in range(num_chunks)]
    best = np.max([np.asarray(p.returns).max(1) for p in parts], axis=0)
    np.testing.assert_allclose(out.total_reward, best)
    np.testing.assert_array_equal(out.success, best >= 0.5)
    np.testing.assert_array_equal(out.env_steps, np.sum([p.env_steps for p in parts], 0))
    np.testing.assert_array_equal(out.policy_evals, out.env_steps)
