"""PPO on CartPole-v1 with PureJaxRL's default settings (the end-to-end PPO benchmark).

  python3 scripts/train.py --config=configs/ppo_cartpole.py --workdir=/tmp/ppo
  python3 scripts/train.py --config=configs/ppo_cartpole.py:small --workdir=/tmp/ppo_small
  python3 scripts/train.py --config=configs/ppo_cartpole.py --config.seeds=16 --workdir=...

Variants: none (5e5 steps, reaches return ~500) or "small" (a quick check that runs
in well under a minute on a 2-core CPU; it does not solve the task).
"""
import ml_collections


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None or "small")."""
  c = ml_collections.ConfigDict()
  c.algo = "ppo"                  # recipe in credit_jax.algos.RECIPES
  c.env_name = "CartPole-v1"      # any id of credit_jax.envs.registered_envs()
  c.env_kwargs = ml_collections.ConfigDict()  # overrides passed to cj.envs.make
  c.history_window = 0            # >0: observe the last W observations (memory); 0: off
  c.seed = 0                      # base RNG seed; seed i of a multi-seed run is split from it
  c.seeds = 1                     # seeds trained side by side in one compiled call (vmap)

  c.total_timesteps = 500_000     # env steps per seed; updates = this // (envs * steps)
  c.num_envs = 4                  # parallel environments per seed
  c.num_steps = 128               # rollout length per update, per environment
  c.update_epochs = 4             # passes over each rollout
  c.num_minibatches = 4           # minibatches per pass; must divide num_envs * num_steps

  c.lr = 2.5e-4                   # Adam learning rate (swept as a traced hparam)
  c.anneal_lr = True              # linearly anneal lr to 0 over the run
  c.adam_eps = 1e-5               # Adam epsilon
  c.max_grad_norm = 0.5           # global gradient-norm clip
  c.gamma = 0.99                  # discount
  c.gae_lambda = 0.95             # GAE lambda
  c.gae_method = "auto"           # cj.gae method: "scan", "associative" or "auto"
  c.clip_eps = 0.2                # PPO ratio clip (also the value clip)
  c.clip_value_loss = True        # clip the value update around the rollout's values
  c.ent_coef = 0.01               # entropy bonus weight
  c.vf_coef = 0.5                 # value loss weight

  c.network = ml_collections.ConfigDict()
  c.network.hidden_sizes = (64, 64)  # MLP widths of each torso
  c.network.activation = "tanh"      # tanh | relu | gelu | silu
  c.network.shared_torso = False     # one torso for policy and value, or one each

  c.chunk_updates = 61            # updates per compiled call (one progress line each)
  c.checkpoint_every = 244        # updates between checkpoints (multiple of chunk_updates)
  c.keep_checkpoints = 3          # newest checkpoints kept

  if arg == "small":
    c.total_timesteps = 20_480    # 40 updates of 4 x 128
    c.chunk_updates = 10
    c.checkpoint_every = 20
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none or 'small'")
  return c
