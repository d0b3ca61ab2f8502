"""scripts/evaluate.py's logic (credit_jax/runtime/evaluate.py) on a trained KeyChain run:
the restored policy's success agrees with what training logged for the same parameters,
and disagrees with a different checkpoint's (so the comparison can fail).

The MLP recipes carry `train.env`, `train.env_params` and `train.eval_policy(params,
greedy)` (`train_lib.attach_evaluation`); `with_eval_policy` checks that they do."""
import json
import os

import jax
import jax.numpy as jnp
import pytest

import credit_jax as cj
from credit_jax import algos, nets, stats
from credit_jax.algos import train as train_lib
from credit_jax.runtime import evaluate, metrics
from credit_jax.runtime import run as runner
from config_files import load_config

EPISODES = 1024


def with_eval_policy(config):
  train = algos.make_train(config)
  assert all(hasattr(train, a) for a in train_lib.EVALUATION), type(train)
  return train


def test_mlp_recipes_can_be_evaluated_and_greedy_is_the_argmax():
  for name in ("grpo", "reinforce", "ppo", "search_then_train"):
    c = algos.RECIPES[name].default_config()
    train = algos.make_train(c)
    assert all(hasattr(train, a) for a in train_lib.EVALUATION), name
  env, env_params = cj.envs.make("KeyChain-v0", horizon=4, num_pivotal=1, num_actions=3)
  net = nets.ActorCritic(num_actions=3, hidden_sizes=(8,))
  obs = jnp.linspace(-1.0, 1.0, env.observation_space(env_params).shape[0])
  params = net.init(jax.random.PRNGKey(0), obs)
  greedy = nets.make_greedy_policy_fn(net)
  action, log_prob, _ = greedy.act(params, obs, greedy.draw(jax.random.PRNGKey(1)))
  logits, _ = net.apply(params, obs)
  assert int(action) == int(jnp.argmax(logits))
  assert float(log_prob) == pytest.approx(float(jax.nn.log_softmax(logits)[action]))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """GRPO on KeyChain (T = 10, k = 2, A = 4: random success 1/16), 12 updates of 16 x 8
  episodes; a checkpoint every 2 updates, all kept."""
  c = load_config("grpo_keychain", "small")
  c.env_kwargs.update(horizon=10, num_pivotal=2, num_actions=4)
  c.update(horizon=10, num_tasks=16, group_size=8, num_updates=12, lr=1e-2,
           chunk_updates=2, checkpoint_every=2, keep_checkpoints=10)
  c.network.hidden_sizes = (32,)
  workdir = str(tmp_path_factory.mktemp("keychain"))
  runner.train_and_evaluate(c, workdir, log=lambda _: None)
  return workdir, metrics.read_jsonl(os.path.join(workdir, metrics.METRICS_FILE))


def _logged(records, update):
  """(success, Wilson interval) logged at `update`: 16 x 8 = 128 episodes."""
  rate = records[update - 1]["success"]
  return rate, stats.wilson_interval(round(rate * 128), 128)


def _overlap(a, b):
  return a[0] <= b[1] and b[0] <= a[1]


def test_evaluated_success_matches_what_training_logged(trained, capsys):
  workdir, records = trained
  out = evaluate.evaluate_run(workdir, checkpoint="latest", episodes=EPISODES,
                              make_train=with_eval_policy)
  final = out["results"]["sampled"]["all"]
  rate, logged = _logged(records, 12)
  assert out["checkpoint"]["update"] == 12
  assert final["episodes"] == EPISODES and final["ended"] == 1.0
  assert _overlap(final["success_ci95"], logged), (final, rate)
  assert final["success_ci95"][0] <= final["success"] <= final["success_ci95"][1]
  assert out["results"]["greedy"]["all"]["success"] >= final["success"] - 0.05
  # Checkpoint 4 holds the parameters update 5 collected its episodes with.
  mid = evaluate.evaluate_run(workdir, checkpoint="4", episodes=EPISODES, greedy=False,
                              make_train=with_eval_policy, log=lambda _: None)
  rate5, logged5 = _logged(records, 5)
  assert _overlap(mid["results"]["sampled"]["all"]["success_ci95"], logged5), rate5
  # The control: an early checkpoint's policy does not pass for the final one.
  early = evaluate.evaluate_run(workdir, checkpoint="2", episodes=EPISODES, greedy=False,
                                make_train=with_eval_policy, log=lambda _: None)
  assert not _overlap(early["results"]["sampled"]["all"]["success_ci95"], logged)
  with open(os.path.join(workdir, evaluate.EVAL_FILE)) as f:
    assert json.load(f)["checkpoint"]["update"] == 2   # the latest evaluation's
  table = capsys.readouterr().out
  assert "checkpoint of update 12 (latest), 1024 episodes per seed and policy" in table
  assert "sampled     0  " in table and "greedy    all  " in table


def test_best_checkpoint_is_the_one_kept_by_the_metric(trained):
  workdir, _ = trained
  best = json.load(open(os.path.join(workdir, runner.BEST_DIR, "best.json")))
  assert best["metric"] == "success" and best["mode"] == "max"
  out = evaluate.evaluate_run(workdir, checkpoint="best", episodes=64, greedy=True,
                              make_train=with_eval_policy, log=lambda _: None)
  assert out["checkpoint"]["update"] == best["step"]
  assert list(out["results"]) == ["greedy"]


def test_bad_requests_are_config_errors(trained, tmp_path):
  workdir, _ = trained
  with pytest.raises(algos.ConfigError, match=r"--checkpoint=7: no checkpoint of that "
                                              r"update; have \["):
    evaluate.evaluate_run(workdir, checkpoint="7", make_train=with_eval_policy)
  with pytest.raises(algos.ConfigError, match="holds no training run"):
    evaluate.evaluate_run(str(tmp_path), make_train=with_eval_policy)
  with pytest.raises(algos.ConfigError, match="does not provide train.eval_policy"):
    evaluate.evaluate_run(workdir, make_train=lambda c: object())
