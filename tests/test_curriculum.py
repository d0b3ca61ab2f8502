"""Horizon curricula: the rules on hand-made sequences, the variable-horizon KeyChain, and
GRPO with a curriculum (one compile, per-seed stages, a seeded learning test)."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax.addons import curriculum as cur
from credit_jax import envs
from credit_jax.algos import ConfigError, grpo
from config_files import load_config


def test_fixed_stage():
  got = [int(cur.fixed_stage(u, (3, 2))) for u in range(8)]
  assert got == [0, 0, 0, 1, 1, 2, 2, 2]
  got = jax.jit(jax.vmap(lambda u: cur.fixed_stage(u, (0, 1))))(jnp.arange(3))
  assert list(np.asarray(got)) == [1, 2, 2]


def reference_gate(successes, threshold, window, num_stages):
  """Plain Python: promote when the last `window` successes at a stage average >= thr."""
  stage, recent, trace = 0, collections.deque(maxlen=window), []
  for s in successes:
    recent.append(s)
    if len(recent) == window and np.mean(recent) >= threshold and stage < num_stages - 1:
      stage += 1
      recent.clear()
    trace.append(stage)
  return trace


@pytest.mark.parametrize("seq,expected", [
    # hand-computed: the window [.9, .9, .5] averages .77 < .8 until the .5 rolls out
    ([.9, .9, .5, .9, .9, .9, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]),
    ([1, 1, 1, 0, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 2, 2]),  # needs a full window first
    ([.79] * 6, [0] * 6),                                      # never reaches 0.8
])
def test_gate_step_promotion_rule(seq, expected):
  window = 3 if len(expected) != 8 else 2
  ref = reference_gate(seq, 0.8, window, 3)
  if len(expected) != 8:
    assert ref == expected
  stage, buf, count = jnp.int32(0), jnp.zeros((window,)), jnp.int32(0)
  step = jax.jit(lambda st, b, c, s: cur.gate_step(st, b, c, s, threshold=0.8,
                                                   num_stages=3))
  trace = []
  for s in seq:
    stage, buf, count = step(stage, buf, count, jnp.float32(s))
    trace.append(int(stage))
  assert trace == ref


def test_plr_scores_and_probs():
  p = jnp.array([0.5, 0.0, 1.0, 0.1])
  np.testing.assert_allclose(cur.learnability(p), [0.25, 0.0, 0.0, 0.09], atol=1e-7)
  w = np.array([0.25, 0.0, 0.0, 0.09]) + 1e-6
  np.testing.assert_allclose(cur.plr_probs(p, 1.0, 0.0), w / w.sum(), rtol=1e-5)
  w2 = w ** 2
  np.testing.assert_allclose(cur.plr_probs(p, 0.5, 0.2), 0.8 * w2 / w2.sum() + 0.05,
                             rtol=1e-5)
  est = cur.plr_observe(p, jnp.int32(3), jnp.float32(0.5), 0.5)
  np.testing.assert_allclose(est, [0.5, 0.0, 1.0, 0.3], atol=1e-7)


@pytest.mark.parametrize("horizon,cue_delay,positions", [(7, 0, "random"),
                                                          (12, 3, "fixed")])
def test_variable_keychain_matches_keychain(horizon, cue_delay, positions):
  """For a given T, episodes are those of KeyChain-v0 with horizon=T, step by step."""
  ref, ref_params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=2,
                              num_actions=3, cue_delay=cue_delay, positions=positions)
  var = cur.VariableHorizonKeyChain(horizon=20, num_pivotal=2, num_actions=3,
                                    cue_delay=cue_delay, positions=positions)
  var_params = var.default_params.replace(horizon=horizon)
  for seed in range(4):
    key = jax.random.PRNGKey(seed)
    obs_r, st_r = ref.reset(key, ref_params)
    obs_v, st_v = var.reset(key, var_params)
    np.testing.assert_array_equal(st_r.positions, st_v.positions)
    np.testing.assert_array_equal(st_r.cues, st_v.cues)
    actions = np.random.RandomState(seed).randint(0, 3, horizon)
    actions[np.asarray(st_r.positions)] = np.asarray(st_r.cues)   # answer right
    for t, a in enumerate(actions):
      np.testing.assert_allclose(obs_r, obs_v, atol=1e-6)
      obs_r, st_r, r_r, d_r, _, _ = ref.step(key, st_r, a, ref_params)
      obs_v, st_v, r_v, d_v, _, _ = var.step(key, st_v, a, var_params)
      assert (float(r_r), bool(d_r)) == (float(r_v), bool(d_v))
    assert bool(d_v) and float(r_v) == 1.0


def tiny_config(kind, **kw):
  c = cur.add_config(grpo.default_config())
  c.env_kwargs.horizon, c.env_kwargs.num_pivotal, c.horizon = 12, 1, 12
  c.num_tasks, c.group_size, c.num_minibatches, c.update_epochs = 4, 4, 1, 1
  c.network.hidden_sizes = (16,)
  c.num_updates = 6
  c.curriculum.kind = kind
  c.curriculum.stages = (3, 6, 12)
  c.curriculum.stage_updates = (2, 2)
  for k, v in kw.items():
    c.curriculum[k] = v
  return c


def test_fixed_schedule_in_one_compiled_run():
  train = grpo.make_train(tiny_config("fixed"))
  keys = jax.random.split(jax.random.PRNGKey(0), 2)
  _, m = jax.jit(jax.vmap(train))(keys)
  np.testing.assert_array_equal(m["curriculum_value"][0], [3, 3, 6, 6, 12, 12])
  # KeyChain episodes last exactly T steps: env steps = tasks * group * T.
  np.testing.assert_array_equal(m["env_steps"], 16 * m["curriculum_value"])


def test_plr_and_gated_run_and_stay_in_range():
  for kind in ("plr", "gated"):
    train = grpo.make_train(tiny_config(kind, threshold=0.0, window=1))
    state, m = jax.jit(train)(jax.random.PRNGKey(1))
    vals = np.asarray(m["curriculum_value"])
    assert set(vals.tolist()) <= {3.0, 6.0, 12.0}
    if kind == "gated":   # threshold 0: promoted after every update until the last stage
      np.testing.assert_array_equal(vals, [3, 6, 12, 12, 12, 12])
    p_est = np.asarray(state.aux["curriculum"]["p_est"])
    assert np.all((p_est >= 0) & (p_est <= 1))


def test_keytodoor_success_is_the_door_not_the_return():
  c = cur.add_config(grpo.default_config())
  c.env_name = "KeyToDoor-v0"
  c.env_kwargs = {"max_distractor": 6, "apple_reward": 0.5}
  c.horizon = 14
  c.num_tasks, c.group_size, c.num_minibatches, c.num_updates = 8, 4, 1, 2
  c.network.hidden_sizes = (16,)
  c.lr = 0.0
  c.curriculum.kind, c.curriculum.param = "fixed", "distractor_length"
  c.curriculum.stages, c.curriculum.stage_updates = (0, 6), (1,)
  _, m = jax.jit(grpo.make_train(c))(jax.random.PRNGKey(0))
  assert float(m["return"][1]) > 1.0               # L = 6: apples, returns all positive
  assert np.all(np.asarray(m["success"]) < 0.7)    # a random policy rarely opens the door
  np.testing.assert_array_equal(m["curriculum_value"], [0, 6])


@pytest.mark.parametrize("field,value,match", [
    ("kind", "linear", "curriculum.kind"),
    ("stages", (3, 6, 13), "curriculum.stages"),
    ("stage_updates", (1,), "curriculum.stage_updates"),
    ("param", "distractor_length", "curriculum.param"),
    ("threshold", 1.5, "curriculum.threshold"),
])
def test_bad_curriculum_fields_are_named(field, value, match):
  c = tiny_config("fixed")
  c.curriculum[field] = value
  with pytest.raises(ConfigError, match=match):
    grpo.validate_config(c)


def test_gated_curriculum_learns_keychain():
  """Seeded learning test: gated 5 -> 15 -> 30 on KeyChain (k=2, A=4, random 6%)."""
  c = cur.add_config(grpo.default_config())
  c.env_kwargs.horizon, c.env_kwargs.num_pivotal, c.horizon = 30, 2, 30
  c.num_updates = 40
  c.curriculum.kind, c.curriculum.stages = "gated", (5, 15, 30)
  c.curriculum.threshold, c.curriculum.window = 0.8, 2
  _, m = jax.jit(grpo.make_train(c))(jax.random.PRNGKey(0))
  assert float(m["curriculum_value"][-1]) == 30.0
  assert float(np.mean(m["success"][-5:])) >= 0.8


# --- the experiment's measurements ------------------------------------------------------

def test_steps_to_level_success_at_and_ci95():
  from credit_jax.experiments import curriculum as exp
  curve = {"env_steps": np.array([[10., 20.], [30., 40.], [50., 60.]]),
           "success": np.array([[0.2, 0.95], [0.91, 0.5], [0.99, 0.8]])}
  np.testing.assert_array_equal(exp.steps_to_level(curve, 0.9), [30.0, 20.0])
  curve["success"][:, 1] = 0.1
  assert np.isinf(exp.steps_to_level(curve, 0.9)[1])
  np.testing.assert_allclose(exp.success_at(curve, 45.0), [0.91, 0.1])
  assert np.isnan(exp.success_at(curve, 15.0)[1])      # seed 1 not yet evaluated
  mean, half = exp.ci95([1.0, 2.0, 3.0, np.inf])      # t(0.975, df=2) = 4.302653
  np.testing.assert_allclose((mean, half), (2.0, 4.302653 / np.sqrt(3)), rtol=1e-6)


def test_censoring_welch_mean_success_and_verdicts_by_hand():
  from credit_jax.experiments.curriculum import analysis as ca
  direct = {"env_steps": np.array([[100., 100.], [200., 200.]]),
            "success": np.array([[0.0, 0.0], [0.5, 0.95]]), "compiles": 1}
  gated = {"env_steps": np.array([[10., 20.], [50., 60.]]),
           "success": np.array([[0.95, 0.5], [1.0, 1.0]]), "compiles": 1}
  # direct seed 0 never reaches 90%: censored at its total 200 steps (a lower bound).
  np.testing.assert_array_equal(ca.censored_steps(direct, 0.9), [200.0, 200.0])
  v = ca.target_verdict({"direct": direct, "gated": gated}, 0.9)["gated"]
  assert v["bound"] == "<=" and v["met"] and (v["reached"], v["baseline_reached"]) == (2, 1)
  np.testing.assert_allclose(v["ratio"], 35.0 / 200.0)
  # a method with a censored seed never meets the target, whatever its ratio.
  gated["success"][1, 1] = 0.5
  v = ca.target_verdict({"direct": direct, "gated": gated}, 0.9)["gated"]
  assert v["bound"] == "?" and not v["met"]
  # Welch: x = [1, 2, 3] vs a constant: df = 2, half = t(0.975, 2) sqrt(1/3).
  diff, half = ca.welch([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
  np.testing.assert_allclose((diff, half), (1.0, 4.302653 * np.sqrt(1.0 / 3.0)), rtol=1e-6)
  # budgets 10, 20, 30: success_at gives 0.2, 0.2, 0.8.
  one = {"env_steps": np.array([[10.0], [30.0]]), "success": np.array([[0.2], [0.8]])}
  np.testing.assert_allclose(ca.mean_success(one, 10.0, 30.0, points=3), [0.4])
  assert ca.budget_range({"d": direct, "g": gated}) == (100.0, 50.0)   # min over seeds
  assert ca.stops_helping([(0.3, 0.1), (0.2, 0.25), (0.5, 0.1)], [0, 20, 40]) == 20
  assert ca.stops_helping([(0.3, float("nan"))], [0]) == 0
  assert ca.stops_helping([(0.3, 0.1), (0.5, 0.1)], [0, 20]) is None
  assert ca.stops_helping([(float("nan"), 0.1), (0.5, 0.1)], [0, 20]) is None
  assert ca.stops_helping([(float("nan"), 0.1)], [0]) == "unmeasured"


def _synthetic_curves(num_updates, horizon, methods, config):
  """Curves shaped like `train_curves`' for `methods` (curricula rise faster)."""
  e, seeds = 1 + int(num_updates) // int(config.eval_every), int(config.seeds)
  steps = np.arange(e, dtype=np.float64)[:, None] * np.ones((1, seeds)) * 1000.0
  rise = np.linspace(0.05, 0.95, e)[:, None] + np.linspace(0.0, 0.04, seeds)[None]
  return {m: {"env_steps": steps * (1.0 if m == "direct" else 0.5),
              "success": np.clip(rise * (1.0 if m == "direct" else 1.1), 0, 1),
              "train_success": rise, "stage_value": steps * 0 + horizon,
              "compiles": 1} for m in methods}


@pytest.mark.slow
def test_curriculum_experiment_smoke(tmp_path, monkeypatch):
  """The experiment end to end at its smoke variant. Part (a) and the hierarchy of (c)
  train for real (one compiled program each); (b1), (b2) and flat GRPO / PPO in (c)
  check the configs they build (their recipe validates them, their envs reset and step)
  and return synthetic curves, so every part's summary, verdicts and figures, and
  resummarize, run in two compiles."""
  import json
  from credit_jax.experiments import curriculum as exp
  from credit_jax.experiments.curriculum import hierarchy as ch
  from credit_jax.experiments.curriculum import study
  from credit_jax.experiments import report
  from credit_jax.algos import ppo
  config = load_config("curriculum", "smoke")
  real_curves, real_method, built = exp.train_curves, ch.train_method, {}

  def train_curves(c, methods, key, cfg, log=None):
    if "cue_delay" not in c.env_kwargs and c.env_name == "KeyChain-v0":   # part (a)
      return real_curves(c, methods, key, cfg, log)
    grpo.validate_config(c)
    env, params = cur.make_env(c)
    params = params.replace(**{c.curriculum.param: c.curriculum.stages[0]})
    _, state = env.reset(jax.random.PRNGKey(0), params)
    env.step(jax.random.PRNGKey(1), state, 0, params)
    built[c.env_name] = c
    return _synthetic_curves(c.num_updates, c.horizon, methods, cfg)

  def train_method(cfg, method, key):
    if method.startswith("hierarchy"):
      return real_method(cfg, method, key)
    c = ch.method_config(cfg, method)
    (ppo if method == "ppo" else grpo).validate_config(c)
    built[method] = c
    curve = _synthetic_curves(cfg.c.num_updates, cfg.c.horizon, ("x",), cfg)["x"]
    return {k: curve[k] for k in ("env_steps", "success", "compiles")}

  monkeypatch.setattr(study, "train_curves", train_curves)   # where run() looks it up
  monkeypatch.setattr(ch, "train_method", train_method)
  summary = exp.run(config, str(tmp_path), log=[].append)
  assert set(summary["parts"]) == {"a", "b1", "b2", "c"}
  rows = summary["parts"]["a"]["T=12"]
  assert set(rows) == {"direct", "gated"}
  # direct trains at T=12 from the start: 2 seeds x 4 updates x 16 episodes x 12 steps.
  assert rows["direct"]["final_env_steps"] == 4 * 16 * 12
  assert rows["gated"]["final_env_steps"] < rows["direct"]["final_env_steps"]
  assert all(r["compiles"] == 1 for r in rows.values())
  # (b1): cue_delay 3 at T = 10, a window of 4 observations, stages from 3 + 2k to T;
  # (b2): distractor 6, stages (0, 0.1, 0.3, 1) x 6 rounded, key + 6 + door steps.
  b1, b2 = built["KeyChain-v0"], built["KeyToDoor-v0"]
  assert (b1.history_window, tuple(b1.curriculum.stages), b1.horizon) == (4, (5, 10), 10)
  assert (b2.curriculum.param, tuple(b2.curriculum.stages), b2.horizon) == (
      "distractor_length", (0, 1, 2, 6), 14)
  # (c): PPO's budget is the hierarchy's padded one (2 updates x 16 episodes x 12 steps),
  # flat GRPO runs the hierarchy's updates and groups; the real hierarchy takes at most
  # that budget (episodes stop at the goal).
  assert built["ppo"].total_timesteps == 2 * 16 * 12
  g = built["grpo"]
  assert (g.num_updates, g.num_tasks, g.group_size, g.horizon) == (2, 4, 4, 12)
  rows = summary["parts"]["c"]["GoalGrid 5x5 T=12 K=4"]
  assert set(rows) == {"hierarchy", "grpo", "ppo"}
  assert 0 < rows["hierarchy"]["final_env_steps"] <= 2 * 16 * 12
  for name in ("curves_a.png", "curves_b1.png", "curves_b2.png", "curves_c.png",
               "summary.md", "metrics.jsonl"):
    assert (tmp_path / name).stat().st_size > 0
  assert set(summary["solved"]) == {"direct", "gated"}
  d = summary["derived"]
  assert set(d["a"]["target"]["T=12"]["gated"]) >= {"ratio", "met", "bound", "reached"}
  assert set(d["b1"]["stops_helping"]) == set(d["b2"]["stops_helping"]) == {"gated"}
  assert set(d["c"]["advantage"]["GoalGrid 5x5 T=12 K=4"]) == {"hierarchy - grpo",
                                                              "hierarchy - ppo"}
  assert set(d["c"]["why"]["GoalGrid 5x5 T=12 K=4"]["hierarchies"]) == {"hierarchy"}
  text = (tmp_path / "summary.md").read_text()
  assert "Target at T=12" in text and "stops helping" in text and "Why, at" in text
  # Re-summarizing from metrics.jsonl alone gives the same tables and verdicts.
  again = exp.resummarize(str(tmp_path), str(tmp_path / "again"))
  dump = lambda s: json.dumps({k: s[k] for k in ("parts", "derived", "solved")},  # noqa: E731
                              default=report._jsonable)  # pylint: disable=protected-access
  assert dump(again) == dump(summary)


def test_hierarchy_diagnostics_by_hand():
  from credit_jax.experiments.curriculum import hierarchy as ch
  assert ch.mean_shortest_path(2) == pytest.approx(4.0 / 3.0)   # 1, 1, 2 from each corner
  assert ch.mean_shortest_path(3) == pytest.approx(18.0 / 8.0)  # 1,2,1,2,3,2,3,4 to (0, 0)
  assert ch.parse_setting("GoalGrid 12x12 T=120 K=12") == (12, 12)
  assert ch.parse_setting("GoalGrid 12x12 T=120") == (12, None)
  h = {"env_steps": np.array([[10.0], [20.0], [30.0]]),
       "success": np.array([[0.1], [0.5], [0.95]]),
       "worker_success": np.array([[0.5], [0.92], [0.99]]),
       "episode_length": np.array([[9.0], [7.0], [5.0]])}
  w = ch.diagnostics({"hierarchy": h}, 3, 2, 0.9, last=2)
  w_h = w["hierarchies"]["hierarchy"]
  assert (w_h["worker_steps_to_level"][0], w_h["pair_steps_to_level"][0]) == (20.0, 30.0)
  assert w["episode_length"]["hierarchy"][0] == 6.0 and w["segment_length"] == 2


def test_hierarchy_at_another_segment_length_is_configured():
  from credit_jax.experiments import curriculum as exp
  from credit_jax.experiments.curriculum import hierarchy as ch
  config = exp.default_config()
  cfg = ch.method_config(config, "hierarchy K=4")
  assert (cfg.segment_length, cfg.horizon, cfg.algo) == (4, 120, "hierarchy")
  assert ch.method_config(config, "hierarchy").segment_length == 12
  config.c.extra_segment_lengths = (7,)
  with pytest.raises(ConfigError, match="extra_segment_lengths"):
    exp.validate_config(config)


def test_ppo_blocks_weight_by_episodes():
  from credit_jax.experiments.curriculum import hierarchy as ch
  m = {"success": np.array([[1.0, 1.0, 0.0, 0.5, 0.5, 0.5]]),
       "episodes": np.array([[1.0, 0.0, 3.0, 2.0, 2.0, 0.0]])}
  out = ch.ppo_blocks(m, 10, 30)                   # blocks of 3 updates
  np.testing.assert_allclose(out["success"][:, 0], [1.0 / 4.0, 0.5])
  np.testing.assert_allclose(out["env_steps"][:, 0], [30.0, 60.0])
