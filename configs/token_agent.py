"""A token agent: a small causal LM warm-started on oracle demonstrations, then trained
with RL on ToolArith-v0 (two chained calculator calls) or ToolLookup-v0.

  python3 scripts/train.py --config=configs/token_agent.py --workdir=/tmp/tok
  python3 scripts/train.py --config=configs/token_agent.py:small --workdir=/tmp/tok_s
  python3 scripts/train.py --config=configs/token_agent.py:ppo --workdir=/tmp/tok_ppo

Variants: none (warm start, then GRPO: held-out greedy success ~0.5 -> ~1.0 in 200
updates), "small" (a quick check that runs in well under a minute on a 2-core CPU),
"rloo", "drgrpo" (with Dr. GRPO's constant loss normaliser), "ppo" (GAE on an independent
critic trunk, PPO's default on tokens), "ppo_shared" (GAE on the LM's own value head,
whose value loss wrecked warm-started LMs: docs/results/token_agent.md), "ppo_critic"
(the same as "ppo", kept for old commands), "prm" (GRPO with turn-level shaping from the
env's ground truth: an upper bound), "turn" (GRPO with turn-level advantages from the
same ground truth), "lookup" (ToolLookup-v0, 2 hops of 2-symbol keys). Every field and its meaning: `credit_jax/algos/token_agent.py`'s
`default_config()`, which the default variant is.
"""
from credit_jax.algos import token_agent

VARIANTS = (None, "small", "rloo", "drgrpo", "ppo", "ppo_shared", "ppo_critic", "prm",
            "turn", "lookup")


def get_config(arg=None):
  """Returns the config; `arg` picks a variant (see VARIANTS)."""
  if arg not in VARIANTS:
    raise ValueError(f"unknown variant {arg!r}; use one of {VARIANTS}")
  c = token_agent.default_config()
  if arg == "small":
    c.sft_steps = 60
    c.num_updates = 10
    c.num_tasks = 4
    c.group_size = 4
    c.chunk_updates = 5
    c.checkpoint_every = 5
  elif arg in ("rloo", "drgrpo", "ppo"):
    c.estimator = arg
    if arg == "drgrpo":
      c.loss_aggregation = "constant"
  elif arg in ("ppo_critic", "ppo_shared"):
    c.estimator = "ppo"
    c.network.critic = "separate" if arg == "ppo_critic" else "shared"
  elif arg == "turn":
    c.turn_advantage = "pooled"
  elif arg == "prm":
    c.prm_weight = 0.5
  elif arg == "lookup":
    c.env_name = "ToolLookup-v0"
    c.env_kwargs = {"num_turns": 2, "key_len": 2, "num_distractors": 2, "split": 1}
  return c
