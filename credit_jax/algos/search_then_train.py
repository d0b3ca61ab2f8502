"""Search then train: GRPO whose all-failed groups are rescued by tree search.

Why: on a hard sparse task most GRPO groups fail entirely (K returns of 0, advantages
exactly 0, no gradient). A tree search from such a task's start state, using the policy
as its prior (`credit_jax.search`), can still find a success; trained on, it gives the
group the signal sampling could not.

One update:
  1. GRPO's group rollout: `num_tasks` start states x `group_size` episodes.
  2. On search updates (`update % search_every == 0`; `search_every = 0` never searches:
     the plain-GRPO control arm) with at least one all-failed group, up to `search_tasks`
     tasks whose K episodes all failed are searched (`search_simulations` simulations
     each, episodes up to `horizon`).
  3. A found success joins its group as member K+1: the group advantages are recomputed
     over the K+1 returns (so the K failures now get a negative advantage too), and the
     searched episode's steps carry the **bounded weight** `search_weight` (in [0, 1];
     the K sampled episodes keep weight 1: plain samples always stay in the mix).
  4. The clipped surrogate (minus an entropy bonus) over all members, a weighted mean
     over steps normalised by the number of valid *sampled* steps, so searched examples
     add to GRPO's gradient instead of diluting it. The searched episode's behaviour
     log-probabilities are the current policy's (its ratio starts at 1): it is trained
     on as if sampled, which is the bias this recipe accepts and measures.

Logged besides GRPO's metrics: how often search ran and found a success, its env steps
next to the sampling's, the policy's mean per-step and per-episode log-probability of the
searched trajectories before and after the update (the distribution-shift hazard: very
unlikely trajectories make large, off-policy updates), and the greedy policy's success
without search on the update's tasks.

Under `jax.vmap` over seeds the search's `lax.cond` becomes a select, so the search is
computed on every update but only used on search updates.

`success` is the fraction of the sampled episodes (without search) that solved their
task; `greedy_success` that of the greedy policy's episodes on the update's tasks.

Hyperparameters in `hparams` (traced): lr, clip_eps, ent_coef, max_grad_norm,
search_weight, search_exploration.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import baselines
from credit_jax import nets, rollout
from credit_jax import search as search_lib
from credit_jax.algos import grpo, train as train_lib
from credit_jax import episodes

HPARAMS = ("lr", "clip_eps", "ent_coef", "max_grad_norm", "search_weight",
           "search_exploration")


def default_config() -> ml_collections.ConfigDict:
  """Search then train on KeyChain-v0 (T=10, k=6, A=4: random success 2.4e-4, about one
  success per 30 updates of 128 sampled episodes), searching every update."""
  c = train_lib.keychain_env(grpo.default_config(), horizon=10, num_pivotal=6)
  c.algo = "search_then_train"    # this recipe
  c.loss_aggregation = "token_mean"  # the recipe's weighted token mean (the only choice)

  c.search_every = 1              # search on every n-th update; 0: never (plain GRPO arm)
  c.search_tasks = 16             # all-failed tasks searched per search update (<= num_tasks)
  c.search_simulations = 64       # simulations per searched task
  c.search_selection = "puct"     # puct | ucb1
  c.search_rollout = "sample"     # leaf rollouts: sample | greedy (from the policy)
  c.search_exploration = 1.25     # PUCT/UCB1 constant (a traced hparam)
  c.search_weight = 0.5           # weight of a searched episode's steps, in [0, 1] (traced)

  return train_lib.checkpoint_at_end(c)


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first recipe-specific field that cannot run."""
  grpo.validate_fields(config)
  req = train_lib.require
  req(config.loss_aggregation == "token_mean", "loss_aggregation",
      f"search-then-train uses a weighted token mean, got {config.loss_aggregation!r}")
  req(not config.use_reference_kl, "use_reference_kl",
      "no reference-KL term in the search-then-train recipe")
  req(int(config.search_every) >= 0, "search_every",
      f"must be >= 0 (0: never search), got {config.search_every}")
  req(1 <= int(config.search_tasks) <= int(config.num_tasks), "search_tasks",
      f"must lie in [1, num_tasks={config.num_tasks}], got {config.search_tasks}")
  train_lib.require_range(config, "search_simulations", 1)
  req(config.search_selection in ("puct", "ucb1"), "search_selection",
      f"must be 'puct' or 'ucb1', got {config.search_selection!r}")
  req(config.search_rollout in ("greedy", "sample"), "search_rollout",
      f"must be 'greedy' or 'sample', got {config.search_rollout!r}")
  req(0.0 <= config.search_weight <= 1.0, "search_weight",
      f"the weight of a searched episode is bounded to [0, 1], got {config.search_weight}")
  train_lib.require_range(config, "search_exploration", 0.0)


validate_config = train_lib.validator("search_then_train", validate_fields,
                                      whole_episodes=True, checked=False)


def group_rollout(env, env_params, policy_fn, params, key, num_tasks: int, group_size: int,
                  horizon: int):
  """GRPO's group rollout plus the start states it used.

  Returns:
    traj: Trajectory [horizon, num_tasks, group_size] (`rollout.collect_groups`).
    obs0: [num_tasks, *obs_shape]; states0: pytree of [num_tasks, ...], the task starts.
  """
  traj = rollout.collect_groups(env, env_params, policy_fn, params, key, num_tasks,
                                group_size, horizon)
  # collect_groups resets its tasks with the first half of its key; tests check that the
  # states rebuilt here are the ones it used.
  obs0, states0 = rollout.reset(env, env_params, jax.random.split(key)[0], num_tasks)
  return traj, obs0, states0


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for search-then-train on `config.env_name`; see `train_lib.Train`."""
  validate_config(config, features)   # it takes no features: any turned on is refused
  env, env_params = train_lib.make_env(config)
  network, obs_shape = train_lib.make_network(config, env, env_params, value_head=False)
  policy_fn = nets.make_policy_fn(network)
  num_tasks, group, horizon = int(config.num_tasks), int(config.group_size), int(config.horizon)
  n_updates, optimizer = int(config.num_updates), train_lib.make_optimizer(config)
  with_success = episodes.has_success(config)
  kind = str(config.advantage)
  search_every, n_search = int(config.search_every), int(config.search_tasks)

  def logits_fn(params, obs):
    return network.apply(params, obs)[0]

  search_fn = search_lib.make_search(
      env, logits_fn, num_simulations=int(config.search_simulations), max_depth=horizon,
      selection=str(config.search_selection), rollout=str(config.search_rollout))

  def greedy_policy(params, obs, key):
    del key
    logits = logits_fn(params, obs)
    action = jnp.argmax(logits).astype(jnp.int32)
    return action, nets.categorical_log_prob(logits, action), ()

  def init_fn(key, hp):
    return train_lib.init_train_state(network, key, obs_shape, hp, optimizer)

  def searched_member(params, key, obs0, states0, failed, update, hp):
    """Member K+1 of every task: the searched episode where search found a success."""
    # The first `search_tasks` failed tasks (stable order); slots past the failed ones
    # hold other tasks, searched but unused.
    idx = jnp.argsort(~failed, stable=True)[:n_search]
    run = (update % max(search_every, 1) == 0) & jnp.any(failed) if search_every else False
    searched = failed[idx] & run

    def do_search(_):
      out = search_fn(params, env_params, key, jax.tree.map(lambda x: x[idx], states0),
                      obs0[idx], exploration=hp["search_exploration"])
      t = out.trajectory
      return ({"obs": t.obs, "actions": t.actions, "log_probs": t.log_probs,
               "valid": t.valid}, out.total_reward, out.complete & (out.total_reward > 0),
              out.stats.env_steps.sum())

    def skip(_):
      return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                          jax.eval_shape(do_search, None))
    if search_every:
      traj, total, found, steps = jax.lax.cond(run, do_search, skip, None)
    else:  # the control arm: no search is even compiled
      traj, total, found, steps = skip(None)
    found = found & searched

    def scatter(x):  # [T, M, ...] of the searched tasks -> [T, N, ...]
      return jnp.zeros((x.shape[0], num_tasks) + x.shape[2:], x.dtype).at[:, idx].set(x)
    valid = traj["valid"] & found[None]
    member = {"obs": scatter(traj["obs"]), "actions": scatter(traj["actions"]),
              "log_probs": scatter(traj["log_probs"]), "valid": scatter(valid)}
    per_task = {"found": jnp.zeros((num_tasks,), bool).at[idx].set(found),
                "return": jnp.zeros((num_tasks,)).at[idx].set(jnp.where(found, total, 0.0))}
    logp = jnp.where(valid, traj["log_probs"], 0.0)
    n_found = jnp.maximum(jnp.sum(found), 1)
    metrics = {
        "search_ran": jnp.asarray(run, jnp.float32),
        "searched_tasks": jnp.sum(searched).astype(jnp.float32),
        "search_found": jnp.sum(found) / jnp.maximum(jnp.sum(searched), 1),
        "search_env_steps": jnp.where(run, steps, 0).astype(jnp.float32),
        "searched_logp_step": jnp.sum(logp) / jnp.maximum(jnp.sum(valid), 1),
        "searched_logp_episode": jnp.sum(logp) / n_found}
    return member, per_task, metrics

  def update_fn(state, hp):
    key, k_roll, k_search, k_greedy, k_perm = jax.random.split(state.key, 5)
    traj, obs0, states0 = group_rollout(env, env_params, policy_fn, state.params, k_roll,
                                        num_tasks, group, horizon)        # [T, N, K]
    valid = traj.valid
    returns = jnp.sum(jnp.where(valid, traj.rewards, 0.0), axis=0)     # [N, K]
    failed = jnp.all(returns <= 0, axis=1)                              # [N]
    adv, degenerate = baselines.group_advantages(returns, kind=kind)          # [N, K]
    member, per_task, search_metrics = searched_member(
        state.params, k_search, obs0, states0, failed, state.update, hp)
    # Groups with a found success: advantages over K + 1 members; else the K sampled
    # members keep GRPO's and the (empty) extra member gets 0.
    aug, _ = baselines.group_advantages(
        jnp.concatenate([returns, per_task["return"][:, None]], axis=1), kind=kind)
    plain = jnp.concatenate([adv, jnp.zeros((num_tasks, 1))], axis=1)
    adv = jnp.where(per_task["found"][:, None], aug, plain)           # [N, K + 1]

    def with_member(x, extra):  # [T, N, K, ...] + [T, N, ...] -> [T, N, K + 1, ...]
      return jnp.concatenate([x, extra[:, :, None]], axis=2)
    all_valid = with_member(valid, member["valid"])
    weights = jnp.concatenate(
        [valid.astype(jnp.float32),
         hp["search_weight"] * member["valid"][:, :, None].astype(jnp.float32)], axis=2)
    data = {"obs": with_member(traj.obs, member["obs"]),
            "actions": with_member(traj.actions, member["actions"]),
            "log_probs": with_member(traj.log_probs, member["log_probs"]),
            "advantages": jnp.broadcast_to(adv[None], all_valid.shape),
            "weights": weights}
    # Minibatches split the task axis (axis 1), so every group stays whole.
    params, opt_state, metrics, lr = grpo.weighted_optimise(   # / valid sampled steps
        network, state, data, hp, k_perm, config, optimizer, lambda w: w[..., :group])
    metrics.update(search_metrics)
    # How far the update moved the policy towards the searched episodes.
    found = per_task["found"]
    logp_after = nets.categorical_log_prob(logits_fn(params, member["obs"]),
                                           member["actions"])
    logp_after = jnp.where(member["valid"], logp_after, 0.0).sum(0)    # [N]
    metrics["searched_logp_episode_after"] = (
        jnp.sum(jnp.where(found, logp_after, 0.0)) / jnp.maximum(jnp.sum(found), 1))
    if with_success:
      greedy = rollout.collect_episodes(env, env_params, greedy_policy, state.params,
                                        k_greedy, num_tasks, horizon)
      greedy_returns = jnp.sum(jnp.where(greedy.valid, greedy.rewards, 0.0), axis=0)
      metrics.update({
          "success": jnp.mean((returns > 0).astype(jnp.float32)),
          "greedy_success": jnp.mean((greedy_returns > 0).astype(jnp.float32))})
    metrics.update({
        **grpo.episode_metrics(valid, returns, lr),
        "all_failed_frac": jnp.mean(failed.astype(jnp.float32)),
        "degenerate_frac": jnp.mean(degenerate.astype(jnp.float32)),
        "sample_env_steps": jnp.sum(valid).astype(jnp.float32)})
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=state.aux), metrics

  return train_lib.attach_evaluation(train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={k: config[k] for k in HPARAMS}, num_updates=n_updates,
      env_steps_per_update=(num_tasks * group
                            * train_lib.episode_steps(config, env, env_params)),
      headline=(("success", "search_found", "greedy_success") if with_success
                else ("return", "search_found")) + ("degenerate_frac",)),
      env, env_params, network)
