"""COCOA's corridor experiment (credit_jax/experiments/cocoa_corridor): the exact credit
against brute-force enumeration, the hindsight models' start and order, epsilon
exploration, the shadow mode's exact gradient, and a killed run resuming exactly."""
import itertools
import os
import tempfile

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import envs, exact, nets, rollout
from credit_jax.addons import hindsight_credit
from credit_jax.envs import conveyor_treasure as ct
from credit_jax.experiments import report
from credit_jax.experiments.cocoa_corridor import probe, study

L = 6   # key, apple-left, empty, apple-right, door, treasure


def _linear(params, obs):
  w, b = params
  return obs @ w + b


def _policy(seed=0, scale=0.7):
  rng = np.random.default_rng(seed)
  return (jnp.asarray(rng.normal(size=(9, 4)) * scale, jnp.float32),
          jnp.asarray(rng.normal(size=4) * scale, jnp.float32))


def _enumerate(params, length=L):
  """NumPy reference: (Q [L, 4, A], E[N_m | s, a] [L, 4, A, 3], reach [L, 4, A]) over
  every action sequence, from the corridor's rules written out here."""
  cells = ct.layout_cells(length)
  w, b = (np.asarray(x, np.float64) for x in params)
  s = 23.0 / length
  mean_apple = 0.5 * (0.1 + 0.9) * s
  mass = np.zeros((length, 4, 4))
  q_sum = np.zeros((length, 4, 4))
  n_sum = np.zeros((length, 4, 4, 3))
  for seq in itertools.product(range(4), repeat=length):
    key = door = False
    prob, flags, rewards, classes = 1.0, [], [], []
    for t, a in enumerate(seq):
      content = ct.TREASURE if (t == length - 1 and door) else cells[t]
      obs = np.zeros(9)
      obs[0], obs[1 + content], obs[7 + int(key)] = t / length, 1.0, 1.0
      logits = obs @ w + b
      pi = np.exp(logits - logits.max())
      pi /= pi.sum()
      prob *= pi[a]
      flags.append(int(key) + 2 * int(door))
      eaten = (content == ct.APPLE_LEFT and a == ct.PICK_LEFT) or (
          content == ct.APPLE_RIGHT and a == ct.PICK_RIGHT)
      treasure = content == ct.TREASURE
      rewards.append(mean_apple * eaten + 0.2 * s * treasure)
      classes.append([0.5 * eaten, 0.5 * eaten, float(treasure)])
      key = key or (content == ct.KEY and a == ct.PICK_KEY)
      door = door or (content == ct.DOOR and a == ct.OPEN_DOOR and key)
    rewards, classes = np.asarray(rewards), np.asarray(classes)
    for t, a in enumerate(seq):
      mass[t, flags[t], a] += prob
      q_sum[t, flags[t], a] += prob * rewards[t:].sum()
      n_sum[t, flags[t], a] += prob * classes[t + 1:].sum(0)
  reach = mass > 0
  safe = np.where(reach, mass, 1.0)
  return q_sum / safe, n_sum / safe[..., None], reach


def test_corridor_credit_matches_enumeration():
  env, env_params = envs.make("ConveyorTreasure-v0", length=L)
  params = _policy()
  q, w, probs = jax.jit(lambda p: probe.corridor_credit(env, env_params, _linear, p))(
      params)
  q_ref, n_ref, reach = _enumerate(params)
  np.testing.assert_allclose(np.asarray(q)[reach], q_ref[reach], rtol=1e-4, atol=1e-6)
  pi = np.asarray(probs, np.float64)
  mean = np.sum(pi[..., None] * n_ref, axis=2, keepdims=True)
  w_ref = np.where(mean > 0, n_ref / np.where(mean > 0, mean, 1.0), 1.0)
  state_reach = reach.any(-1)
  np.testing.assert_allclose(np.asarray(w)[state_reach], w_ref[state_reach], rtol=1e-4,
                             atol=1e-5)
  # The key step: only picking the key makes the treasure possible. (The apples' w there
  # is not 1: holding the key changes the observation, so the later apple steps' policy.)
  w0 = np.asarray(w)[0, 0]
  assert w0[ct.PICK_KEY, 2] > 1 and np.all(w0[1:, 2] == 0)


def test_first_state_gradient_matches_enumeration():
  env, env_params = envs.make("ConveyorTreasure-v0", length=L)
  params = _policy(1)
  g = jax.jit(lambda p: probe.first_state_gradient(env, env_params, _linear, p))(params)
  q_ref, _, _ = _enumerate(params)
  obs0 = np.zeros(9, np.float32)
  obs0[1 + ct.KEY], obs0[7] = 1.0, 1.0
  ref = jax.grad(lambda p: jnp.sum(jax.nn.softmax(_linear(p, obs0[None]))[0]
                                   * jnp.asarray(q_ref[0, 0], jnp.float32)))(params)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(ref)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def _batch(env, env_params, params, n=16, seed=3):
  net = _LinearNet()
  traj = rollout.collect_episodes(env, env_params, nets.make_policy_fn(net, value=False),
                                  params, jax.random.key(seed), n, env.horizon)
  return traj, _linear(params, traj.obs)


class _LinearNet:
  num_actions = 4

  def apply(self, params, obs):
    return _linear(params, obs), jnp.zeros(obs.shape[:-1])


@pytest.mark.parametrize("kind,model_kind", [("cocoa", "gated"), ("hca", "gated"),
                                             ("cocoa", "tabular")])
def test_untrained_gated_model_gives_no_credit(kind, model_kind):
  env, env_params = envs.make("ConveyorTreasure-v0", length=L)
  params = _policy(2)
  traj, logits = _batch(env, env_params, params)
  cfg = hindsight_credit.add_config(ml_collections.ConfigDict(), kind, model=model_kind,
                                    hidden_sizes=(32,))[kind]
  model = hindsight_credit.Hindsight(kind, cfg, 4, 9,
                                     hindsight_credit.reward_values_of(env, env_params),
                                     env.onehot_groups)
  carry = model.init(jax.random.key(0))
  credit, _, ratio = model.credit(carry[model.owns[0]], logits, traj, 1.0)
  if kind == "cocoa":
    np.testing.assert_allclose(np.asarray(credit.coefficients), 0.0, atol=1e-5)  # w - 1
    np.testing.assert_allclose(np.asarray(credit.contributions), 0.0, atol=1e-5)
  else:
    np.testing.assert_allclose(float(ratio), 1.0, atol=1e-5)   # pi / h of the action
    np.testing.assert_allclose(np.asarray(credit), 0.0, atol=1e-5)
  # ... and it learns: one step moves the coefficients.
  trained, _ = model.train(carry, traj, 1.0, 3e-3, jax.random.key(1), logits)
  moved, _, _ = model.credit(trained[model.owns[0]], logits, traj, 1.0)
  pick = (lambda c: c.coefficients) if kind == "cocoa" else (lambda c: c)
  assert float(jnp.max(jnp.abs(pick(moved) - pick(credit)))) > 1e-4


def test_tabular_hindsight_model_is_cocoas_only_and_needs_onehot_groups():
  cfg = hindsight_credit.add_config(ml_collections.ConfigDict(), "hca",
                                    model="tabular")["hca"]
  with pytest.raises(ValueError, match="tabular"):
    hindsight_credit.Hindsight("hca", cfg, 4, 9, (), ((1, 7),))
  cfg = hindsight_credit.add_config(ml_collections.ConfigDict(), "cocoa",
                                    model="tabular")["cocoa"]
  with pytest.raises(ValueError, match="onehot_groups"):
    hindsight_credit.Hindsight("cocoa", cfg, 4, 9, (1.0,), None)


def test_fit_first_credits_with_the_fitted_model():
  env, env_params = envs.make("ConveyorTreasure-v0", length=L)
  traj, logits = _batch(env, env_params, _policy(4))
  values = hindsight_credit.reward_values_of(env, env_params)
  out = {}
  for first in (False, True):
    cfg = hindsight_credit.add_config(ml_collections.ConfigDict(), "cocoa", model="gated",
                                      hidden_sizes=(32,), fit_first=first,
                                      train_steps=2)["cocoa"]
    model = hindsight_credit.Hindsight("cocoa", cfg, 4, 9, values)
    carry = model.init(jax.random.key(0))
    credit, new, _ = model.step(carry, logits, traj, 1.0, 1e-2, jax.random.key(1))
    trained, _ = model.train(carry, traj, 1.0, 1e-2, jax.random.key(1), logits)
    before, _, _ = model.credit(carry[model.owns[0]], logits, traj, 1.0)
    after, _, _ = model.credit(trained[model.owns[0]], logits, traj, 1.0)
    ref = after if first else before
    np.testing.assert_allclose(np.asarray(credit.coefficients),
                               np.asarray(ref.coefficients), atol=1e-6)
    out[first] = np.asarray(credit.coefficients)
  assert np.abs(out[True] - out[False]).max() > 1e-4


@pytest.mark.parametrize("model_kind", ["gated", "tabular"])
def test_learned_cocoa_approaches_exact_coefficients(model_kind):
  """The gated model (and the table, whose key-cell row no other step shares) fitted on a
  fixed policy's episodes (COCOA's loss) approaches the exact key-step coefficients."""
  env, env_params = envs.make("ConveyorTreasure-v0", length=L)
  params = _policy(5, scale=0.2)
  _, w, _ = probe.corridor_credit(env, env_params, _linear, params)
  values = hindsight_credit.reward_values_of(env, env_params)
  cfg = hindsight_credit.add_config(ml_collections.ConfigDict(), "cocoa", model=model_kind,
                                    hidden_sizes=(64,), train_steps=1,
                                    max_grad_norm=0.0)["cocoa"]
  model = hindsight_credit.Hindsight("cocoa", cfg, 4, 9, values, env.onehot_groups)
  policy = nets.make_policy_fn(_LinearNet(), value=False)
  lr = 3e-3 if model_kind == "gated" else 3e-2   # Adam moves a table entry ~lr per step

  @jax.jit
  def fit(carry, key):
    def body(c, k):
      traj = rollout.collect_episodes(env, env_params, policy, params, k, 64, L)
      return model.train(c, traj, 1.0, lr, k, _linear(params, traj.obs))[0], None
    return jax.lax.scan(body, carry, jax.random.split(key, 400))[0]

  carry = fit(model.init(jax.random.key(0)), jax.random.key(1))
  traj, logits = _batch(env, env_params, params, n=4)
  credit, _, _ = model.credit(carry[model.owns[0]], logits, traj, 1.0)
  learned = np.asarray(credit.coefficients)[0, 0] + 1.0        # w at s_0, [M, A]
  want = np.asarray(w)[0, 0].T                                 # [M, A]
  np.testing.assert_allclose(learned[2], want[2], atol=0.35)   # the treasure class
  # The apples' classes: fitted at a constant rate on 64-episode batches, the model keeps
  # an error of ~0.1-0.2 (the floor docs/results/learned_credit.md discusses).
  assert np.abs(learned[:2] - want[:2]).mean() < 0.2


def test_epsilon_mixture_and_recipe_field():
  logits = jnp.asarray([[2.0, 0.0, -1.0, 0.5]])
  mixed = nets.epsilon_mixture_logits(logits, 0.05)
  np.testing.assert_allclose(np.exp(np.asarray(mixed)),
                             0.95 * np.asarray(jax.nn.softmax(logits)) + 0.0125, rtol=1e-6)
  with pytest.raises(ValueError, match="epsilon"):
    nets.epsilon_mixture_logits(logits, 1.0)
  from credit_jax.algos import reinforce
  from credit_jax.config import ConfigError
  c = study.cell_config("reinforce", L, study.default_config())
  c.explore_epsilon = 1.5
  with pytest.raises(ConfigError, match="explore_epsilon"):
    reinforce.validate_config(c)


def test_entropy_schedule_is_theirs():
  assert study.entropy_coef(23) == pytest.approx(0.03)
  assert study.entropy_coef(103) == pytest.approx(0.01, rel=2e-3)


def test_killed_cell_resumes_to_the_same_numbers(tmp_path, monkeypatch):
  c = study.default_config()
  c.lengths, c.seeds, c.updates, c.eval_every, c.eval_episodes = (5,), 2, 4, 2, 8
  c.progress_s = 0.0   # a progress line per chunk: the watchdog's heartbeat inside a cell
  lines = []
  fresh = study.run_cell("cocoa", 5, c, str(tmp_path / "a"), lines.append)
  assert [l.split(",")[0] for l in lines[:2]] == ["cocoa L=5: update 2/4",
                                                  "cocoa L=5: update 4/4"]
  assert lines[2].startswith("cocoa L=5: run-averaged treasure")
  real_replace, calls = os.replace, []

  def killed(src, dst):
    real_replace(src, dst)
    calls.append(dst)
    if len(calls) == 1:
      raise KeyboardInterrupt   # after the first chunk's state is saved
  monkeypatch.setattr(study.os, "replace", killed)
  with pytest.raises(KeyboardInterrupt):
    study.run_cell("cocoa", 5, c, str(tmp_path / "b"), lambda s: None)
  monkeypatch.setattr(study.os, "replace", real_replace)
  resumed = study.run_cell("cocoa", 5, c, str(tmp_path / "b"), lambda s: None)
  assert resumed["evals"] == fresh["evals"] == [0, 2, 4]
  np.testing.assert_array_equal(resumed["curve"], fresh["curve"])
  np.testing.assert_array_equal(resumed["train_success"], fresh["train_success"])


def test_throttled_log_keeps_the_first_line_and_then_one_per_interval():
  lines = []
  quiet = report.throttled(lines.append, 1e9)
  for i in range(3):
    quiet(str(i))
  every = report.throttled(lines.append, 0.0)
  for i in range(3, 5):
    every(str(i))
  assert lines == ["0", "3", "4"]


def test_exact_coefficients_feature_rows_and_a_run():
  """COCOA with exact coefficients (exact_credit.py): each step reads the row (t, has_key)
  of `corridor_credit`'s w, and the arm trains through the recipe as a passed feature."""
  from credit_jax.experiments.cocoa_corridor import exact_credit
  rng = np.random.default_rng(0)
  w = rng.normal(size=(4, 4, 4, 3)).astype(np.float32)          # [L, flags, A, M]
  obs = np.zeros((4, 2, 9), np.float32)
  obs[:, 1, 8] = 1.0                                             # column 1 holds the key
  valid = np.ones((4, 2), bool)
  valid[3, 0] = False
  got = np.asarray(exact_credit.step_coefficients(jnp.asarray(w), jnp.asarray(obs),
                                                  jnp.asarray(valid)))
  for t in range(4):
    for b in range(2):
      want = w[t, b].T if valid[t, b] else np.ones((3, 4))
      np.testing.assert_array_equal(got[t, b], want)
  c = study.default_config()
  c.methods, c.lengths, c.seeds, c.updates, c.eval_every, c.eval_episodes = \
      ("cocoa_exact",), (5,), 2, 4, 2, 8
  c.policy, c.table_groups, c.lrs.cocoa_exact = "tabular", (0,), 0.1
  row = study.run_cell("cocoa_exact", 5, c, tempfile.mkdtemp(), lambda s: None)
  assert row["evals"] == [0, 2, 4] and np.isfinite(row["auc"]).all()


def test_shadow_mode_runs_with_the_tabular_policy_and_model():
  """The shadow mode's loop end to end (smoke sizes) with the table policy and COCOA's
  tabular model, whose rows follow `table_groups`; a progress line per measurement."""
  c = study.default_config()
  c.policy, c.model, c.table_groups, c.progress_s = "tabular", "tabular", (0,), 0.0
  c.probe.updates, c.probe.every, c.probe.draws, c.probe.seeds = 2, 2, 4, 2
  lines = []
  out = probe.shadow(5, c, lines.append)
  assert [p["update"] for p in out["points"]] == [0, 2]
  assert lines[0].startswith("shadow L=5: update 0/2") and len(lines) == 3
  for row in out["rows"].values():
    assert all(np.isfinite(v) for v in row.values())
  # Untrained, the tabular model gives w = 1 exactly, so its contributions are 0: the
  # error on distractor steps is then the exact credit there, which is 0 (no action on an
  # apple cell changes a later reward), and on the pivotal steps it is the exact credit.
  first = out["points"][0]
  np.testing.assert_allclose(first["distractor_error"], 0.0, atol=1e-6)
  np.testing.assert_allclose(first["pivotal_error"], first["pivotal_credit"], rtol=1e-5)
  assert min(first["pivotal_credit"]) > 0
  assert set(probe.MASS_KEYS) <= set(out["rows"]["cocoa"])
  workdir = tempfile.mkdtemp()
  study.probe_figure({"probe": [out]}, workdir)
  assert os.path.getsize(os.path.join(workdir, "shadow_vs_length.png")) > 0


def test_credit_mass_against_a_loop():
  """`probe.credit_mass` against a NumPy loop over episodes and steps."""
  rng = np.random.default_rng(3)
  t_len, n, a, length = 6, 5, 4, 6
  learned, exact_c = rng.normal(size=(2, t_len, n, a)).astype(np.float32)
  pi = rng.dirichlet(np.ones(a), size=(t_len, n)).astype(np.float32)
  valid = np.ones((t_len, n), bool)
  valid[4:, 1] = False
  got = probe.credit_mass(learned, exact_c, pi, valid, length)
  want = {k: 0.0 for k in probe.MASS_KEYS}
  for j in range(n):
    for t in range(t_len):
      if not valid[t, j]:
        continue
      err = float(np.sum(pi[t, j] * np.abs(learned[t, j] - exact_c[t, j])))
      if t in (0, length - 2):
        want["pivotal_error"] += err / n
        want["pivotal_credit"] += float(np.sum(pi[t, j] * np.abs(exact_c[t, j]))) / n
      else:
        want["distractor_error"] += err / n
  for k in probe.MASS_KEYS:
    np.testing.assert_allclose(float(got[k]), want[k], rtol=1e-5)


def test_advantage_critic_ablation_builds_their_critic():
  """`config.value_sizes = (256,)` gives Advantage's value torso one 256-unit layer (their
  critic) and leaves the policy's 64-64 torso; other methods and the default are unchanged."""
  from credit_jax.algos import train as train_lib
  from credit_jax.experiments.cocoa_corridor.methods import cell_config
  c = study.default_config()
  c.value_sizes = (256,)

  def torso_widths(method):
    cfg = cell_config(method, 7, c)
    env, env_params = train_lib.make_env(cfg)
    network, obs_shape = train_lib.make_network(cfg, env, env_params, value_head=True)
    params = train_lib.init_params(network, jax.random.key(0), obs_shape)["params"]
    return {name: [params[name][k]["kernel"].shape[1] for k in sorted(params[name])]
            for name in ("pi_torso", "v_torso")}
  assert torso_widths("advantage") == {"pi_torso": [64, 64], "v_torso": [256]}
  assert torso_widths("reinforce") == {"pi_torso": [64, 64], "v_torso": [64, 64]}


def test_a_critic_width_nothing_uses_is_refused():
  """`value_sizes` with the table policy, and `network.value_hidden_sizes` on a network
  with no value torso of its own, are refused naming the field (not silently ignored)."""
  from credit_jax.algos import train as train_lib
  from credit_jax.config import ConfigError
  from credit_jax.experiments.cocoa_corridor.methods import cell_config
  c = study.default_config()
  c.policy, c.value_sizes = "tabular", (256,)
  with pytest.raises(ValueError, match="config.value_sizes"):
    study.validate_config(c)
  c.policy = "mlp"
  cfg = cell_config("advantage", 7, c)
  cfg.network.shared_torso = True
  env, env_params = train_lib.make_env(cfg)
  with pytest.raises(ConfigError, match="network.value_hidden_sizes"):
    train_lib.make_network(cfg, env, env_params, value_head=True)
