"""Table and linear policies (credit_jax/nets/tabular.py): indexing against a NumPy loop,
the entropy floor, and every flat recipe training them through `config.network.kind`."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, nets
from credit_jax.algos import ConfigError, grpo, make_train, ppo, reinforce
from credit_jax.nets import tabular

PROBE = dict(horizon=10, num_pivotal=3, num_actions=4, segment_cue_onehot=True,
             distinct_rules=True, distractor_cues=True, pivotal_flag=False)


def _numpy_index(obs, groups):
  out = np.zeros(obs.shape[0], np.int64)
  for n, o in enumerate(obs):
    idx = 0
    for a, b in groups:
      part = o[a:b]
      cat = 1 + int(np.argmax(part)) if part.max() > 0 else 0
      idx = idx * (b - a + 1) + cat
    out[n] = idx
  return out


def test_joint_index_matches_a_numpy_loop():
  groups = ((0, 3), (3, 4), (5, 7))
  rng = np.random.default_rng(0)
  obs = np.zeros((200, 8), np.float32)
  for o in obs:
    c = rng.integers(0, 4)
    if c:
      o[c - 1] = 1.0
    o[3] = rng.integers(0, 2)
    c = rng.integers(0, 3)
    if c:
      o[4 + c] = 1.0
    o[7] = rng.random()            # a time feature: ignored
  got = np.asarray(tabular.joint_index(jnp.asarray(obs), groups))
  np.testing.assert_array_equal(got, _numpy_index(obs, groups))
  assert tabular.table_size(groups) == 4 * 2 * 3 and got.max() < 24


def test_tabular_rows_linear_logits_and_the_floor():
  env, params = envs.make("KeyChain-v0", **PROBE)
  obs = jax.vmap(lambda k: env.reset(k, params)[0])(jax.random.split(jax.random.key(0), 16))
  net = nets.make_table_network("tabular", env, env.obs_shape, True, min_prob=0.05)
  p = net.init(jax.random.key(1), obs[0])
  assert p["params"]["W"].shape == (13, 4) and p["params"]["w"].shape == (13,)
  assert set(p["params"]) == {"W", "w"}
  table = jax.random.normal(jax.random.key(2), (13, 4)) * 5
  p = {"params": {"W": table, "w": jnp.arange(13.0)}}
  logits, value = net.apply(p, obs)
  rows = _numpy_index(np.asarray(obs), env.onehot_groups)
  probs = np.exp(np.asarray(logits))
  want = 0.8 * np.asarray(jax.nn.softmax(table[rows])) + 0.05
  np.testing.assert_allclose(probs, want, rtol=1e-5)
  np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
  assert probs.min() >= 0.05 - 1e-7
  np.testing.assert_array_equal(np.asarray(value), rows.astype(np.float32))
  lin = nets.make_table_network("linear", env, env.obs_shape, False)
  lp = lin.init(jax.random.key(1), obs[0])
  w = jax.random.normal(jax.random.key(3), (12, 4))
  lp = {"params": {"W": w, "b": jnp.ones(4)}}
  logits, value = lin.apply(lp, obs)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(obs[:, :12] @ w + 1.0),
                             rtol=1e-5, atol=1e-6)
  assert np.all(np.asarray(value) == 0)


def test_refusals_name_the_field():
  env, _ = envs.make("CartPole-v1")
  with pytest.raises(ValueError, match="network.kind"):
    nets.make_table_network("tabular", env, (4,), True)
  kc, _ = envs.make("KeyChain-v0", **PROBE)
  with pytest.raises(ValueError, match="network.min_prob"):
    nets.make_table_network("tabular", kc, kc.obs_shape, True, min_prob=0.3)
  c = grpo.default_config()
  c.env_name, c.env_kwargs = "CartPole-v1", {}
  c.network.kind = "tabular"
  with pytest.raises(ConfigError, match="network.kind"):
    make_train(c)


def test_table_groups_pick_the_env_groups_the_table_reads():
  env, env_params = envs.make("ConveyorTreasure-v0", length=8)
  assert tabular.env_groups(env) == ((1, 7), (7, 9))
  assert tabular.env_groups(env, (0,)) == ((1, 7),)
  net = nets.make_table_network("tabular", env, (9,), True, select=(0,))
  assert tabular.table_size(net.groups) == 7          # the content alone: 6 + "none"
  obs = jnp.zeros((2, 9)).at[:, 1 + 4].set(1.0).at[0, 7].set(1.0).at[1, 8].set(1.0)
  params = net.init(jax.random.key(0), obs)
  params = jax.tree.map(lambda x: x + jax.random.normal(jax.random.key(1), x.shape), params)
  logits, _ = net.apply(params, obs)   # the key cell with and without the key: one row
  np.testing.assert_array_equal(np.asarray(logits[0]), np.asarray(logits[1]))
  for bad in ((2,), (0, 0)):
    with pytest.raises(ValueError, match="network.table_groups"):
      tabular.env_groups(env, bad)
  c = reinforce.default_config()
  c.env_name, c.env_kwargs, c.horizon = "ConveyorTreasure-v0", {"length": 8}, 8
  c.network.kind, c.network.table_groups = "tabular", (5,)
  with pytest.raises(ConfigError, match="network.table_groups"):
    make_train(c)


def _recipe(name):
  if name == "ppo":
    c = ppo.default_config()
    c.num_envs, c.num_steps, c.total_timesteps = 16, 10, 2 * 16 * 10
    c.num_minibatches, c.update_epochs = 2, 1
  elif name == "grpo":
    c = grpo.default_config()
    c.group_size, c.num_tasks, c.num_updates, c.horizon = 4, 8, 2, 10
  else:
    c = reinforce.default_config()
    c.num_envs, c.num_updates, c.horizon = 16, 2, 10
  # k = 1 (random success 1/4), so GRPO's groups are rarely all equal.
  c.env_name, c.env_kwargs = "KeyChain-v0", dict(PROBE, num_pivotal=1)
  c.chunk_updates, c.checkpoint_every = 2, 0
  return c


@pytest.mark.parametrize("recipe", ["ppo", "grpo", "reinforce"])
@pytest.mark.parametrize("kind", ["tabular", "linear"])
def test_every_flat_recipe_trains_a_table(recipe, kind):
  c = _recipe(recipe)
  c.network.kind, c.network.min_prob = kind, 0.01
  train = make_train(c)
  hp = {k: jnp.asarray(v, jnp.float32) for k, v in train.default_hparams.items()}
  state = jax.jit(train.init)(jax.random.key(0), hp)
  first = state.params
  state, metrics = jax.jit(lambda s: train.run(s, hp, 2))(state)
  leaves = jax.tree.leaves(state.params)
  assert all(np.all(np.isfinite(np.asarray(x))) for x in leaves)
  moved = sum(float(jnp.abs(a - b).sum()) for a, b in zip(
      jax.tree.leaves(first), leaves))
  assert moved > 0.0
  shapes = {x.shape for x in leaves}
  assert ((5, 4) in shapes) if kind == "tabular" else ((4, 4) in shapes)
