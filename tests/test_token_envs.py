"""Tests for the token tool-use environments (credit_jax/envs/tokens.py, tool_arith.py,
tool_lookup.py): the oracle solves every task, a random policy's outcome distribution
equals an exact dynamic program over the documented grammar, tool outputs and parsing on
hand-built token sequences against Python arithmetic, jit/vmap, and bad spans."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.envs import tokens as tk

make = functools.lru_cache(envs.make)
demos = jax.jit(tk.demonstrations, static_argnums=(0, 3))

CASES = [("ToolArith-v0", dict(num_turns=1, num_digits=1)),
         ("ToolArith-v0", dict(num_turns=5, num_digits=2)),
         ("ToolArith-v0", dict(num_turns=11, num_digits=1, step_index=True)),
         ("ToolLookup-v0", dict(num_turns=1, key_len=1, num_distractors=1)),
         ("ToolLookup-v0", dict(num_turns=6, key_len=2, num_distractors=3))]


@pytest.mark.parametrize("name,kw", CASES)
@pytest.mark.parametrize("split", [0, 1, 2])
def test_oracle_solves_every_task(name, kw, split):
  env, params = make(name, **kw)
  params = params.replace(split=split)
  d = demos(env, params, jax.random.key(split), 256)
  rewards, agent = np.asarray(d.rewards), np.asarray(d.agent)
  assert rewards.shape == (env.oracle_steps, 256)
  np.testing.assert_array_equal(rewards[-1], 1.0)
  assert not rewards[:-1].any()
  # Prompt tokens are all forced; per turn the agent writes call_len + 2 tokens.
  assert not agent[:env.prompt_len - 1].any()
  per_turn = env.call_len + 2
  assert np.all(agent.sum(0) == env.num_turns * per_turn + env.answer_len + 2)
  # Every oracle call is correct and needed: replay through the gymnax step (auto-reset)
  # with the recorded actions.
  _, state = jax.vmap(env.reset, in_axes=(0, None))(
      jax.random.split(jax.random.key(split), 256), params)
  step = jax.vmap(env.step, in_axes=(None, 0, 0, None))

  def body(state, action):
    _, state, _, term, trunc, info = step(jax.random.key(0), state, action, params)
    return state, (term, trunc, info["call_correct"], info["call_needed"])
  term, trunc, correct, needed = (np.asarray(x) for x in jax.jit(
      lambda s, a: jax.lax.scan(body, s, a)[1])(state, d.actions))
  np.testing.assert_array_equal(correct, needed)
  np.testing.assert_array_equal(needed.sum(0), env.num_turns)
  assert not trunc.any()
  last = np.arange(env.oracle_steps) == env.oracle_steps - 1
  np.testing.assert_array_equal(term, np.broadcast_to(last[:, None], term.shape))


def test_stream_lengths_match_the_documented_formulas():
  env, _ = make("ToolArith-v0", num_turns=16, num_digits=2)
  assert env.oracle_tokens == 217
  env, _ = make("ToolArith-v0", num_turns=64, num_digits=3)
  assert env.oracle_tokens == 1099
  env, _ = make("ToolLookup-v0", num_turns=128, key_len=3)
  assert env.oracle_tokens == 1167
  env, params = make("ToolArith-v0", num_turns=1, num_digits=1)
  assert env.oracle_tokens == 16
  assert params.max_steps_in_episode == env.oracle_steps + env.turn_tokens


def test_splits_partition_the_tasks():
  keys = jax.random.split(jax.random.key(3), 512)
  env, params = make("ToolArith-v0", num_turns=2, num_digits=2)
  for split, parity in ((1, 0), (2, 1)):
    _, s = jax.vmap(env.reset, in_axes=(0, None))(keys, params.replace(split=split))
    total = (np.asarray(s.task["x0"]) + np.asarray(s.task["operands"]).sum(1)
             + np.asarray(s.task["ops"]).sum(1))
    assert np.all(total % 2 == parity)
    x0 = np.asarray(s.task["x0"])                    # still covers both parities
    assert 0.4 < np.mean(x0 % 2) < 0.6
  env, params = make("ToolLookup-v0", num_turns=3, key_len=2)
  for split in (1, 2):
    _, s = jax.vmap(env.reset, in_axes=(0, None))(keys, params.replace(split=split))
    chain = np.asarray(s.task["chain"])
    assert np.all(chain[:, 0].sum(1) % 2 == (split == 2))
    assert 0.4 < np.mean(chain[:, 0, 0] >= 8) < 0.6
    codes = chain[..., 0] * 16 + chain[..., 1]
    assert all(len(set(c)) == len(c) for c in codes)       # chain keys stay distinct


# --- hand-built token sequences -----------------------------------------------------------

@functools.lru_cache
def _jit_step(env):
  return jax.jit(env.step_env)


def _play(env, params, key, agent_tokens):
  """Reset, write the prompt, then feed `agent_tokens` (forced tool tokens are written
  in between). Returns (stream of written tokens, infos per step, rewards, terminated)."""
  obs, state = env.reset(key, params)
  step = _jit_step(env)
  stream, infos, rewards, terms = [int(obs[0])], [], [], []
  queue = list(agent_tokens)
  while queue:
    action = queue[0] if int(obs[1]) == 1 else tk.PAD
    if int(obs[1]) == 1:
      queue.pop(0)
    obs, state, r, term, info = step(key, state, jnp.int32(action), params)
    stream.append(int(obs[0]))
    infos.append({k: int(v) for k, v in info.items()})
    rewards.append(float(r))
    terms.append(bool(term))
    if term:
      break
  while int(obs[1]) == 0 and not terms[-1]:   # drain a pending tool output
    obs, state, r, term, info = step(key, state, jnp.int32(tk.PAD), params)
    stream.append(int(obs[0]))
    infos.append({k: int(v) for k, v in info.items()})
    rewards.append(float(r))
    terms.append(bool(term))
  return stream, infos, rewards, terms, state


def _num(tokens_):
  return int("".join(str(t - tk.DIGIT0) for t in tokens_))


def _dig(value, d):
  return [tk.DIGIT0 + int(c) for c in str(value).zfill(d)]


def test_calculator_outputs_and_parsing_by_hand():
  env, params = make("ToolArith-v0", num_turns=3, num_digits=2)
  key = jax.random.key(11)
  _, state = env.reset(key, params)
  prompt = [int(t) for t in state.prompt]
  # Read the task back from the prompt tokens, independently of the env's task pytree.
  x0 = _num(prompt[2:4])
  steps = [(prompt[4 + 3 * i], _num(prompt[5 + 3 * i:7 + 3 * i])) for i in range(3)]
  ops = {tk.PLUS: lambda a, b: (a + b) % 100, tk.MINUS: lambda a, b: (a - b) % 100,
         tk.TIMES: lambda a, b: (a * b) % 100}
  chain = [x0]
  for op, a in steps:
    chain.append(ops[op](chain[-1], a))
  # A right first call, a repeat of it, a wrong-operand call (a copy slip), then 56*43.
  slip = (chain[0] + 1) % 100
  calls = [[tk.CALC, *_dig(chain[0], 2), steps[0][0], *_dig(steps[0][1], 2), tk.END],
           [tk.CALC, *_dig(chain[0], 2), steps[0][0], *_dig(steps[0][1], 2), tk.END],
           [tk.CALC, *_dig(slip, 2), steps[1][0], *_dig(steps[1][1], 2), tk.END],
           [tk.CALC, *_dig(56, 2), tk.TIMES, *_dig(43, 2), tk.END]]
  stream, infos, rewards, terms, _ = _play(env, params, key, sum(calls, []))
  text = tk.decode(stream)
  outs = [o.strip().split(" ")[:2] for o in text.split("END")[1:]]
  expected = [chain[1], chain[1], ops[steps[1][0]](slip, steps[1][1]), 56 * 43 % 100]
  assert [int("".join(o)) for o in outs] == expected, text
  ends = [i for i in infos if i["call_end"]]
  assert [e["call_correct"] for e in ends] == [1, 1, 0, 0]
  assert [e["call_needed"] for e in ends] == [1, 0, 0, 0]
  assert [e["turn"] for e in ends] == [0, 1, 2, 3]
  assert not any(terms) and not any(rewards)


def test_step_index_tags_the_prompt_and_echoes_the_next_call_by_hand():
  env, params = make("ToolArith-v0", num_turns=11, num_digits=1, step_index=True)
  assert env.prompt_len == 3 + 1 + 11 * 5 and env.out_size == 5
  plain, _ = make("ToolArith-v0", num_turns=11, num_digits=1)
  key = jax.random.key(5)
  _, state = env.reset(key, params)
  _, plain_state = plain.reset(key, params)
  prompt = [int(t) for t in state.prompt]
  # Step i is `STEP i_1 i_0 op_i a_i`, the plain prompt's `op_i a_i` tagged (same task).
  for i in range(11):
    tag = prompt[3 + 5 * i:6 + 5 * i]
    assert tag == [tk.STEP, *_dig(i + 1, 2)], tk.decode(prompt)
    assert prompt[6 + 5 * i:8 + 5 * i] == [int(t) for t in plain_state.prompt[3 + 2 * i:
                                                                            5 + 2 * i]]
  x0, (op1, a1), (op2, a2) = (_num(prompt[2:3]),
                              *[(prompt[6 + 5 * i], _num(prompt[7 + 5 * i:8 + 5 * i]))
                                for i in range(2)])
  ops = {tk.PLUS: lambda a, b: (a + b) % 10, tk.MINUS: lambda a, b: (a - b) % 10,
         tk.TIMES: lambda a, b: (a * b) % 10}
  v1 = ops[op1](x0, a1)
  wrong = (a2 + 1) % 10
  calls = [[tk.CALC, *_dig(x0, 1), op1, *_dig(a1, 1), tk.END],         # call 1: right
           [tk.CALC, tk.PLUS, tk.END],                                   # call 2: malformed
           [tk.CALC, *_dig(v1, 1), op2, *_dig(wrong, 1), tk.END]]        # call 3: wrong
  stream, infos, _, _, _ = _play(env, params, key, sum(calls, []))
  outs = [o.strip().split(" ;")[0] for o in tk.decode(stream).split("END")[1:]]
  # The tool counts its calls, malformed ones included: after call c it names c + 1.
  assert outs == [f"{v1} # 0 2", "ERR", f"{ops[op2](v1, wrong)} # 0 4"], outs
  ends = [i for i in infos if i["call_end"]]
  assert [e["call_needed"] for e in ends] == [1, 0, 0]


@pytest.mark.parametrize("span,why", [
    ([tk.CALC, tk.DIGIT0, tk.PLUS, tk.DIGIT0, tk.DIGIT0, tk.END], "too short"),
    ([tk.CALC, tk.DIGIT0, tk.DIGIT0, tk.SEP, tk.DIGIT0, tk.DIGIT0, tk.END], "not an op"),
    ([tk.CALC, tk.DIGIT0, tk.ANSWER, tk.PLUS, tk.DIGIT0, tk.DIGIT0, tk.END], "not a digit"),
    ([tk.CALC] + [tk.DIGIT0] * 8, "overflow: the 8th token closes it"),
    ([tk.CALC, 999, tk.DIGIT0, tk.PLUS, tk.DIGIT0, tk.DIGIT0, tk.END], "out of range"),
    ([tk.CALC, -3, tk.DIGIT0, tk.PLUS, tk.DIGIT0, tk.DIGIT0, tk.END], "negative"),
])
def test_malformed_calls_get_err(span, why):
  env, params = make("ToolArith-v0", num_turns=2, num_digits=2)
  assert env.span_size == 7
  stream, infos, _, terms, state = _play(env, params, jax.random.key(0), span)
  assert stream[-2:] == [tk.ERR, tk.SEP], (why, tk.decode(stream))
  assert sum(i["call_end"] for i in infos) == 1 and not any(terms)
  assert not any(i["call_correct"] for i in infos)
  assert int(state.mode) == tk.TOP and int(state.span_len) == 0


def test_answers_eos_chatter_and_termination():
  env, params = make("ToolArith-v0", num_turns=1, num_digits=2)
  key = jax.random.key(5)
  _, state = env.reset(key, params)
  answer = [int(t) for t in env._answer(state.task)]
  wrong = answer[:1] + [tk.DIGIT0 + (answer[1] - tk.DIGIT0 + 1) % 10]
  chatter = [tk.PAD, tk.LOOKUP, tk.END, tk.DIGIT0, 1000]     # no effect at TOP
  for agent_tokens, reward, terminated_at in [
      (chatter + [tk.ANSWER, *answer, tk.EOS], 1.0, True),    # right, after chatter
      ([tk.ANSWER, *wrong, tk.EOS], 0.0, True),                # wrong answer
      ([tk.ANSWER, answer[0], tk.EOS], 0.0, True),             # too short
      ([tk.ANSWER, *answer, answer[0], tk.EOS], 0.0, True),    # too long
      ([tk.ANSWER] + [tk.DIGIT0] * 8, 0.0, True),              # overflow ends it
      ([tk.EOS], 0.0, True),                                   # unanswered
      ([tk.CALC, tk.DIGIT0, tk.EOS], 0.0, True),               # EOS inside a call
      (chatter, 0.0, False)]:
    _, infos, rewards, terms, _ = _play(env, params, key, agent_tokens)
    assert terms[-1] == terminated_at and rewards[-1] == reward, agent_tokens
    assert infos[-1]["success"] == (reward == 1.0)
    assert not any(terms[:-1])


def test_lookup_tool_by_hand():
  env, params = make("ToolLookup-v0", num_turns=2, key_len=2, num_distractors=2)
  key = jax.random.key(7)
  _, state = env.reset(key, params)
  chain = np.asarray(state.task["chain"]) + tk.SYMBOL0
  keys = np.asarray(state.task["keys"]) + tk.SYMBOL0
  values = np.asarray(state.task["values"]) + tk.SYMBOL0
  table = {tuple(k): tuple(v) for k, v in reversed(list(zip(keys, values)))}  # first wins
  distractor = keys[env.num_turns + 1]                # differs from c_0 in one symbol
  assert (distractor != chain[0]).sum() == 1
  absent = next((a, b) for a in range(32, 48) for b in range(32, 48)
                if (a, b) not in table)
  calls = [[tk.LOOKUP, *chain[0], tk.END],        # right: c_1
           [tk.LOOKUP, *distractor, tk.END],      # the slip: a plausible wrong key
           [tk.LOOKUP, *absent, tk.END],          # NOTFOUND
           [tk.LOOKUP, *chain[2], tk.END],        # the over-hop: c_3
           [tk.LOOKUP, tk.DIGIT0, chain[0][1], tk.END],   # not a key: ERR
           [tk.LOOKUP, *chain[1], tk.END]]        # right: c_2
  stream, infos, _, _, _ = _play(env, params, key, sum(calls, []))
  text = tk.decode(stream).split("END")[1:]
  want = [table[tuple(chain[0])], table[tuple(distractor)], (tk.NOTFOUND,),
          tuple(chain[3]), (tk.ERR,), tuple(chain[2])]
  for out, w in zip(text, want):
    assert out.split(";")[0].split() == tk.decode(w).split(), (out, w)
  assert tuple(chain[1]) == table[tuple(chain[0])]
  assert table[tuple(distractor)] not in {tuple(c) for c in chain}
  ends = [i for i in infos if i["call_end"]]
  assert [e["call_correct"] for e in ends] == [1, 0, 0, 0, 0, 1]
  assert [e["call_needed"] for e in ends] == [1, 0, 0, 0, 0, 1]


# --- the random policy against an exact dynamic program over the grammar ------------------

def _grammar_dp(probs, prompt_len, span, answer_len, out_len, limit):
  """Exact outcome probabilities (success, failed termination, truncation) of a policy
  that writes token classes i.i.d. with `probs` = {tool, answer, eos, end, right, other}
  ("right": the answer's token at each answer position, assumed distinct from the
  others), from the module docstring's grammar. Tool outputs are `out_len` tokens."""
  # States: ("top",), ("call", n), ("ans", n, ok), ("out", left).
  dist = {("top",): 1.0}
  time = prompt_len - 1
  success = fail = 0.0
  p = probs
  while time < limit:
    new = {}

    def add(s, q):
      new[s] = new.get(s, 0.0) + q
    for s, q in dist.items():
      if s[0] == "out":
        add(("out", s[1] - 1) if s[1] > 1 else ("top",), q)
      elif s[0] == "top":
        add(("call", 0), q * p["tool"])
        add(("ans", 0, True), q * p["answer"])
        fail += q * p["eos"]
        add(("top",), q * (1 - p["tool"] - p["answer"] - p["eos"]))
      elif s[0] == "call":
        add(("out", out_len), q * p["end"])
        fail += q * p["eos"]
        rest = 1 - p["end"] - p["eos"]
        add(("out", out_len) if s[1] >= span else ("call", s[1] + 1), q * rest)
      else:
        n, ok = s[1], s[2]
        if n == answer_len and ok:
          success += q * p["eos"]
        else:
          fail += q * p["eos"]
        if n >= span:
          fail += q * (1 - p["eos"])
        else:
          add(("ans", n + 1, ok and n < answer_len), q * p["right"])
          add(("ans", n + 1, False), q * (1 - p["eos"] - p["right"]))
    dist = new
    time += 1
  return success, fail, sum(dist.values())


def _random_outcomes(env, params, token_sets, num, key):
  """First-episode outcomes of `num` episodes whose agent writes a uniform choice from
  `token_sets(state) -> [n]`, through the gymnax auto-reset step under jit and vmap."""
  limit = int(params.max_steps_in_episode)

  @jax.jit
  def run(key):
    k_reset, k_run = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_reset, num),
                                                       params)

    def body(carry, k):
      state, alive, out = carry
      choices = jax.vmap(token_sets)(state)                              # [num, n]
      pick = jax.random.randint(k, (num,), 0, choices.shape[1])
      action = jnp.take_along_axis(choices, pick[:, None], 1)[:, 0]
      _, state, r, term, trunc, _ = jax.vmap(env.step, in_axes=(None, 0, 0, None))(
          k, state, action, params)
      outcome = jnp.where(r > 0, 0, jnp.where(term, 1, 2))
      out = jnp.where(alive & (term | trunc), outcome, out)
      return (state, alive & ~(term | trunc), out), None

    init = (state, jnp.ones(num, bool), jnp.full(num, 3))
    (_, alive, out), _ = jax.lax.scan(body, init, jax.random.split(k_run, limit))
    return out, alive
  out, alive = run(key)
  assert not np.any(alive)            # every episode ended within the time limit
  return np.bincount(np.asarray(out), minlength=4)


@pytest.mark.parametrize("name,kw", [("ToolArith-v0", dict(num_turns=1, num_digits=1)),
                                     ("ToolLookup-v0", dict(num_turns=1, key_len=1,
                                                            num_distractors=1))])
@pytest.mark.parametrize("policy", ["uniform", "restricted"])
def test_random_policy_matches_the_grammar_dp(name, kw, policy):
  env, params = make(name, **kw)
  assert env.out_size == 2 and env.answer_len == 1   # every tool output is 2 tokens
  v = tk.VOCAB_SIZE
  if policy == "uniform":     # uniform over the whole vocabulary
    def token_sets(state):
      del state
      return jnp.arange(v)
    num = 1 << 17
    probs = {c: 1 / v for c in ("tool", "answer", "eos", "end", "right")}
  else:                       # uniform over six tokens, one of them the answer
    def token_sets(state):
      return jnp.stack([jnp.int32(env.tool_token), jnp.int32(tk.ANSWER),
                        jnp.int32(tk.EOS), jnp.int32(tk.END), env._answer(state.task)[0],
                        jnp.int32(tk.PAD)])
    num = 1 << 14
    probs = {c: 1 / 6 for c in ("tool", "answer", "eos", "end", "right")}
  exact = _grammar_dp(probs, env.prompt_len, env.span_size, env.answer_len, 2,
                      int(params.max_steps_in_episode))
  counts = _random_outcomes(env, params, token_sets, num, jax.random.key(1))
  assert counts[3] == 0
  for count, p in zip(counts[:3], exact):
    assert abs(count - num * p) <= 4 * np.sqrt(num * p * (1 - p)) + 1, (counts, exact)
  assert exact[0] > (5e-5 if policy == "uniform" else 5e-3)   # success is not ~0


# --- jit / vmap and robustness ------------------------------------------------------------

def test_vmapped_rollout_equals_single_steps():
  env, params = make("ToolLookup-v0", num_turns=2, key_len=2)
  policy = rollout.uniform_random_policy(tk.VOCAB_SIZE)
  traj = jax.jit(rollout.collect_episodes, static_argnums=(0, 2, 5, 6))(
      env, params, policy, None, jax.random.key(2), 3, 30)
  key_reset, _ = jax.random.split(jax.random.key(2))
  for b, k in enumerate(jax.random.split(key_reset, 3)):
    obs, state = env.reset(k, params)
    for t in range(30):
      np.testing.assert_array_equal(obs, traj.obs[t, b])
      obs, state, r, term, trunc, _ = env.step(jax.random.key(t), state,
                                               traj.actions[t, b], params)
      assert float(r) == float(traj.rewards[t, b])
      if term or trunc:
        break


def test_random_tokens_never_break_the_env():
  env, params = make("ToolArith-v0", num_turns=3, num_digits=2)
  num, steps = 512, 200

  @jax.jit
  def run(key):
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num), params)

    def body(state, k):
      action = jax.random.randint(k, (num,), -20, 80)   # includes out-of-range ids
      obs, state, r, term, trunc, info = jax.vmap(env.step, in_axes=(None, 0, 0, None))(
          k, state, action, params)
      return state, (obs, state.span_len, state.out_pos, state.out_len, state.mode,
                     state.time)
    return jax.lax.scan(body, state, jax.random.split(key, steps))[1]
  obs, span_len, out_pos, out_len, mode, time = (np.asarray(x) for x in run(
      jax.random.key(9)))
  assert obs.min() >= 0 and obs[..., 0].max() < tk.VOCAB_SIZE
  assert span_len.max() <= env.span_size and np.all(out_pos <= out_len)
  assert set(np.unique(mode)) <= {0, 1, 2}
  assert time.max() < params.max_steps_in_episode


def test_make_validates():
  assert "ToolArith-v0" in envs.registered_envs()
  static, fields = envs.overrides_of("ToolLookup-v0")
  assert {"num_turns", "key_len", "num_distractors"} <= set(static)
  assert {"split", "max_steps_in_episode"} <= set(fields)
  with pytest.raises(ValueError, match="key_len"):
    envs.make("ToolLookup-v0", num_turns=20, key_len=1)
  with pytest.raises(ValueError, match="split"):
    envs.make("ToolArith-v0", split=3)
  with pytest.raises(ValueError, match="num_turns"):
    envs.make("ToolArith-v0", num_turns=0)
