"""GRPO on KeyChain-v0 (T=50 steps, k=3 pivotal steps, A=4 actions: random success 1.6%).

  python3 scripts/train.py --config=configs/grpo_keychain.py --workdir=/tmp/grpo
  python3 scripts/train.py --config=configs/grpo_keychain.py:small --workdir=/tmp/grpo_s
  python3 scripts/train.py --config=configs/grpo_keychain.py:delay --workdir=/tmp/grpo_d

Variants: none (reaches >= 90% success), "small" (a quick check that runs in well under a
minute on a 2-core CPU), "delay" (cues shown 3 steps before their pivotal step, so the
policy needs memory: a history window of 4 observations).
"""
import ml_collections


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (None, "small" or "delay")."""
  c = ml_collections.ConfigDict()
  c.algo = "grpo"                 # recipe in credit_jax.algos.RECIPES
  c.env_name = "KeyChain-v0"      # any id of credit_jax.envs.registered_envs()
  c.env_kwargs = ml_collections.ConfigDict()  # overrides passed to cj.envs.make
  c.env_kwargs.horizon = 50       # KeyChain episode length T
  c.env_kwargs.num_pivotal = 3    # pivotal steps k
  c.env_kwargs.num_actions = 4    # actions A (random success (1/A)^k)
  c.env_kwargs.cue_delay = 0      # steps between a cue and its pivotal step
  c.history_window = 0            # >0: observe the last W observations; needs >= cue_delay+1
  c.seed = 0                      # base RNG seed; seed i of a multi-seed run is split from it
  c.seeds = 1                     # seeds trained side by side in one compiled call (vmap)

  c.num_updates = 60              # updates (one group rollout each)
  c.num_tasks = 16                # tasks (start states) per update
  c.group_size = 8                # K rollouts per task from the same start state (>= 2)
  c.horizon = 50                  # rollout steps per episode (>= the env's episode length)
  c.update_epochs = 2             # passes over each group rollout
  c.num_minibatches = 2           # minibatches of whole groups; must divide num_tasks
  c.advantage = "grpo"            # group advantage: grpo | rloo | drgrpo
  c.loss_aggregation = "token_mean"  # token_mean | sequence_mean | constant (Dr. GRPO)

  c.lr = 3e-3                     # Adam learning rate (swept as a traced hparam)
  c.anneal_lr = False             # linearly anneal lr to 0 over the run
  c.adam_eps = 1e-5               # Adam epsilon
  c.max_grad_norm = 1.0           # global gradient-norm clip
  c.clip_eps = 0.2                # ratio clip of the surrogate
  c.ent_coef = 0.0                # entropy bonus weight
  c.use_reference_kl = False      # penalise KL to the frozen initial policy
  c.kl_coef = 0.0                 # its weight (used when use_reference_kl)

  c.network = ml_collections.ConfigDict()
  c.network.hidden_sizes = (64, 64)  # MLP widths
  c.network.activation = "tanh"      # tanh | relu | gelu | silu
  c.network.shared_torso = False     # (no value head in GRPO: only the policy torso exists)

  c.chunk_updates = 10            # updates per compiled call (one progress line each)
  c.checkpoint_every = 20         # updates between checkpoints (multiple of chunk_updates)
  c.keep_checkpoints = 3          # newest checkpoints kept

  if arg == "small":
    c.num_updates = 10
    c.num_tasks = 8
    c.group_size = 4
    c.chunk_updates = 5
    c.checkpoint_every = 5
  elif arg == "delay":
    c.env_kwargs.cue_delay = 3
    c.history_window = 4
  elif arg:
    raise ValueError(f"unknown variant {arg!r}; use none, 'small' or 'delay'")
  return c
