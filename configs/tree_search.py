"""Exercise 5: tree search vs sampling on KeyChain-v0, and GRPO with and without search.

  python3 scripts/tree_search.py --config=configs/tree_search.py:small --workdir=/tmp/ts

Part A (no training) compares, per difficulty, sampling K episodes per task with a tree
search from the same start states under the same policy, and sampling at the search's
compute. Part B trains the search-then-train recipe (`credit_jax.algos.search_then_train`)
with search on and off (the control arm is plain GRPO with the same loss) and plots both.

Variants: "small" (the default, a few minutes on a 2-core CPU), "smoke" (seconds: what
tests run), "gpu" (more tasks, simulations and seeds). Variant "train" returns part B's
recipe config alone, for the training script:

  python3 scripts/train.py --config=configs/tree_search.py:train --workdir=/tmp/stt
"""
import ml_collections


def train_config(horizon: int, num_pivotal: int):
  """The search-then-train recipe config used by part B (and by the recipe's tests)."""
  c = ml_collections.ConfigDict()
  c.algo = "search_then_train"   # credit_jax.algos.search_then_train
  c.env_name = "KeyChain-v0"
  c.env_kwargs = ml_collections.ConfigDict()
  c.env_kwargs.horizon = horizon          # KeyChain episode length T
  c.env_kwargs.num_pivotal = num_pivotal  # pivotal steps k
  c.env_kwargs.num_actions = 4            # A: random success (1/A)^k
  c.env_kwargs.cue_delay = 0
  c.history_window = 0
  c.seed = 0                      # base RNG seed
  c.seeds = 4                     # seeds vmapped in one compiled call

  c.num_updates = 40              # updates (one group rollout each)
  c.num_tasks = 16                # tasks (start states) per update
  c.group_size = 8                # K sampled episodes per task
  c.horizon = horizon             # rollout steps (= KeyChain's episode length)
  c.update_epochs = 2
  c.num_minibatches = 2           # must divide num_tasks
  c.advantage = "grpo"            # grpo | rloo | drgrpo
  c.loss_aggregation = "token_mean"  # the recipe's weighted token mean
  c.lr = 3e-3
  c.anneal_lr = False
  c.adam_eps = 1e-5
  c.max_grad_norm = 1.0
  c.clip_eps = 0.2
  c.ent_coef = 0.0
  c.use_reference_kl = False
  c.kl_coef = 0.0

  c.search_every = 1              # search on every n-th update; 0: never (plain GRPO arm)
  c.search_tasks = 16             # all-failed tasks searched per search update (<= num_tasks)
  c.search_simulations = 64       # simulations per searched task
  c.search_selection = "puct"     # puct | ucb1
  c.search_rollout = "sample"     # leaf rollouts: sample | greedy (from the policy)
  c.search_exploration = 1.25     # PUCT/UCB1 constant (traced hparam)
  c.search_weight = 0.5           # weight of a searched episode's steps, in [0, 1] (traced)

  c.network = ml_collections.ConfigDict()
  c.network.hidden_sizes = (64, 64)
  c.network.activation = "tanh"
  c.network.shared_torso = False

  c.chunk_updates = 10            # updates per compiled call
  c.checkpoint_every = 0          # experiments keep no checkpoints
  c.keep_checkpoints = 1
  return c


def get_config(arg=None):
  """Returns the config; `arg` picks a variant ("small" (default), "smoke", "gpu", "train")."""
  if arg == "train":  # part B's search-then-train recipe, for scripts/train.py
    c = train_config(horizon=10, num_pivotal=6)
    c.num_updates = 60
    return c
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.env_name = "KeyChain-v0"
  c.horizon = 10                 # episode length T, and the search's max_depth
  c.num_actions = 4              # A
  # Part A points (k pivotal steps, q): q = 0 is the uniform policy, random success
  # (1/A)^k; q > 0 a tabular policy answering each pivotal step right with probability q
  # (credit_jax.diagnostics.biased_logits), success q^k: a partly trained prior.
  c.difficulties = ((2, 0.0), (4, 0.0), (5, 0.0), (7, 0.0), (7, 0.5), (10, 0.5))
  c.num_tasks = 128              # tasks (start states) per point
  c.group_size = 8               # K: episodes per task GRPO would sample
  c.search = ml_collections.ConfigDict()
  c.search.simulations = 256     # per task
  c.search.selection = "puct"    # puct | ucb1
  c.search.rollout = "sample"    # sample | greedy
  c.search.exploration = 1.25
  # Part B: GRPO with and without search at one difficulty (random success 2.4e-4: about
  # one success per 30 updates of 128 sampled episodes).
  c.train = train_config(horizon=10, num_pivotal=6)
  c.train.num_updates = 60

  if arg in (None, "", "small"):
    pass
  elif arg == "smoke":
    c.difficulties = ((2, 0.0), (4, 0.5))
    c.num_tasks = 16
    c.search.simulations = 32
    c.train = train_config(horizon=6, num_pivotal=2)
    c.train.num_updates = 4
    c.train.chunk_updates = 2
    c.train.seeds = 2
    c.train.num_tasks = 4
    c.train.group_size = 2
    c.train.search_tasks = 4
    c.train.search_simulations = 16
    c.train.network.hidden_sizes = (16,)
  elif arg == "gpu":
    c.num_tasks = 1024
    c.search.simulations = 1024
    c.train.seeds = 16
    c.train.num_updates = 100
  else:
    raise ValueError(f"unknown variant {arg!r}; use 'small' (default), 'smoke', 'gpu' or "
                     "'train'")
  return c
