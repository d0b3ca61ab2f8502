"""ToolLookup-v0: `num_turns` (k) chained lookups in a hidden per-episode key-value table.

Keys and values are strings of `key_len` (L) symbols out of 16. The prompt (`L + 7`
tokens) names a start key and the number of hops: `BOS HOPS c_0 ; h h h ;` (k in three
digits). The table, which the agent never sees, maps `c_i -> c_{i+1}` along a chain of
distinct keys; the answer is `c_k`. The call `LOOKUP key END` (arguments: L symbols)
queues the key's value and `;`, or `NOTFOUND ;` for a key not in the table. The oracle
looks up `c_0, ..., c_{k-1}` in turn, copying each output into the next call, and
answers `ANSWER c_k EOS`: `L + 7 + k (2L + 3) + L + 2` stream tokens (k = 128, L = 3:
1167).

Traps, so a sloppy chain goes wrong silently rather than with an error:
  * distractors: for each chain key `c_i` (i < k), `num_distractors` entries whose key is
    `c_i` with one symbol changed and whose value is a fresh key off the chain (looking
    that up gives NOTFOUND or another distractor's value): a one-symbol copying slip
    returns a plausible key, and the chain never rejoins;
  * the over-hop: `c_k -> c_{k+1}` is in the table too, so one lookup too many returns a
    plausible wrong answer.
A distractor key that equals a chain key is shadowed (chain entries are found first).

Keys are a keyed pseudo-random bijection of their indices (three rounds of multiply-add
and xor-shift on 4L bits, not a cryptographic one), so the chain has no visible pattern:
only the tool knows the next key. Ground truth: a lookup of `c_i` (i < k) is correct, and
needed the first time (i >= the progress so far). Held-out split (`params.split`): the
sum of `c_0`'s symbols is even in the training half (1) and odd in the held-out half (2)
(every key's last symbol is xor-ed with 1 when needed, which keeps them distinct); each
single symbol of the prompt is distributed alike in both halves.

What makes it easy: the number of hops is in the prompt, every key to copy is the
previous output, and nothing but the copy and the count matters.
"""
from __future__ import annotations

from typing import Any, Tuple

import jax
import jax.numpy as jnp

from credit_jax.envs import base, tokens

_ROUNDS = 3


class ToolLookup(tokens.ToolEnv):
  """ToolLookup-v0. See the module docstring.

  Task pytree: `{"chain": [k + 2, L], "keys": [N, L], "values": [N, L]}` int32 symbols
  (0..15), `N = k + 1 + k * num_distractors`, chain entries first.
  """

  name = "ToolLookup-v0"
  tool_token = tokens.LOOKUP

  def __init__(self, num_turns: int = 2, key_len: int = 2, num_distractors: int = 2):
    super().__init__()
    self.num_turns = base.check_int("num_turns", num_turns, minimum=1, maximum=999)
    self.key_len = base.check_int("key_len", key_len, minimum=1, maximum=4)
    self.num_distractors = base.check_int("num_distractors", num_distractors, minimum=0)
    fresh = self.num_turns + 2 + self.num_turns * self.num_distractors
    if fresh > tokens.NUM_SYMBOLS ** self.key_len:
      raise ValueError(
          f"key_len={self.key_len} gives {tokens.NUM_SYMBOLS ** self.key_len} keys, fewer "
          f"than the {fresh} distinct ones num_turns={self.num_turns} and "
          f"num_distractors={self.num_distractors} need; raise key_len")
    self.call_len = self.key_len
    self.answer_len = self.key_len
    self.out_size = self.key_len + 1
    self.prompt_len = self.key_len + 7
    self._finish_init()

  def _symbols(self, code: jax.Array) -> jax.Array:
    """[...] codes in [0, 16**L) -> [..., L] symbols, most significant first."""
    shifts = 4 * jnp.arange(self.key_len - 1, -1, -1, dtype=jnp.uint32)
    return ((code[..., None] >> shifts) & 15).astype(jnp.int32)

  def _sample_task(self, key: jax.Array, split: jax.Array) -> Tuple[Any, jax.Array]:
    k, d, n_len = self.num_turns, self.num_distractors, self.key_len
    bits = 4 * n_len
    mask = jnp.uint32((1 << bits) - 1)
    n_fresh = k + 2 + k * d
    words = jax.random.bits(key, (2 * _ROUNDS + 2 * k * d,), jnp.uint32)
    x = jnp.arange(n_fresh, dtype=jnp.uint32)
    for r in range(_ROUNDS):
      x = (x * (words[2 * r] | 1) + words[2 * r + 1]) & mask
      x = x ^ (x >> max(bits // 2, 1))
    codes = self._symbols(x)                                       # [n_fresh, L]
    # Split: the parity of c_0's symbol sum, set by xor-ing every key's low bit alike
    # (a bijection still, so the keys stay distinct).
    flip = (split != 0) & ((jnp.sum(codes[0]) % 2 == 1) != (split == 2))
    codes = jnp.where(flip, codes ^ jnp.eye(1, n_len, n_len - 1, dtype=jnp.int32), codes)
    chain = codes[:k + 2]
    dw = words[2 * _ROUNDS:].reshape(2, k * d)
    base_keys = jnp.repeat(chain[:k], d, axis=0)                   # [k d, L]
    where = (dw[0] % n_len).astype(jnp.int32)
    shift = 1 + (dw[1] % (tokens.NUM_SYMBOLS - 1)).astype(jnp.int32)
    hit = jnp.arange(n_len)[None] == where[:, None]
    distract = jnp.where(hit, (base_keys + shift[:, None]) % tokens.NUM_SYMBOLS, base_keys)
    keys = jnp.concatenate([chain[:k + 1], distract])
    values = jnp.concatenate([chain[1:k + 2], codes[k + 2:]])
    hops = tokens.digits(jnp.int32(k), 3)
    prompt = jnp.concatenate([
        jnp.array([tokens.BOS, tokens.TASK_LOOKUP], jnp.int32), tokens.SYMBOL0 + chain[0],
        jnp.array([tokens.SEP], jnp.int32), hops, jnp.array([tokens.SEP], jnp.int32)])
    return {"chain": chain, "keys": keys, "values": values}, prompt

  def _tool(self, task, args, progress, call):
    del call  # the lookup tool keeps no count
    sym = args - tokens.SYMBOL0
    ok = jnp.all((sym >= 0) & (sym < tokens.NUM_SYMBOLS))
    match = jnp.all(task["keys"] == sym[None], axis=1)             # [N]
    found = jnp.any(match)
    value = task["values"][jnp.argmax(match)]
    out = jnp.where(found, jnp.concatenate([tokens.SYMBOL0 + value,
                                            jnp.array([tokens.SEP], jnp.int32)]),
                    jnp.full((self.out_size,), tokens.SEP, jnp.int32).at[0].set(
                        tokens.NOTFOUND))
    out_len = jnp.where(found, self.out_size, 2).astype(jnp.int32)
    on_chain = jnp.all(task["chain"][:self.num_turns] == sym[None], axis=1)   # [k]
    step = jnp.where(jnp.any(on_chain) & ok, jnp.argmax(on_chain) + 1, 0)
    return out, out_len, step.astype(jnp.int32), ok

  def _answer(self, task) -> jax.Array:
    return tokens.SYMBOL0 + task["chain"][self.num_turns]

  def _oracle_call(self, task, progress) -> jax.Array:
    return tokens.SYMBOL0 + task["chain"][progress]
