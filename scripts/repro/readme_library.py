"""README's "library in one screen", runnable: the same calls on small made-up inputs.

The README's block leaves its inputs (rewards, values, a network, its parameters) to the
reader; this script makes them (T = 64 steps, a batch of 8) and then runs the block's
calls as written, waiting for each result. `--configure` adds the optional
`cj.configure_process()` first.

  python3 scripts/repro/readme_library.py
  python3 scripts/repro/readme_library.py --configure   # with the optional call
"""
import argparse
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--configure", action="store_true",
                    help="call the optional cj.configure_process() first")
args = parser.parse_args()

t0 = time.perf_counter()
import credit_jax as cj   # noqa: E402

if args.configure:
  cj.configure_process()

import jax   # noqa: E402
import jax.numpy as jnp   # noqa: E402

# The inputs the README's block assumes: [T, B] time-major, values [T + 1, B].
T, B = 64, 8
k = jax.random.split(jax.random.PRNGKey(0), 6)
rewards = jax.random.normal(k[0], (T, B))
discounts = jnp.full((T, B), 0.99)
values = jax.random.normal(k[1], (T + 1, B))
lambda_ = 0.95
term = jax.random.bernoulli(k[2], 0.02, (T, B))
trunc = jax.random.bernoulli(k[3], 0.02, (T, B)) & ~term
v_final = jax.random.normal(k[4], (T, B))
v_last = values[-1]
group_rewards = jax.random.bernoulli(k[5], 0.3, (16, 8)).astype(jnp.float32)
key = jax.random.PRNGKey(1)

# --- the README's block, as written ---
adv = cj.gae(rewards, discounts, values, lambda_,
             terminated=term, truncated=trunc,
             final_values=v_final,
             method="auto")
ret = cj.lambda_returns(rewards, discounts, values, lambda_)
g = cj.discounted_returns(rewards, discounts, bootstrap_value=v_last)
adv, degenerate = cj.group_advantages(group_rewards, kind="grpo")

env, params = cj.envs.make("KeyChain-v0", horizon=1000, num_pivotal=3, num_actions=4)
env, params = cj.envs.make("CartPole-v1")

network = cj.nets.ActorCritic(num_actions=env.num_actions)
obs, _ = env.reset(key, params)
policy_params = network.init(key, obs)
policy_fn = cj.nets.make_policy_fn(network)
traj = cj.rollout.collect_groups(env, params, policy_fn, policy_params, key,
                                 num_tasks=16, group_size=8, horizon=50)
cj.fast_paths.enable()
# --- end of the block ---

jax.block_until_ready((adv, ret, g, degenerate, traj))
print(f"readme block done in {time.perf_counter() - t0:.1f} s: adv {adv.shape}, "
      f"traj.rewards {traj.rewards.shape}", flush=True)
sys.exit(0)
