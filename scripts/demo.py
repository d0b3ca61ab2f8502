"""Prints the credit each estimator gives on a small auto-reset trajectory.

The window holds three episode fragments: one that terminates with reward 1, one cut by
the time limit (truncated: it bootstraps from the value of its final observation), and
one still running at the end of the window (bootstraps from values[T]). Run:

  python3 scripts/demo.py
"""
from absl import app
import jax.numpy as jnp
import numpy as np

import credit_jax as cj


def sample_trajectory():
  """A 10-step window: rewards [T], boundaries [T], values [T + 1], final values [T]."""
  rewards = jnp.array([0., 0., 0., 1., 0., 0., 0., 0., 0., 0.])
  terminated = jnp.array([0, 0, 0, 1, 0, 0, 0, 0, 0, 0], bool)   # episode 1 ends at t=3
  truncated = jnp.array([0, 0, 0, 0, 0, 0, 1, 0, 0, 0], bool)    # episode 2 cut at t=6
  values = jnp.array([.2, .3, .5, .8, .1, .2, .3, .1, .2, .4, .5])
  final_values = jnp.zeros(10).at[6].set(.6)     # V(final_obs) where truncated
  return rewards, terminated, truncated, values, final_values


def main(argv):
  del argv
  rewards, terminated, truncated, values, final_values = sample_trajectory()
  gamma, lam = 0.9, 0.8
  discounts = jnp.full_like(rewards, gamma)
  bounds = dict(terminated=terminated, truncated=truncated, final_values=final_values)
  columns = {
      "reward": rewards,
      "value": values[:-1],
      "ret-to-go": cj.discounted_returns(rewards, discounts, bootstrap_value=values[-1],
                                         **bounds),
      "td-error": cj.td_errors(rewards, discounts, values, **bounds),
      "gae(scan)": cj.gae(rewards, discounts, values, lam, method="scan", **bounds),
      "gae(assoc)": cj.gae(rewards, discounts, values, lam, method="associative", **bounds),
      "lambda-ret": cj.lambda_returns(rewards, discounts, values, lam, **bounds),
  }
  print(f"gamma={gamma} lambda={lam}; episode 1 terminates at t=3, episode 2 is "
        "truncated at t=6, episode 3 runs past the window.\n")
  print("  t  boundary    " + "".join(f"{k:>11}" for k in columns))
  for t in range(rewards.shape[0]):
    mark = "terminated" if terminated[t] else "truncated" if truncated[t] else ""
    print(f"{t:3d}  {mark:<10}  " + "".join(f"{float(v[t]):11.4f}" for v in columns.values()))

  # GRPO-style credit: 2 tasks x K=4 rollouts of terminal reward; task 2 all failed.
  group_rewards = jnp.array([[1., 0., 0., 1.], [0., 0., 0., 0.]])
  print("\nGroup baselines, rewards per task (K = 4):\n", np.asarray(group_rewards))
  for kind in ("grpo", "rloo", "drgrpo", "mean"):
    adv, degenerate = cj.group_advantages(group_rewards, kind=kind)
    rows = "  ".join(" ".join(f"{a:+.3f}" for a in row) for row in np.asarray(adv))
    print(f"{kind:>7}: advantages [{rows}]  degenerate {np.asarray(degenerate).tolist()}")


if __name__ == "__main__":
  app.run(main)
