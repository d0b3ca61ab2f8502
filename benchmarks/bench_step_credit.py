"""Benchmark: what step-level credit from restored states costs, side by side in one run.

Three comparisons on KeyChain-v0, each timed in alternating rounds (every call once per
round, compile excluded) and reported as the median of per-round ratios, so load from
other processes that slows a whole round cancels out:

  * vine: `vine_ppo.collect_vines` (K vines from every m-th step of B trajectories) against
    `rollout.collect` of the same batch (as many environments as the vines have lanes,
    for as many steps as their loop), under a 64-64 MLP policy and the uniform policy:
    counted env steps per second, vines / plain (target >= 0.8).
  * gigpo: a GRPO update (`algos.make_train`, T = 1000, K = 8) against the same update
    plus GiGPO's work, the anchor groups and step advantages of every task group from the
    update's states, on arrays of the update's shapes: added time / GRPO update
    (target <= 10%).
  * tree: `tree_groups.collect_tree` of K leaves per task against `rollout.collect_groups`
    of K independent episodes: counted env steps (measured) against the formula, and the
    wall-time ratio.

  python3 benchmarks/bench_step_credit.py                  # all three, CPU-sized
  python3 benchmarks/bench_step_credit.py --only=vine --repeats=7
"""
from __future__ import annotations

import functools
import statistics

from absl import app, flags
import jax
import jax.numpy as jnp

from credit_jax import algos, envs, nets, returns, rollout
from credit_jax.addons import gigpo, tree_groups, vine_ppo
from credit_jax.algos import train as train_lib
from credit_jax.runtime import launch

import bench_env

_ONLY = flags.DEFINE_list("only", ["vine", "gigpo", "tree"], "Sections to run.")
_REPEATS_SC = flags.DEFINE_integer("rounds", 7, "Timed rounds per section.")
_T = flags.DEFINE_integer("T", 1000, "KeyChain horizon.")
_VINE_B = flags.DEFINE_integer("vine_trajectories", 16, "Trajectories B the vines start from.")
_VINE_K = flags.DEFINE_integer("vine_k", 4, "Vines K per point.")
_VINE_M = flags.DEFINE_integer("vine_every", 100, "Vine points every m steps.")
_GROUP_N = flags.DEFINE_integer("gigpo_tasks", 16, "GRPO tasks N per update.")
_GROUP_K = flags.DEFINE_integer("gigpo_k", 8, "GRPO group size K.")
_TREE_N = flags.DEFINE_integer("tree_tasks", 16, "Tasks per tree rollout.")
_TREE_B = flags.DEFINE_integer("tree_branch", 2, "Tree branch factor b.")
_TREE_STEPS = flags.DEFINE_list("tree_steps", ["250", "500", "750"], "Branch steps.")


def _mlp_policy(env, env_params, key):
  network = nets.ActorCritic(num_actions=env.num_actions, hidden_sizes=(64, 64),
                             value_head=False)
  obs_shape = env.observation_space(env_params).shape
  return nets.make_policy_fn(network, value=False), train_lib.init_params(
      network, key, obs_shape)


def vine_calls(horizon):
  env, params = envs.make("KeyChain-v0", horizon=horizon)
  b, k, every = _VINE_B.value, _VINE_K.value, _VINE_M.value
  points = vine_ppo.vine_points(horizon, every)
  pairs = (len(points) + 1) // 2
  lanes = pairs * b * k
  remaining = horizon - points
  length = int(max(remaining[i] + (remaining[len(points) - 1 - i]
                                   if i < len(points) // 2 else 0) for i in range(pairs)))
  counted = b * k * int(remaining.sum())
  calls, rates = {}, {}
  for name, (policy, pp) in {
      "MLP 64-64": _mlp_policy(env, params, jax.random.key(0)),
      "uniform": (rollout.uniform_random_policy(env.num_actions), None)}.items():
    traj, states = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6),
                           static_argnames=("keep_states",))(
        env, params, policy, pp, jax.random.key(1), b, horizon, keep_states=True)
    run_vines = jax.jit(functools.partial(
        lambda policy, pp, key, traj, states: vine_ppo.collect_vines(
            env, params, policy, pp, key, traj, states, num_vines=k, every=every).values,
        policy))
    obs, state = rollout.reset(env, params, jax.random.key(2), lanes)
    run_plain = jax.jit(functools.partial(
        lambda policy, pp, key, state, obs: rollout.collect(
            env, params, policy, pp, key, state, obs, length)[0].rewards, policy))
    calls[(name, "vines")] = functools.partial(
        lambda f, pp, traj, states, r: f(pp, jax.random.key(100 + r), traj, states),
        run_vines, pp, traj, states)
    calls[(name, "plain")] = functools.partial(
        lambda f, pp, state, obs, r: f(pp, jax.random.key(100 + r), state, obs),
        run_plain, pp, state, obs)
    rates[(name, "vines")], rates[(name, "plain")] = counted, lanes * length
  header = (f"vines: B={b} trajectories x K={k} vines every m={every} steps of T={horizon}"
            f" = {lanes} lanes x {length} loop steps, {counted} counted steps "
            f"({counted / (lanes * length):.1%} of the loop); plain: {lanes} envs x "
            f"{length} steps")
  return calls, rates, header


def gigpo_calls(horizon):
  config = algos.RECIPES["grpo"].default_config()
  config = train_lib.keychain_env(config, horizon=horizon, num_pivotal=3)
  config.group_size, config.num_tasks = _GROUP_K.value, _GROUP_N.value
  config.num_minibatches = 2
  train = algos.make_train(config)
  state = jax.jit(train.init)(jax.random.key(0))
  update = jax.jit(train.update)
  env, params = train_lib.make_env(config)
  n, k = config.num_tasks, config.group_size
  traj, states = jax.jit(rollout.collect_groups, static_argnums=(0, 2, 5, 6, 7),
                         static_argnames=("keep_states",))(
      env, params, rollout.uniform_random_policy(env.num_actions), None,
      jax.random.key(1), n, k, horizon, keep_states=True)

  @jax.jit
  def grouping(env_state, traj):
    # What GiGPO adds to the update: returns-to-go, anchor groups, step advantages.
    to_go = returns.discounted_returns(jnp.where(traj.valid, traj.rewards, 0.0), 0.99,
                                       terminated=traj.dones)
    adv, stats = jax.vmap(gigpo.anchor_advantages, in_axes=(1, 1, 1))(
        env_state, to_go, traj.valid)
    return adv, stats

  calls = {("GRPO update", "update"): lambda r: update(state)[1]["loss"],
           ("GiGPO grouping", "grouping"): lambda r: grouping(states.env_state, traj)[0]}
  header = (f"gigpo: GRPO update of N={n} tasks x K={k} x T={horizon} "
            f"({n * k * horizon} steps, {config.update_epochs} epochs); grouping by state "
            f"(KeyChain state: {sum(x[0, 0, 0].size for x in jax.tree.leaves(states.env_state))}"
            f" words) of every group")
  return calls, {}, header


def tree_calls(horizon):
  env, params = envs.make("KeyChain-v0", horizon=horizon)
  policy, pp = _mlp_policy(env, params, jax.random.key(0))
  n, b = _TREE_N.value, _TREE_B.value
  steps = tuple(int(s) for s in _TREE_STEPS.value)
  leaves = b ** len(steps)
  run_tree = jax.jit(lambda key: tree_groups.collect_tree(
      env, params, policy, pp, key, n, b, steps, horizon))
  run_groups = jax.jit(lambda key: rollout.collect_groups(
      env, params, policy, pp, key, n, leaves, horizon))
  measured = int(run_tree(jax.random.key(5)).env_steps)
  independent = int(jnp.sum(run_groups(jax.random.key(5)).valid))
  formula = n * tree_groups.tree_env_steps(b, steps, horizon)
  calls = {("tree", "tree"): lambda r: run_tree(jax.random.key(r)).env_steps,
           ("tree", "groups"): lambda r: run_groups(jax.random.key(r)).rewards}
  header = (f"tree: N={n} tasks, b={b}, branch steps {steps}, K={leaves} leaves, "
            f"T={horizon}: measured {measured} env steps, formula {formula} "
            f"({'equal' if measured == formula else 'DIFFERENT'}), K independent "
            f"episodes {independent} (n K T = {n * leaves * horizon}); saved "
            f"{1 - measured / independent:.1%}, formula 1 - "
            f"{tree_groups.tree_env_steps(b, steps, horizon)}/({leaves} T) = "
            f"{1 - formula / (n * leaves * horizon):.1%}")
  return calls, {}, header


def main(argv):
  del argv
  launch.configure_process(num_seeds=1)   # the XLA CPU flags that keep jaxlib 0.10 from hanging
  horizon = _T.value
  print(f"backend={jax.default_backend()} device={jax.devices()[0].device_kind} "
        f"jax={jax.__version__} rounds={_REPEATS_SC.value}")
  builders = {"vine": vine_calls, "gigpo": gigpo_calls, "tree": tree_calls}
  for section in _ONLY.value:
    calls, rates, header = builders[section](horizon)
    wall, cpu = bench_env.time_rounds(calls, _REPEATS_SC.value)
    print(f"\n{header}")
    print("| case | path | wall median (s) | CPU median (s) |")
    print("|---|---|---|---|")
    for name in calls:
      print(f"| {name[0]} | {name[1]} | {statistics.median(wall[name]):.4f} | "
            f"{statistics.median(cpu[name]):.4f} |")
    for label, times in (("wall", wall), ("CPU", cpu)):
      if section == "vine":
        for case in dict.fromkeys(n for n, _ in calls):
          per_round = [(rates[(case, "vines")] / v) / (rates[(case, "plain")] / p)
                       for v, p in zip(times[(case, "vines")], times[(case, "plain")])]
          print(f"{label}: {case}: vine counted steps/s over plain steps/s, median of "
                f"paired ratios: {statistics.median(per_round):.3f}x (target >= 0.8)")
      elif section == "gigpo":
        ratio = bench_env.median_ratio(times[("GiGPO grouping", "grouping")],
                                       times[("GRPO update", "update")])
        print(f"{label}: GiGPO grouping / GRPO update, median of paired ratios: "
              f"{ratio:+.1%} (target <= +10%)")
      else:
        ratio = bench_env.median_ratio(times[("tree", "tree")], times[("tree", "groups")])
        print(f"{label}: tree rollout / K independent episodes, median of paired "
              f"ratios: {ratio:.3f}x")


if __name__ == "__main__":
  app.run(main)
