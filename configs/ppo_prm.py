"""PPO with process-reward shaping on RunningSum-v0 (issue 19): the PPO side of the PRM hook.

  python3 scripts/train.py --config=configs/ppo_prm.py --workdir=/tmp/ppo_prm
  python3 scripts/train.py --config=configs/ppo_prm.py:small --workdir=/tmp/ppo_prm_s

PPO's reward becomes `prm.outcome_weight * r_t + prm.weight * PRM term` per step
(`credit_jax/prm.py`, `make_step_shaper`): form "step" (default here) adds
`w * (p_t - p_{t-1})`, a potential-based difference that never pays for padding; "sum"
adds `w * p_t` (pays for padding). The PRM is trained on demonstrator steps with truth
labels and retrained every `prm.retrain_every` updates on the policy's own steps
("mc_soft": Monte-Carlo completions by the current policy). Variants: none (3 terms
mod 3, T=6, 2e5 steps) or "small" (a seconds-long check).
"""
from credit_jax import prm
from credit_jax.algos import ppo


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  c = ppo.default_config()
  c.env_name = "RunningSum-v0"
  c.env_kwargs = dict(num_terms=3, modulus=3, horizon=6)
  c.total_timesteps = 200_000     # env steps per seed
  c.num_envs = 16                 # parallel environments
  c.num_steps = 32                # steps per env per update
  c.lr = 1e-3
  c.gamma = 1.0                   # episodic task, reward only at the end
  c.chunk_updates = 65
  c.checkpoint_every = 130
  c.prm = prm.default_config()    # the PRM block (credit_jax/prm.py)
  c.prm.form = "step"             # per-step difference w * (p_t - p_{t-1})
  c.prm.weight = 0.1              # light shaping
  c.prm.retrain_every = 10        # retrain on the policy's steps every 10 updates
  c.prm.retrain_labels = "mc_soft"
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
