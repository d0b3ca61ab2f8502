"""scripts/evaluate.py's logic (credit_jax/runtime/evaluate.py) on a trained KeyChain run:
the restored policy's success agrees with what training logged for the same parameters,
and disagrees with a different checkpoint's (so the comparison can fail); where the JSON
goes (a new file per evaluation, --output, an unwritable place); every recipe's policy
with a GRU, a transformer, a table and a linear layer (with an MLP: tests/test_contract.py,
for every recipe).

The MLP recipes carry `train.env`, `train.env_params` and `train.eval_policy(params,
greedy)` (`train_lib.attach_evaluation`); `with_eval_policy` checks that they do."""
import json
import os
import shutil
import subprocess
import sys

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
  # Each evaluation got a file of its own (none overwritten), named by its checkpoint.
  paths = [out["written_to"], mid["written_to"], early["written_to"]]
  assert [os.path.basename(p) for p in paths] == [
      "latest_update12.json", "update4.json", "update2.json"]
  for path, update in zip(paths, (12, 4, 2)):
    with open(path) as f:
      assert json.load(f)["checkpoint"]["update"] == update
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


def test_a_second_evaluation_of_a_checkpoint_writes_a_new_file_and_output_goes_where_asked(
    trained, tmp_path):
  workdir, _ = trained
  kw = dict(episodes=16, greedy=True, make_train=with_eval_policy, log=lambda _: None)
  first = evaluate.evaluate_run(workdir, checkpoint="6", **kw)
  second = evaluate.evaluate_run(workdir, checkpoint="6", **kw)
  assert os.path.basename(first["written_to"]) == "update6.json"
  assert os.path.basename(second["written_to"]) == "update6_2.json"
  assert os.path.exists(first["written_to"])
  target = str(tmp_path / "sub" / "mine.json")
  mine = evaluate.evaluate_run(workdir, checkpoint="6", output=target, **kw)
  assert mine["written_to"] == target
  with open(target) as f:
    assert json.load(f)["results"] == mine["results"]


def _unwritable_copy(workdir, tmp_path):
  """A copy of the run whose eval/ cannot be created (a file stands in its place: the
  tests run as root here, where a read-only mode does not stop a write)."""
  copy = str(tmp_path / "run")
  shutil.copytree(workdir, copy)
  shutil.rmtree(os.path.join(copy, evaluate.EVAL_DIR), ignore_errors=True)
  open(os.path.join(copy, evaluate.EVAL_DIR), "w").close()
  return copy


def test_unwritable_workdir_prints_the_table_and_says_where_it_could_not_write(
    trained, tmp_path):
  copy = _unwritable_copy(trained[0], tmp_path)
  logged, warned = [], []
  out = evaluate.evaluate_run(copy, episodes=16, greedy=True, make_train=with_eval_policy,
                              log=logged.append, warn=warned.append)
  assert out["written_to"] is None
  assert "checkpoint of update 12" in logged[0] and len(logged) == 1
  assert len(warned) == 1 and os.path.join(copy, "eval") in warned[0]
  assert "could not write" in warned[0] and "--output=PATH" in warned[0]


def _evaluate_script(*args):
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  return subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), os.pardir,
                                                      "scripts", "evaluate.py"), *args],
                        env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_script_on_an_unwritable_run_exits_0_with_the_table_and_5_for_an_explicit_output(
    trained, tmp_path):
  copy = _unwritable_copy(trained[0], tmp_path)
  proc = _evaluate_script(f"--workdir={copy}", "--episodes=16", "--greedy")
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "greedy    all  " in proc.stdout
  assert "could not write" in proc.stderr and "Traceback" not in proc.stderr
  blocked = os.path.join(copy, "eval", "x.json")   # under a file: cannot be created
  proc = _evaluate_script(f"--workdir={copy}", "--episodes=16", "--greedy",
                          f"--output={blocked}")
  assert proc.returncode == 5, proc.stderr[-2000:]
  assert "greedy    all  " in proc.stdout
  line = proc.stderr.strip().splitlines()[-1]
  assert f"--output={blocked}: could not write" in line and "free space" not in line


def _trains_and_evaluates(c, workdir):
  """Trains `c` into `workdir`, evaluates its latest checkpoint: 8 episodes per policy."""
  runner.train_and_evaluate(c, workdir, log=lambda _: None)
  out = evaluate.evaluate_run(workdir, episodes=8, log=lambda _: None)
  for policy in ("sampled", "greedy"):
    res = out["results"][policy]["all"]
    assert res["episodes"] == 8 and res["ended"] == 1.0 and 0.0 <= res["success"] <= 1.0
  assert os.path.exists(out["written_to"])


# Every network kind a recipe that trains a policy network on KeyChain accepts, past the
# MLP each recipe's default runs with (evaluated for every recipe, the goal / subgoal /
# token ones included, by tests/test_contract.py's resumed run): PPO with each kind (also
# with a critic of its own, "actor+critic": the evaluated actor is an MLP or a GRU, the
# critic the other kind); GRPO and REINFORCE with one kind of each family (sequence GRU,
# tabular), since the evaluation path depends on the family (flat policy or replayed
# carry), not on the recipe. Each case compiles a training and an evaluation program, the
# suite's main cost.
RECIPES_BY_KIND = [("ppo", kind) for kind in (
    "gru", "transformer", "tabular", "linear", "mlp+gru", "gru+mlp")] + [
        (recipe, kind) for recipe in ("grpo", "reinforce") for kind in ("gru", "tabular")
    ] + [("grpo", "transformer"), ("reinforce", "linear")]


@pytest.mark.slow
@pytest.mark.parametrize("recipe,kind", RECIPES_BY_KIND)
def test_every_recipe_and_network_kind_evaluates(recipe, kind, tmp_path):
  c = algos.RECIPES[recipe].default_config()
  c.env_name = "KeyChain-v0"
  c.env_kwargs = {"horizon": 6, "num_pivotal": 1, "num_actions": 3}
  kind, _, critic = kind.partition("+")
  c.network.kind = kind
  if critic:
    c.network.critic_kind = critic
  for field, value in (("horizon", 6), ("num_envs", 4), ("num_steps", 6),
                       ("num_minibatches", 2), ("update_epochs", 1), ("num_tasks", 4),
                       ("group_size", 2), ("num_episodes", 4), ("total_timesteps", 48),
                       ("num_updates", 2)):
    if field in c:
      c[field] = value
  c.chunk_updates, c.checkpoint_every = 1, 1
  if kind == "transformer":
    c.network.max_len = 8
  _trains_and_evaluates(c, str(tmp_path / "run"))


def test_dqn_greedy_is_argmax_q_and_sampled_is_epsilon_greedy_at_config_epsilon():
  c = algos.RECIPES["dqn"].default_config()
  c.env_kwargs.num_bits, c.horizon, c.epsilon = 3, 3, 0.25
  c.network.hidden_sizes = (8,)
  train = algos.make_train(c)
  params = train.init(jax.random.PRNGKey(0)).params
  obs = jnp.linspace(-1.0, 1.0, train.env.observation_space(train.env_params).shape[0])
  network, _ = train_lib.make_network(c, train.env, train.env_params, value_head=False)
  q, _ = network.apply(params, obs)
  greedy, greedy_params = train.eval_policy(params, greedy=True)
  sampled, sampled_params = train.eval_policy(params, greedy=False)
  assert float(greedy_params[1]) == 0.0 and float(sampled_params[1]) == 0.25
  keys = jax.random.split(jax.random.PRNGKey(1), 2000)
  g = jax.vmap(lambda k: greedy(greedy_params, obs, k)[0])(keys)
  a = jax.vmap(lambda k: sampled(sampled_params, obs, k)[0])(keys)
  best = int(jnp.argmax(q))
  assert bool(jnp.all(g == best))
  # epsilon-greedy over A = 3 actions: the greedy one with 1 - 0.25 + 0.25 / 3.
  frac = float(jnp.mean(a == best))
  assert abs(frac - (0.75 + 0.25 / 3)) < 4 * (0.23 / 2000) ** 0.5, frac
