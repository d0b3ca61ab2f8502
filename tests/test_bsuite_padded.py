"""One compiled program per bucket of a bsuite sweep (credit_jax/envs/bsuite.py's
PaddedChain, credit_jax/experiments/bsuite/runner.py): the padded chain steps as the
unpadded chain does for the same keys and actions, then pads; and the bucketed
program's runs give the per-setting programs' episodes, successes, returns and bsuite
scores exactly when the policy is held fixed (lr = 0: the same actions; learning itself
differs for PPO, which also trains on the padding steps)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs
from credit_jax.envs import bsuite as bs
from credit_jax.experiments.bsuite import analysis, padded, runner, specs
from config_files import load_config


def _config():
  c = load_config("bsuite", "smoke")
  c.umbrella_lengths = (2, 3)
  c.memory_lengths = (1, 2)
  c.discounting_mapping_seeds = (0, 1, 5)
  for x in ("umbrella_length", "memory_len", "discounting_chain"):
    c.episodes[x] = 40
  c.chunk_updates = 2
  return c


# --- the environment --------------------------------------------------------------------

CASES = [  # experiment, settings, pad_to
    ("umbrella_length", (1, 3, 7), 9),
    ("memory_len", (1, 4), 7),
    ("umbrella_distract", (1, 5), 20),
    ("memory_size", (1, 3), 3),
    ("discounting_chain", (0, 7, 13), 100),
]


def _padded_env(experiment, settings, pad_to):
  config = _config()
  config.buckets = (1000,)
  config.umbrella_distractors = settings
  config.memory_bits = settings
  cell = specs.padded_cell(experiment, tuple(settings), config)
  kwargs = dict(cell.env_kwargs)
  kwargs["pad_to"] = pad_to
  return envs.make(cell.env_id, **kwargs), config


def _same_obs(a, b):
  # a traced setting (1 - t / L with L traced) can round the time feature in the last
  # bit where the unpadded chain's constant L is folded
  np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def _scan(env, params, state, keys, actions):
  def body(s, xs):
    k, a = xs
    obs, s, r, term, trunc, info = env.step(k, s, a, params)
    return s, (obs, r, term, trunc, info["success"], info["final_observation"])
  return jax.lax.scan(body, state, (keys, actions))[1]


@pytest.mark.parametrize("experiment,settings,pad_to", CASES)
def test_padded_chain_steps_as_the_chain_then_pads(experiment, settings, pad_to):
  (env, params), config = _padded_env(experiment, settings, pad_to)
  field = specs.SWEPT_FIELDS[experiment]
  for setting in settings:
    plain, plain_params = envs.make(specs.ENV_IDS[experiment],
                                    **specs._plain_kwargs(experiment, setting, config))
    n = specs.episode_len(experiment, setting, config)
    pad = pad_to - n
    episodes = 4
    key = jax.random.PRNGKey(setting)
    keys = jax.random.split(jax.random.fold_in(key, 1), episodes * n)
    actions = jax.random.randint(jax.random.fold_in(key, 2), (episodes * n,), 0,
                                 plain.num_actions)
    # the padded run: each episode's n real steps take the plain run's keys and
    # actions; its padding steps take other keys (they must not matter) and action 0
    real = np.zeros(episodes * pad_to, bool)
    index = np.zeros(episodes * pad_to, np.int64)
    for e in range(episodes):
      real[e * pad_to:e * pad_to + n] = True
      index[e * pad_to:e * pad_to + n] = np.arange(e * n, (e + 1) * n)
    other = jax.random.split(jax.random.fold_in(key, 3), episodes * pad_to)
    p_keys = jnp.where(jnp.asarray(real)[:, None], keys[index], other)
    p_actions = jnp.where(jnp.asarray(real), actions[index], 0)
    p_params = params.replace(**{field: setting})
    obs0, p_state = env.reset(key, p_params)
    plain_obs0, state = plain.reset(key, plain_params)
    d = plain_obs0.shape[0]
    _same_obs(obs0[:d], plain_obs0)
    assert not np.any(np.asarray(obs0[d:]))
    want = jax.device_get(_scan(plain, plain_params, state, keys, actions))
    got = jax.device_get(_scan(env, params, p_state, p_keys, p_actions))
    w_obs, w_r, w_term, _, w_succ, w_final = want
    g_obs, g_r, g_term, g_trunc, g_succ, g_final = got
    assert not g_trunc.any()
    pad_obs = np.asarray(env.padding_observation())
    for e in range(episodes):
      for t in range(n):
        i, j = e * n + t, e * pad_to + t
        last = t == n - 1
        _same_obs(g_final[j][:d], w_final[i])
        assert (g_r[j], g_term[j], g_succ[j]) == (w_r[i], w_term[i], w_succ[i])
        assert bool(g_term[j]) == last
        if not last or pad == 0:
          _same_obs(g_obs[j][:d], w_obs[i])   # the next step's / the reset's
          assert not np.any(g_obs[j][d:])     # bits past the setting read 0
        else:
          np.testing.assert_array_equal(g_obs[j], pad_obs)
      for t in range(pad):
        j = e * pad_to + n + t
        assert g_r[j] == 0.0 and not g_succ[j]
        assert bool(g_term[j]) == (t == pad - 1)
        np.testing.assert_array_equal(g_final[j], pad_obs)
        if t == pad - 1:   # the next episode starts as the plain chain's reset drew it
          _same_obs(g_obs[j][:d], w_obs[e * n + n - 1])
        else:
          np.testing.assert_array_equal(g_obs[j], pad_obs)
    assert int(w_term.sum()) == episodes and int(g_term.sum()) == episodes * (
        1 + (pad > 0))


def test_padding_observation_is_no_real_observation():
  for env in (bs.UmbrellaChain(), bs.MemoryChain(), bs.DiscountingChain()):
    pad = np.asarray(env.padding_observation())
    assert pad.shape == env.obs_shape and pad.min() == -1.0
  # umbrella's and memory's time features (index 2, 0) lie in [0, 1] on real steps
  assert bs.UmbrellaChain().padding_observation()[2] == -1.0
  assert bs.MemoryChain().padding_observation()[0] == -1.0


def test_with_setting_draws_the_reset_again_with_the_setting():
  env, params = envs.make("bsuite/PaddedMemoryChain-v0", pad_to=3, field="active_bits",
                          num_bits=6, memory_length=2, active_bits=6)
  key = jax.random.PRNGKey(4)
  _, state = env.reset(key, params)
  for bits in (1, 2, 6):
    obs, s = env.with_setting(state, params, bits)
    want_obs, want = env.reset(key, params.replace(active_bits=bits))
    np.testing.assert_array_equal(obs, want_obs)
    assert int(s.setting) == bits and int(s.inner.query) < bits
    np.testing.assert_array_equal(s.inner.context, want.inner.context)
    assert not np.any(np.asarray(obs[2 + bits:]))


def test_padded_settings_are_checked():
  with pytest.raises(ValueError, match="pad_to"):
    envs.make("bsuite/PaddedUmbrellaChain-v0", pad_to=5, chain_length=6)
  with pytest.raises(ValueError, match="field"):
    padded.PaddedChain(bs.UmbrellaChain(), "num_bits", 5)
  with pytest.raises(ValueError, match="active_distractors"):
    envs.make("bsuite/UmbrellaChain-v0", n_distractor=4, active_distractors=5)


def test_buckets_group_settings_and_pad_to_the_longest():
  config = load_config("bsuite", "bsuite")
  cells = specs.cells_of("umbrella_length", config, "ppo_mlp_g0.99_l0.95")
  assert [c.settings for c in cells] == [tuple(range(1, 11)), (12, 14, 17, 20, 25, 30),
                                         tuple(range(40, 101, 10))]
  assert [c.episode_len for c in cells] == [10, 30, 100]
  assert [c.episode_len for c in specs.cells_of("memory_len", config, "grpo_k5")] == \
      [11, 31, 101]
  assert len(specs.cells_of("discounting_chain", config, "grpo_k5")) == 1
  size = specs.cells_of("memory_size", config, "ppo_gru_g0.99_l0.95")
  assert [c.settings[-1] for c in size] == [10, 30, 40]
  assert dict(size[-1].env_kwargs)["num_bits"] == 40
  # REINFORCE and DQN take their setting per run too (a one-stage curriculum)
  assert len(specs.cells_of("umbrella_length", config, "reinforce")) == 3
  assert len(specs.cells_of("umbrella_length", config, "dqn")) == 3
  config.buckets = ()
  assert len(specs.cells_of("umbrella_length", config, "grpo_k5")) == 23


# --- the program --------------------------------------------------------------------------

@pytest.mark.parametrize("method,experiment", [
    ("ppo_mlp_g0.99_l0.95", "umbrella_length"),
    ("grpo_k5", "umbrella_length"),
    ("ppo_gru_g0.99_l0.95", "memory_len"),
    ("ppo_mlp_g0.99_l0.95", "discounting_chain"),
    ("dqn", "umbrella_length"),
    ("reinforce", "memory_len"),
])
def test_bucketed_program_gives_the_per_setting_programs_runs(method, experiment):
  config = _config()
  for family in ("ppo", "grpo", "dqn", "reinforce"):   # a fixed policy: the same actions
    config.lrs[family] = 0.0
  config.buckets = (10,)
  (bucket,) = specs.cells_of(experiment, config, method)
  assert bucket.field is not None and len(bucket.settings) >= 2
  padded = runner.train_cell(method, bucket, config, lambda line: None, "bucket")
  config.buckets = ()
  cells = specs.cells_of(experiment, config, method)
  assert len(cells) >= 2 and all(c.field is None for c in cells)
  plain = [runner.train_cell(method, c, config, lambda line: None, c.name)
           for c in cells]
  settings = np.asarray(padded["settings"])
  for rec in plain:
    for j, setting in enumerate(rec["settings"]):
      i = np.flatnonzero((settings == setting)
                         & (np.asarray(padded["seeds"]) == rec["seeds"][j]))[0]
      for k in ("episodes", "successes"):
        assert padded[k][i] == rec[k][j], (setting, k)
      np.testing.assert_allclose(padded["return_sum"][i], rec["return_sum"][j],
                                 rtol=0, atol=1e-4)
  mine = analysis.summarize_experiment(experiment, [padded], config)
  theirs = analysis.summarize_experiment(experiment, plain, config)
  assert mine["seed_scores"] == pytest.approx(theirs["seed_scores"], abs=1e-5)
  assert mine["bsuite_score"] == pytest.approx(theirs["bsuite_score"], abs=1e-5)
  assert padded["env_steps_per_seed"] == sum(r["env_steps_per_seed"] for r in plain)
  assert padded["program_steps_per_seed"] >= padded["env_steps_per_seed"]
