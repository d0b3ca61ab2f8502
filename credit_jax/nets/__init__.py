"""Networks (flax.linen): the MLP actor-critic, the GRU and transformer sequence
actor-critics, the process reward model, and the categorical distribution they share.

  net = nets.ActorCritic(num_actions=4)                   # nets/mlp.py
  policy_fn = nets.make_policy_fn(net)                     # a PresampledPolicy for rollouts
  seq = nets.make_sequence_network("gru", num_actions=4)   # nets/sequence.py
  policy = nets.make_sequence_policy(seq)                  # a SequencePolicy (memory)

Modules: `mlp` (dense layers, MLP, ActorCritic, categorical sampling / log-prob /
entropy / KL, `make_policy_fn`), `gru` (the GRU cell and its scans, plain and fast path),
`sequence` (GRU and cached-transformer actor-critics, `unroll`, `make_sequence_policy`),
`initializers` (`orthogonal`: flax's values, safe to vmap on jaxlib 0.10; every network's
initialiser), `prm` (the process reward model and its training step), `lm` (a causal token
LM with a KV cache and a value head, for the token tool-use environments;
`lm.make_policy`), `tabular` (table and linear policies and critics over an observation's
one-hot parts, `network.kind` "tabular" | "linear").
"""
from credit_jax.nets import gru, initializers, lm, mlp, prm, sequence, tabular
from credit_jax.nets.initializers import orthogonal
from credit_jax.nets.mlp import (MLP, ActorCritic, ColumnDense, EpsilonNetwork, RowDense,
                                 activation_fn, epsilon_mixture_logits,
                                 categorical_entropy, categorical_kl, categorical_log_prob,
                                 categorical_noise, categorical_sample,
                                 categorical_sample_with_noise, make_greedy_policy_fn,
                                 make_policy_fn)
from credit_jax.nets.sequence import (GRUActorCritic, TransformerActorCritic,
                                      make_sequence_network, make_sequence_policy, unroll)
from credit_jax.nets.tabular import Linear, Tabular, make_table_network

__all__ = [
    "MLP", "ActorCritic", "ColumnDense", "EpsilonNetwork", "GRUActorCritic", "Linear",
    "RowDense", "Tabular",
    "TransformerActorCritic", "activation_fn", "categorical_entropy", "categorical_kl",
    "categorical_log_prob", "categorical_noise", "categorical_sample",
    "categorical_sample_with_noise", "epsilon_mixture_logits", "gru", "lm",
    "make_greedy_policy_fn", "make_policy_fn",
    "initializers", "make_sequence_network", "make_sequence_policy", "make_table_network",
    "mlp", "orthogonal", "prm", "sequence", "tabular", "unroll",
]
