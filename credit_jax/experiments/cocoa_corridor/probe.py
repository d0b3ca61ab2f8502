"""The shadow mode: first-state gradient statistics against the exact DP gradient.

COCOA's paper measures estimators in a "shadow" mode (their `callback.py`, read not
copied): the policy is trained by the true gradient, not by the estimator, so every
estimator is judged at the same policies on the same kind of data; only the first
state's term of each single-episode gradient is kept (`first_state_only`), and it is
compared with the exact first-state gradient

    g* = grad_theta sum_a pi_theta(a | s_0) Q(s_0, a)     (Q held constant),

here from `corridor_credit` (the corridor's backward DP). For a single episode an
all-action estimator's first-state gradient is `sum_a grad pi(a | s_0) C_0(a)` with:

  reinforce         C_0(a) = [a = a_0] G_0 / pi(a_0)
  advantage (V*)    C_0(a) = [a = a_0] (G_0 - V(s_0)) / pi(a_0), V the exact value (the
                    best a learned baseline can do)
  hca_return        [a = a_0] (1 - pi(a_0) / h(a_0 | s_0, G_0)) G_0 / pi(a_0), h learned
  cocoa             r_0 [a = a_0] / pi(a_0) + sum_m (w(s_0, a, m) - 1) F_0(m), w learned
  cocoa (exact w)   the same with `corridor_credit`'s coefficients (unbiased)

Per measurement N = `draws x episodes` episodes give single-episode gradients g_i, and
  SNR_dB = 10 log10(|g*|^2 / mean_i |g_i - g*|^2),
  variance_dB = 10 log10(var / |g*|^2), var = sum_i |g_i - mean g|^2 / (N - 1),
  bias_dB = 10 log10((|mean_i g_i - g*|^2 - var / N) / |g*|^2), the squared error of the
  mean less what sampling alone gives it, shown as the floor `bias_floor_dB`
  (10 log10(var / N / |g*|^2)) when it is below it: theirs is exact, from a DP over the
  learned model.
The policy is the study's MLP with epsilon exploration (the mixture is the policy whose
gradient is measured, as theirs); it takes AdamW steps on the exact gradient of J. The
hindsight models train on each update's batch of `episodes` episodes (the study's
settings); they are measured on fresh batches drawn after their step.
"""
from __future__ import annotations

import time
from typing import Callable, Dict

import chex
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from credit_jax import exact, nets, returns, rollout
from credit_jax.addons import contributions as cb, hindsight_credit
from credit_jax.algos import train as train_lib
from credit_jax.envs.conveyor_treasure import ConveyorTreasure
from credit_jax.experiments import report
from credit_jax.experiments.cocoa_corridor.methods import cell_config

__all__ = ["ESTIMATORS", "MASS_KEYS", "corridor_credit", "credit_mass", "first_state_gradient",
           "rows_of", "shadow", "step_coefficients"]

ESTIMATORS = ("reinforce", "advantage_exact_v", "hca_return", "cocoa", "cocoa_exact_w")
MASS_KEYS = ("distractor_error", "pivotal_error", "pivotal_credit")
_KEY_HELD = 8   # the observation's "one key held" feature (module doc of conveyor_treasure)


def corridor_credit(env: ConveyorTreasure, env_params, apply_fn: Callable, params):
  """Exact action values and COCOA-reward coefficients on ConveyorTreasure-v0, by a
  backward pass over (t, flags), flags = has_key + 2 door_open (the states that matter):

    q [L, 4, A]:    Q(s_t, a), the expected return from step t on (its reward included);
    w [L, 4, A, 3]: w(s_t, a, m) = E[N_m | s_t, a] / E[N_m | s_t], N_m the number of
                    later steps k > t whose reward is of class m (apple_low, apple_high,
                    treasure; `hindsight_credit.reward_values_of`'s order): the
                    coefficient h(a | s, m) / pi(a | s) that COCOA's count-weighted
                    hindsight loss has as minimiser (gamma = 1); 1 where E[N_m | s_t] = 0.
    probs [L, 4, A]: the policy at each state.
  Rows of unreachable states are computed all the same."""
  if not isinstance(env, ConveyorTreasure):
    raise ValueError(f"corridor_credit covers ConveyorTreasure-v0, got {type(env).__name__}")
  probs, nxt, reward, classes = exact.corridor_tables(env, env_params, apply_fn, params)

  def body(later, xs):  # later: ([4] V, [4, 3] counts) from step t + 1 on
    p, n, r, c = xs
    v_next, n_next = later
    q = r + v_next[n]                                    # [4, A]
    ahead = n_next[n]                                    # [4, A, 3]: k > t only
    counts = c + ahead                                   # k >= t
    return (jnp.sum(p * q, -1), jnp.sum(p[..., None] * counts, 1)), (q, ahead)
  zeros = (jnp.zeros(4, jnp.float32), jnp.zeros((4, 3), jnp.float32))
  _, (q, ahead) = jax.lax.scan(body, zeros, (probs, nxt, reward, classes), reverse=True)
  mean = jnp.sum(probs[..., None] * ahead, axis=2, keepdims=True)   # [L, 4, 1, 3]
  w = jnp.where(mean > 0, ahead / jnp.where(mean > 0, mean, 1.0), 1.0)
  return q, w, probs


def step_coefficients(w, obs, valid):
  """`w [L, 4, A, M]` (`corridor_credit`) at each step of a batch `obs [T, B, D]`:
  `[T, B, M, A]`, the row (t, has_key) of each step; 1 at invalid steps (`valid [T, B]`).
  On the corridor the door flag is set only on the treasure cell, the last step, where no
  reward follows and w = 1, so a step's row is (t, has_key), has_key read from the
  observation's key one-hot. T <= L: row t of the batch is step t of its episode."""
  chex.assert_rank([w, obs, valid], [4, 3, 2])
  chex.assert_equal_shape_prefix([obs, valid], 2)
  t_len = obs.shape[0]
  if t_len > w.shape[0] or obs.shape[-1] <= _KEY_HELD:
    raise ValueError(f"step_coefficients: obs [T, B, D] with T <= L = {w.shape[0]} and the "
                     f"corridor's D = 9, got {obs.shape}")
  key = (obs[..., _KEY_HELD] > 0.5).astype(jnp.int32)               # [T, B]
  rows = w[jnp.arange(t_len)[:, None], key]                         # [T, B, A, M]
  return jnp.where(valid[..., None, None], jnp.swapaxes(rows, -1, -2), 1.0)


def credit_mass(learned, exact_c, pi, valid, length: int) -> Dict:
  """The distractor credit mass (issue 50's diagnostic): how much credit a learned
  COCOA model hands out where the exact coefficients hand out none.

  learned, exact_c: [T, N, A] the contribution terms sum_m (w(s_t, a, m) - 1) F_t(m) of
  the learned and the exact coefficients; pi: [T, N, A] the policy; valid: [T, N].
  A step's error is sum_a pi(a | s_t) |learned - exact| (reward units). The pivotal steps
  are the key cell (t = 0) and the door (t = L - 2); every other step is a distractor step,
  where the exact contribution is 0 (no action there changes a later reward). Returns the
  mean over the N episodes of the summed error over distractor steps
  (`distractor_error`), over pivotal steps (`pivotal_error`), and the exact credit on the
  pivotal steps, sum_a pi |exact| (`pivotal_credit`, what the error is to be read
  against)."""
  chex.assert_equal_shape([learned, exact_c, pi])
  chex.assert_equal_shape_prefix([learned, valid], 2)
  t = jnp.arange(learned.shape[0])[:, None]
  pivotal = ((t == 0) | (t == int(length) - 2)) & valid
  distract = valid & ~pivotal
  err = jnp.sum(pi * jnp.abs(learned - exact_c), -1)                # [T, N]
  size = jnp.sum(pi * jnp.abs(exact_c), -1)
  per_episode = lambda x, m: jnp.mean(jnp.sum(jnp.where(m, x, 0.0), 0))
  return {"distractor_error": per_episode(err, distract),
          "pivotal_error": per_episode(err, pivotal),
          "pivotal_credit": per_episode(size, pivotal)}


def first_state_gradient(env, env_params, apply_fn, params):
  """The exact first-state gradient `g*` (module doc), a pytree like `params`;
  `apply_fn(params, obs [N, D]) -> logits [N, A]` of a memoryless policy."""
  q, _, _ = corridor_credit(env, env_params, apply_fn,
                                  jax.lax.stop_gradient(params))
  obs0 = _first_obs(env, env_params)
  return jax.grad(lambda p: jnp.sum(jax.nn.softmax(apply_fn(p, obs0[None]))[0]
                                    * q[0, 0]))(params)


def _first_obs(env, env_params):
  with jax.ensure_compile_time_eval():
    return env.reset(jax.random.key(0), env_params)[0]


def _first_state_contributions(traj, pi0, h_models, carries, logits, q0, w, values):
  """[N, A] C_0(a) of every estimator (`ESTIMATORS` order) for N episodes `traj`
  ([T, N]); pi0 [A] the policy at s_0; q0 [A] exact Q(s_0, .); w [L, 4, A, M] exact w
  (`corridor_credit`). Also the learned and exact COCOA contribution terms of every step
  ([T, N, A] each, for `credit_mass`)."""
  a0 = traj.actions[0]
  hot = jax.nn.one_hot(a0, pi0.shape[0])
  rewards = jnp.where(traj.valid, traj.rewards, 0.0)
  g0 = returns.discounted_returns(rewards, jnp.ones_like(rewards),
                                  terminated=traj.dones)[0]           # [N]
  per_taken = lambda x: hot * (x / pi0[a0])[:, None]
  hca, cocoa = h_models
  adv_h, _, _ = hca.credit(carries[0][hca.owns[0]], logits, traj, 1.0)
  credit, _, _ = cocoa.credit(carries[1][cocoa.owns[0]], logits, traj, 1.0)
  classes = cb.reward_classes(rewards, values)
  future, _ = cb.future_by_class(rewards, classes, len(values), 1.0, traj.dones, traj.valid)
  exact_c = jnp.einsum("tnma,tnm->tna", step_coefficients(w, traj.obs, traj.valid) - 1.0,
                       future)
  learned = jnp.where(traj.valid[..., None], credit.contributions, 0.0)
  immediate = per_taken(rewards[0])
  c0 = jnp.stack([per_taken(g0), per_taken(g0 - jnp.sum(pi0 * q0)), per_taken(adv_h[0]),
                  immediate + credit.contributions[0], immediate + exact_c[0]])  # [E, N, A]
  return c0, learned, exact_c


def rows_of(points) -> Dict:
  """`{estimator: {snr_db, bias_db, bias_floor_db, variance_db}}`: the mean over seeds
  and over the measurements after update 0 (there the untrained models give exactly no
  credit, 0 dB SNR by construction, which says nothing)."""
  later = [pt for pt in points if pt["update"] > 0] or points
  rows = {name: {k: float(np.mean([np.asarray(pt[k])[:, j] for pt in later]))
                 for k in ("snr_db", "bias_db", "bias_floor_db", "variance_db")}
          for j, name in enumerate(ESTIMATORS)}
  if all(k in pt for pt in later for k in MASS_KEYS):   # rows written before it: without
    rows["cocoa"].update({k: float(np.mean([pt[k] for pt in later])) for k in MASS_KEYS})
  return rows


def shadow(length: int, config, log: Callable) -> Dict:
  """The shadow mode at corridor length `length` (module doc); returns its rows
  `{estimator: {snr_db, bias_db, bias_floor_db, variance_db}}` (the mean over seeds and
  the measurements after update 0) and every measurement (`points`)."""
  p = config.probe
  cfg = cell_config("cocoa", length, config)
  env, env_params = train_lib.make_env(cfg)
  network, obs_shape = train_lib.make_network(cfg, env, env_params, value_head=False)
  eps = float(config.epsilon)
  apply_fn = lambda params, obs: nets.epsilon_mixture_logits(
      network.apply(params, obs)[0], eps)
  policy = nets.make_policy_fn(nets.EpsilonNetwork(network, eps), value=False)
  values = hindsight_credit.reward_values_of(env, env_params)
  a = env.num_actions
  obs_size = int(np.prod(obs_shape))
  models = (hindsight_credit.Hindsight(
      "hca", cell_config("hca_return", length, config).hca, a, obs_size),
            hindsight_credit.Hindsight(
                "cocoa", cfg.cocoa, a, obs_size, values,
                nets.tabular.env_groups(env, tuple(cfg.network.table_groups))
                if cfg.cocoa.model == "tabular" else None))
  tx = optax.adamw(float(p.lr), weight_decay=float(config.weight_decay))
  episodes, horizon = int(p.episodes), int(length)
  lr_models = (float(cell_config("hca_return", length, config).hca.lr), float(cfg.cocoa.lr))
  obs0 = _first_obs(env, env_params)

  def init(key):
    k_p, k_h, k_c = jax.random.split(key, 3)
    params = train_lib.init_params(network, k_p, obs_shape)
    return params, tx.init(params), (models[0].init(k_h), models[1].init(k_c))

  def update(carry, key):
    params, opt, carries = carry
    traj = rollout.collect_episodes(env, env_params, policy, params, key, episodes, horizon)
    logits = apply_fn(params, traj.obs)
    carries = tuple(m.train(c, traj, 1.0, lr, key, logits)[0]
                    for m, c, lr in zip(models, carries, lr_models))
    grad = exact.gradient(env, env_params, apply_fn, params)
    upd, opt = tx.update(jax.tree.map(jnp.negative, grad), opt, params)
    return (optax.apply_updates(params, upd), opt, carries), None

  def measure(carry, key):
    params, _, carries = carry
    q, w, _ = corridor_credit(env, env_params, apply_fn, params)
    flat, unravel = jax.flatten_util.ravel_pytree(params)
    jac = jax.jacobian(lambda f: jax.nn.softmax(apply_fn(unravel(f), obs0[None]))[0])(
        flat)                                                          # [A, P]
    n = int(p.draws) * episodes
    traj = rollout.collect_episodes(env, env_params, policy, params, key, n, horizon)
    logits = apply_fn(params, traj.obs)
    c0, learned, exact_c = _first_state_contributions(
        traj, jax.nn.softmax(logits[0, 0]), models, carries, logits, q[0, 0], w, values)
    g = c0 @ jac                                                       # [E, N, P]
    g_star = q[0, 0] @ jac
    norm2 = jnp.sum(g_star ** 2)
    mean = g.mean(axis=1)
    db = lambda x: 10.0 * jnp.log10(x)
    var = jnp.sum((g - mean[:, None]) ** 2, -1).sum(-1) / (n - 1)     # [E]
    floor = var / n          # what |mean - g*|^2 would be for an unbiased estimator
    bias2 = jnp.sum((mean - g_star) ** 2, -1) - floor
    return {"snr_db": db(norm2 / jnp.mean(jnp.sum((g - g_star) ** 2, -1), -1)),
            "bias_db": db(jnp.maximum(bias2, floor) / norm2),
            "bias_floor_db": db(floor / norm2), "variance_db": db(var / norm2),
            "objective": exact.objective(env, env_params, apply_fn, params),
            **credit_mass(learned, exact_c, jax.nn.softmax(logits), traj.valid, length)}

  seeds = int(p.get("seeds", 3))
  keys = jax.random.split(jax.random.key(int(config.seed) + 17), seeds)
  carry = jax.jit(jax.vmap(init))(keys)
  every = int(p.every)
  run = jax.jit(jax.vmap(lambda c, k: jax.lax.scan(update, c, jax.random.split(k, every))[0]))
  # one seed at a time: a measurement's batch (draws x episodes x L steps through the
  # models) is the memory peak, and at L = 1000 ten seeds of it at once do not fit
  meas = jax.jit(lambda c, k: jax.lax.map(lambda x: measure(*x), (c, k)))
  t0 = time.time()
  points = []
  progress = report.throttled(log, float(config.get("progress_s", 60.0)))
  for i in range(int(p.updates) // every + 1):
    if i:
      carry = run(carry, jax.vmap(lambda k: jax.random.fold_in(k, 2 * i))(keys))
    m = jax.device_get(meas(carry, jax.vmap(lambda k: jax.random.fold_in(k, 2 * i + 1))(
        keys)))
    points.append({"update": i * every, **{k: np.asarray(v).tolist() for k, v in m.items()}})
    progress(f"shadow L={length}: update {i * every}/{int(p.updates)} "
             f"({time.time() - t0:.0f} s)")
  rows = rows_of(points)
  log(f"shadow L={length}: " + ", ".join(f"{k} snr {v['snr_db']:.1f} bias "
                                         f"{v['bias_db']:.1f} dB" for k, v in rows.items())
      + f" ({time.time() - t0:.0f} s)")
  return {"length": int(length), "rows": rows, "points": points, "seeds": seeds,
          "wall_s": round(time.time() - t0, 1)}
