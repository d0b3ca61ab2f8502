"""PPO with process-reward shaping on RunningSum-v0: the PPO side of the PRM hook.

  python3 scripts/train.py --config=configs/ppo_prm.py --workdir=/tmp/ppo_prm
  python3 scripts/train.py --config=configs/ppo_prm.py:small --workdir=/tmp/ppo_prm_s

The config is part E of the PRM experiment (`credit_jax/experiments/prm/study.py`,
`ppo_config()`; `configs/prm.py:ppo` runs it against outcome-only PPO over seeds).
PPO's reward becomes `prm.outcome_weight * r_t + prm.weight * PRM term` per step
(`credit_jax/addons/prm.py`, `make_step_shaper`): form "step" (default here) adds
`w * (p_t - p_{t-1})`, a potential-based difference that never pays for padding; "sum"
adds `w * p_t` (pays for padding). The PRM is trained on demonstrator steps with truth
labels and retrained every `prm.retrain_every` updates on the policy's own steps (truth
labels; "mc_soft": Monte-Carlo completions by the current policy). Variants: none (3
terms mod 3, T=6, w = 0.3, 3e5 env steps) or "small" (a seconds-long check).
"""
from credit_jax.experiments import prm as prm_experiment


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  c = prm_experiment.ppo_config()
  if arg == "small":
    c.total_timesteps = 16 * 32 * 6
    c.chunk_updates = 3
    c.checkpoint_every = 6
    c.prm.demo_episodes = 32
    c.prm.train_steps = 20
    c.prm.retrain_every = 2
    c.prm.retrain_mc_states = 16
    c.prm.retrain_steps = 5
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
