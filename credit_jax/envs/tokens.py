"""The token world shared by the tool-use environments: vocabulary, grammar, oracle demos.

An episode is one token stream `s_0 = BOS, s_1, ...`. Each env step writes exactly one
token: the next prompt token while the prompt lasts, then the next token of a pending tool
output while there is one, and otherwise the agent's action. The observation after a step
is `[2]` int32 `(s_t, agent_next)`: the newest token and whether the next token written is
the agent's (`agent_next` = 0 while prompt or tool tokens are pending). A policy therefore
reads the stream one token per step and keeps the history itself (the token LM's KV cache,
`credit_jax/nets/lm.py`); its action at a step where the next token is not its own is
ignored, and `info["agent"]` (the same flag, for the step just taken) is the loss mask
that keeps prompt and tool tokens out of the policy gradient. The reset observation is
`(BOS, 0)`. Prompt and tool tokens count as env steps, so `max_steps_in_episode` and every
step budget count all tokens of the stream.

Grammar of the agent's tokens (one mode at a time; spans hold at most `span_len` tokens):

  TOP     the tool's name token starts a call span; ANSWER starts the answer span; EOS
          ends the episode unanswered (reward 0); any other token is chatter (no effect).
  CALL    END closes the span and the env parses it: a well-formed call queues the tool's
          output (its tokens, then SEP), a malformed one queues `ERR SEP`; either way the
          mode returns to TOP once the output is written. A token that would make the span
          longer than `span_len` closes it as malformed (the same `ERR SEP`). EOS ends the
          episode (reward 0).
  ANSWER  EOS ends the episode: reward 1.0 iff the span is exactly the answer's tokens (the
          verifier), else 0. A token that would overflow the span ends the episode with
          reward 0.

So no token sequence can crash or stall the env: every span either parses or errors, and
the time limit truncates an agent that never answers. Actions outside `[0, VOCAB_SIZE)`
(possible under jit) are written as PAD, which is chatter at TOP and malformed in a span.
Tool names of other environments are chatter.

Per-step ground truth in `info` (all `[]`): `agent` (the action was written), `call_end`
(a call span closed at this step), `call_correct` (that call computed a true step of the
task), `call_needed` (it was the first call of a step the answer still needed, so the
task's progress advanced), `turn` (calls closed before this step), `success` (the
episode was answered right at this step).

`ToolEnv` holds the stream and the grammar; a task family subclasses it with its prompt,
tool, answer and oracle (`tool_arith.py`, `tool_lookup.py`). `demonstrations` runs the
oracle solver for supervised warm starts.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from credit_jax.envs import base

# --- vocabulary -------------------------------------------------------------------------

PAD, BOS, EOS, ANSWER, END, SEP, ERR, NOTFOUND = range(8)
CALC, LOOKUP = 8, 9                      # tool names
PLUS, MINUS, TIMES = 10, 11, 12          # calculator operators
TASK_ARITH, TASK_LOOKUP = 13, 14         # task markers, the prompt's second token
STEP = 15                                # a step-index tag (ToolArith-v0's step_index)
DIGIT0 = 16                              # digits 0-9: ids 16..25
SYMBOL0 = 32                             # key symbols 0-15: ids 32..47
NUM_SYMBOLS = 16
VOCAB_SIZE = 48

TOP, CALL, ANSWER_MODE = 0, 1, 2

_NAMES = {PAD: "_", BOS: "<bos>", EOS: "<eos>", ANSWER: "ANSWER", END: "END", SEP: ";",
          ERR: "ERR", NOTFOUND: "NOTFOUND", CALC: "CALC", LOOKUP: "LOOKUP", PLUS: "+",
          MINUS: "-", TIMES: "*", TASK_ARITH: "ARITH", TASK_LOOKUP: "HOPS", STEP: "#"}
_NAMES.update({DIGIT0 + d: str(d) for d in range(10)})
_NAMES.update({SYMBOL0 + s: "abcdefghijklmnop"[s] for s in range(NUM_SYMBOLS)})


def decode(tokens) -> str:
  """A readable string of token ids (a 1-D sequence; unknown ids print as `?id`)."""
  return " ".join(_NAMES.get(int(t), f"?{int(t)}") for t in np.asarray(tokens).reshape(-1))


def digits(value: jax.Array, num_digits: int) -> jax.Array:
  """`[...]` int in `[0, 10**num_digits)` -> `[..., num_digits]` digit tokens, most
  significant first, zero-padded (numbers are always written with exactly D digits)."""
  place = 10 ** np.arange(num_digits - 1, -1, -1)
  return (DIGIT0 + (jnp.asarray(value)[..., None] // place) % 10).astype(jnp.int32)


def parse_digits(tokens: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """`[..., D]` tokens -> `(value [...] int32, ok [...] bool)`: ok iff all are digits."""
  d = tokens - DIGIT0
  ok = jnp.all((d >= 0) & (d < 10), axis=-1)
  place = 10 ** np.arange(tokens.shape[-1] - 1, -1, -1)
  return jnp.sum(jnp.clip(d, 0, 9) * place, axis=-1).astype(jnp.int32), ok


# --- the stream and the grammar ----------------------------------------------------------

@struct.dataclass
class ToolState(environment.EnvState):
  task: Any             # the task family's pytree (hidden from the agent)
  prompt: jax.Array     # [P] int32 prompt tokens, prompt[0] = BOS
  pos: jax.Array        # [] int32 prompt tokens written so far
  out: jax.Array        # [O] int32 pending tool output
  out_len: jax.Array    # [] int32 its length
  out_pos: jax.Array    # [] int32 its tokens written so far
  mode: jax.Array       # [] int32 TOP | CALL | ANSWER_MODE
  span: jax.Array       # [S] int32 tokens of the open span (PAD after span_len)
  span_len: jax.Array   # [] int32
  progress: jax.Array   # [] int32 task steps done by needed calls (0..num_turns)
  calls: jax.Array      # [] int32 call spans closed
  ended: jax.Array      # [] bool  the episode terminated at the last step
  time: jax.Array       # [] int32 steps taken (tokens written after BOS)


@struct.dataclass
class ToolParams(environment.EnvParams):
  max_steps_in_episode: int = 64   # time limit in tokens; each env sets its own default
  split: int = 0                   # 0: all tasks; 1: training half; 2: held-out half


class ToolEnv(base.CreditEnv):
  """A token-stream tool-use environment; see the module docstring for the protocol.

  Subclasses set `tool_token`, `num_turns`, `call_len` (tokens of a well-formed call's
  arguments), `answer_len`, `out_size` (tool output tokens incl. SEP, >= 2) and
  `prompt_len`, call `_finish_init()`, and implement `_sample_task(key, split) -> (task,
  prompt [prompt_len])`, `_tool(task, args [call_len], progress, call) -> (out
  [out_size], out_len, step [] int32, ok [] bool)` (`call` [] int32: this call's number,
  1 for the first; `ok`: the arguments parse; `step` in
  1..num_turns: a task step they are the true arguments of, the first one after
  `progress` when there is one, 0 when none), `_answer(task) ->
  [answer_len]` and
  `_oracle_call(task, progress) -> [call_len]` (the true arguments of step progress+1).
  """

  num_actions = VOCAB_SIZE
  deterministic_transitions = True   # step_env ignores its key
  obs_shape = (2,)
  tool_token: int
  num_turns: int
  call_len: int
  answer_len: int
  out_size: int
  prompt_len: int

  def _finish_init(self) -> None:
    self.span_size = max(self.call_len, self.answer_len) + 2
    # Stream length of the oracle's episode: prompt, then per turn the tool name, the
    # arguments, END and the output, then ANSWER, the answer and EOS.
    self.turn_tokens = self.call_len + 2 + self.out_size
    self.oracle_tokens = (self.prompt_len + self.num_turns * self.turn_tokens
                          + self.answer_len + 2)
    self.oracle_steps = self.oracle_tokens - 1   # BOS comes with the reset

  @property
  def default_params(self) -> ToolParams:
    # One spare turn beyond the oracle's episode.
    return ToolParams(max_steps_in_episode=self.oracle_steps + self.turn_tokens, split=0)

  def observation_space(self, params: Any = None) -> spaces.Box:
    return spaces.Box(0, VOCAB_SIZE - 1, self.obs_shape, jnp.int32)

  def validate_params(self, params: Any) -> None:
    super().validate_params(params)
    base.check_param_range("split", params.split, 0, 2, integral=True)

  def reset_env(self, key: jax.Array, params: ToolParams) -> Tuple[jax.Array, ToolState]:
    task, prompt = self._sample_task(key, jnp.asarray(params.split, jnp.int32))
    zero = jnp.zeros((), jnp.int32)
    state = ToolState(
        task=task, prompt=prompt.astype(jnp.int32), pos=jnp.ones((), jnp.int32),
        out=jnp.full((self.out_size,), PAD, jnp.int32), out_len=zero, out_pos=zero,
        mode=zero, span=jnp.full((self.span_size,), PAD, jnp.int32), span_len=zero,
        progress=zero, calls=zero, ended=jnp.array(False), time=zero)
    return jnp.stack([jnp.int32(BOS), self._agent_next(state)]), state

  def _agent_next(self, state: ToolState) -> jax.Array:
    return ((state.pos >= self.prompt_len) & (state.out_pos >= state.out_len)).astype(
        jnp.int32)

  def step_env(self, key: jax.Array, state: ToolState, action: Any, params: ToolParams
               ) -> Tuple[jax.Array, ToolState, jax.Array, jax.Array, Dict[str, Any]]:
    del key  # deterministic transitions
    action = jnp.asarray(action, jnp.int32)
    action = jnp.where((action >= 0) & (action < VOCAB_SIZE), action, PAD)
    from_prompt = state.pos < self.prompt_len
    from_out = ~from_prompt & (state.out_pos < state.out_len)
    agent = ~from_prompt & ~from_out
    token = jnp.where(from_prompt, state.prompt[jnp.minimum(state.pos, self.prompt_len - 1)],
                      jnp.where(from_out, state.out[jnp.minimum(state.out_pos,
                                                                self.out_size - 1)],
                                action))
    mode = state.mode
    eos = agent & (token == EOS)
    start_call = agent & (mode == TOP) & (token == self.tool_token)
    start_answer = agent & (mode == TOP) & (token == ANSWER)
    end_call = agent & (mode == CALL) & (token == END)
    push = agent & (mode != TOP) & ~eos & ~end_call
    overflow = push & (state.span_len >= self.span_size)
    write = push & ~overflow
    slots = jnp.arange(self.span_size)
    span = jnp.where(write & (slots == state.span_len), token, state.span)
    span_len = state.span_len + write.astype(jnp.int32)

    # A call closes at END or on overflow; only an END-closed span of the right length
    # can be well formed (the task family checks the argument tokens).
    close = end_call | ((mode == CALL) & overflow)
    args = span[:self.call_len]
    out, out_len, step, ok = self._tool(state.task, args, state.progress, state.calls + 1)
    err = jnp.full((self.out_size,), PAD, jnp.int32).at[0].set(ERR).at[1].set(SEP)
    well = end_call & (span_len == self.call_len) & ok
    out = jnp.where(well, out, err)
    out_len = jnp.where(well, out_len, 2)
    correct = close & well & (step > 0)
    needed = correct & (step > state.progress)
    progress = jnp.where(needed, step, state.progress)

    answered = (mode == ANSWER_MODE) & eos
    right = jnp.all(span[:self.answer_len] == self._answer(state.task)) & (
        span_len == self.answer_len)
    success = answered & right
    terminated = eos | ((mode == ANSWER_MODE) & overflow)
    new_mode = jnp.where(start_call, CALL, jnp.where(start_answer, ANSWER_MODE,
                                                     jnp.where(close, TOP, mode)))
    opened = start_call | start_answer
    state = state.replace(
        pos=state.pos + from_prompt.astype(jnp.int32),
        out=jnp.where(close, out, state.out),
        out_len=jnp.where(close, out_len, state.out_len),
        out_pos=jnp.where(close, 0, state.out_pos + from_out.astype(jnp.int32)),
        mode=new_mode,
        span=jnp.where(opened | close, PAD, span),
        span_len=jnp.where(opened | close, 0, span_len),
        progress=progress, calls=state.calls + close.astype(jnp.int32),
        ended=terminated, time=state.time + 1)
    obs = jnp.stack([token, self._agent_next(state)])
    info = {"agent": agent, "call_end": close, "call_correct": correct,
            "call_needed": needed, "turn": state.calls - close.astype(jnp.int32),
            "success": success}
    return obs, state, success.astype(jnp.float32), terminated, info

  def is_terminated(self, state: ToolState, params: Any) -> jax.Array:
    return state.ended

  def get_obs(self, state: ToolState, params: Any = None, key: Any = None) -> jax.Array:
    raise NotImplementedError("the observation is the token just written: see step_env")

  def oracle_action(self, state: ToolState) -> jax.Array:
    """[] int32: the oracle solver's next token from a state on its own path (from a
    reset, following only its own actions): per turn the tool name, the true arguments,
    END; then ANSWER, the answer, EOS. Its action at forced steps is PAD (ignored)."""
    mode, n = state.mode, state.span_len
    call = self._oracle_call(state.task, jnp.minimum(state.progress, self.num_turns - 1))
    answer = self._answer(state.task)
    top = jnp.where(state.progress < self.num_turns, self.tool_token, ANSWER)
    in_call = jnp.where(n < self.call_len, call[jnp.minimum(n, self.call_len - 1)], END)
    in_answer = jnp.where(n < self.answer_len, answer[jnp.minimum(n, self.answer_len - 1)],
                          EOS)
    action = jnp.where(mode == TOP, top, jnp.where(mode == CALL, in_call, in_answer))
    return jnp.where(self._agent_next(state) == 1, action, PAD).astype(jnp.int32)


class Demonstrations(struct.PyTreeNode):
  """Oracle episodes, time-major `[T, B]` (T = `env.oracle_steps`)."""
  obs: jax.Array       # [T, B, 2] int32 observation acted on at step t
  actions: jax.Array   # [T, B] int32 the oracle's action (PAD at forced steps)
  agent: jax.Array     # [T, B] bool the action was written (the imitation mask)
  rewards: jax.Array   # [T, B] float32


def demonstrations(env: ToolEnv, params: ToolParams, key: jax.Array, num: int
                   ) -> Demonstrations:
  """`num` oracle episodes from fresh resets (the supervised warm start's data).

  Every episode takes exactly `env.oracle_steps` steps and ends with the right answer
  (reward 1 at its last step), whatever `params.split` selects.
  """
  num = base.check_int("num", num, minimum=1)
  obs, state = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key, num),
                                                         params)
  step = jax.vmap(env.step_env, in_axes=(None, 0, 0, None))

  def body(carry, _):
    obs, state = carry
    action = jax.vmap(env.oracle_action)(state)
    next_obs, state, reward, _, info = step(key, state, action, params)
    return (next_obs, state), (obs, action, info["agent"], reward)

  _, (o, a, agent, r) = jax.lax.scan(body, (obs, state), None, length=env.oracle_steps)
  return Demonstrations(obs=o, actions=a, agent=agent, rewards=r)
