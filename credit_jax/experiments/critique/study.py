"""Self-critique and persistent memory on KeyChain-v0: retries, critics and remembered tasks.

  python3 scripts/critique.py --config=configs/critique.py:small --workdir=/tmp/critique

The task is KeyChain-v0 with its cues shown `cue_delay` steps before their pivotal steps
and a memoryless policy, so a policy alone answers each pivotal step right with
probability 1/A: the failures a critic can point at. A retry episode
(`credit_jax.addons.critique.RetryWrapper`) is up to R attempts at the same task; after a failed
attempt the critic's critique `(step, suggestion, confidence)` is stored and shown to the
policy at that step in later attempts.

Per seed:
  1. Training with critiques as input: REINFORCE (`credit_jax/algos/reinforce.py`,
     unchanged) on retry episodes with the oracle critic (`config.retry_attempts`,
     `retry_critic` select the wrapper in `train_lib.make_env`), and, as the baseline, on
     retry episodes with no critic.
  2. Success after 1..R attempts (cumulative: solved within r attempts), measured on
     `eval_episodes` fresh tasks: no critique (the plain-retry policy), the oracle, the
     learned critic, and the noisy critic for every `noises` value (one vmapped call).
     The break-even noise: where the noisy critic's success after attempt r falls to the
     no-critique retry's (linear interpolation of the seed means).
  3. The learned critic (`critic_training.train_critic`): a small network fitted to the oracle's
     labels on uniform-policy attempts; its localisation accuracy against the oracle. And
     the same network trained without labels, with the improvement of the retry its
     critique guided as its reward (`critic_training.train_critic_by_improvement`, Retroformer).
  4. Persistent memory (`memory.py`): a stream of `memory_episodes` retry
     episodes drawn from a family of `family_size` tasks, each with fixed answers. At
     an episode's end its critique store is written to memory under the task id; the
     next episode of that task starts with it. Per capacity (0: no memory): first-attempt
     success along the stream, env steps per episode, and env steps until first-attempt
     success reaches `target_success`.

Intervals: 95% Student-t intervals over seeds of the per-seed means. Writes
success_by_attempt.png, noise_break_even.png, memory.png, summary.json and summary.md.
"""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from credit_jax.addons import critique
from credit_jax.experiments.critique import critic_training
from credit_jax.experiments.critique import memory
from credit_jax import envs, nets, rollout
from credit_jax.algos import ConfigError, train as train_lib, reinforce
from credit_jax.experiments import report

__all__ = [
    "break_even", "ci95", "default_config", "make_eval", "make_memory_stream",
    "markdown", "measure_memory", "measure_retries", "num_seeds", "plot",
    "recipe_config", "run", "steps_to_target", "train_policies", "validate_config",
]


def default_config() -> ml_collections.ConfigDict:
  """The "small" run: 5 seeds, KeyChain T=6, k=2, A=4, cues 3 steps early, R=3."""
  c = ml_collections.ConfigDict()
  c.horizon = 6                # KeyChain steps per attempt T
  c.num_pivotal = 2            # pivotal steps k
  c.num_actions = 4            # actions A: a blind guess is right with probability 1/A
  c.cue_delay = 3              # cue shown this many steps early (memoryless policy: blind)
  c.attempts = 3               # attempts per retry episode R
  c.seeds = 5                  # independent seeds (vmapped), for the 95% intervals
  c.seed = 0                   # base RNG seed
  c.num_updates = 120          # REINFORCE updates per policy
  c.num_envs = 64              # retry episodes per update
  c.lr = 1e-2                  # REINFORCE learning rate
  c.eval_episodes = 1024       # retry episodes per seed and evaluation point
  c.noises = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)   # noisy critic's error rates
  c.critic_steps = 300         # learned critic: Adam steps (batch critic_batch)
  c.critic_batch = 256         # learned critic: uniform-policy attempts per step
  c.improvement_steps = 300    # critic trained by the retry's improvement: REINFORCE steps
  c.family_size = 8            # memory: tasks in the family (fixed answers per task id)
  c.capacities = (0, 4, 8)     # memory capacities compared (0: no memory)
  c.eviction = "lru"           # memory eviction: fifo | lru
  c.memory_episodes = 48       # memory: retry episodes per stream
  c.memory_streams = 64        # memory: independent streams per seed
  c.target_success = 0.9       # memory: first-attempt success that counts as learned
  return c


def num_seeds(config) -> int:
  """Seeds vmapped in one compiled call."""
  return int(config.seeds)


def validate_config(config) -> None:
  """Raises ConfigError naming the field when the experiment cannot run as configured."""
  def req(ok, field, msg):
    if not ok:
      raise ConfigError(f"config.{field}: {msg}")
  for f in ("horizon", "num_pivotal", "attempts", "num_updates", "num_envs",
            "eval_episodes", "critic_steps", "critic_batch", "improvement_steps", "family_size",
            "memory_episodes", "memory_streams"):
    req(int(config[f]) >= 1, f, f"must be >= 1, got {config[f]}")
  req(int(config.seeds) >= 2, "seeds", f"must be >= 2 for an interval, got {config.seeds}")
  req(int(config.num_actions) >= 2, "num_actions", f"must be >= 2, got {config.num_actions}")
  req(int(config.attempts) >= 2, "attempts", f"must be >= 2 to retry, got {config.attempts}")
  req(all(0.0 <= n <= 1.0 for n in config.noises), "noises", "must lie in [0, 1]")
  req(all(int(c) >= 0 for c in config.capacities), "capacities", "must be >= 0")
  req(config.eviction in memory.EVICTIONS, "eviction", f"must be one of {memory.EVICTIONS}")
  req(0.0 < config.target_success <= 1.0, "target_success", "must lie in (0, 1]")
  try:
    envs.make("KeyChain-v0", **_env_kwargs(config))
  except ValueError as e:
    raise ConfigError(f"config.cue_delay: {e}") from e


def _env_kwargs(config):
  return dict(horizon=int(config.horizon), num_pivotal=int(config.num_pivotal),
              num_actions=int(config.num_actions), cue_delay=int(config.cue_delay))


def recipe_config(config, critic: str) -> ml_collections.ConfigDict:
  """REINFORCE's config for retry episodes with `critic` (what step 1 trains)."""
  c = reinforce.default_config()
  c.env_kwargs.update(_env_kwargs(config))
  c.retry_attempts = int(config.attempts)
  c.retry_critic = critic
  c.retry_noise = 0.0
  c.horizon = int(config.attempts) * int(config.horizon)
  c.num_updates, c.num_envs, c.lr = int(config.num_updates), int(config.num_envs), config.lr
  c.seeds, c.seed = int(config.seeds), int(config.seed)
  return c


ci95 = report.t_interval   # (mean, half-width of the 95% t-interval) over an axis


def train_policies(config, key):
  """Trains the oracle-critique and the no-critique policies; ([S] params each, network,
  final training success per policy [S])."""
  out = {}
  for critic in ("oracle", "none"):
    rc = recipe_config(config, critic)
    train = reinforce.make_train(rc)
    keys = jax.random.split(jax.random.fold_in(key, len(out)), config.seeds)
    (state, metrics), _, _ = report.compile_and_run(jax.vmap(lambda k: train(k)), keys)
    out[critic] = (state.params, np.asarray(metrics["success"])[:, -10:].mean(axis=1))
  env, env_params = train_lib.make_env(recipe_config(config, "oracle"))
  network, _ = train_lib.make_network(rc, env, env_params, value_head=False)
  return out, network


def make_eval(config, network, critic: str):
  """`eval(policy_params, critic_params, key, noise) -> [R]` cumulative success; `critic`:
  a name of `critique.CRITICS`, or "learned" (`critic_training.learned_critic`)."""
  inner, inner_params = envs.make("KeyChain-v0", **_env_kwargs(config))
  env = critique.RetryWrapper(inner, int(config.attempts), critic_training.learned_critic
                              if critic == "learned" else critic)
  policy_fn = nets.make_policy_fn(network)
  r = int(config.attempts)

  def evaluate(policy_params, critic_params, key, noise):
    params = critique.RetryParams(inner=inner_params, noise=noise,
                                  critic_params=critic_params)
    traj = rollout.collect_episodes(env, params, policy_fn, policy_params, key,
                                    int(config.eval_episodes), env.horizon)
    per = critic_training.attempt_success(traj, r)
    return jnp.mean(critic_training.cumulative_success(per), axis=1)

  return evaluate


def measure_retries(config, policies, network, key):
  """Cumulative success [S, R] per setting, noisy [S, N, R]; learned critic accuracy."""
  inner, inner_params = envs.make("KeyChain-v0", **_env_kwargs(config))
  s = int(config.seeds)
  keys = jax.random.split(key, s)
  oracle_params, none_params = policies["oracle"][0], policies["none"][0]
  res = {}

  def critic_fit(k):
    params, losses = critic_training.train_critic(inner, inner_params, k, int(config.critic_steps),
                                           int(config.critic_batch))
    return params, losses[-1], critic_training.localisation_accuracy(
        inner, inner_params, params, jax.random.fold_in(k, 1))

  (cparams, closs, (acc_step, acc_both)), _, _ = report.compile_and_run(
      jax.vmap(critic_fit), jax.random.split(jax.random.fold_in(key, 7), s))
  res["critic_loss"], res["critic_step_acc"], res["critic_both_acc"] = closs, acc_step, acc_both
  act = lambda p, obs, k: nets.categorical_sample(k, network.apply(p, obs)[0])

  def improvement_fit(p, k):
    params, rewards = critic_training.train_critic_by_improvement(
        inner, inner_params, act, p, k, int(config.improvement_steps),
        int(config.critic_batch))
    return params, rewards, critic_training.localisation_accuracy(
        inner, inner_params, params, jax.random.fold_in(k, 1))

  (iparams, irewards, (iacc_step, iacc_both)), _, _ = report.compile_and_run(
      jax.vmap(improvement_fit), oracle_params, jax.random.split(jax.random.fold_in(key, 8), s))
  res["improvement_rewards"] = irewards
  res["improvement_step_acc"], res["improvement_both_acc"] = iacc_step, iacc_both
  noises = jnp.asarray(config.noises, jnp.float32)
  plain_eval = make_eval(config, network, "none")
  plain = jax.jit(jax.vmap(lambda p, k: plain_eval(p, None, k, 0.0)))   # compiled once
  res["none"] = jax.device_get(plain(none_params, keys))
  res["oracle_policy_no_critique"] = jax.device_get(plain(oracle_params, keys))
  res["oracle"] = jax.device_get(jax.jit(jax.vmap(
      lambda p, k: make_eval(config, network, "oracle")(p, None, k, 0.0)))(oracle_params, keys))
  learned = jax.jit(jax.vmap(
      lambda p, c, k: make_eval(config, network, "learned")(p, c, k, 0.0)))
  res["learned"] = jax.device_get(learned(oracle_params, cparams, keys))
  res["improvement"] = jax.device_get(learned(oracle_params, iparams, keys))
  noisy = make_eval(config, network, "noisy")
  res["noisy"] = jax.device_get(jax.jit(jax.vmap(lambda p, k: jax.vmap(
      lambda n, i: noisy(p, None, jax.random.fold_in(k, i), n))(
          noises, jnp.arange(noises.shape[0]))))(oracle_params, keys))
  return {k: np.asarray(v) for k, v in res.items()}


def break_even(noises, noisy_mean, none_mean):
  """The smallest noise where the noisy curve falls to `none_mean` (linear interpolation
  between grid points); None when it never does on the grid."""
  gap = np.asarray(noisy_mean) - none_mean
  for i in range(len(noises)):
    if gap[i] <= 0:
      if i == 0:
        return float(noises[0])
      n0, n1, g0, g1 = noises[i - 1], noises[i], gap[i - 1], gap[i]
      return float(n0 + (n1 - n0) * g0 / (g0 - g1))
  return None


def make_memory_stream(config, network, capacity: int):
  """`stream(policy_params, key) -> (first-attempt success [E], env steps [E])`."""
  inner, inner_params = envs.make("KeyChain-v0", **_env_kwargs(config))
  r, t = int(config.attempts), int(config.horizon)
  env = critique.RetryWrapper(inner, r, "oracle")
  params = critique.RetryParams(inner=inner_params)
  slots = (max(r - 1, 1), critique.CRITIQUE_SIZE)

  def episode(policy_params, fam_key, carry, xs):
    mem = carry
    task, key = xs
    _, state = env.reset_env(jax.random.fold_in(fam_key, task), params)
    stored, hit, mem = memory.read(mem, task)
    obs, state = env.with_critiques(state, jnp.where(hit & (capacity > 0), stored,
                                                     state.critiques))

    def step(c, k):
      state, obs, done, steps, first_ok = c
      k_act, k_env = jax.random.split(k)
      logits, _ = network.apply(policy_params, obs)
      action = nets.categorical_sample(k_act, logits)
      obs2, state2, _, term, info = env.step_env(k_env, state, action, params)
      live = ~done
      first_ok = first_ok | (live & info["attempt_success"] & (info["attempt"] == 0))
      keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(live, a, b), new, old)
      state, obs = keep((state2, obs2), (state, obs))
      return (state, obs, done | term, steps + live.astype(jnp.int32), first_ok), None

    init = (state, obs, jnp.zeros((), bool), jnp.zeros((), jnp.int32), jnp.zeros((), bool))
    (state, _, _, steps, first_ok), _ = jax.lax.scan(step, init, jax.random.split(key, r * t))
    mem = memory.write(mem, task, state.critiques, enabled=capacity > 0)
    return mem, (first_ok.astype(jnp.float32), steps)

  def stream(policy_params, key):
    fam_key, k_order, k_run = jax.random.split(key, 3)
    n = int(config.memory_episodes)
    tasks = jax.random.randint(k_order, (n,), 0, int(config.family_size))
    mem = memory.init(max(capacity, 1), slots, str(config.eviction))
    _, (ok, steps) = jax.lax.scan(lambda c, x: episode(policy_params, fam_key, c, x), mem,
                                  (tasks, jax.random.split(k_run, n)))
    return ok, steps

  return stream


def measure_memory(config, policies, network, key):
  """Per capacity: first-attempt success [S, E] and env steps [S, E] (stream means)."""
  oracle_params = policies["oracle"][0]
  out = {}
  for cap in config.capacities:
    stream = make_memory_stream(config, network, int(cap))
    per_seed = lambda p, k: jax.vmap(lambda kk: stream(p, kk))(
        jax.random.split(k, int(config.memory_streams)))
    ok, steps = jax.device_get(jax.jit(jax.vmap(per_seed))(
        oracle_params, jax.random.split(jax.random.fold_in(key, int(cap)), config.seeds)))
    out[int(cap)] = (np.asarray(ok).mean(axis=1), np.asarray(steps).mean(axis=1))
  return out


def steps_to_target(ok_mean, steps_mean, target):
  """Env steps (cumulative, mean stream) until first-attempt success first reaches `target`
  (None when it never does)."""
  hit = np.nonzero(np.asarray(ok_mean) >= target)[0]
  if hit.size == 0:
    return None
  return float(np.cumsum(steps_mean)[hit[0]])


def plot(config, res, mem, summary, workdir):
  """success_by_attempt.png, noise_break_even.png and memory.png; returns their names."""
  r = np.arange(1, int(config.attempts) + 1)
  fig, axes = report.figure(1, 1, figsize=(6.5, 4.5))
  ax = axes[0, 0]
  noises = list(config.noises)
  curves = [("no critique (plain retry)", res["none"]), ("oracle critic", res["oracle"]),
            ("learned critic (oracle labels)", res["learned"]),
            ("learned critic (retry improvement)", res["improvement"])]
  for n in (0.2, 0.5, 1.0):
    if n in noises:
      curves.append((f"noisy critic, eps={n:g}", res["noisy"][:, noises.index(n)]))
  for i, (label, x) in enumerate(curves):
    m, h = ci95(x)
    ax.errorbar(r + 0.04 * (i - len(curves) / 2), m, yerr=h, marker="o", capsize=3,
                label=label)
  ax.set_xticks(r)
  ax.set_xlabel("attempt r")
  ax.set_ylabel("solved within r attempts")
  ax.set_ylim(0, 1.02)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  ax.set_title(f"KeyChain T={config.horizon} k={config.num_pivotal} A={config.num_actions}, "
               f"blind policy; 95% CI over {config.seeds} seeds", fontsize=9)
  names = [report.save_figure(fig, workdir, "success_by_attempt.png")]

  fig, axes = report.figure(1, 1, figsize=(6.5, 4.5))
  ax = axes[0, 0]
  for j in range(1, int(config.attempts)):
    m, h = ci95(res["noisy"][:, :, j])
    ax.plot(noises, m, marker="o", color=f"C{j}", label=f"noisy critic, attempt {j + 1}")
    ax.fill_between(noises, m - h, m + h, color=f"C{j}", alpha=0.2)
    nm, nh = ci95(res["none"][:, j])
    ax.axhspan(nm - nh, nm + nh, color=f"C{j}", alpha=0.1)
    ax.axhline(nm, color=f"C{j}", ls="--", label=f"no critique, attempt {j + 1}")
    be = summary["break_even_noise"][str(j + 1)]
    if be is not None:
      ax.axvline(be, color=f"C{j}", ls=":", lw=1)
  ax.set_xlabel("noisy critic's error probability eps")
  ax.set_ylabel("solved within r attempts")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  ax.set_title("a wrong critique is worse than none beyond the break-even eps (dotted)",
               fontsize=9)
  names.append(report.save_figure(fig, workdir, "noise_break_even.png"))

  fig, axes = report.figure(1, 2, figsize=(12, 4.5))
  for cap, (ok, steps) in mem.items():
    label = "no memory" if cap == 0 else f"memory, capacity {cap} ({config.eviction})"
    m, h = ci95(ok)
    x = np.cumsum(steps.mean(axis=0))
    axes[0, 0].plot(x, m, label=label)
    axes[0, 0].fill_between(x, m - h, m + h, alpha=0.2)
    sm, sh = ci95(steps)
    e = np.arange(1, steps.shape[1] + 1)
    axes[0, 1].plot(e, sm, label=label)
    axes[0, 1].fill_between(e, sm - sh, sm + sh, alpha=0.2)
  axes[0, 0].axhline(config.target_success, color="grey", ls=":")
  axes[0, 0].set_xlabel("env steps (mean stream)")
  axes[0, 0].set_ylabel("solved on the first attempt")
  axes[0, 1].set_xlabel("episode of the stream")
  axes[0, 1].set_ylabel("env steps per episode (effective horizon)")
  for a in axes[0]:
    a.grid(alpha=0.3)
    a.legend(fontsize=8)
  axes[0, 0].set_title(f"family of {config.family_size} tasks with fixed answers", fontsize=9)
  names.append(report.save_figure(fig, workdir, "memory.png"))
  return names


def _fmt(x, h):
  return f"{x:.3f} ± {h:.3f}"


def markdown(config, summary):
  """summary.md: the headline numbers and the tables behind the figures."""
  s = summary
  r = int(config.attempts)
  lines = [
      "# Self-critique and persistent memory (KeyChain-v0)", "",
      f"KeyChain T={config.horizon}, k={config.num_pivotal}, A={config.num_actions}, cues "
      f"{config.cue_delay} steps early and a memoryless policy (a blind guess at each "
      f"pivotal step: 1/A); retry episodes of R={r} attempts. Policies: REINFORCE trained "
      f"{config.num_updates} updates on retry episodes with the oracle critic's critiques as "
      "input, and with no critic. Success = solved within r attempts, "
      f"{config.eval_episodes} tasks per seed; mean ± 95% t-interval over {config.seeds} "
      f"seeds. {report.wall_time(s['wall_seconds'])}", ""]
  rows = []
  for name in ("none", "oracle_policy_no_critique", "oracle", "learned", "improvement"):
    rows.append([name] + [_fmt(*s["success"][name][i]) for i in range(r)])
  for i, n in enumerate(config.noises):
    rows.append([f"noisy eps={n:g}"] + [_fmt(*s["success"]["noisy"][i][j]) for j in range(r)])
  lines += report.table(["critic"] + [f"attempt {j + 1}" for j in range(r)], rows) + [""]
  o2, n2 = s["success"]["oracle"][1], s["success"]["none"][1]
  lines += [
      f"- Oracle vs no critique on the second attempt: {_fmt(*o2)} vs {_fmt(*n2)} "
      f"({'intervals separate' if o2[0] - o2[1] > n2[0] + n2[1] else 'intervals overlap'}).",
      "- Break-even noise (noisy critic no better than none, seed means interpolated): "
      + "; ".join(f"attempt {k}: {'not on the grid' if v is None else f'{v:.2f}'}"
                  for k, v in s["break_even_noise"].items()) + ".",
      f"- Learned critic ({config.critic_steps} Adam steps on uniform-policy attempts): "
      f"localises the first wrong step in {_fmt(*s['critic_step_acc'])} of failed attempts, "
      f"step and right action in {_fmt(*s['critic_both_acc'])}.",
      f"- Critic trained by the retry's improvement ({config.improvement_steps} REINFORCE "
      "steps, reward: the guided retry succeeded; no labels): the retry success it earns "
      f"rose from {s['improvement_reward_first10']:.3f} to "
      f"{s['improvement_reward_last10']:.3f} during training; it names the oracle's step "
      f"in {_fmt(*s['improvement_step_acc'])} of failed attempts, step and action in "
      f"{_fmt(*s['improvement_both_acc'])}.", "",
      f"## Memory: a stream of {config.memory_episodes} retry episodes over a family of "
      f"{config.family_size} tasks ({config.memory_streams} streams per seed)", ""]
  rows = []
  for cap, m in s["memory"].items():
    st = m["steps_to_target"]
    rows.append([cap, _fmt(*m["first_attempt_last10"]), _fmt(*m["steps_per_episode_last10"]),
                 "not reached" if st is None else f"{st:.0f}"])
  lines += report.table(["capacity", "first-attempt success (last 10 episodes)",
                         "env steps / episode (last 10)",
                         f"env steps to {config.target_success:.0%} first-attempt success"],
                        rows)
  return "\n".join(lines + [""])


def run(config, workdir: str, log=print) -> dict:
  """Runs the experiment; writes figures and summaries into `workdir`; returns the summary."""
  validate_config(config)
  os.makedirs(workdir, exist_ok=True)
  watch = report.Stopwatch()
  key = jax.random.key(int(config.seed))
  policies, network = train_policies(config, jax.random.fold_in(key, 1))
  log(f"trained policies ({watch.lap():.0f}s): final training success "
      + ", ".join(f"{k} {v.mean():.3f}" for k, v in ((k, p[1]) for k, p in policies.items())))
  res = measure_retries(config, policies, network, jax.random.fold_in(key, 2))
  log(f"retries measured ({watch.lap():.0f}s): second attempt none "
      f"{res['none'][:, 1].mean():.3f}, oracle {res['oracle'][:, 1].mean():.3f}, learned "
      f"{res['learned'][:, 1].mean():.3f}; critic accuracy {res['critic_step_acc'].mean():.3f}")
  mem = measure_memory(config, policies, network, jax.random.fold_in(key, 3))
  log(f"memory measured ({watch.lap():.0f}s)")
  r = int(config.attempts)
  pair = lambda x: [float(v) for v in ci95(x)]
  success = {name: [pair(res[name][:, j]) for j in range(r)]
             for name in ("none", "oracle_policy_no_critique", "oracle", "learned",
                          "improvement")}
  success["noisy"] = [[pair(res["noisy"][:, i, j]) for j in range(r)]
                      for i in range(len(config.noises))]
  breaks = {str(j + 1): break_even(list(config.noises), res["noisy"][:, :, j].mean(axis=0),
                                   res["none"][:, j].mean()) for j in range(1, r)}
  memory_summary = {}
  for cap, (ok, steps) in mem.items():
    memory_summary[str(cap)] = {
        "first_attempt_last10": pair(ok[:, -10:].mean(axis=1)),
        "steps_per_episode_last10": pair(steps[:, -10:].mean(axis=1)),
        "first_attempt_curve": ok.mean(axis=0).tolist(),
        "steps_to_target": steps_to_target(ok.mean(axis=0), steps.mean(axis=0),
                                           config.target_success)}
  summary = {"success": success, "noises": list(config.noises), "break_even_noise": breaks,
             "critic_step_acc": pair(res["critic_step_acc"]),
             "critic_both_acc": pair(res["critic_both_acc"]),
             "critic_final_loss": float(res["critic_loss"].mean()),
             "improvement_step_acc": pair(res["improvement_step_acc"]),
             "improvement_both_acc": pair(res["improvement_both_acc"]),
             "improvement_reward_first10": float(res["improvement_rewards"][:, :10].mean()),
             "improvement_reward_last10": float(res["improvement_rewards"][:, -10:].mean()),
             "training_success": {k: float(p[1].mean()) for k, p in policies.items()},
             "memory": memory_summary, "seeds": int(config.seeds),
             "attempts": r, "wall_seconds": watch.seconds()}
  plot(config, res, mem, summary, workdir)
  report.write_summary(workdir, summary, markdown(config, summary))
  log(f"break-even noise {breaks}; wall {watch.seconds():.0f}s")
  return summary
