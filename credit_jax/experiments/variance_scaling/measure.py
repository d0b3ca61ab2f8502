"""The measurement of the variance-scaling study (credit_jax/experiments/variance_scaling/
study.py): one compiled call per horizon, and the per-point records it turns into.

  make_measure(config, T)  a jitted `measure(key)`: all seeds' trajectories at horizon T,
                           every credit scheme's per-trajectory gradients and their
                           statistics against the exact gradient, per reward mode
  records_for(...)         one metrics.jsonl record per (reward mode, scheme) of it

The schemes (`scheme_names`) and the reward modes (`step_rewards`) are described in the
study's docstring; what the records become (slopes, figures, summary.md) is the study's.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from credit_jax import diagnostics as dg
from credit_jax.experiments.variance_scaling import exact
from credit_jax import envs, rollout

__all__ = ["PARTS", "REWARD_MODES", "STATS", "make_measure", "records_for", "scheme_names",
           "step_rewards"]

REWARD_MODES = ("terminal", "partial")
STATS = ("variance", "snr", "bias", "cosine")
# The parts of the variance beside its trace: record suffix -> gradient_variance_parts field.
PARTS = {"pivotal": "variance_masked", "distractor": "variance_unmasked",
         "along": "variance_along"}


def scheme_names(discounts):
  names = ["terminal"]
  for kind in ("rtg", "gae_zero", "gae_fitted"):
    names += [f"{kind}_gamma{g:g}" for g in discounts]
  return names


def step_rewards(traj, mode, num_pivotal):
  """[T, N] rewards of a KeyChain batch under a reward mode (study.py's docstring)."""
  if mode == "terminal":
    return traj.rewards
  return traj.info["correct"].astype(jnp.float32) / num_pivotal


def make_measure(config, horizon):
  """A jitted `measure(key) -> dict` for one horizon (all seeds, all schemes)."""
  env, env_params = envs.make(config.env_name, horizon=horizon,
                              num_pivotal=config.num_pivotal,
                              num_actions=config.num_actions)
  logits = jnp.zeros((config.num_actions + 1, config.num_actions), jnp.float32)
  names = scheme_names(config.discounts)
  num_fit = int(config.num_fit_trajectories)
  gammas = jnp.asarray(config.discounts, jnp.float32)              # [G]
  # The schemes after "terminal", in `names` order, are all GAE: returns-to-go are GAE
  # with lambda = 1 and a zero value. One vmapped scan over (discount, lambda, value)
  # compiles once instead of once per scheme.
  num_g, lam = len(config.discounts), float(config.gae_lambda)
  spec_gamma = jnp.tile(jnp.arange(num_g), 3)                      # [M - 1] into gammas
  spec_lambda = jnp.repeat(jnp.array([1.0, lam, lam], jnp.float32), num_g)
  spec_fitted = jnp.repeat(jnp.array([0.0, 0.0, 1.0], jnp.float32), num_g)

  def weights_of(fit, ev, r_fit, r_ev):
    """[M, T, N] credit of every scheme for one reward mode."""
    fitted = jax.vmap(lambda g: exact.fit_time_value(dg.credit_weights(
        "rtg", r_fit, discount=g, terminated=fit.terminated, valid=fit.valid),
        fit.valid))(gammas)                                         # [G, T + 1]

    def gae_scheme(g, lam_, use_fitted):
      values = jnp.broadcast_to((use_fitted * fitted[g])[:, None],
                                (horizon + 1, r_ev.shape[1]))
      return dg.credit_weights("gae", r_ev, discount=gammas[g], lambda_=lam_,
                               values=values, terminated=ev.terminated, valid=ev.valid)

    terminal = dg.credit_weights("terminal", r_ev, valid=ev.valid)
    return jnp.concatenate(
        [terminal[None], jax.vmap(gae_scheme)(spec_gamma, spec_lambda, spec_fitted)])

  def per_seed(traj):
    # traj: [T, num_fit + N]; the first columns fit the value, the rest are measured.
    fit = jax.tree.map(lambda x: x[:, :num_fit], traj)
    ev = jax.tree.map(lambda x: x[:, num_fit:], traj)
    rewards = jnp.stack([step_rewards(traj, m, config.num_pivotal) for m in REWARD_MODES])
    w = jax.vmap(weights_of, in_axes=(None, None, 0, 0))(
        fit, ev, rewards[:, :, :num_fit], rewards[:, :, num_fit:])   # [R, M, T, N]
    flat_w = w.reshape((-1,) + w.shape[2:])
    grads = jax.vmap(lambda wi: dg.flatten_gradients(dg.per_trajectory_gradients(
        exact.tabular_log_prob, logits, ev.obs, ev.actions, wi, ev.valid)))(flat_w)
    mass = jnp.abs(w)
    return {"grads": grads.reshape(w.shape[:2] + grads.shape[1:]),  # [R, M, N, D]
            "pivotal_mass": jnp.sum(mass * ev.info["pivotal"], axis=(2, 3)),
            "mass": jnp.sum(mass, axis=(2, 3)),                     # [R, M]
            "success": jnp.mean(jnp.sum(rewards[:, :, num_fit:], axis=1), axis=1)}

  def seeds_chunk(key, num_seeds):
    # The seeds are independent slices of one batched rollout: the engine already
    # vmaps over environments, and vmapping it again over seeds would compute the same
    # thing at twice the compile time. Everything after the rollout is vmapped per seed.
    batch = num_fit + config.num_trajectories
    traj = rollout.collect_episodes(env, env_params, dg.tabular_policy, logits, key,
                                    num_seeds * batch, horizon)
    traj = jax.tree.map(lambda x: x.reshape((horizon, num_seeds, batch) + x.shape[2:]),
                        traj)
    return jax.vmap(per_seed, in_axes=1)(traj)

  def measure(key):
    chunk = int(config.seeds_per_chunk)
    if chunk:
      res = jax.lax.map(lambda k: seeds_chunk(k, chunk),
                        jax.random.split(key, config.seeds // chunk))
      res = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), res)
    else:
      res = seeds_chunk(key, config.seeds)
    out = {}
    mask = exact.keychain_pivotal_mask(config.num_actions).ravel()
    for i, mode in enumerate(REWARD_MODES):
      true = exact.keychain_true_gradient(logits, config.num_pivotal, mode).ravel()
      grads = jnp.swapaxes(res["grads"][:, i], 0, 1)                # [M, S, N, D]

      def stats(g, true=true):
        return {**dg.gradient_stats(g, true), **exact.gradient_variance_parts(g, true, mask)}

      out[mode] = {
          "per_seed": jax.vmap(jax.vmap(stats))(grads),
          "pooled": jax.vmap(lambda g, stats=stats: stats(
              g.reshape((-1, g.shape[-1]))))(grads),
          "credit_accuracy": (jnp.sum(res["pivotal_mass"][:, i], 0)
                              / jnp.sum(res["mass"][:, i], 0)),
          "success": jnp.mean(res["success"][:, i]),
          "max_abs_diff_terminal_rtg1": (
              jnp.max(jnp.abs(grads[0] - grads[names.index("rtg_gamma1")]))
              if "rtg_gamma1" in names else jnp.nan)}
    return out

  return jax.jit(measure)  # key -> stats of all seeds of this horizon


def records_for(horizon, out, names, num_trajectories, first_index):
  """One JSON record per (reward mode, scheme) of a horizon's measurement."""
  recs = []
  for mode in REWARD_MODES:
    o = jax.device_get(out[mode])
    num_seeds = o["per_seed"]["variance"].shape[1]
    pooled_n = num_seeds * num_trajectories
    true_norm = float(np.sqrt(o["pooled"]["true_norm_sq"][0]))
    for i, name in enumerate(names):
      seeds_var = o["per_seed"]["variance"][i]
      seeds_mse = o["per_seed"]["mse"][i]
      snr = float(o["pooled"]["snr"][i])
      rec = {"update": first_index + len(recs), "horizon": horizon, "reward": mode,
             "scheme": name,
             "variance": float(np.mean(seeds_var)),
             "variance_se": float(np.std(seeds_var, ddof=1) / np.sqrt(num_seeds)),
             "snr": snr,
             # Delta method through the MSE (a plain mean over seeds): per-seed SNRs
             # are ratios that blow up when a seed's batch happens to be all zeros.
             "snr_se": snr * float(np.std(seeds_mse, ddof=1) / np.sqrt(num_seeds)
                                   / np.mean(seeds_mse)),
             "bias": float(o["pooled"]["bias"][i]),
             # Bias relative to the signal, and the scale below which it is noise:
             # the error of the pooled mean, sqrt(variance / (S N)), over |true grad|.
             "rel_bias": float(o["pooled"]["bias"][i] / true_norm),
             "rel_bias_noise": float(np.sqrt(o["pooled"]["variance"][i] / pooled_n)
                                     / true_norm),
             "cosine": float(o["pooled"]["cosine"][i]),
             # Where the variance lies (exact.gradient_variance_parts): in the
             # parameters the pivotal steps use, and along the exact gradient.
             **{f"variance_{part}{suffix}": value for part, field in PARTS.items()
                for suffix, value in (
                    ("", float(np.mean(o["per_seed"][field][i]))),
                    ("_se", float(np.std(o["per_seed"][field][i], ddof=1)
                                  / np.sqrt(num_seeds))))},
             "snr_along": float(o["pooled"]["snr_along"][i]),
             "mse": float(o["pooled"]["mse"][i]),
             "credit_accuracy": float(o["credit_accuracy"][i]),
             "true_norm_sq": float(o["pooled"]["true_norm_sq"][i]),
             "success_rate": float(o["success"]),
             "max_abs_diff_terminal_rtg1": float(o["max_abs_diff_terminal_rtg1"])}
      recs.append(rec)
  return recs
