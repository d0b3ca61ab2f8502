"""Tests for credit_jax.relabel (relabeling, schedule, importance weights) and the GRPO
relabeling recipe: hand-computed goldens, verifier-only rewards, originals kept, jit/vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import algos, envs, relabel, rollout
from credit_jax.algos import grpo_relabel
from credit_jax.types import Trajectory
from config_files import load_config_module


def _bitflip_failure():
  """BitFlip n=2, goal A = 11 from 00: flips bit 0, bit 0, bit 1; ends on B = 01.

  Achieved after each step: 10, 00, 01; truncated at the third step; reward 0 throughout.
  Time-major with one batch column: [T=3, B=1].
  """
  env, _ = envs.make("BitFlip-v0", num_bits=2)
  achieved = jnp.array([[1, 0], [0, 0], [0, 1]], jnp.int32)
  before = jnp.array([[0, 0], [1, 0], [0, 0]], jnp.int32)
  goal = jnp.ones((3, 2), jnp.int32)
  obs = jnp.concatenate([before, goal], axis=1).astype(jnp.float32)
  final_obs = jnp.concatenate([achieved, goal], axis=1).astype(jnp.float32)
  col = lambda x: x[:, None]
  traj = Trajectory(
      obs=col(obs), actions=col(jnp.array([0, 0, 1], jnp.int32)), rewards=jnp.zeros((3, 1)),
      terminated=jnp.zeros((3, 1), bool), truncated=col(jnp.array([False, False, True])),
      log_probs=jnp.full((3, 1), -0.5), final_obs=col(final_obs),
      valid=jnp.ones((3, 1), bool), extras={"value": jnp.arange(3.0)[:, None]},
      info={"achieved_goal": col(achieved), "prev_achieved_goal": col(before),
            "desired_goal": col(goal), "goal_checked": jnp.ones((3, 1), bool)})
  return env, traj


def test_final_relabels_a_failure_on_a_into_a_success_on_b():
  env, traj = _bitflip_failure()
  out = relabel.relabel(env, traj, jax.random.PRNGKey(0), strategy="final",
                          relabel_weight=0.5)
  rel = jax.tree.map(lambda x: x[:, 0, 1], out.traj)
  np.testing.assert_array_equal(out.goals[:, 0, 1], [[0, 1]] * 3)      # B
  np.testing.assert_array_equal(out.original_goal[:, 0], [[1, 1]] * 3)  # A
  np.testing.assert_array_equal(rel.rewards, [0.0, 0.0, 1.0])
  np.testing.assert_array_equal(env.goal_reward(rel.info["achieved_goal"], out.goals[:, 0, 1]),
                                rel.rewards)                            # the verifier's
  np.testing.assert_array_equal(rel.terminated, [False, False, True])
  np.testing.assert_array_equal(rel.truncated, [False, False, False])
  np.testing.assert_array_equal(rel.valid, [True, True, True])
  np.testing.assert_array_equal(rel.obs[:, 2:], [[0.0, 1.0]] * 3)       # goal part = B
  np.testing.assert_array_equal(rel.obs[:, :2], traj.obs[:, 0, :2])     # bits unchanged
  np.testing.assert_array_equal(out.source_step[:, 0], [[-1, 2]] * 3)
  np.testing.assert_array_equal(out.relabeled[:, 0], [[False, True]] * 3)
  np.testing.assert_allclose(out.weights[:, 0], [[1.0, 0.5]] * 3)
  np.testing.assert_array_equal(rel.log_probs, traj.log_probs[:, 0])    # still under A


def test_episode_strategy_skips_goals_achieved_before_acting_and_cuts_at_success():
  env, traj = _bitflip_failure()
  out = relabel.relabel(env, traj, jax.random.PRNGKey(3), strategy="episode",
                          num_goals=64)
  sources = np.asarray(out.source_step[0, 0, 1:])
  assert set(sources.tolist()) == {0, 2}          # step 1 re-achieved the start 00
  for j, s in enumerate(sources):
    valid = np.asarray(out.traj.valid[:, 0, j + 1])
    np.testing.assert_array_equal(valid, np.arange(3) <= s)   # ends at its first success
    np.testing.assert_array_equal(out.traj.rewards[:, 0, j + 1], np.arange(3) == s)
    np.testing.assert_array_equal(out.traj.terminated[:, 0, j + 1], np.arange(3) == s)


def test_future_strategy_draws_from_the_rest_of_the_episode():
  env, traj = _bitflip_failure()
  out = relabel.relabel(env, traj, jax.random.PRNGKey(4), strategy="future", num_goals=64)
  source = np.asarray(out.source_step[:, 0, 1:])
  assert set(source[0].tolist()) == {0, 2} and set(source[1].tolist()) == {2}
  assert set(source[2].tolist()) == {2}
  assert np.all(out.traj.valid[:, 0, 1:])         # transitions, not cut episodes
  np.testing.assert_array_equal(out.traj.rewards[:, 0, 1:], source == np.arange(3)[:, None])


def test_nothing_verifiable_achieved_yields_no_relabeled_example():
  # TextEdit checks its goal only on submit; a policy that never submits is truncated.
  env, params = envs.make("TextEdit-v0", buffer_len=3, vocab_size=2, start_len=2,
                          num_edits=1)
  env = envs.DesiredGoalWrapper(env)
  write = lambda p, obs, key: (jnp.int32(4), jnp.float32(0.0), ())
  traj = rollout.collect_episodes(env, params, write, None, jax.random.PRNGKey(0), 4,
                                  int(params.max_steps_in_episode))
  assert not np.any(traj.info["goal_checked"]) and np.all(traj.truncated[-1])
  relabel_all = jax.jit(lambda t, k: [
      relabel.relabel(env, t, k, strategy=s, num_goals=2) for s in relabel.STRATEGIES])
  for out in relabel_all(traj, jax.random.PRNGKey(1)):
    assert not np.any(out.relabeled) and not np.any(out.traj.valid[..., 1:])
    assert not np.any(out.weights[..., 1:]) and np.all(out.source_step == -1)
    np.testing.assert_array_equal(out.traj.valid[..., 0], traj.valid)


@pytest.fixture(scope="module")
def random_bitflip():
  env, params = envs.make("BitFlip-v0", num_bits=3)
  env = envs.DesiredGoalWrapper(env)
  policy = rollout.uniform_random_policy(env.num_actions)
  # Auto-reset rollout: several episodes per column, boundaries inside it.
  obs, state = rollout.reset(env, params, jax.random.PRNGKey(0), 6)
  traj, _ = rollout.collect(env, params, policy, None, jax.random.PRNGKey(1), state, obs, 9)
  return env, traj


@pytest.mark.parametrize("strategy", relabel.STRATEGIES)
def test_original_kept_and_rewards_come_from_the_verifier(random_bitflip, strategy):
  env, traj = random_bitflip
  out = jax.jit(lambda t, k: relabel.relabel(env, t, k, strategy=strategy, num_goals=3,
                                               relabel_weight=0.25))(traj, jax.random.PRNGKey(2))
  jax.tree.map(lambda o, x: np.testing.assert_array_equal(o[:, :, 0], x), out.traj, traj)
  np.testing.assert_array_equal(out.weights[..., 0], traj.valid)
  rel = jax.tree.map(lambda x: np.asarray(x[:, :, 1:]), out.traj)
  assert np.any(rel.valid)
  verdict = env.goal_reward(rel.info["achieved_goal"], rel.info["desired_goal"])
  np.testing.assert_array_equal(rel.rewards, np.where(rel.valid, verdict, 0.0))
  np.testing.assert_allclose(out.weights[..., 1:], 0.25 * rel.valid)
  # A relabeled goal was achieved (verified) at its source step, in the same episode.
  start, end = map(np.asarray, relabel.episode_bounds(traj.dones))
  t, b, j = np.nonzero(rel.valid)
  src = np.asarray(out.source_step[..., 1:])[t, b, j]
  assert np.all((src >= np.asarray(start)[t, b]) & (src <= np.asarray(end)[t, b]))
  np.testing.assert_array_equal(np.asarray(traj.info["achieved_goal"])[src, b],
                                np.asarray(rel.info["desired_goal"])[t, b, j])
  # BitFlip ends an episode exactly on success, under any goal.
  np.testing.assert_array_equal(rel.terminated, rel.rewards == 1)
  if strategy != "future":  # a whole relabeled episode succeeds once: at its end
    starts = np.asarray(start)[t, b]
    for key in set(zip(starts, b, j)):
      rows = (starts == key[0]) & (b == key[1]) & (j == key[2])
      rewards = np.asarray(rel.rewards)[t[rows], b[rows], j[rows]]
      np.testing.assert_array_equal(rewards, np.arange(rows.sum()) == rows.sum() - 1)


def test_relabel_vmaps_over_a_leading_batch_axis(random_bitflip):
  env, traj = random_bitflip
  stacked = jax.tree.map(lambda x: jnp.stack([x, x[:, ::-1]]), traj)
  keys = jax.random.split(jax.random.PRNGKey(5), 2)
  fn = jax.jit(lambda t, k: relabel.relabel(env, t, k, strategy="future", num_goals=2))
  batched = jax.jit(jax.vmap(fn))(stacked, keys)
  for i in range(2):
    single = fn(jax.tree.map(lambda x: x[i], stacked), keys[i])
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a[i], b), batched, single)


def test_schedule_turns_relabeling_down_then_off_above_the_threshold():
  s = jnp.array([0.0, 0.3, 0.45, 0.5, 0.55, 0.6, 0.9])
  np.testing.assert_allclose(relabel.relabel_schedule(s, 2.0, 0.6, 0.2),
                             [2.0, 2.0, 1.5, 1.0, 0.5, 0.0, 0.0], atol=1e-6)
  np.testing.assert_allclose(relabel.relabel_schedule(s, 1.0, 0.5), [1, 1, 1, 0, 0, 0, 0])
  hard = jax.jit(jax.vmap(relabel.relabel_schedule, in_axes=(None, None, 0)))(
      jnp.float32(0.5), 1.0, jnp.array([0.4, 0.6]))
  np.testing.assert_allclose(hard, [0.0, 1.0])


def test_importance_weights_are_per_episode_clipped_ratios():
  lp_new = jnp.log(jnp.array([0.5, 0.5, 0.9, 0.1, 0.3]))
  lp_old = jnp.log(jnp.array([0.25, 0.5, 0.3, 0.2, 0.3]))
  dones = jnp.array([False, True, False, False, True])
  valid = jnp.array([True, True, True, True, False])
  w, log_rho = relabel.goal_importance_weights(lp_new, lp_old, valid, dones, 1.2)
  np.testing.assert_allclose(log_rho, np.log([2.0, 2.0, 1.5, 1.5, 1.0]) * [1, 1, 1, 1, 0],
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(w, [1.2, 1.2, 1.2, 1.2, 0.0], rtol=1e-6)
  w2, _ = relabel.goal_importance_weights(lp_old, lp_new, valid, dones, 5.0)
  np.testing.assert_allclose(w2, [0.5, 0.5, 2 / 3, 2 / 3, 0.0], rtol=1e-5)


def test_bad_inputs_are_named():
  env, traj = _bitflip_failure()
  with pytest.raises(ValueError, match="strategy"):
    relabel.relabel(env, traj, jax.random.PRNGKey(0), strategy="her")
  with pytest.raises(ValueError, match="num_goals"):
    relabel.relabel(env, traj, jax.random.PRNGKey(0), strategy="final", num_goals=0)
  bare = traj._replace(info={k: v for k, v in traj.info.items() if k != "desired_goal"})
  with pytest.raises(ValueError, match="DesiredGoalWrapper"):
    relabel.relabel(env, bare, jax.random.PRNGKey(0), strategy="final")
  with pytest.raises(ValueError, match="share one shape"):
    relabel.goal_importance_weights(jnp.zeros(3), jnp.zeros(4), jnp.ones(3, bool),
                                      jnp.zeros(3, bool), 1.0)


# --- GRPO + relabeling ------------------------------------------------------------------

def _load_config(variant):
  """configs/relabel.py's experiment config, or its arms' recipe configs ("dqn", "grpo")."""
  module = load_config_module("relabel")
  if variant in ("dqn", "grpo"):
    return getattr(module, f"{variant}_config")()
  return module.get_config(variant)


def test_shipped_configs_validate():
  algos.validate_config(_load_config("grpo"))
  algos.validate_config(_load_config("dqn"))
  for variant in (None, "small", "full"):
    cfg = _load_config(variant)
    algos.validate_config(cfg.dqn)
    for c in cfg.grpo.values():
      algos.validate_config(c)


def test_grpo_relabel_modes_run_in_one_compiled_call():
  c = _load_config("grpo")
  c.env_kwargs.size, c.env_kwargs.max_steps_in_episode, c.horizon = 3, 4, 4
  c.num_tasks, c.group_size, c.num_updates, c.num_minibatches = 2, 2, 2, 1
  c.update_epochs, c.network.hidden_sizes = 1, (8,)
  train = algos.make_train(c)
  modes = [grpo_relabel.mode_hparams(m) for m in grpo_relabel.MODES]
  hp = {k: jnp.array([m.get(k, v) for m in modes], jnp.float32)
        for k, v in train.default_hparams.items()}
  keys = jnp.tile(jax.random.PRNGKey(0)[None], (3, 1))
  _, metrics = jax.jit(jax.vmap(train))(keys, hp)
  assert all(np.all(np.isfinite(v)) for v in metrics.values())
  np.testing.assert_array_equal(metrics["relabel_weight"][0], 0.0)   # mode "none"
  assert np.all(metrics["relabel_weight"][1:, 0] == 1.0)             # real success 0 at start
  # Same key, same first rollout: the modes differ only in how they learn from it.
  np.testing.assert_array_equal(metrics["success"][:, 0], metrics["success"][0, 0])
  with pytest.raises(ValueError, match="mode"):
    grpo_relabel.mode_hparams("both")
  c.relabel_strategy = "future"
  with pytest.raises(algos.ConfigError, match="config.relabel_strategy"):
    algos.validate_config(c)


def test_goal_options_that_keep_relabeled_goals_in_the_task():
  # GoalGrid targets="all": every cell is posed as a goal, never the start cell.
  env, params = envs.make("GoalGrid-v0", size=3, targets="all")
  states = jax.vmap(lambda k: env.reset(k, params)[1])(
      jax.random.split(jax.random.PRNGKey(0), 400))
  cells = np.asarray(states.goal[:, 0] * 3 + states.goal[:, 1])
  assert set(cells.tolist()) == set(range(9))
  assert not np.any(np.all(np.asarray(states.goal) == np.asarray(states.pos), axis=1))
  with pytest.raises(ValueError, match="targets"):
    envs.make("GoalGrid-v0", targets="corners")
  # TextEdit goal_edits="any": one substitution, insertion or deletion away.
  env, params = envs.make("TextEdit-v0", buffer_len=4, vocab_size=2, start_len=3,
                          num_edits=1, goal_edits="any")
  states = jax.vmap(lambda k: env.reset(k, params)[1])(
      jax.random.split(jax.random.PRNGKey(1), 400))
  start, goal = np.asarray(states.buffer), np.asarray(states.goal)
  growth = np.sum(goal >= 0, axis=1) - np.sum(start >= 0, axis=1)
  assert set(growth.tolist()) == {-1, 0, 1}
  assert not np.any(np.all(start == goal, axis=1))
  same_len = growth == 0
  assert np.all(np.sum(start[same_len] != goal[same_len], axis=1) == 1)
  with pytest.raises(ValueError, match="goal_edits"):
    envs.make("TextEdit-v0", goal_edits="many")


def _textedit_starts_and_goals(n, **kwargs):
  env, params = envs.make("TextEdit-v0", **kwargs)
  states = jax.vmap(lambda k: env.reset(k, params)[1])(
      jax.random.split(jax.random.PRNGKey(2), n))
  return np.asarray(states.buffer), np.asarray(states.goal)


def test_textedit_all_poses_every_other_buffer_uniformly():
  # buffer_len 2, vocab 2: 1 + 2 + 4 = 7 buffers; from a start of 1 token, 6 goals.
  start, goal = _textedit_starts_and_goals(
      6000, buffer_len=2, vocab_size=2, start_len=1, num_edits=1, goal_edits="all")
  for s in (0, 1):
    goals = [tuple(g) for g in goal[start[:, 0] == s]]
    counts = {g: goals.count(g) for g in set(goals)}
    assert len(counts) == 6 and (s, -1) not in counts
    # Uniform: each of 6 goals ~1/6 of ~3000 draws (binomial sd ~20).
    assert max(counts.values()) - min(counts.values()) < 150, counts
    # PAD only after the tokens; tokens in [0, V).
    for g in counts:
      assert list(g) in ([-1, -1], [0, -1], [1, -1], [0, 0], [0, 1], [1, 0], [1, 1])


def test_textedit_upto_draws_one_to_num_edits_edits():
  start, goal = _textedit_starts_and_goals(2000, buffer_len=6, vocab_size=4,
                                           start_len=4, num_edits=3, goal_edits="upto")
  growth = np.sum(goal >= 0, axis=1) - np.sum(start >= 0, axis=1)
  assert set(growth.tolist()) == {-3, -2, -1, 0, 1, 2}
  assert not np.any(np.all(start == goal, axis=1))
  # Some goals one substitution away (count 1), which "any" with 3 edits rarely poses.
  same_len = growth == 0
  assert np.any(np.sum(start[same_len] != goal[same_len], axis=1) == 1)


def test_old_hindsight_names_still_work_and_say_the_new_one(capsys):
  """Relabeling's old names (issue 45: "hindsight" names HCA's credit only): the config
  files and the recipe name give what the new names give, after one line naming the new
  name; nothing changes silently. `cj.hindsight` no longer resolves."""
  import credit_jax as cj   # pylint: disable=g-import-not-at-top
  from config_files import load_config   # pylint: disable=g-import-not-at-top
  for old, new in (("hindsight", "relabel"),
                   ("grpo_hindsight_goalgrid", "grpo_relabel_goalgrid")):
    capsys.readouterr()
    got = load_config(old, "small")
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"note: configs/{old}.py is now configs/{new}.py"], err
    assert got.to_dict() == load_config(new, "small").to_dict()
  assert load_config_module("hindsight").grpo_config().to_dict() == \
      _load_config("grpo").to_dict()
  c = grpo_relabel.default_config()
  c.algo = "grpo_hindsight"
  capsys.readouterr()
  algos.validate_config(c)
  assert capsys.readouterr().err.strip().splitlines() == [
      "note: recipe 'grpo_hindsight' is now 'grpo_relabel'"]
  assert c.algo == "grpo_relabel" and algos.ALIASES == {"grpo_hindsight": "grpo_relabel"}
  assert not hasattr(cj, "hindsight")   # the module alias went with the flat layout's
