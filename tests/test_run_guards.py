"""The run loop's guards and extension: divergence warnings, the NaN stop's message,
extending a finished run (equal to one longer run; refused where it would not be), and
the best checkpoint. In process, on tiny configs."""
import numpy as np
import pytest

from credit_jax import algos
from credit_jax.runtime import checkpoint, divergence, extend, metrics
from credit_jax.runtime import run as runner
import test_algos


def tiny_grpo(**overrides):
  """test_algos's tiny GRPO (KeyChain T = 6, k = 1, A = 2), 4 updates in chunks of 2."""
  return test_algos.tiny_grpo(**{"num_updates": 4, "chunk_updates": 2,
                                 "checkpoint_every": 2, **overrides})


def _records(workdir):
  return metrics.read_jsonl(str(workdir / metrics.METRICS_FILE))


# --- divergence -------------------------------------------------------------------------

def test_guard_warns_once_per_kind_on_hand_made_metrics():
  guard = divergence.DivergenceGuard(patience=3, lr=0.5)
  ent = np.array([[0.7, 0.0, 0.0], [0.7, 0.6, 0.5]])           # [S=2, U=3]
  assert guard.observe({"entropy": ent}, 1) == []               # seed 0: 2 zeros so far
  lines = guard.observe({"entropy": np.zeros((2, 2))}, 4)
  assert lines == ["warning: entropy has been 0 for 3 updates in a row (updates 2-4, "
                   "seed 0): the policy has collapsed to deterministic actions and "
                   "stopped exploring; lower config.lr (now 0.5) or check the rewards"]
  assert guard.observe({"entropy": np.zeros((2, 5))}, 6) == []  # once per kind
  # grad_norm 0 where every group was degenerate is no signal, not a fault.
  quiet = divergence.DivergenceGuard(patience=2)
  assert quiet.observe({"grad_norm": np.zeros((1, 4)),
                        "degenerate_frac": np.ones((1, 4))}, 1) == []
  assert "grad_norm has been 0" in quiet.observe({"grad_norm": np.zeros((1, 2))}, 5)[0]
  # A loss 1000x its early scale.
  boom = divergence.DivergenceGuard(patience=2)
  assert boom.observe({"loss": np.array([[2.0, 3.0, 10.0]])}, 1) == []
  line = boom.observe({"loss": np.array([[3e3, 4.0]])}, 4)[0]
  assert line.startswith("warning: the loss exploded at update 4 (|loss| 3e+03 on "
                         "seed 0, over 1000x its early scale 2.5)")


def test_a_collapsing_run_warns_and_a_learning_run_does_not(tmp_path):
  lines = []
  runner.train_and_evaluate(tiny_grpo(lr=1e6, num_updates=8, chunk_updates=4,
                                      checkpoint_every=4), str(tmp_path / "boom"),
                            log=lines.append)
  warned = [l for l in lines if l.startswith("warning: entropy has been 0 for 5 updates")]
  assert len(warned) == 1, lines
  lines = []
  runner.train_and_evaluate(tiny_grpo(num_updates=8, chunk_updates=4, checkpoint_every=4),
                            str(tmp_path / "fine"), log=lines.append)
  assert not [l for l in lines if l.startswith("warning")], lines


def test_nan_stop_without_a_checkpoint_says_there_is_none(tmp_path):
  c = test_algos.tiny_reinforce(lr=1e38, chunk_updates=2, checkpoint_every=2)
  with pytest.raises(runner.NonFiniteLossError,
                     match=r"at update 2 \(seed 0\); stopped without saving it; no "
                           r"checkpoint was saved before it\."):
    runner.train_and_evaluate(c, str(tmp_path), log=lambda _: None)


# --- extending a run --------------------------------------------------------------------

def test_extending_a_finished_run_equals_one_longer_run(tmp_path):
  lines = []
  runner.train_and_evaluate(tiny_grpo(num_updates=4), str(tmp_path / "a"),
                            log=lambda _: None)
  summary = runner.train_and_evaluate(tiny_grpo(num_updates=8), str(tmp_path / "a"),
                                      log=lines.append)
  assert "extending the run: config.num_updates from 4 to 8, from update 4" in lines
  assert summary["resumed_from"] == 4
  runner.train_and_evaluate(tiny_grpo(num_updates=8), str(tmp_path / "b"),
                            log=lambda _: None)
  extended, longer = _records(tmp_path / "a"), _records(tmp_path / "b")
  assert [r["update"] for r in extended] == list(range(1, 9))
  assert extended == longer
  # Fewer updates than a checkpoint holds stays refused.
  with pytest.raises(algos.ConfigError, match="past this config's 6 updates"):
    runner.train_and_evaluate(tiny_grpo(num_updates=6), str(tmp_path / "a"),
                              log=lambda _: None)


def test_extension_is_refused_when_the_update_reads_the_length():
  longer = tiny_grpo(num_updates=8, anneal_lr=True)
  saved = runner.config_to_json(tiny_grpo(num_updates=4, anneal_lr=True))
  with pytest.raises(algos.ConfigError, match=(
      r"config.num_updates: changing config.num_updates from 4 to 8 changes the compiled "
      r"update \(config.anneal_lr=True: the learning rate falls to 0 over num_updates\)")):
    extend.check(longer, saved, runner.config_to_json(longer), algos.make_train(longer),
                 4, print)
  # Without annealing the two lengths compile to the same update.
  plain = tiny_grpo(num_updates=8)
  lines = []
  extend.check(plain, runner.config_to_json(tiny_grpo()), runner.config_to_json(plain),
               algos.make_train(plain), 4, lines.append)
  assert lines == ["extending the run: config.num_updates from 4 to 8, from update 4"]


# --- the best checkpoint ----------------------------------------------------------------

def test_best_checkpoint_keeps_the_highest_and_survives_reopening(tmp_path):
  best = checkpoint.BestCheckpoint(str(tmp_path), "success", "max")
  assert best.offer(2, 0.5, {"x": np.float32(2)})
  assert not best.offer(4, 0.25, {"x": np.float32(4)})
  assert best.offer(6, 0.75, {"x": np.float32(6)})
  best.close()
  again = checkpoint.BestCheckpoint(str(tmp_path), "success", "max")
  assert again.best == {"metric": "success", "mode": "max", "step": 6, "value": 0.75}
  assert again.checkpointer.all_steps() == [6]
  assert not again.offer(8, float("nan"), {"x": np.float32(8)})
  again.close()
  c = tiny_grpo()
  assert checkpoint.best_metric_of(c, ("success", "degenerate_frac")) == ("success", "max")
  with c.unlocked():
    c.best_metric = "value_loss"
  assert checkpoint.best_metric_of(c, ("success",)) == ("value_loss", "min")


# --- one source of truth for episode length ----------------------------------------------

def test_a_rollout_shorter_than_the_episode_is_refused_naming_both_fields():
  c = algos.RECIPES["grpo"].default_config()      # KeyChain T = 50, rollout 50
  c.horizon = 20
  with pytest.raises(algos.ConfigError) as e:
    algos.RECIPES["grpo"].validate_config(c)
  msg = str(e.value)
  assert msg.startswith("config.horizon: 20 rollout steps")
  assert "50-step episodes" in msg and "--config.horizon=50" in msg
  assert "--config.env_kwargs.horizon=20" in msg
  c = algos.RECIPES["reinforce"].default_config()  # KeyChain T = 20
  c.horizon = 19
  with pytest.raises(algos.ConfigError, match=r"^config\.horizon: 19 rollout steps"):
    algos.RECIPES["reinforce"].validate_config(c)


def test_env_steps_count_the_episode_not_the_rollouts_padding():
  c = algos.RECIPES["grpo"].default_config()
  c.env_kwargs.horizon = 20                        # 20-step episodes, 50-step rollout
  train = algos.make_train(c)
  assert train.env_steps_per_update == c.num_tasks * c.group_size * 20
  c.env_kwargs.horizon = 50
  assert algos.make_train(c).env_steps_per_update == c.num_tasks * c.group_size * 50
  r = algos.RECIPES["reinforce"].default_config()
  r.horizon = 25                                   # 20-step episodes
  assert algos.make_train(r).env_steps_per_update == r.num_envs * 20
