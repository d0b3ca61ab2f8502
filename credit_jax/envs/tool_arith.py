"""ToolArith-v0: a chain of `num_turns` (k) arithmetic steps, each done by a calculator call.

Prompt (`3 + D + k (1 + D)` tokens, D = `num_digits`): `BOS ARITH x0 op_1 a_1 ... op_k
a_k ;`, numbers written with exactly D digits. The answer is `v_k` with `v_0 = x0` and
`v_i = v_{i-1} op_i a_i mod 10**D`. The calculator call `CALC u op b END` (arguments of
`2D + 1` tokens) queues `u op b mod 10**D` (D digits) and `;`. The oracle calls step i
with `(v_{i-1}, op_i, a_i)`, copying `v_{i-1}` from the previous output, and answers
`ANSWER v_k EOS`: `3 + D + k (1 + D) + k (2D + 4) + D + 2` stream tokens in all (k = 16, D
= 2: 217; k = 64, D = 3: 1099).

Every step is a bijection of `Z_{10**D}` (+ and - are, and * draws its operand among the
units, the numbers coprime to 10), so a wrong intermediate can never be repaired by a
later step: it always gives a wrong answer.

Ground truth (see `tokens.py`): a call is correct when its arguments are the true ones of
some step i (`(v_{i-1}, op_i, a_i)`), and needed when i is a step the answer still needed
(the first call of step i after the progress so far). Held-out split (`params.split`):
the training half (1) are the tasks whose `x0 + sum_i a_i + sum_i op_i` (ops coded 0, 1,
2) is even, the held-out half (2) those where it is odd; every single prompt token is
distributed alike in both halves, so a model cannot tell them apart by one position.

Step indices (`step_index=True`, a counting aid, off by default): every step of the prompt
is tagged `STEP i` (i in two digits, 1-based), `BOS ARITH x0 STEP 0 1 op_1 a_1 ... STEP
k_1 k_0 op_k a_k ;`, and a well-formed call's output names the step that comes next,
`u op b mod 10**D` then `STEP c_1 c_0 ;` with `c` = this call's number + 1 (the tool
counts its calls, right or wrong; a malformed call still gets `ERR ;`). On the oracle's
path that is the step to do next, so finding its operator and operand is a match of the
tag in the last output against the prompt's tags, not a count of the calls so far. The
prompt is `3 + D + k (4 + D)` tokens, a call's output `D + 4`; k <= 99.

What makes it easy: every operand is visible in the prompt and every intermediate in the
previous tool output, so the oracle is a copying policy (no arithmetic); with D = 1 a
model could also learn the 10 x 10 tables and skip the calculator, which the verifier
does not forbid (`call_needed` then stays 0). Operators and operands are uniform (words
modulo 3, 10**D and the unit count: off uniform by < 10**D / 2**32 relative).
"""
from __future__ import annotations

from typing import Any, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax.envs import base, tokens

_UNIT_DIGITS = np.array([1, 3, 7, 9], np.int32)
_OPS = np.array([tokens.PLUS, tokens.MINUS, tokens.TIMES], np.int32)
_INDEX_DIGITS = 2                    # step indices are written with two digits
_MAX_INDEXED = 10 ** _INDEX_DIGITS - 1


def _tag(index: jax.Array) -> jax.Array:
  """`[...]` int step numbers -> `[..., 3]` tokens `STEP i_1 i_0`."""
  index = jnp.asarray(index)
  step = jnp.full(index.shape + (1,), tokens.STEP, jnp.int32)
  return jnp.concatenate([step, tokens.digits(index, _INDEX_DIGITS)], axis=-1)


class ToolArith(tokens.ToolEnv):
  """ToolArith-v0. See the module docstring.

  Task pytree: `{"x0": [], "ops": [k] (0 +, 1 -, 2 *), "operands": [k], "chain":
  [k + 1]}` int32, `chain[i] = v_i`.
  """

  name = "ToolArith-v0"
  tool_token = tokens.CALC

  def __init__(self, num_turns: int = 2, num_digits: int = 1, step_index: bool = False):
    super().__init__()
    self.step_index = bool(step_index)
    self.num_turns = base.check_int("num_turns", num_turns, minimum=1,
                                    maximum=_MAX_INDEXED if self.step_index else 4096)
    self.num_digits = base.check_int("num_digits", num_digits, minimum=1, maximum=4)
    self.modulus = 10 ** self.num_digits
    d = self.num_digits
    tag = (1 + _INDEX_DIGITS) if self.step_index else 0   # STEP and the index digits
    self.call_len = 2 * d + 1
    self.answer_len = d
    self.out_size = d + 1 + tag
    self.prompt_len = 3 + d + self.num_turns * (1 + d + tag)
    self._finish_init()

  def _sample_task(self, key: jax.Array, split: jax.Array) -> Tuple[Any, jax.Array]:
    k, m = self.num_turns, self.modulus
    words = jax.random.bits(key, (1 + 2 * k,), jnp.uint32)
    x0 = (words[0] % m).astype(jnp.int32)
    ops = (words[1:1 + k] % 3).astype(jnp.int32)
    w = words[1 + k:]
    units = (w % (4 * m // 10)).astype(jnp.int32)
    unit = 10 * (units // 4) + jnp.asarray(_UNIT_DIGITS)[units % 4]
    operands = jnp.where(ops == 2, unit, (w % m).astype(jnp.int32))
    # Split: the parity of x0 + sum(operands) + sum(ops); x0's low bit sets it, so x0
    # stays uniform in either half and no single prompt token tells the halves apart.
    odd = (x0 + jnp.sum(operands) + jnp.sum(ops)) % 2
    x0 = jnp.where((split != 0) & (odd != (split == 2)), x0 ^ 1, x0)

    def chain_step(v, op_a):
      op, a = op_a
      v = self._apply(v, op, a)
      return v, v
    _, vs = jax.lax.scan(chain_step, x0, (ops, operands))
    chain = jnp.concatenate([x0[None], vs])
    body = jnp.concatenate([jnp.asarray(_OPS)[ops][:, None],
                            tokens.digits(operands, self.num_digits)], axis=1)
    if self.step_index:
      body = jnp.concatenate([_tag(jnp.arange(1, k + 1)), body], axis=1)
    prompt = jnp.concatenate([
        jnp.array([tokens.BOS, tokens.TASK_ARITH], jnp.int32),
        tokens.digits(x0, self.num_digits), body.reshape(-1),
        jnp.array([tokens.SEP], jnp.int32)])
    return {"x0": x0, "ops": ops, "operands": operands, "chain": chain}, prompt

  def _apply(self, u, op, b):
    m = self.modulus
    return jnp.where(op == 0, (u + b) % m,
                     jnp.where(op == 1, (u - b) % m, (u * b) % m)).astype(jnp.int32)

  def _tool(self, task, args, progress, call):
    d = self.num_digits
    u, ok_u = tokens.parse_digits(args[:d])
    b, ok_b = tokens.parse_digits(args[d + 1:])
    op = jnp.argmax(args[d] == jnp.asarray(_OPS))
    ok = ok_u & ok_b & jnp.any(args[d] == jnp.asarray(_OPS))
    echo = [_tag(jnp.minimum(call + 1, _MAX_INDEXED))] if self.step_index else []
    out = jnp.concatenate([tokens.digits(self._apply(u, op, b), d)] + echo
                          + [jnp.array([tokens.SEP], jnp.int32)])
    steps = jnp.arange(1, self.num_turns + 1)
    match = ((task["chain"][:-1] == u) & (task["ops"] == op) & (task["operands"] == b)
             & ok)
    return out, jnp.int32(self.out_size), _first_step(match, steps, progress), ok

  def _answer(self, task) -> jax.Array:
    return tokens.digits(task["chain"][-1], self.num_digits)

  def _oracle_call(self, task, progress) -> jax.Array:
    d = self.num_digits
    return jnp.concatenate([tokens.digits(task["chain"][progress], d),
                            jnp.asarray(_OPS)[task["ops"][progress]][None],
                            tokens.digits(task["operands"][progress], d)])


def _first_step(match: jax.Array, steps: jax.Array, progress: jax.Array) -> jax.Array:
  """The first matching step after `progress`, else the first matching one, else 0."""
  def first(m):
    return jnp.where(jnp.any(m), steps[jnp.argmax(m)], 0)
  later = match & (steps > progress)
  return jnp.where(jnp.any(later), first(later), first(match)).astype(jnp.int32)
