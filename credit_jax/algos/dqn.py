"""DQN, with hindsight experience replay (HER) on goal environments.

One update is one HER "cycle": collect `num_envs` whole episodes with an epsilon-greedy
policy, relabel them with `relabel.relabel` (strategy `her_strategy`, `her_k` goals
per step, HER's `future` by default), write every example that exists and has a weight
into the replay buffer, take `grad_steps` gradient steps on uniformly sampled batches,
and move the target network towards the online one (Polyak, `target_tau`).

Success, as in every recipe, is measured on the original goals: `success` is the
fraction of the cycle's collected episodes that the behaviour policy (epsilon-greedy,
the policy DQN samples with) solved; `greedy_success` that of `eval_envs` fresh episodes
run by the greedy policy (epsilon 0), the figure HER reports. An episode succeeded when
`info["success"]` is set on one of its valid steps where the environment reports it
(bsuite's chains, KeyToDoor: there a positive reward is no guide), else when it got a
positive reward (`credit_jax/episodes.py`'s `success_signal`); `return` is the mean
return of the collected episodes.

Without relabeling: on an environment that is not a goal environment (no
`goal_reward`) `config.relabel_weight` must be 0 and the recipe is plain double DQN:
every valid step of the collected episodes is written with weight 1 and nothing is
relabeled (no `DesiredGoalWrapper`, no `relabel.relabel`).

Curriculum (`config.curriculum`, the hook of `credit_jax/addons/curriculum.py`): the
env params of each cycle's collected and greedy episodes are the curriculum's; its
state rides in `TrainState.aux["curriculum"]` per run, so a vmapped program can hold a
different traced setting per run (a one-stage fixed curriculum, as the bsuite study
uses, `credit_jax/experiments/bsuite/runner.py`). DQN has no advantages: the hook's
`Outcome.advantages` are zeros, and its value-loss PLR scores are refused.

Targets are double-DQN: `r + gamma * (1 - terminated) * Q_target(s', argmax_a Q(s', a))`,
where `s'` is the observation after the step before any auto-reset, so a truncated
step bootstraps and a terminated one does not (relabeled ends come from the verifier,
see `credit_jax/relabel.py`). `config.reward_offset` is added to every stored reward:
0 keeps the goal envs' 1-on-success/0-else, -1 gives the HER paper's 0/-1 convention
(every step that misses the goal costs 1, so an untrained Q near 0 is optimistic);
`config.clip_target` clips targets to the range of returns the rewards allow
(`[min(r, 0), max(r, 0)] / (1 - gamma)` over r in {offset, 1 + offset}), as the paper
clips to `[-1 / (1 - gamma), 0]`; those bounds hold for a goal environment's rewards
only, so a non-goal environment needs `clip_target = False`. Each sample's squared error is weighted by its example
weight (1 for real transitions, the scheduled `relabel_weight` for relabeled ones).

Warm start: relabeled examples are written with weight `relabel_schedule(success_ema,
relabel_weight, relabel_threshold, relabel_ramp)`, where `success_ema` is a running mean
of the real (behaviour) success rate; at weight 0 they are not written at all, so
`relabel_weight = 0` is DQN without HER (a traced value: both arms run in one compiled
program, vmapped).

Hyperparameters in `hparams` (traced): lr, gamma, epsilon, target_tau, max_grad_norm,
relabel_weight, relabel_threshold, relabel_ramp.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import envs, episodes, relabel, replay, rollout
from credit_jax.addons import features as features_lib, hooks as hooks_lib
from credit_jax.algos import train as train_lib

HPARAMS = ("lr", "gamma", "epsilon", "target_tau", "max_grad_norm", "relabel_weight",
           "relabel_threshold", "relabel_ramp")
# The hook this recipe takes (credit_jax/addons/hooks.py): the curriculum's env params.
HOOKS = ("curriculum",)
RECIPE = hooks_lib.Recipe("dqn", HOOKS, rollout=hooks_lib.EPISODES)


def add_relabel_fields(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Adds the warm-start fields both relabeling recipes share (DQN here, GRPO) to `c`."""
  c.relabel_weight = 1.0          # weight of relabeled examples, 0: none (a traced hparam)
  c.relabel_threshold = 1.01      # real success rate at which relabeling switches off (traced)
  c.relabel_ramp = 0.0            # success range below the threshold over which it fades (traced)
  c.success_ema = 0.9             # decay of the running real-success rate (per update)
  return c


def default_config() -> ml_collections.ConfigDict:
  """DQN + HER (`future`, k = 4) on BitFlip-v0 with 15 bits (the HER paper's experiment)."""
  c = add_relabel_fields(train_lib.base_config())
  c.algo = "dqn"                  # this recipe
  c.env_name = "BitFlip-v0"       # a goal environment
  c.env_kwargs.num_bits = 15      # n; the episode limit is n steps
  c.her_strategy = "future"       # final | episode | future
  c.her_k = 4                     # relabeled goals per transition (HER: k = 4)
  c.num_updates = 300             # HER cycles: collect, relabel, store, learn
  c.num_envs = 16                 # episodes collected per cycle
  c.horizon = 15                  # steps per episode (the env's limit, num_bits)
  c.eval_envs = 64                # greedy test episodes per cycle (`greedy_success`)
  c.buffer_size = 100_000         # replay capacity in transitions
  c.batch_size = 128              # transitions per gradient step
  c.grad_steps = 40               # gradient steps per cycle
  c.lr = 1e-3                     # learning rate (a traced hparam)
  c.max_grad_norm = 10.0          # global gradient-norm clip (a traced hparam)
  c.gamma = 0.98                  # discount (a traced hparam)
  c.epsilon = 0.2                 # exploration rate of the behaviour policy (traced)
  c.target_tau = 0.05             # Polyak step of the target network per cycle (traced)
  # The paper's 0/-1 rewards and targets clipped to [-1/(1-gamma), 0]. This is what
  # n = 50 needs: with the env's 1/0 rewards (offset 0, no clip) one seed stayed at 0
  # success for 5500 cycles at n = 50 (greedy Q-values of matching and differing bits
  # within 0.01 of each other far from the goal, so the policy flipped bits back and
  # forth); with -1 and the clip the same seed reached 0.99 at 1250 cycles.
  c.reward_offset = -1.0          # added to stored rewards (-1: success 0, else -1)
  c.clip_target = True            # clip TD targets to the returns the rewards allow
  c.network.hidden_sizes = (256,)   # Q-network MLP widths
  c.network.activation = "relu"     # tanh | relu | gelu | silu
  c.chunk_updates = 25            # updates per compiled call (one progress line each)
  c.keep_checkpoints = 1          # newest checkpoints kept
  return c


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first DQN-specific field that cannot run."""
  req = train_lib.require
  train_lib.require_range(config, ("num_envs", "horizon", "num_updates", "buffer_size",
                                   "batch_size", "grad_steps", "eval_envs", "her_k"), 1)
  train_lib.require_one_of(config.her_strategy, "her_strategy", relabel.STRATEGIES)
  req(config.buffer_size >= config.batch_size, "buffer_size",
      f"{config.buffer_size} is smaller than batch_size={config.batch_size}")
  train_lib.require_range(config, ("gamma", "epsilon"), 0.0, 1.0)
  req(0.0 < config.target_tau <= 1.0, "target_tau",
      f"must lie in (0, 1], got {config.target_tau}")
  req(-1.0 <= config.get("reward_offset", 0.0) <= 0.0, "reward_offset",
      f"must lie in [-1, 0], got {config.get('reward_offset')}")
  validate_relabel_fields(config, allow_plain=True)
  if not _is_goal_env(config):
    req(not bool(config.get("clip_target", False)), "clip_target",
        f"its bounds assume a goal environment's rewards {{offset, 1 + offset}}; "
        f"{config.env_name} is not one, set clip_target=False")


validate_config = train_lib.validator("dqn", validate_fields, RECIPE, checked=False)


def _is_goal_env(config) -> bool:
  """Whether `config.env_name` is a goal environment (has `goal_reward` to relabel
  with); False also when it cannot be made (validation names that next)."""
  try:
    env, _ = train_lib.make_env(config)
  except ValueError:
    return False
  return hasattr(env, "goal_reward")


def validate_relabel_fields(config, allow_plain: bool = False) -> None:
  """Checks the relabeling fields both relabeling recipes share (DQN here, GRPO).

  `allow_plain`: a non-goal environment is accepted when `relabel_weight` is 0 (DQN
  without relabeling)."""
  req = train_lib.require
  train_lib.require_range(config, ("relabel_weight", "relabel_ramp"), 0.0)
  req(0.0 <= config.success_ema < 1.0, "success_ema",
      f"must lie in [0, 1), got {config.success_ema}")
  req(int(config.history_window) == 0, "history_window",
      "relabeling replaces the goal in flat observations; no history window")
  try:
    env, _ = train_lib.make_env(config)
  except ValueError:
    return  # train_lib.validate reports a bad environment next, naming its fields
  if allow_plain and float(config.relabel_weight) == 0.0:
    return
  req(hasattr(env, "goal_reward"), "env_name",
      f"{config.env_name} is not a goal environment (no goal_reward to relabel with)"
      + ("; set relabel_weight=0 for DQN without relabeling" if allow_plain else ""))


def epsilon_greedy_policy(network):
  """`PolicyFn` over `(params, epsilon)`: greedy in Q with probability 1 - epsilon.

  Returns `(action [] int32, log_prob [], ())` for one observation, where log_prob is
  the log-probability of the action under the epsilon-greedy distribution.
  """
  def policy_fn(policy_params, obs, key):
    params, epsilon = policy_params
    q, _ = network.apply(params, obs)                                  # [A]
    num_actions = q.shape[-1]
    k_explore, k_action = jax.random.split(key)
    greedy = jnp.argmax(q).astype(jnp.int32)
    explore = jax.random.uniform(k_explore) < epsilon
    random_action = jax.random.randint(k_action, (), 0, num_actions, jnp.int32)
    action = jnp.where(explore, random_action, greedy)
    prob = epsilon / num_actions + (1.0 - epsilon) * (action == greedy)
    return action, jnp.log(prob), ()
  return policy_fn


def episode_success(traj) -> jax.Array:
  """[B] float32: the episode succeeded on one of its valid steps (`info["success"]`
  where the env reports it, else a positive reward: `episodes.success_signal`)."""
  hit = episodes.success_signal(traj) > 0
  return jnp.any(jnp.logical_and(traj.valid, hit), axis=0).astype(jnp.float32)


def double_q_targets(reward, discount, q_next_online, q_next_target, gamma,
                     bounds=None) -> jax.Array:
  """[N] double-DQN targets `r + gamma * discount * Q_target(s', argmax_a Q(s', a))`.

  reward, discount: [N]; q_next_online, q_next_target: [N, A] Q-values of the next
  observation under the online and target networks; `bounds`: `(lo, hi)` to clip the
  targets to, or None.
  """
  if q_next_online.ndim != 2 or q_next_online.shape != q_next_target.shape or \
      reward.shape != q_next_online.shape[:1] or discount.shape != reward.shape:
    raise ValueError(f"need reward, discount [N] and Q [N, A] alike, got "
                     f"{reward.shape}, {discount.shape}, {q_next_online.shape}, "
                     f"{q_next_target.shape}")
  best = jnp.argmax(q_next_online, axis=1)
  q_next = jnp.take_along_axis(q_next_target, best[:, None], axis=1)[:, 0]
  y = reward + gamma * discount * q_next
  return y if bounds is None else jnp.clip(y, bounds[0], bounds[1])


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for DQN (+HER on a goal environment) on `config.env_name`."""
  passed = tuple(features)
  validate_config(config, passed)     # of the features, it takes the curriculum only
  env, env_params = features_lib.wrap_env(config, *train_lib.make_env(config), passed)
  goal_env = hasattr(env, "goal_reward")
  if goal_env:
    env = envs.DesiredGoalWrapper(env)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=False)
  policy_fn = epsilon_greedy_policy(network)
  num_envs, horizon = int(config.num_envs), int(config.horizon)
  n_updates, grad_steps = int(config.num_updates), int(config.grad_steps)
  batch_size, capacity = int(config.batch_size), int(config.buffer_size)
  eval_envs, her_k = int(config.eval_envs), int(config.her_k)
  strategy = str(config.her_strategy)
  ema_decay = float(config.success_ema)
  optimizer = train_lib.make_optimizer(config)
  reward_offset = float(config.get("reward_offset", 0.0))
  clip_target = bool(config.get("clip_target", False))
  example = {"obs": jnp.zeros(obs_shape, jnp.float32), "action": jnp.zeros((), jnp.int32),
             "reward": jnp.zeros(()), "next_obs": jnp.zeros(obs_shape, jnp.float32),
             "discount": jnp.zeros(()), "weight": jnp.zeros(())}

  hooks = features_lib.bind(config, RECIPE, env, env_params, policy_fn, num_envs,
                            network, passed=passed)

  def init_fn(key, hp):
    def aux_fn(params, *keys):
      return {"target": params, "buffer": replay.init(example, capacity),
              "success_ema": jnp.zeros(()), **hooks.init(keys[0] if keys else None)}
    return train_lib.init_train_state(network, key, obs_shape, hp, optimizer, aux_fn,
                                      aux_keys=hooks.init_keys)

  def loss_fn(params, target, batch, hp):
    q_all, _ = network.apply(params, batch["obs"])                     # [N, A]
    q = jnp.take_along_axis(q_all, batch["action"][:, None], axis=1)[:, 0]
    q_next_online, _ = network.apply(params, batch["next_obs"])
    q_next_target, _ = network.apply(target, batch["next_obs"])
    bounds = None
    if clip_target:
      # Returns of rewards in {offset, 1 + offset} lie within these bounds.
      horizon_sum = 1.0 / jnp.maximum(1.0 - hp["gamma"], 1e-6)
      bounds = (min(reward_offset, 0.0) * horizon_sum,
                max(1.0 + reward_offset, 0.0) * horizon_sum)
    y = jax.lax.stop_gradient(double_q_targets(
        batch["reward"], batch["discount"], q_next_online, q_next_target, hp["gamma"],
        bounds))
    loss = jnp.mean(batch["weight"] * jnp.square(q - y))
    return loss, {"q_mean": jnp.mean(q)}

  grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

  def transitions(traj, key, weight):
    """Flattened examples `{name: [N, ...]}` and the mask of those that exist."""
    if goal_env:
      out = relabel.relabel(env, traj, key, strategy=strategy, num_goals=her_k,
                              relabel_weight=weight)
      traj, weights, relabeled = out.traj, out.weights, out.relabeled
    else:   # plain DQN: every valid step, weight 1, nothing relabeled
      weights = traj.valid.astype(jnp.float32)
      relabeled = jnp.zeros(weights.shape, bool)
    flat = lambda x: x.reshape((-1,) + x.shape[weights.ndim:])
    items = {"obs": flat(traj.obs), "action": flat(traj.actions),
             "reward": flat(traj.rewards) + reward_offset,
             "next_obs": flat(traj.final_obs),
             "discount": flat(1.0 - traj.terminated.astype(jnp.float32)),
             "weight": flat(weights)}
    written = items["weight"] > 0
    relabeled_frac = jnp.sum(flat(relabeled) & written) / jnp.maximum(jnp.sum(written), 1)
    return items, written, relabeled_frac

  def update_fn(state, hp):
    key, k_roll, k_rel, k_learn, k_eval = jax.random.split(state.key, 5)
    # The curriculum's params (without one, env_params unchanged; the hook's key is
    # derived from k_eval so that the other draws stay as they were).
    roll_params, notes = hooks.env_params(state.aux, env_params, state.update, k_eval)
    traj = rollout.collect_episodes(env, roll_params, policy_fn,
                                    (state.params, hp["epsilon"]), k_roll, num_envs,
                                    horizon)
    train_success = jnp.mean(episode_success(traj))
    ema = ema_decay * state.aux["success_ema"] + (1.0 - ema_decay) * train_success
    weight = relabel.relabel_schedule(ema, hp["relabel_weight"],
                                        hp["relabel_threshold"], hp["relabel_ramp"])
    items, written, relabeled_frac = transitions(traj, k_rel, weight)
    buffer = replay.add(state.aux["buffer"], items, written)
    lr = train_lib.learning_rate(hp["lr"], state.update, n_updates, bool(config.anneal_lr))
    target = state.aux["target"]
    ready = buffer.size >= batch_size

    def grad_step(carry, k):
      params, opt_state = carry
      batch = replay.sample(buffer, k, batch_size)
      (loss, m), grads = grad_fn(params, target, batch, hp)
      new_params, new_opt, gnorm = optimizer.apply(params, opt_state, grads, lr,
                                                   hp["max_grad_norm"])
      # Learning waits until the buffer holds one batch (vmapped seeds: a select).
      params, opt_state = jax.tree.map(lambda new, old: jnp.where(ready, new, old),
                                       (new_params, new_opt), (params, opt_state))
      return (params, opt_state), {"loss": loss, "grad_norm": gnorm, **m}

    (params, opt_state), m = jax.lax.scan(grad_step, (state.params, state.opt_state),
                                          jax.random.split(k_learn, grad_steps))
    tau = hp["target_tau"]
    target = jax.tree.map(lambda t, p: (1.0 - tau) * t + tau * p, target, params)
    evaluation = rollout.collect_episodes(env, roll_params, policy_fn, (params, 0.0),
                                          k_eval, eval_envs, horizon)
    metrics = jax.tree.map(jnp.mean, m)
    returns = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)     # [B]
    metrics.update({
        "lr": lr, "success": train_success, "return": jnp.mean(returns),
        "greedy_success": jnp.mean(episode_success(evaluation)), "success_ema": ema,
        "relabel_weight": weight,
        "relabeled_frac": relabeled_frac, "buffer_size": buffer.size.astype(jnp.float32),
        "episode_length": jnp.sum(traj.valid, axis=0).astype(jnp.float32).mean()})
    aux = {**state.aux, "target": target, "buffer": buffer, "success_ema": ema}
    aux, metrics = hooks.observe(aux, notes, hooks_lib.Outcome(
        train_success, jnp.zeros_like(traj.rewards), traj), metrics)
    if hooks.counts_steps:
      metrics["env_steps"] = jnp.sum(traj.valid).astype(jnp.float32)
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=aux), metrics

  train = train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={k: config[k] for k in HPARAMS}, num_updates=n_updates,
      env_steps_per_update=num_envs * horizon,
      headline=("greedy_success", "success", "relabel_weight"))
  # What evaluating a checkpoint needs (train_lib.EVALUATION): greedy is argmax Q
  # (epsilon 0); sampled is epsilon-greedy at `config.epsilon`, the run's final epsilon
  # (DQN keeps it constant), on the env's own goals (`DesiredGoalWrapper`).
  epsilon = lambda greedy: jnp.float32(0.0 if greedy else float(config.epsilon))
  return train_lib.attach_evaluation(train, env, env_params, eval_policy=lambda params,
                                     greedy=False: (policy_fn, (params, epsilon(greedy))))
