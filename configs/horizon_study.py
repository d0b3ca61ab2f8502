"""The horizon study (credit_jax/experiments/horizon/study.py): every method on KeyChain from
T = 10 upward, updates and env steps to 90% success against T.

  python3 scripts/horizon_study.py --config=configs/horizon_study.py:small --workdir=DIR
  python3 scripts/horizon_study.py --config=configs/horizon_study.py:full --workdir=DIR

Variants:
  "small" (the default; CI-sized, 2 CPU cores): 4 seeds, T in {10, 30, 100, 300},
      REINFORCE, GRPO K = 8 and 32, PPO + GAE with the MLP critic at (gamma, lambda) =
      (1, 1) and (0.99, 0.95); learning rates fixed (the values `:full`'s sweep chose);
      the short-stage remedy trained at T = 30 and run at T = 1000 and 10^4.
  "full": 8 seeds, T in {10, 30, 100, 300, 1000, 3000}, PPO with gamma in {0.99,
      0.999, 1} and lambda in {0.95, 1} (MLP critic), the oracle-state critic, the
      history (GRU) critic and the GRU actor-critic, a learning-rate sweep per family at
      T = 100, the remedy run up to T = 10^4. GPU-sized: on 2 loaded CPU cores even a
      4-seed subset of it takes over an hour (docs/results/horizon.md says what ran).
  "cpu": the part of "full" that fits 2 CPU cores in ~1.5 h (what docs/results/horizon.md
      reports): 8 seeds, T in {10, 30, 100, 300, 1000}, 150 updates per cell (9,600 T env
      steps per seed), REINFORCE, GRPO K = 8 and 32, PPO + GAE with the MLP critic at
      (1, 1), (1, 0.95), (0.999, 0.95), the oracle-state and the history (GRU) critic at
      (1, 0.95); lr swept per family at T = 100 over {1e-3, 3e-3, 1e-2, 3e-2} (8 seeds,
      60 updates). Not in it: gamma 0.99, the GRU actor-critic, T = 3000 (run with
      overrides for the fastest methods) and 10^4. Run in pieces with --config.methods /
      --config.horizons overrides on one workdir (docs/results/horizon.md lists them).
  "smoke": seconds; what the tests run.
Every field is documented in credit_jax/experiments/horizon/study.py's default_config().
"""
from credit_jax.experiments import horizon


def get_config(arg=None):
  """Returns the study config; `arg` picks a variant ("small" default, "full", "cpu", "smoke")."""
  c = horizon.default_config()
  if arg in (None, "", "small"):
    pass
  elif arg == "full":
    c.seeds = 8
    c.horizons = (10, 30, 100, 300, 1000, 3000)
    c.methods = ("reinforce", "grpo_k8", "grpo_k32",
                 "ppo_mlp_g1_l1", "ppo_mlp_g1_l0.95", "ppo_mlp_g0.999_l1",
                 "ppo_mlp_g0.999_l0.95", "ppo_mlp_g0.99_l1", "ppo_mlp_g0.99_l0.95",
                 "ppo_oracle_g1_l0.95", "ppo_oracle_g0.99_l0.95", "ppo_hist_g1_l0.95",
                 "ppo_gru_g1_l1")
    c.lr_sweep.candidates = (1e-3, 3e-3, 1e-2, 3e-2)
    c.gae_gradient_every = 10
    c.budget_updates = 200
    c.lr_sweep.families = ("reinforce", "grpo", "ppo")
    c.lr_sweep.methods = ("reinforce", "grpo_k8", "ppo_mlp_g1_l1")
    c.budget_env_steps = 40_000_000
  elif arg == "cpu":
    c.seeds = 8
    c.horizons = (10, 30, 100, 300, 1000)
    c.methods = ("reinforce", "grpo_k8", "grpo_k32", "ppo_mlp_g1_l1", "ppo_mlp_g1_l0.95",
                 "ppo_oracle_g1_l0.95", "ppo_hist_g1_l0.95", "ppo_mlp_g0.999_l0.95")
    c.lr_sweep.candidates = (1e-3, 3e-3, 1e-2, 3e-2)
    c.lr_sweep.families = ("reinforce", "grpo", "ppo")
    c.lr_sweep.methods = ("reinforce", "grpo_k8", "ppo_mlp_g1_l1")
    c.gae_gradient_every = 10
    c.budget_updates = 150
    c.budget_env_steps = 40_000_000   # as :full; binds above T = 4166
  elif arg == "smoke":
    c.seeds, c.episodes, c.hidden_sizes = 2, 8, (8,)
    c.horizons = (4, 8)
    c.methods = ("grpo_k4",)
    c.num_pivotal, c.num_actions = 1, 2
    c.budget_updates, c.chunk_updates, c.smooth, c.hold = 4, 2, 1, 1
    c.lr_sweep.families, c.lr_sweep.methods = ("grpo",), ("grpo_k4",)
    c.lr_sweep.horizon, c.lr_sweep.candidates, c.lr_sweep.budget_updates = 4, (1e-2, 3e-2), 2
    c.transfer.method, c.transfer.train_horizon = "grpo_k4", 4
    c.transfer.targets, c.transfer.eval_episodes = (16,), 4
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'full', 'cpu' or 'smoke'")
  return c
