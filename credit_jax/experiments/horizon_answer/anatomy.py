"""Part A of the horizon answer: per-episode policy-gradient estimates at a fixed tabular
policy, with every critic and hindsight coefficient exact.

A *probe* (`make_probe`) is one environment at one length with a tabular softmax policy
over its observation's one-hot parts (`credit_jax/nets/tabular.py`, time excluded):
logits `W [R, A]`, row `joint_index(obs)`. Its exact objective and gradient come from
`credit_jax/exact.py`. For a policy `W`, `episode_gradients(probe, W, key, n)` rolls out
`n` episodes (vmapped, one compiled program per shape) and returns each episode's
gradient estimate `[E, n, R, A]` for every estimator of `ESTIMATORS`, all computed on the
same episodes:

  * `reinforce_loo`: `sum_t (G_t - b_t) grad log pi(a_t | o_t)`, G_t the return-to-go
    (gamma 1), b_t the leave-one-out mean of G_t over the other episodes of its batch of
    `loo_batch` independent episodes (`credit_jax/experiments/probes/credit_horizon.py`'s
    estimator);
  * `gae_obs_<lambda>` / `gae_oracle_<lambda>`: `returns.gae` advantages with an exact
    critic, either of the **observation** (`V(o) = E[G_t | o_t = o]` under the policy,
    by DP: the hidden state's posterior given what the policy sees) or of the **full
    state** (the oracle: on KeyChain every pivotal step's position and cue and whether
    all so far were right; on the corridor (t, has_key, door_open));
  * `cocoa_exact`: COCOA's reward-conditioned estimator as
    `credit_jax/addons/contributions.py` writes it, `grad log pi(a_t|o_t) r_t +
    sum_a grad pi(a | o_t) C_t(a)`, `C_t(a) = sum_{k > t} w(o_t, a, u_k) r_k`, with the
    coefficients `w(o, a, u) = P(u later | o, a) / P(u later | o) - 1` exact from the DP.
    Outcome classes: on KeyChain the success event of the last step (reward noise is
    not an outcome: it is independent of every action); on the corridor "apple" and
    "treasure" (an apple's drawn value is independent of the actions, so its two values
    share a class: their coefficients are equal);
  * `hca_exact` (KeyChain only): HCA's return-conditioned advantage
    `(1 - pi(a_t | o_t) / h(a_t | o_t, U)) Z_t`, `Z_t` the return-to-go, conditioned on
    the success bit U (`pi / h = P(U | o) / P(U | o, a)`, exact). Without reward noise
    `Z_t` is U itself; with it, `Z_t = U + noise` whose noise is independent of the
    actions, so conditioning on U keeps the estimator unbiased. The corridor's return
    has O(L^2) values (two apple values per eaten apple); its exact h is not computed;
  * `grpo` / `rloo` (a second set of episodes: `n / group_size` groups of `group_size`
    episodes from one reset): `A_i grad log pi` summed over the episode, `A_i` from
    `baselines.group_advantages` on the episodes' returns ("grpo": std-normalised,
    "rloo": leave-one-out).

Env steps: every estimator above costs exactly its episodes' steps (n T; the grouped set
its own n T); `steps_per_episode` says so per estimator and the tests check the count.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax import baselines, envs, exact, returns
from credit_jax.envs.conveyor_treasure import (APPLE_LEFT, APPLE_RIGHT, DOOR, KEY,
                                               NUM_CONTENTS, ConveyorTreasure)
from credit_jax.envs.keychain import KeyChain
from credit_jax.nets import tabular

__all__ = ["FAMILIES", "Probe", "chunk_size", "estimator_names", "episode_gradients", "exact_gradient",
           "gae_prediction", "make_chunk", "make_probe", "policy_at", "right_answers", "success_of",
           "steps_per_episode", "tune_policy"]

FAMILIES = ("probe", "control", "corridor")


@dataclasses.dataclass(frozen=True)
class Probe:
  """One environment at one length: `family` in FAMILIES, `horizon` T (the corridor's L),
  `sigma` the probe's episode_noise_std; `env`, `env_params`; the table's `groups`,
  rows `R` and actions `A`."""
  family: str
  horizon: int
  sigma: float
  env: object
  env_params: object
  groups: Tuple[Tuple[int, int], ...]
  R: int
  A: int
  # Compiled functions and host tables of this probe, built once on first use.
  cache: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

  def cached(self, name, build):
    if name not in self.cache:
      self.cache[name] = build()
    return self.cache[name]

  @property
  def name(self) -> str:
    if self.family == "corridor":
      return f"corridor/L{self.horizon}"
    if self.family == "control":
      return f"control/T{self.horizon}"
    return f"probe_s{self.sigma:g}/T{self.horizon}"


def make_probe(family: str, horizon: int, sigma: float = 0.0, num_pivotal: int = 3,
               num_actions: int = 4) -> Probe:
  """The credit probe (conjunction input, fake distractor cues, no flag, noise
  sigma / sqrt(T)), the default KeyChain (control) or COCOA's corridor, at `horizon`."""
  if family == "probe":
    env, params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=num_pivotal,
                            num_actions=num_actions, segment_cue_onehot=True,
                            distinct_rules=True, distractor_cues=True, pivotal_flag=False,
                            episode_noise_std=float(sigma))
  elif family == "control":
    if sigma:
      raise ValueError("the control (default KeyChain) has no reward noise; sigma must be 0")
    env, params = envs.make("KeyChain-v0", horizon=horizon, num_pivotal=num_pivotal,
                            num_actions=num_actions)
  elif family == "corridor":
    if sigma:
      raise ValueError("the corridor has no reward-noise option; sigma must be 0")
    env, params = envs.make("ConveyorTreasure-v0", length=horizon)
  else:
    raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
  groups = tuple(env.onehot_groups)
  return Probe(family, int(horizon), float(sigma), env, params, groups,
               tabular.table_size(groups), int(env.num_actions))


def _apply(probe: Probe):
  """`apply(W [R, A], obs [N, D]) -> logits [N, A]`: the table (nets/tabular.py's rows)."""
  return lambda w, obs: jax.nn.one_hot(tabular.joint_index(obs, probe.groups), probe.R,
                                       dtype=jnp.float32) @ w


def _row(probe: Probe, obs) -> int:
  with jax.ensure_compile_time_eval():   # concrete even when traced inside a jit
    return int(tabular.joint_index(jnp.asarray(obs)[None], probe.groups)[0])


def _pivotal_rows(probe: Probe) -> np.ndarray:
  """[k, A] int: the table row a pivotal step of segment i showing cue c is seen in."""
  return probe.cached("pivotal_rows", lambda: _build_pivotal_rows(probe))


def _build_pivotal_rows(probe: Probe) -> np.ndarray:
  env, k, a = probe.env, probe.env.num_pivotal, probe.A
  seg_start = np.asarray(env._seg_start)   # noqa: SLF001 (the segments' first steps)
  rows = np.zeros((k, a), np.int64)
  with jax.ensure_compile_time_eval():
    _, start = env.reset(jax.random.key(0), probe.env_params)
    for i in range(k):
      for c in range(a):
        s = start.replace(positions=jnp.asarray(seg_start),
                          cues=start.cues.at[i].set(c), time=jnp.int32(seg_start[i]))
        rows[i, c] = _row(probe, env.get_obs(s, probe.env_params))
  return rows


def right_answers(probe: Probe) -> np.ndarray:
  """[R] int: each row's rewarding action, -1 where the row has none (the direction the
  study's policies interpolate towards)."""
  return probe.cached("right", lambda: _right_answers(probe)).copy()


def _right_answers(probe: Probe) -> np.ndarray:
  right = -np.ones(probe.R, np.int64)
  if probe.family == "corridor":
    def row(content, keys):
      obs = np.zeros(probe.env.obs_shape, np.float32)
      obs[1 + content] = 1.0
      obs[1 + NUM_CONTENTS + keys] = 1.0
      return _row(probe, obs)
    right[row(KEY, 0)] = 0                        # PICK_KEY
    right[row(DOOR, 1)] = 3                       # OPEN_DOOR with the key
    for keys in (0, 1):
      right[row(APPLE_LEFT, keys)] = 1
      right[row(APPLE_RIGHT, keys)] = 2
    return right
  rows, rules = _pivotal_rows(probe), probe.env.rules
  right[rows.ravel()] = rules.ravel()
  return right


def policy_at(probe: Probe, beta: float) -> np.ndarray:
  """[R, A] float32 logits: `beta` on each row's rewarding action, 0 elsewhere."""
  w = np.zeros((probe.R, probe.A), np.float32)
  right = right_answers(probe)
  rows = np.flatnonzero(right >= 0)
  w[rows, right[rows]] = beta
  return w


def success_of(probe: Probe):
  """`f(W) -> []`: the exact success probability (KeyChain: J; corridor: the treasure's
  probability, the DP's J with apples worth 0 and the treasure 1)."""
  apply = _apply(probe)
  params = probe.env_params
  if probe.family == "corridor":
    params = params.replace(apple_low=0.0, apple_high=0.0, treasure_reward=1.0,
                            reward_scale=1.0)
  return probe.cached("success", lambda: jax.jit(
      lambda w: exact.objective(probe.env, params, apply, w)))


def tune_policy(probe: Probe, target: float, iters: int = 60) -> Tuple[float, float]:
  """(beta, success): `policy_at(probe, beta)` with exact success `target`, by bisection
  on beta in [0, 30] (success rises with beta); beta 0 is the uniform policy."""
  f = success_of(probe)
  direction = jnp.asarray(policy_at(probe, 1.0))
  lo, hi = 0.0, 30.0
  if target <= float(f(lo * direction)):
    return lo, float(f(lo * direction))
  for _ in range(iters):
    mid = 0.5 * (lo + hi)
    if float(f(mid * direction)) < target:
      lo = mid
    else:
      hi = mid
  beta = 0.5 * (lo + hi)
  return beta, float(f(policy_at(probe, beta)))


def exact_gradient(probe: Probe, w) -> Tuple[float, np.ndarray]:
  """(J, grad J [R, A]) of the expected return (credit_jax/exact.py)."""
  apply = _apply(probe)
  fn = probe.cached("exact", lambda: jax.jit(jax.value_and_grad(
      lambda v: exact.objective(probe.env, probe.env_params, apply, v))))
  j, g = fn(jnp.asarray(w, jnp.float32))
  return float(j), np.asarray(g, np.float64)


def _keychain_q(probe: Probe, w):
  """([k] q_i, [k, A] pi_right): the chance of answering pivotal step i right (over its
  cue), and the right action's probability at (segment i, cue c)."""
  probs = jax.nn.softmax(w, axis=-1)
  rows, rules = _pivotal_rows(probe), probe.env.rules
  _, cue_probs = probe.env.draw_probabilities()
  right = probs[rows, rules]                                     # [k, A]
  return right @ jnp.asarray(cue_probs, jnp.float32), right


def gae_prediction(probe: Probe, w, lambda_: float) -> Tuple[np.ndarray, float]:
  """(expected gradient [R, A], 1 - E[lambda^d]) of GAE(lambda) under the exact
  observation critic, predicted: on KeyChain an observation says nothing about the
  actions taken (the critic cannot see whether a pivotal step was answered right), so
  only the TD error of the last step, reached with weight lambda^d (d = T - 1 - the
  pivotal step's position), carries the pivotal action's effect: the expected gradient is
  `sum_i E[lambda^(d_i)] g_i`, g_i the part of the exact gradient through pivotal step
  i. The scalar is the mean of 1 - E[lambda^(d_i)] over the k steps. On the corridor the
  observation determines the state (key held is shown; the door only matters at the last
  cell, where the treasure shows it): prediction the exact gradient, scalar 0."""
  if probe.family == "corridor":
    return exact_gradient(probe, w)[1], 0.0
  pos, _ = probe.env.draw_probabilities()
  d = probe.horizon - 1 - np.arange(probe.horizon)
  m = pos @ (float(lambda_) ** d)                                # [k] E[lambda^d_i]

  def weighted(v, m):
    q, _ = _keychain_q(probe, v)
    k = q.shape[0]
    others = jnp.stack([jnp.prod(jnp.delete(jax.lax.stop_gradient(q), i)) for i in range(k)])
    return jnp.sum(m * others * q)
  fn = probe.cached("gae_prediction", lambda: jax.jit(jax.grad(weighted)))
  g = fn(jnp.asarray(w, jnp.float32), jnp.asarray(m, jnp.float32))
  return np.asarray(g, np.float64), float(np.mean(1.0 - m))


def estimator_names(probe: Probe, lambdas) -> List[str]:
  """The estimators of `episode_gradients`, in its output order."""
  names = ["reinforce_loo"]
  names += [f"gae_obs_{lam:g}" for lam in lambdas]
  names += [f"gae_oracle_{lam:g}" for lam in lambdas]
  names += ["cocoa_exact"]
  if probe.family != "corridor":
    names += ["hca_exact"]
  return names + ["grpo", "rloo"]


def steps_per_episode(probe: Probe, name: str) -> int:
  """Env steps one episode's estimate costs for `name`: T for all of these (the critics
  and coefficients are exact, computed by the DP, not from extra rollouts)."""
  del name
  return probe.horizon


# ---------------------------------------------------------------------------- rollouts

def _keychain_rollout(probe: Probe, w, keys, reset_keys):
  """Per-step arrays of `len(keys)` episodes: rows, actions, rewards [T, B] and the
  exact quantities at each step (observation and oracle values, P(U = 1 | o, a) [T, B, A]),
  and the success bit [B]. `reset_keys` [B]: each episode's reset key (shared within a
  group)."""
  env, params, horizon, a = probe.env, probe.env_params, probe.horizon, probe.A
  w = jnp.asarray(w, jnp.float32)
  probs = jax.nn.softmax(w, axis=-1)
  q, pi_right = _keychain_q(probe, w)
  pos_probs, _ = env.draw_probabilities()
  pos_probs = jnp.asarray(pos_probs, jnp.float32)                # [k, T]
  right = jnp.asarray(right_answers(probe), jnp.int32)          # [R]
  seg_start = env._seg_start                                    # noqa: SLF001
  k = env.num_pivotal

  def episode(key, reset_key):
    _, state = env.reset_env(reset_key, params)

    def step(state, key_t):
      t = state.time
      obs = env.get_obs(state, params)
      row = tabular.joint_index(obs, probe.groups)
      action = jax.random.categorical(key_t, w[row]).astype(jnp.int32)
      seg = jnp.sum(t >= seg_start) - 1
      pivotal_now = jnp.any(state.positions == t)
      # P(this step is pivotal | o_t): with fake cues the shown cue is uniform either
      # way, so the prior; without them a cue is shown exactly at the pivotal steps.
      p_piv = pos_probs[seg, t] if env.distractor_cues else pivotal_now.astype(jnp.float32)
      others = jnp.prod(jnp.where(jnp.arange(k) == seg, 1.0, q))
      hit = (jnp.arange(a) == right[row]).astype(jnp.float32)
      pu1_a = others * (p_piv * hit + (1.0 - p_piv) * q[seg])   # P(U=1 | o_t, a)
      v_obs = jnp.sum(probs[row] * pu1_a)
      ahead = state.positions >= t
      factor = pi_right[jnp.arange(k), state.cues]              # the full state's cues
      v_oracle = state.all_correct * jnp.prod(jnp.where(ahead, factor, 1.0))
      _, state, reward, _, _ = env.step_env(key_t, state, action, params)
      return state, (row, action, reward, v_obs, v_oracle, pu1_a)
    state, out = jax.lax.scan(step, state, jax.random.split(key, horizon))
    return out + (state.all_correct,)
  out = jax.vmap(episode)(keys, reset_keys)
  # [B, T, ...] -> [T, B, ...]
  return tuple(jnp.swapaxes(x, 0, 1) for x in out[:-1]) + (out[-1],)


def _corridor_tables(probe: Probe, w):
  """Exact tables over (t, flags f = has_key + 2 door_open) [L(+1), 4]: next flags and
  reward of each action, the state value V [L + 1, 4], the observation critic's value
  (the posterior over flags given the observation), and the expected count of each
  outcome class (apple, treasure) from t on, Nm [2, L + 1, 4]."""
  env, params, length, a = probe.env, probe.env_params, probe.horizon, probe.A
  _, start = env.reset(jax.random.key(0), params)
  flags = jnp.asarray([[False, False], [True, False], [False, True], [True, True]])
  states = jax.vmap(lambda t: jax.vmap(lambda f: start.replace(
      time=t, has_key=f[0], door_open=f[1]))(flags))(jnp.arange(length, dtype=jnp.int32))
  obs = jax.vmap(jax.vmap(lambda s: env.get_obs(s, params)))(states)     # [L, 4, D]
  rows = tabular.joint_index(obs, probe.groups)                          # [L, 4]
  probs = jax.nn.softmax(w, axis=-1)[rows]                               # [L, 4, A]
  mean_apple = 0.5 * (params.apple_low + params.apple_high) * params.reward_scale

  def outcome(s, act):
    nxt, reward, info = env.corridor_step(s, act, env.content_at(s, s.time), mean_apple,
                                          params)
    f = nxt.has_key.astype(jnp.int32) + 2 * nxt.door_open.astype(jnp.int32)
    return f, reward, info["apple"].astype(jnp.float32), info["success"].astype(jnp.float32)
  acts = jnp.arange(a, dtype=jnp.int32)
  nxt, rew, apple, treas = jax.vmap(jax.vmap(lambda s: jax.vmap(lambda x: outcome(s, x))(
      acts)))(states)                                                     # [L, 4, A]

  def backward(per_step):                                                # [L, 4, A]
    def body(v_next, xs):
      p, n, r = xs
      v = jnp.sum(p * (r + v_next[n]), axis=-1)
      return v, v
    _, v = jax.lax.scan(body, jnp.zeros(4), (probs, nxt, per_step), reverse=True)
    return jnp.concatenate([v, jnp.zeros((1, 4))])                        # [L + 1, 4]
  value = backward(rew)
  counts = jnp.stack([backward(apple), backward(treas)])                 # [2, L + 1, 4]

  def forward(dist, xs):
    p, n = xs
    flow = jax.ops.segment_sum((dist[:, None] * p).reshape(-1), n.reshape(-1),
                               num_segments=4)
    return flow, dist
  _, dist = jax.lax.scan(forward, jnp.zeros(4).at[0].set(1.0), (probs, nxt))   # [L, 4]
  same = jnp.all(obs[:, :, None, :] == obs[:, None, :, :], axis=-1)      # [L, 4, 4]
  mass = same * dist[:, None, :]
  total = mass.sum(-1)
  v_obs = jnp.where(total > 0, jnp.sum(mass * value[:-1, None, :], -1) / jnp.where(
      total > 0, total, 1.0), value[:-1])
  v_obs = jnp.concatenate([v_obs, jnp.zeros((1, 4))])
  return nxt, value, v_obs, counts, probs


def _corridor_rollout(probe: Probe, w, keys, reset_keys):
  """Per-step arrays (as `_keychain_rollout`) for the corridor: rows, actions, rewards,
  V_obs, V_state [T, B], COCOA's C_t(a) [T, B, A], and the treasure bit [B]."""
  env, params, length = probe.env, probe.env_params, probe.horizon
  w = jnp.asarray(w, jnp.float32)
  nxt, value, v_obs_table, counts, probs_table = _corridor_tables(probe, w)
  del reset_keys   # the corridor's reset draws nothing (one fixed layout)

  def episode(key):
    _, state = env.reset_env(key, params)

    def step(state, key_t):
      k_act, k_env = jax.random.split(key_t)
      obs = env.get_obs(state, params)
      row = tabular.joint_index(obs, probe.groups)
      action = jax.random.categorical(k_act, w[row]).astype(jnp.int32)
      f = state.has_key.astype(jnp.int32) + 2 * state.door_open.astype(jnp.int32)
      _, state, reward, _, info = env.step_env(k_env, state, action, params)
      return state, (row, action, reward, f, info["apple"], info["success"])
    return jax.lax.scan(step, state, jax.random.split(key, length))[1]
  row, action, reward, f, apple, treasure = (jnp.swapaxes(x, 0, 1) for x in
                                             jax.vmap(episode)(keys))
  t = jnp.arange(length)[:, None]
  v_obs = v_obs_table[t, f]
  v_state = value[t, f]
  # Expected later counts of each class after each action: Nm[t + 1, next(f, a)].
  later = counts[:, t[..., None] + 1, nxt[t, f]]                                  # [2, T, B, A]
  pi = probs_table[t, f]                                                 # [T, B, A]
  base = jnp.sum(pi * later, axis=-1, keepdims=True)
  w_coef = jnp.where(base > 0, later / jnp.where(base > 0, base, 1.0) - 1.0, 0.0)
  apple_r = jnp.where(apple, reward, 0.0)
  treasure_r = jnp.where(treasure, reward, 0.0)
  future = jnp.stack([_future(apple_r), _future(treasure_r)])            # [2, T, B]
  credit = jnp.sum(w_coef * future[..., None], axis=0)                   # [T, B, A]
  success = jnp.any(treasure, axis=0)
  return row, action, reward, v_obs, v_state, credit, success


def _future(x):
  """[T, B] -> sum over k > t of x_k."""
  return jnp.cumsum(x[::-1], axis=0)[::-1] - x


def _rtg(rewards):
  return jnp.cumsum(rewards[::-1], axis=0)[::-1]


def _advantages(probe: Probe, w, rollout, lambdas, loo_batch: int):
  """[E, T, B, A] per-step gradients with respect to the step's logits row, for the
  independent set's estimators (the order of `estimator_names`, without grpo / rloo)."""
  if probe.family == "corridor":
    row, action, reward, v_obs, v_oracle, credit, success = rollout
    pu1_a = None
  else:
    row, action, reward, v_obs, v_oracle, pu1_a, success = rollout
  horizon, b = reward.shape
  probs = jax.nn.softmax(w, axis=-1)[row]                                 # [T, B, A]
  score = jax.nn.one_hot(action, probe.A) - probs                         # d log pi / d logits
  g = _rtg(reward)
  blocks = g.reshape(horizon, b // loo_batch, loo_batch)
  loo = (blocks.sum(-1, keepdims=True) - blocks) / (loo_batch - 1)
  out = [(g - loo.reshape(horizon, b))[..., None] * score]
  terminated = jnp.zeros((horizon, b), bool).at[-1].set(True)
  for values in (v_obs, v_oracle):
    values = jnp.concatenate([values, jnp.zeros((1, b))])
    for lam in lambdas:
      adv = returns.gae(reward, jnp.float32(1.0), values, jnp.float32(lam),
                        terminated=terminated)
      out.append(adv[..., None] * score)
  if pu1_a is None:
    c = credit
  else:
    # C_t(a) = w(o_t, a, success) r_{T-1} [success], t < T - 1 (the last step's reward
    # is the immediate term's).
    pu1 = jnp.sum(probs * pu1_a, axis=-1, keepdims=True)
    w_coef = jnp.where(pu1 > 0, pu1_a / jnp.where(pu1 > 0, pu1, 1.0) - 1.0, 0.0)
    last = jnp.where(success, reward[-1], 0.0)                          # [B]
    later = jnp.arange(horizon)[:, None, None] < horizon - 1
    c = jnp.where(later, w_coef * last[None, :, None], 0.0)
  sum_a = probs * c - probs * jnp.sum(probs * c, axis=-1, keepdims=True)
  out.append(reward[..., None] * score + sum_a)
  if pu1_a is not None:
    taken = jnp.take_along_axis(pu1_a, action[..., None], axis=-1)[..., 0]
    pu1 = jnp.sum(probs * pu1_a, axis=-1)
    u = success[None, :]
    p_u = jnp.where(u, pu1, 1.0 - pu1)
    p_ua = jnp.where(u, taken, 1.0 - taken)
    ratio = jnp.where(p_ua > 0, p_u / jnp.where(p_ua > 0, p_ua, 1.0), 0.0)
    out.append(((1.0 - ratio) * g)[..., None] * score)
  return jnp.stack(out)


def _per_episode(probe: Probe, row, per_step):
  """[E, T, B, A] per-step logit gradients -> [E, B, R, A] per-episode gradients."""
  onehot = jax.nn.one_hot(row, probe.R, dtype=jnp.float32)              # [T, B, R]
  return jnp.einsum("tbr,etba->ebra", onehot, per_step)


def _rollout(probe, w, keys, reset_keys):
  if probe.family == "corridor":
    return _corridor_rollout(probe, w, keys, reset_keys)
  return _keychain_rollout(probe, w, keys, reset_keys)


def make_chunk(probe: Probe, lambdas, loo_batch: int, group_size: int):
  """A jitted `chunk(w [R, A], key) -> (independent [E1, B, R, A], grouped [2, B, R, A],
  success [2, B])` for a chunk of B episodes per set (B a multiple of `loo_batch` and of
  `group_size`, fixed by the first call's key batch: pass `num`)."""
  lambdas = tuple(float(x) for x in lambdas)

  def chunk(w, key, num):
    k_ind, k_reset, k_grp = jax.random.split(key, 3)
    ind_keys = jax.random.split(k_ind, num)
    ind_reset = jax.random.split(k_reset, num)
    roll = _rollout(probe, w, ind_keys, ind_reset)
    independent = _per_episode(probe, roll[0], _advantages(probe, w, roll, lambdas,
                                                            loo_batch))
    groups = num // group_size
    g_reset = jnp.repeat(jax.random.split(jax.random.fold_in(k_reset, 1), groups),
                         group_size, axis=0)
    groll = _rollout(probe, w, jax.random.split(k_grp, num), g_reset)
    row, action, reward = groll[0], groll[1], groll[2]
    probs = jax.nn.softmax(w, axis=-1)[row]
    score = jax.nn.one_hot(action, probe.A) - probs
    ret = reward.sum(0).reshape(groups, group_size)
    advs = [baselines.group_advantages(ret, kind)[0].reshape(num) for kind in
            ("grpo", "rloo")]
    grouped = _per_episode(probe, row, jnp.stack([adv[None, :, None] * score
                                                  for adv in advs]))
    return independent, grouped, jnp.stack([roll[-1], groll[-1]]).astype(jnp.float32)
  return jax.jit(chunk, static_argnums=2)


def episode_gradients(probe: Probe, w, key, num: int, lambdas=(1.0, 0.99, 0.95, 0.9),
                      loo_batch: int = 64, group_size: int = 8, chunk_steps: int = 400_000,
                      chunk_fn=None) -> Dict[str, np.ndarray]:
  """{estimator: [num, R, A] float32 per-episode gradient estimates} for the policy
  `w [R, A]`, plus "success" [2, num] (the independent and the grouped set). Episodes
  run in chunks of about `chunk_steps` steps per set (a multiple of `loo_batch` and
  `group_size`); `chunk_fn` (`make_chunk`'s) reuses a compiled program across policies."""
  w = jnp.asarray(w, jnp.float32)
  if w.shape != (probe.R, probe.A):
    raise ValueError(f"w must be [R, A] = [{probe.R}, {probe.A}], got {w.shape}")
  size = chunk_size(probe, num, loo_batch, group_size, chunk_steps)
  fn = chunk_fn or make_chunk(probe, lambdas, loo_batch, group_size)
  ind, grp, succ = [], [], []
  for c in range(num // size):
    i, g, s = jax.device_get(fn(w, jax.random.fold_in(key, c), size))
    ind.append(i), grp.append(g), succ.append(s)
  ind, grp = np.concatenate(ind, axis=1), np.concatenate(grp, axis=1)
  names = estimator_names(probe, lambdas)
  out = {n: ind[e] for e, n in enumerate(names[:-2])}
  out["grpo"], out["rloo"] = grp[0], grp[1]
  out["success"] = np.concatenate(succ, axis=1)
  return out


def chunk_size(probe: Probe, num: int, loo_batch: int, group_size: int,
               chunk_steps: int = 400_000) -> int:
  """The B `episode_gradients` uses (for reporting and to share a compiled program)."""
  unit = int(np.lcm(loo_batch, group_size))
  if num % unit:
    raise ValueError(f"episodes ({num}) must be a multiple of lcm(loo_batch, "
                     f"group_size) = {unit}")
  size = max(unit, min(num, (chunk_steps // probe.horizon) // unit * unit))
  while num % size:
    size -= unit
  return size
