"""Tests for GRPO and REINFORCE with sequence networks (the sequence `Actor` of
credit_jax.algos.grpo, the sequence path of credit_jax.algos.reinforce)."""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import algos, nets, rollout
from credit_jax.nets import sequence as sn
from credit_jax.algos import train as train_lib, grpo, reinforce
from credit_jax.types import PolicyState


def delayed_cue_config(kind, horizon=8, cue_delay=3, num_updates=2):
  """KeyChain T=`horizon`, k=1, A=4, the cue shown `cue_delay` steps before its pivotal
  step and never at it, no history window: a memoryless policy succeeds w.p. 1/4."""
  c = grpo.default_config()
  c.env_kwargs.horizon = c.horizon = horizon
  c.env_kwargs.num_pivotal, c.env_kwargs.num_actions = 1, 4
  c.env_kwargs.cue_delay = cue_delay
  c.history_window = 0
  c.num_updates, c.num_tasks, c.group_size = num_updates, 4, 3
  c.network.kind = kind
  c.network.gru_size, c.network.hidden_sizes = 8, (8,)
  c.network.d_model, c.network.max_len = 8, horizon
  return c


@pytest.mark.parametrize("kind", ["gru", "transformer"])
def test_group_replay_reproduces_the_rollout_log_probs(kind):
  c = delayed_cue_config(kind, horizon=6, cue_delay=2)
  c.env_kwargs.num_pivotal = 2
  env, env_params = train_lib.make_env(c)
  network, obs_shape = train_lib.make_network(c, env, env_params, value_head=True)
  # Larger weights than at init, so the logits (and a wrong replay) are far from uniform.
  # (Jitted, as the replays below: one compile each instead of one per op.)
  params = jax.jit(lambda k: jax.tree.map(lambda x: 3.0 * x, sn.init_params(
      network, k, obs_shape)))(jax.random.PRNGKey(0))
  policy = sn.make_sequence_policy(network, value=False)
  num_tasks, group, horizon = 3, 4, 9       # horizon > T: steps after the episode's end

  def replay(params, key):
    traj = rollout.collect_groups(env, env_params, policy, params, key, num_tasks, group,
                                  horizon)
    start = PolicyState(carry=None, prev_action=jnp.full((num_tasks, group), -1, jnp.int32),
                        prev_reward=jnp.zeros((num_tasks, group), jnp.float32))
    inputs = rollout.sequence_inputs(traj, start)
    logits = sn.unroll_episodes(network, params, traj.obs, *inputs)[0]
    return traj, inputs, nets.categorical_log_prob(logits, traj.actions)

  traj, inputs, log_probs = jax.jit(replay)(params, jax.random.PRNGKey(1))
  prev_a, prev_r, starts = inputs
  assert log_probs.shape == (horizon, num_tasks, group)
  np.testing.assert_allclose(log_probs, traj.log_probs, atol=2e-5)
  # Every episode starts from the initial carry, with no previous action; after its end
  # (at step T - 1 = 5) the next auto-reset episode starts with a reset carry too.
  assert np.all(np.asarray(prev_a[0]) == -1) and not np.any(starts[0])
  np.testing.assert_array_equal(np.asarray(starts[6]), True)
  np.testing.assert_array_equal(np.asarray(traj.valid[:6]), True)
  np.testing.assert_array_equal(np.asarray(traj.valid[6:]), False)
  # Not trivially equal: the same network with its memory reset at every step (no
  # history) gives other log-probs.
  memoryless = jax.jit(lambda *x: sn.unroll_episodes(network, *x)[0])(
      params, traj.obs, prev_a, prev_r, jnp.ones_like(starts))
  assert not np.allclose(nets.categorical_log_prob(memoryless, traj.actions),
                         traj.log_probs, atol=1e-3)


@pytest.mark.parametrize("kind", ["gru", "transformer"])
def test_sequence_grpo_first_ratios_are_one(kind):
  c = delayed_cue_config(kind)
  c.lr, c.update_epochs = 0.0, 1
  c.use_reference_kl, c.kl_coef = True, 0.1
  train = algos.make_train(c)
  assert train.env_steps_per_update == 4 * 3 * 8
  _, m = jax.jit(train)(jax.random.PRNGKey(3))
  # lr = 0: the loss replays each episode with the parameters that acted, and they are
  # the frozen reference: ratio 1 everywhere, zero KL to the reference.
  np.testing.assert_allclose(m["approx_kl"], 0.0, atol=1e-6)
  np.testing.assert_allclose(m["clip_frac"], 0.0)
  np.testing.assert_allclose(m["kl_ref"], 0.0, atol=1e-6)
  assert m["loss"].shape == (2,) and np.all(np.isfinite(m["loss"]))
  assert set(m) >= {"loss", "success", "return", "degenerate_frac"}


def test_mlp_kind_is_the_unchanged_mlp_path():
  c = grpo.default_config()
  c.num_updates, c.num_tasks, c.group_size, c.horizon = 2, 4, 2, 8
  c.env_kwargs.horizon = 8
  assert c.network.kind == "mlp"                      # GRPO's default_config names it
  old = ml_collections.ConfigDict(c.to_dict())        # a config from before the field
  del old.network["kind"]
  assert train_lib.network_kind(old) == "mlp"
  key = jax.random.PRNGKey(0)
  default = str(jax.make_jaxpr(algos.make_train(old))(key))
  assert str(jax.make_jaxpr(algos.make_train(c))(key)) == default
  assert len(default) > 1000


def test_network_fields_are_validated():
  c = delayed_cue_config("lstm")
  with pytest.raises(train_lib.ConfigError, match="network.kind"):
    algos.validate_config(c)
  c = delayed_cue_config("transformer")
  c.network.d_model, c.network.num_heads = 6, 4
  with pytest.raises(train_lib.ConfigError, match="network.d_model"):
    algos.make_train(c)
  c = delayed_cue_config("gru")
  c.network.gru_size = 0
  with pytest.raises(train_lib.ConfigError, match="network.gru_size"):
    algos.validate_config(c)
  with pytest.raises(ValueError, match="must agree"):
    sn.unroll_episodes(None, None, jnp.zeros((4, 2, 3, 5)),
                       jnp.zeros((4, 2, 3), jnp.int32), jnp.zeros((4, 2, 3)),
                       jnp.zeros((4, 2), bool))


@pytest.mark.slow
def test_transformer_grpo_learns_delayed_cues_above_the_memoryless_ceiling():
  # KeyChain T=8, k=1, A=4, cue 3 steps before its pivotal step and never at it, no
  # history window: a memoryless policy's success is exactly 1/4 whatever it learns.
  # The MLP's run is the control.
  c = delayed_cue_config("transformer", num_updates=60)
  c.num_tasks, c.group_size, c.network.d_model = 16, 8, 16
  results = {}
  for kind in ("transformer", "mlp"):
    c.network.kind = kind
    _, m = jax.jit(algos.make_train(c))(jax.random.PRNGKey(0))
    results[kind] = float(np.mean(m["success"][-10:]))
  print(f"sampled success, last 10 updates (128 episodes each): {results} "
        f"(memoryless ceiling 0.25)")
  assert results["transformer"] >= 0.55
  assert results["mlp"] <= 0.35   # 0.25 + 3.5 standard errors of 1280 episodes


# REINFORCE with sequence networks (the sequence path of credit_jax.algos.reinforce).


def reinforce_config(kind, credit="gae", baseline="value"):
  c = reinforce.default_config()
  c.env_kwargs.horizon, c.env_kwargs.num_pivotal, c.env_kwargs.cue_delay = 6, 2, 2
  c.horizon, c.num_envs, c.num_updates = 9, 4, 2     # horizon > T: steps after the end
  c.credit, c.baseline = credit, baseline
  c.network.kind = kind
  c.network.gru_size, c.network.hidden_sizes = 8, (8,)
  c.network.d_model, c.network.max_len = 8, 8
  return c


@pytest.mark.parametrize("kind", ["gru", "transformer"])
def test_reinforce_replay_reproduces_the_rollout(kind):
  c = reinforce_config(kind)
  env, env_params = train_lib.make_env(c)
  network, obs_shape = train_lib.make_network(c, env, env_params, value_head=True)
  params = jax.jit(lambda k: jax.tree.map(lambda x: 3.0 * x, sn.init_params(
      network, k, obs_shape)))(jax.random.PRNGKey(0))   # jitted: one compile, not one per op
  policy = sn.make_sequence_policy(network, value=True)

  def run(params, key):
    traj = rollout.collect_episodes(env, env_params, policy, params, key, 4, 9)
    return traj, reinforce.replay_sequence(network, params, traj, final=True)

  traj, (logits, values, final_values) = jax.jit(run)(params, jax.random.PRNGKey(2))
  np.testing.assert_allclose(nets.categorical_log_prob(logits, traj.actions),
                             traj.log_probs, atol=2e-5)
  np.testing.assert_allclose(values, traj.extras["value"], atol=2e-5)
  # The final observation's value is the value the next step of the same episode would
  # read: at every step that did not end the episode, the next step's value.
  not_done = ~np.asarray(traj.dones[:-1])
  np.testing.assert_allclose(np.asarray(final_values[:-1])[not_done],
                             np.asarray(values[1:])[not_done], atol=2e-5)


def test_sequence_reinforce_trains():
  c = reinforce_config("gru", "gae", "value")
  _, m = jax.jit(algos.make_train(c))(jax.random.PRNGKey(0))
  assert m["loss"].shape == (2,) and np.all(np.isfinite(m["loss"]))
  assert np.all(np.asarray(m["grad_norm"]) > 0)   # the value loss is never zero here
  assert set(m) >= {"loss", "success", "return"}


@pytest.mark.slow
def test_gru_reinforce_learns_delayed_cues_above_the_memoryless_ceiling():
  # KeyChain T=8, k=1, A=4, the cue shown 3 steps before its pivotal step and never at
  # it, no history window: a memoryless policy's success is exactly 1/4 whatever it
  # learns. REINFORCE with returns-to-go and the leave-one-out mean baseline, 32
  # episodes per update, 100 updates, seed 0 (GRU: 0.57 over the last 10 updates when
  # written, rising; MLP: 0.29). The MLP's run is the control.
  c = reinforce.default_config()
  c.env_kwargs.horizon = c.horizon = 8
  c.env_kwargs.num_pivotal, c.env_kwargs.num_actions, c.env_kwargs.cue_delay = 1, 4, 3
  c.history_window = 0
  c.num_envs, c.num_updates, c.lr = 32, 100, 1e-2
  c.credit, c.baseline = "rtg", "mean"
  c.network.gru_size, c.network.hidden_sizes = 16, (16,)
  results = {}
  for kind in ("gru", "mlp"):
    c.network.kind = kind
    _, m = jax.jit(algos.make_train(c))(jax.random.PRNGKey(0))
    results[kind] = float(np.mean(m["success"][-10:]))
  print(f"sampled success, last 10 updates (320 episodes): {results} "
        f"(memoryless ceiling 0.25)")
  assert results["gru"] >= 0.45
  assert results["mlp"] <= 0.36   # 0.25 + 4.5 standard errors of 320 episodes


def test_reinforce_mlp_kind_is_the_unchanged_mlp_path():
  c = reinforce_config("mlp")
  old = ml_collections.ConfigDict(c.to_dict())
  del old.network["kind"]
  key = jax.random.PRNGKey(0)
  default = str(jax.make_jaxpr(algos.make_train(old))(key))
  assert str(jax.make_jaxpr(algos.make_train(c))(key)) == default
  assert len(default) > 1000


@pytest.mark.parametrize("name", ["grpo_relabel", "search_then_train"])
def test_recipes_built_on_grpo_fields_refuse_sequence_networks(name):
  c = algos.RECIPES[name].default_config()
  assert c.network.kind == "mlp"
  algos.validate_config(c)
  c.network.kind = "gru"
  with pytest.raises(train_lib.ConfigError, match="network.kind"):
    algos.validate_config(c)


# PRM shaping and a curriculum with a sequence policy (the hooks grpo.py has).


def test_sequence_grpo_takes_a_curriculum():
  from credit_jax.addons import curriculum
  c = curriculum.add_config(delayed_cue_config("gru", horizon=12, num_updates=6))
  c.env_kwargs.cue_delay = 0
  c.num_minibatches, c.update_epochs = 1, 1
  c.curriculum.kind = "fixed"
  c.curriculum.stages = (3, 6, 12)
  c.curriculum.stage_updates = (2, 2)
  algos.validate_config(c)
  _, m = jax.jit(algos.make_train(c))(jax.random.PRNGKey(0))
  np.testing.assert_array_equal(m["curriculum_value"], [3, 3, 6, 6, 12, 12])
  # KeyChain episodes last exactly the stage's T: the steps taken follow the schedule.
  np.testing.assert_array_equal(m["episode_length"], m["curriculum_value"])
  np.testing.assert_array_equal(m["env_steps"], 12 * m["curriculum_value"])
  assert np.all(np.isfinite(m["loss"])) and "success" in m


def test_sequence_grpo_takes_prm_shaping():
  from configs import prm as prm_configs  # pylint: disable=import-outside-toplevel
  c = prm_configs.get_config("tiny").grpo
  c.network.kind = "gru"
  c.network.gru_size, c.network.hidden_sizes = 8, (8,)
  algos.validate_config(c)
  train = algos.make_train(c)
  assert {"prm.weight", "prm.outcome_weight"} <= set(train.default_hparams)
  run = jax.jit(train)   # hyperparameters as arguments in every call: one compile
  state, m = run(jax.random.PRNGKey(0), train.default_hparams)
  assert "prm_params" in state.aux
  for k in ("loss", "success", "prm_score", "prm_gap"):
    assert m[k].shape == (c.num_updates,) and np.all(np.isfinite(m[k])), k
  # The shaped scores are what the advantages come from: with the PRM's weight 0 and
  # the outcome's 1 the run is the run without the PRM; with a large PRM weight it
  # is not.
  hp = {**train.default_hparams, "prm.weight": jnp.float32(0.0),
        "prm.outcome_weight": jnp.float32(1.0)}
  _, m0 = run(jax.random.PRNGKey(0), hp)
  c.prm.enabled = False
  _, m_plain = jax.jit(algos.make_train(c))(jax.random.PRNGKey(0))
  np.testing.assert_allclose(m0["loss"], m_plain["loss"], rtol=1e-5, atol=1e-7)
  _, m5 = run(jax.random.PRNGKey(0), {**hp, "prm.weight": jnp.float32(5.0)})
  assert not np.allclose(m5["loss"], m_plain["loss"], rtol=1e-3, atol=1e-5)
