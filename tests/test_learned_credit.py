"""Learned credit (RUDDER's return decomposition, HCA and COCOA): the estimators against
hand-computed cases and NumPy loops, KeyChain's exact hindsight distributions against an
enumeration of every episode, and the unbiasedness of the exact estimators against
KeyChain's exact gradient."""
import itertools

import jax
import jax.flatten_util
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from credit_jax import envs, returns, rollout
from credit_jax.addons import contributions as cb
from credit_jax.experiments.learned_credit import exact_hindsight as keychain_hindsight
from credit_jax.experiments.learned_credit import probe as learned_probe
from credit_jax.addons import rudder as rd
from credit_jax.addons import hindsight_credit, hooks, rudder

T, K, A = 4, 2, 2
# A memoryless linear actor on KeyChain's [A + 2] observation: logits = obs @ W + b.
W = np.array([[0.8, -0.4], [-0.3, 0.9], [0.2, -0.2], [0.5, -0.6]], np.float32)
B = np.array([0.1, -0.1], np.float32)


def logits_fn(params, obs):
  w, b = params
  return obs @ w + b


PARAMS = (jnp.asarray(W), jnp.asarray(B))


def _env():
  return envs.make("KeyChain-v0", horizon=T, num_pivotal=K, num_actions=A)


def _softmax(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _obs(t, pivotal, cue):
  o = np.zeros(A + 2, np.float32)
  if pivotal:
    o[cue] = 1.0
    o[A] = 1.0
  o[A + 1] = t / T
  return o


def _enumerate():
  """{(t, pivotal, cue): [A, 2] P(o_t, a_t = a, success = s)} over every episode."""
  joint = {}
  for p1, p2, c1, c2 in itertools.product((0, 1), (2, 3), (0, 1), (0, 1)):
    cues = {p1: c1, p2: c2}
    obs = [_obs(t, t in cues, cues.get(t, 0)) for t in range(T)]
    pis = [_softmax(o @ W + B) for o in obs]
    for acts in itertools.product(range(A), repeat=T):
      p = 1.0 / 16 * np.prod([pis[t][a] for t, a in enumerate(acts)])
      s = int(acts[p1] == c1 and acts[p2] == c2)
      for t in range(T):
        key = (t, t in cues, cues.get(t, 0) if t in cues else 0)
        joint.setdefault(key, np.zeros((A, 2)))[acts[t], s] += p
  return joint


# --------------------------------------------------------------------------------------
# Return decomposition.


def test_redistribution_hand_case_sums_to_each_episode_return():
  r = jnp.array([[0., 1], [1, 0], [0, 0], [2, 3]])
  d = jnp.array([[0, 0], [1, 0], [0, 1], [1, 0]], bool)
  g = jnp.array([[.5, .1], [.7, .2], [.3, .3], [1., .4]])
  got = rd.redistribute(g, r, d)
  # Column 0: episodes [0, 1] (G = 1) and [2, 3] (G = 2); column 1: [0, 2] (G = 1) and
  # an unfinished one at step 3 (no correction).
  np.testing.assert_allclose(got, [[.5, .1], [.5, .1], [.3, .8], [1.7, .4]], atol=1e-6)
  jit_got = jax.jit(rd.redistribute)(g, r, d)
  np.testing.assert_allclose(jit_got, got, atol=1e-6)
  with pytest.raises(ValueError, match="predictions"):
    rd.redistribute(g[:3], r, d)


def test_perfect_predictor_puts_the_return_on_the_decisive_steps():
  env, params = envs.make("KeyChain-v0", horizon=12, num_pivotal=2, num_actions=2)
  traj = rollout.collect_episodes(env, params, rollout.uniform_random_policy(2), None,
                                  jax.random.key(3), 64, 12)
  piv = np.asarray(traj.info["pivotal"])
  correct = np.asarray(traj.info["correct"])
  # E[G | prefix_t] under the uniform policy: 0 once a pivotal step went wrong, else
  # (1/2)^(pivotal steps still ahead after t).
  g = np.zeros((12, 64), np.float32)
  for b in range(64):
    ok, left = True, 2
    for t in range(12):
      if piv[t, b]:
        ok, left = ok and bool(correct[t, b]), left - 1
      g[t, b] = float(ok) * 0.5 ** left
  shaped = np.asarray(rd.redistribute(jnp.asarray(g), traj.rewards, traj.dones,
                                      traj.valid))
  ret = np.asarray(traj.rewards).sum(0)
  np.testing.assert_allclose(shaped.sum(0), ret, atol=1e-6)
  first = np.zeros_like(piv)
  first[0] = True
  assert np.all(shaped[~(piv | first)] == 0.0)
  # Step 0 holds the expected return (1/4, or what its own action changed when pivotal).
  assert np.all(np.abs(shaped[0][~piv[0]] - 0.25) < 1e-6)
  # A success: each pivotal step moves the expectation 1/4 -> 1/2 -> 1. A failure: the
  # first wrong answer takes it to 0 and later steps change nothing.
  for b in np.nonzero(~piv[0])[0]:
    steps = np.nonzero(piv[:, b])[0]
    if ret[b] == 1:
      np.testing.assert_allclose(shaped[steps, b], [0.25, 0.5], atol=1e-6)
    else:
      wrong = steps[~correct[steps, b]][0]
      np.testing.assert_allclose(shaped[wrong, b], -g[wrong - 1, b], atol=1e-6)
      assert np.all(shaped[steps[steps > wrong], b] == 0.0)
  assert 0 < np.sum(ret) < 64


def test_lessons_buffer_keeps_high_and_low_returns():
  buf = rd.lessons_init(3, 2, 4)
  for s, rets in enumerate(([0., 1., .5], [.1, 1.1, .6], [.2, 1.2, .7])):
    tokens = jnp.full((3, 3, 2), float(s))
    buf = rd.lessons_add(buf, tokens, jnp.ones((3, 3), bool), jnp.asarray(rets), s)
  assert int(buf.size) == 4
  np.testing.assert_allclose(sorted(np.asarray(buf.data["ret"])), [0., .1, 1.1, 1.2],
                             atol=1e-6)
  # An episode not offered never enters; an empty buffer samples with weight 0.
  empty = rd.lessons_init(3, 2, 4)
  kept = rd.lessons_add(empty, jnp.ones((3, 2, 2)), jnp.ones((3, 2), bool),
                        jnp.array([5., 6.]), 0, offered=jnp.array([True, False]))
  assert int(kept.size) == 1 and float(kept.data["ret"][0]) == 5.0
  assert float(rd.lessons_sample(empty, jax.random.key(0), 3)[3].sum()) == 0.0
  window = jnp.arange(12).reshape(6, 2)
  np.testing.assert_array_equal(rd.window_of(rd.whole_episodes(window, 3), 6), window)


# --------------------------------------------------------------------------------------
# HCA and COCOA.


def _future_loop(r, u, m, gamma, dones):
  t_len, b_len = r.shape
  f, n = np.zeros((t_len, b_len, m)), np.zeros((t_len, b_len, m))
  for b in range(b_len):
    for t in range(t_len):
      for k in range(t + 1, t_len):
        if dones[k - 1, b]:
          break
        if u[k, b] >= 0:
          f[t, b, u[k, b]] += gamma ** (k - t) * r[k, b]
          n[t, b, u[k, b]] += gamma ** (k - t)
  return f, n


def test_future_by_class_and_cocoa_credit_match_loops():
  rng = np.random.default_rng(0)
  r = rng.choice([0.0, 0.3, 1.0], size=(7, 3)).astype(np.float32)
  dones = np.zeros((7, 3), bool)
  dones[3, 0] = dones[6, :] = True
  u = np.asarray(cb.reward_classes(jnp.asarray(r), (0.3, 1.0)))
  np.testing.assert_array_equal(u, np.where(r == 0, -1, np.where(r > 0.5, 1, 0)))
  f, n = cb.future_by_class(jnp.asarray(r), jnp.asarray(u), 2, 0.9, jnp.asarray(dones))
  f_ref, n_ref = _future_loop(r, u, 2, 0.9, dones)
  np.testing.assert_allclose(f, f_ref, atol=1e-5)
  np.testing.assert_allclose(n, n_ref, atol=1e-5)
  pi = _softmax(rng.normal(size=(7, 3, A))).astype(np.float32)
  h = _softmax(rng.normal(size=(7, 3, 2, A))).astype(np.float32)
  credit = cb.cocoa_credit(jnp.asarray(pi), jnp.asarray(h), jnp.asarray(r),
                           jnp.asarray(u), 0.9, jnp.asarray(dones))
  want = np.einsum("tbma,tbm->tba", h / pi[:, :, None] - 1.0, f_ref)
  np.testing.assert_allclose(credit.contributions, want, atol=1e-5)
  np.testing.assert_allclose(credit.immediate, r)


def test_hca_advantages_and_losses_by_hand():
  adv = cb.hca_advantages(jnp.array([[0.5, 0.2]]), jnp.array([[1.0, 0.1]]),
                          jnp.array([[2.0, 1.0]]))
  np.testing.assert_allclose(adv, [[1.0, -1.0]], atol=1e-6)
  logits = jnp.log(jnp.array([[[0.25, 0.75]]]))
  np.testing.assert_allclose(cb.hca_loss(logits, jnp.array([[1]])), -np.log(0.75),
                             rtol=1e-6)
  # The all-action surrogate at pi = pi_old: PPO's clipped terms have the same gradient.
  rng = np.random.default_rng(1)
  lg = jnp.asarray(rng.normal(size=(3, 2, A)), jnp.float32)
  acts = jnp.asarray(rng.integers(0, A, size=(3, 2)))
  imm = jnp.asarray(rng.normal(size=(3, 2)), jnp.float32)
  con = jnp.asarray(rng.normal(size=(3, 2, A)), jnp.float32)
  g1 = jax.grad(cb.all_action_loss)(lg, acts, imm, con)
  g2 = jax.grad(lambda z: jnp.mean(cb.clipped_all_action_terms(z, lg, acts, imm, con,
                                                                0.2)))(lg)
  np.testing.assert_allclose(g1, g2, atol=1e-6)
  pi = jax.nn.softmax(lg)
  # d/dz of sum_a pi_a C_a = pi * (C - sum pi C); of log pi_taken * imm = (e - pi) imm.
  want = -(pi * (con - jnp.sum(pi * con, -1, keepdims=True)) +
           (jax.nn.one_hot(acts, A) - pi) * imm[..., None]) / 6.0
  np.testing.assert_allclose(g1, want, atol=1e-6)


def test_exact_keychain_hindsight_matches_enumeration():
  env, _ = _env()
  joint = _enumerate()
  for (t, piv, cue), table in joint.items():
    obs = jnp.asarray(_obs(t, piv, cue))
    success, failure = keychain_hindsight.keychain_hindsight(env, logits_fn, PARAMS, obs)
    np.testing.assert_allclose(success, table[:, 1] / table[:, 1].sum(), atol=1e-5,
                               err_msg=f"success at {(t, piv, cue)}")
    np.testing.assert_allclose(failure, table[:, 0] / table[:, 0].sum(), atol=1e-5,
                               err_msg=f"failure at {(t, piv, cue)}")


def _expected_gradients(joint):
  """E[g] of REINFORCE, exact HCA and exact COCOA over every episode (NumPy), raveled
  like (W, b): the score of logits = o W + b is (o, 1) outer (e_a - pi)."""
  out = {m: np.zeros(W.size + B.size) for m in ("reinforce", "hca", "cocoa")}
  for p1, p2, c1, c2 in itertools.product((0, 1), (2, 3), (0, 1), (0, 1)):
    cues = {p1: c1, p2: c2}
    keys = [(t, t in cues, cues.get(t, 0) if t in cues else 0) for t in range(T)]
    obs = [_obs(*k) for k in keys]
    pis = [_softmax(o @ W + B) for o in obs]
    for acts in itertools.product(range(A), repeat=T):
      p = 1.0 / 16 * np.prod([pis[t][a] for t, a in enumerate(acts)])
      s = int(acts[p1] == c1 and acts[p2] == c2)
      for t, a in enumerate(acts):
        score_logits = np.eye(A)[a] - pis[t]
        score = np.concatenate([np.outer(obs[t], score_logits).ravel(), score_logits])
        table = joint[keys[t]]
        h = table[:, s] / table[:, s].sum()
        out["reinforce"] += p * score * s
        out["hca"] += p * score * (1.0 - pis[t][a] / h[a]) * s
        if t < T - 1 and s:   # COCOA: all actions, the success that follows step t
          h1 = table[:, 1] / table[:, 1].sum()
          for b in range(A):
            d_pi = pis[t][b] * (np.eye(A)[b] - pis[t])
            d_pi = np.concatenate([np.outer(obs[t], d_pi).ravel(), d_pi])
            out["cocoa"] += p * d_pi * (h1[b] / pis[t][b] - 1.0)
        if t == T - 1:        # the last step's own reward, for the action taken
          out["cocoa"] += p * score * s
  return out


def test_exact_hindsight_estimators_against_enumeration():
  env, params = _env()
  expected = _expected_gradients(_enumerate())
  true = np.asarray(jax.flatten_util.ravel_pytree(jax.grad(
      lambda p: learned_probe.gae_probe.keychain_success_probability(env, logits_fn, p))(
          PARAMS))[0])
  # The enumeration is right: REINFORCE's and COCOA's expectations are grad J.
  np.testing.assert_allclose(expected["reinforce"], true, atol=1e-6)
  np.testing.assert_allclose(expected["cocoa"], true, atol=1e-6)
  # Return-conditioned HCA is not unbiased on KeyChain: a wrong answer makes Z = 1
  # impossible, so its pi / h term does not average to 0 (HCA's theorem needs
  # h(a | o, z) > 0 wherever pi(a | o) > 0).
  hca_bias = np.linalg.norm(expected["hca"] - true) / np.linalg.norm(true)
  assert hca_bias > 0.2
  traj = learned_probe.collect(env, params, logits_fn, PARAMS, jax.random.key(7), 4096)
  base = None
  for method in ("reinforce", "hca", "cocoa"):
    credit = learned_probe.credit_of(method, traj, logits_fn, PARAMS, env=env)
    stats = learned_probe.estimator_stats(env, logits_fn, PARAMS, traj, credit)
    grads = np.asarray(learned_probe.all_action_gradients(
        logits_fn, PARAMS, traj, credit.immediate, credit.contributions)
        if method == "cocoa" else jax.vmap(lambda g: jax.flatten_util.ravel_pytree(g)[0])(
            learned_probe.diagnostics.per_trajectory_gradients(
                lambda p, o, a: learned_probe.nets.categorical_log_prob(logits_fn(p, o), a),
                PARAMS, traj.obs, traj.actions, credit, traj.valid)))
    se = grads.std(0, ddof=1) / np.sqrt(grads.shape[0])
    z = np.abs(grads.mean(0) - expected[method]) / np.maximum(se, 1e-9)
    assert z.max() < 4.5, (method, z)
    if method == "reinforce":
      base = stats
    else:
      # No credit at distractor steps: HCA's all on the pivotal ones, COCOA's except the
      # last step's own reward (its sampled-action term, whatever that step is).
      if method == "hca":
        assert float(stats["credit_on_pivotal"]) > 0.999, stats
      else:
        off = ~np.asarray(traj.info["pivotal"])
        assert np.abs(np.asarray(credit.contributions)[off]).max() < 1e-5
        assert float(stats["credit_on_pivotal"]) > float(base["credit_on_pivotal"])
      assert float(stats["variance"]) < float(base["variance"]), (method, stats)
  assert float(stats["bias"]) < 3 * float(stats["noise"]) + 1e-3, stats   # COCOA


def _hooks_context(config, env, params):
  recipe = hooks.Recipe("reinforce", ("rudder", "hca", "cocoa"))
  return hooks.Context(config=config, recipe=recipe, env=env, env_params=params,
                       policy=None, network=None,
                       logits=lambda p, traj: logits_fn(p, traj.obs),
                       discount=lambda hp: hp["gamma"], batch=8)


def test_features_validate_refuse_and_fill_their_slots():
  env, params = _env()
  feats = (rudder.RudderFeature(), hindsight_credit.HcaFeature(),
           hindsight_credit.CocoaFeature())
  base = ml_collections.ConfigDict({"horizon": T, "num_steps": 2 * T,
                                    "env_name": "KeyChain-v0",
                                    "env_kwargs": {"horizon": T}})
  c = hindsight_credit.add_config(rudder.add_config(ml_collections.ConfigDict(base)),
                                  "cocoa")
  hooks.check(c, hooks.Recipe("reinforce", ("rudder", "cocoa")), feats)
  with pytest.raises(Exception, match=r"rudder\.enabled"):
    hooks.check(c, hooks.Recipe("dqn", ("cocoa",)), feats)
  with pytest.raises(Exception, match=r"hca\.enabled"):
    hooks.check(hindsight_credit.add_config(ml_collections.ConfigDict(base), "hca"),
                hooks.Recipe("ppo", ("hca",), rollout=hooks.CONTINUING), feats)
  bad = rudder.add_config(ml_collections.ConfigDict(base))
  bad.num_steps = T + 1
  with pytest.raises(Exception, match="num_steps"):
    hooks.check(bad, hooks.Recipe("ppo", ("rudder",), rollout=hooks.CONTINUING), feats)
  # Bound: COCOA's estimator slot returns a CocoaCredit; RUDDER keeps each return.
  bound = hooks.Hooks([(f.name, f.bind(_hooks_context(c, env, params)))
                       for f in feats if f.enabled(c)])
  aux = bound.init(jax.random.key(0))
  traj = learned_probe.collect(env, params, logits_fn, PARAMS, jax.random.key(1), 8)
  hp = {"gamma": jnp.float32(1.0), "rudder.lr": jnp.float32(1e-3),
        "rudder.aux_weight": jnp.float32(0.5), "cocoa.lr": jnp.float32(1e-3)}
  signal, aux, m = bound.shape_rewards(aux, hooks.Signal(traj.rewards), traj, hp,
                                       jax.random.key(2), 0, PARAMS)
  np.testing.assert_allclose(signal.rewards.sum(0), traj.rewards.sum(0), atol=1e-5)
  assert "rudder_pivotal_share" in m
  adv, aux, m = bound.advantages(aux, hooks.EstimatorInput(
      traj, signal, None, jnp.zeros_like(traj.rewards), PARAMS, hp, jax.random.key(3)))
  assert isinstance(adv, cb.CocoaCredit) and adv.contributions.shape == (T, 8, A)
  assert "cocoa_loss" in m
