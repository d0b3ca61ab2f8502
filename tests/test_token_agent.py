"""Tests for the token LM (credit_jax/nets/lm.py) and the token-agent recipe
(credit_jax/algos/token_agent.py): cached acting equals the full-sequence pass, the loss
masks keep prompt and tool tokens out, GAE over the agent's decisions against a NumPy
loop on the compressed sequence, and a seeded learning test with a threshold."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from credit_jax import envs, rollout
from credit_jax.algos import token_agent
from credit_jax.config import ConfigError
from credit_jax.envs import tokens as tokens_lib
from credit_jax.experiments.token_study import study as token_study
from credit_jax.nets import lm, mlp


@functools.lru_cache
def _setup(critic):
  env, params = envs.make("ToolArith-v0", num_turns=2, num_digits=1)
  horizon = int(params.max_steps_in_episode)
  net = lm.TokenLM(vocab_size=env.num_actions, d_model=16, num_heads=2, num_layers=2,
                   max_len=horizon, critic=critic)
  p = lm.init_params(net, jax.random.key(1))
  # Perturbed, so the value head (zeros at init) and every logit carry signal.
  leaves, tree = jax.tree.flatten(p)
  keys = jax.random.split(jax.random.key(2), len(leaves))
  p = jax.tree.unflatten(tree, [x + 0.3 * jax.random.normal(k, x.shape)
                                for x, k in zip(leaves, keys)])
  return env, params, horizon, net, p


@functools.lru_cache
def _sequence(critic):
  net = _setup(critic)[3]
  return jax.jit(functools.partial(lm.sequence, net))


@functools.lru_cache
def _rollout(critic, reencode):
  env, env_params, horizon, net, p = _setup(critic)
  policy = lm.make_policy(net, reencode=reencode)
  traj = jax.jit(lambda k: rollout.collect_episodes(env, env_params, policy, p, k, 6,
                                                    horizon))(jax.random.key(0))
  return traj


@pytest.mark.parametrize("critic,reencode", [("shared", False), ("separate", False),
                                             ("shared", True)])
def test_cached_acting_equals_the_full_sequence_pass(critic, reencode):
  env, _, horizon, net, p = _setup(critic)
  traj = _rollout(critic, reencode)
  logits, values = _sequence(critic)(p, traj.obs[..., 0])               # [T, B, V]
  valid = np.asarray(traj.valid)
  log_probs = mlp.categorical_log_prob(logits, traj.actions)
  np.testing.assert_allclose(np.asarray(log_probs)[valid],
                             np.asarray(traj.log_probs)[valid], atol=2e-5)
  np.testing.assert_allclose(np.asarray(values)[valid],
                             np.asarray(traj.extras["value"])[valid], atol=2e-5)
  assert np.std(np.asarray(values)[valid]) > 1e-2     # the values are not all alike
  # The rollout's streams are the env's: each valid step's next token is its obs.
  assert valid.sum() > 6 * 10


def test_separate_critic_has_its_own_trunk():
  _, _, _, net, p = _setup("separate")
  tokens_ = jnp.arange(20) % 40
  logits, values = net.apply(p, tokens_, method="sequence")
  # Zeroing the actor trunk's parameters leaves the values unchanged, and vice versa.
  actor_off = jax.tree_util.tree_map_with_path(
      lambda path, x: jnp.zeros_like(x) if "trunks_0" in str(path) else x, p)
  critic_off = jax.tree_util.tree_map_with_path(
      lambda path, x: jnp.zeros_like(x) if "trunks_1" in str(path) else x, p)
  np.testing.assert_allclose(net.apply(actor_off, tokens_, method="sequence")[1], values,
                             atol=1e-6)
  np.testing.assert_allclose(net.apply(critic_off, tokens_, method="sequence")[0], logits,
                             atol=1e-6)


def test_agent_mask_is_the_observed_flag_and_excludes_forced_tokens():
  env, *_ = _setup("shared")
  traj = _rollout("shared", False)
  mask = np.asarray(token_agent.agent_mask(traj))
  flag = np.asarray(traj.obs[..., 1]) == 1
  valid = np.asarray(traj.valid)
  np.testing.assert_array_equal(mask, flag & valid)
  assert not mask[:env.prompt_len - 1].any()        # prompt tokens are never the agent's


def _loss_grads_at_forced_steps(loss_of_logits, logits, mask):
  grads = jax.jit(jax.grad(loss_of_logits))(logits)
  return np.abs(np.asarray(grads))[~np.asarray(mask)].max()


def test_masks_keep_prompt_and_tool_tokens_out_of_the_losses():
  _, _, _, net, p = _setup("shared")
  traj = _rollout("shared", False)
  mask = token_agent.agent_mask(traj)
  logits, values = _sequence("shared")(p, traj.obs[..., 0])
  hp = {"clip_eps": 0.2, "ent_coef": 0.01, "kl_coef": 0.0, "vf_coef": 0.5}
  adv = jax.random.normal(jax.random.key(3), mask.shape)
  # GRPO's surrogate on [T, n, K] (here n = 1 task of K = 6 streams).
  mb = {"actions": traj.actions[:, None], "log_probs": traj.log_probs[:, None] - 0.1,
        "advantages": adv[:, None], "valid": mask[:, None]}
  for agg in token_agent.AGGREGATIONS:
    def loss(lg, agg=agg):
      return token_agent.group_surrogate(lg[:, None], None, mb, hp, agg)[0]
    assert _loss_grads_at_forced_steps(loss, logits, mask) == 0.0
  mb = {"mask": mask, "actions": traj.actions, "log_probs": traj.log_probs - 0.1,
        "advantages": adv, "targets": adv, "values": values}

  def ppo(lg):
    return token_agent.ppo_loss(lg, values, mb, hp)[0]
  assert _loss_grads_at_forced_steps(ppo, logits, mask) == 0.0
  v_grad = jax.jit(jax.grad(lambda v: token_agent.ppo_loss(logits, v, mb, hp)[0]))(values)
  assert np.abs(np.asarray(v_grad))[~np.asarray(mask)].max() == 0.0
  # The warm start's cross-entropy ignores whatever stands at forced steps.
  env, env_params, *_ = _setup("shared")
  from credit_jax.envs import tokens
  demo = jax.jit(tokens.demonstrations, static_argnums=(0, 3))(
      env, env_params, jax.random.key(4), 3)
  noisy = demo.replace(actions=jnp.where(demo.agent, demo.actions, 7))
  sft = jax.jit(functools.partial(token_agent.sft_loss, net))
  a, b = sft(p, demo), sft(p, noisy)
  np.testing.assert_allclose(a, b)


def test_group_surrogate_matches_a_numpy_loop_for_each_aggregation():
  rng = np.random.default_rng(0)
  T, N, K, V = 5, 2, 3, 4
  logits = rng.normal(size=(T, N, K, V)).astype(np.float32)
  ref = rng.normal(size=(T, N, K, V)).astype(np.float32)
  actions = rng.integers(0, V, size=(T, N, K))
  old = rng.normal(size=(T, N, K)).astype(np.float32) - 1.5
  adv = rng.normal(size=(T, N, K)).astype(np.float32)
  valid = rng.random((T, N, K)) < 0.6
  valid[:, 0, 0] = False                              # one stream with no agent token
  hp = {"clip_eps": 0.2, "ent_coef": 0.05, "kl_coef": 0.3}
  mb = {"actions": jnp.asarray(actions), "log_probs": jnp.asarray(old),
        "advantages": jnp.asarray(adv), "valid": jnp.asarray(valid)}
  lp_all = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  ref_all = ref - np.log(np.exp(ref).sum(-1, keepdims=True))
  lp = np.take_along_axis(lp_all, actions[..., None], -1)[..., 0]
  rlp = np.take_along_axis(ref_all, actions[..., None], -1)[..., 0]
  ratio = np.exp(lp - old)
  pg = -np.minimum(ratio * adv, np.clip(ratio, 0.8, 1.2) * adv)
  ent = -(np.exp(lp_all) * lp_all).sum(-1)
  kl = np.exp(rlp - lp) - (rlp - lp) - 1.0
  for kind in token_agent.AGGREGATIONS:
    def agg(x):
      if kind == "token_mean":
        return (x * valid).sum() / max(valid.sum(), 1)
      if kind == "constant":
        return (x * valid).sum() / x.size
      per = [sum(x[t, n, k] for t in range(T) if valid[t, n, k]) / max(valid[:, n, k].sum(), 1)
             for n in range(N) for k in range(K)]
      return np.mean(per)
    want = agg(pg) - hp["ent_coef"] * agg(ent) + hp["kl_coef"] * agg(kl)
    got, aux = jax.jit(token_agent.group_surrogate, static_argnums=4)(
        jnp.asarray(logits), jnp.asarray(ref), mb, hp, kind)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(aux["kl_ref"], agg(kl), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match="kind"):
    token_agent.aggregation_weights(jnp.asarray(valid), "sum")


def _numpy_gae(rewards, values, bootstrap, gamma, lam):
  adv, nxt = np.zeros(len(rewards)), 0.0
  for j in reversed(range(len(rewards))):
    v_next = values[j + 1] if j + 1 < len(values) else bootstrap
    nxt = rewards[j] + gamma * v_next - values[j] + gamma * lam * nxt
    adv[j] = nxt
  return adv


def test_gae_runs_over_the_agents_decisions_only():
  traj = _rollout("shared", False)
  horizon = traj.rewards.shape[0]
  values_ext = jax.random.normal(jax.random.key(5), (horizon + 1, 6))
  rewards = jax.random.uniform(jax.random.key(6), traj.rewards.shape) * traj.valid
  traj = traj._replace(rewards=rewards)
  hp = {"gamma": 0.9, "gae_lambda": 0.7, "prm_weight": 0.0}
  adv, targets = token_agent.ppo_advantages(traj, values_ext, hp,
                                            jnp.zeros_like(rewards))
  adv, mask = np.asarray(adv), np.asarray(token_agent.agent_mask(traj))
  for b in range(6):
    valid = np.asarray(traj.valid[:, b])
    end = valid.sum()                       # steps of the first episode
    steps = np.flatnonzero(mask[:end, b])
    # A decision's reward: its own step's and those of the forced steps after it.
    bounds = list(steps) + [end]
    r = np.asarray(rewards[:, b])
    dec_rewards = [r[bounds[j]:bounds[j + 1]].sum() for j in range(len(steps))]
    # A forced prefix before the first decision is telescoped into nothing it credits.
    dec_values = np.asarray(values_ext[steps, b])
    ended = bool(traj.terminated[end - 1, b])
    bootstrap = 0.0 if ended else float(values_ext[horizon, b])
    want = _numpy_gae(dec_rewards, dec_values, bootstrap, 0.9, 0.7)
    np.testing.assert_allclose(adv[steps, b], want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(targets), adv + np.asarray(values_ext[:-1]),
                             rtol=1e-6)


def test_turn_shaping_by_hand():
  info = {"call_end": jnp.array([False, True, False, True, True]),
          "call_needed": jnp.array([False, True, False, False, True])}
  np.testing.assert_allclose(token_agent.turn_shaping(info, 2),
                             [0.0, 0.5, 0.0, 0.0, 0.5])


def _tiny(**over):
  c = token_agent.default_config()
  c.env_kwargs.num_turns = 1
  c.network.d_model, c.network.num_layers = 16, 1
  c.num_tasks, c.group_size, c.num_minibatches = 2, 4, 1
  c.sft_steps, c.sft_batch = 0, 4
  for k, v in over.items():
    c[k] = v
  return c


@pytest.mark.parametrize("over", [
    dict(estimator="drgrpo", loss_aggregation="constant", use_reference_kl=True,
         kl_coef=0.1, prm_weight=0.5),
    dict(estimator="ppo", prm_weight=0.5)])
def test_every_estimator_updates_finitely(over):
  c = _tiny(**over)
  if c.estimator == "ppo":
    c.network.critic = "separate"
  train = token_agent.make_train(c)
  state, m = jax.jit(lambda k: train.run(train.init(k), None, 2))(jax.random.key(0))
  assert all(np.all(np.isfinite(np.asarray(v))) for v in m.values()), m
  assert ("value_loss" in m) == (c.estimator == "ppo")
  assert ("degenerate_frac" in m) == (c.estimator != "ppo")


def test_validation_names_the_field():
  for field, bad in (("estimator", "a2c"), ("group_size", 1), ("env_name", "KeyChain-v0"),
                     ("sft_steps", -1)):
    c = token_agent.default_config()
    c[field] = bad
    with pytest.raises(ConfigError, match=rf"^config\.{field}: "):
      token_agent.validate_config(c)
  c = token_agent.default_config()
  c.network.num_heads = 3
  with pytest.raises(ConfigError, match=r"^config\.network\.d_model"):
    token_agent.validate_config(c)


def test_warm_start_then_grpo_learns():
  # One turn of 1-digit arithmetic: a 100-step warm start makes the greedy policy right
  # on held-out prompts but the sampled one right in about half the episodes (seeds
  # 0-2: 0.54, 0.59, 0.70 over the first 10 updates); GRPO raises that (0.76, 0.83, 0.84
  # over updates 71-80) and keeps the greedy policy right.
  c = token_agent.default_config()
  c.env_kwargs.num_turns = 1
  c.sft_steps, c.num_updates = 100, 80
  train = token_agent.make_train(c)
  evaluate = token_agent.make_evaluate(c, num_episodes=128)

  @jax.jit
  def run(key):
    state = train.init(key)
    before = evaluate(state.params, jax.random.key(7))["success"]
    state, m = train.run(state, None, c.num_updates)
    return before, evaluate(state.params, jax.random.key(7))["success"], m["success"]
  before, after, success = (np.asarray(x) for x in run(jax.random.key(0)))
  assert after >= 0.9, (before, after)
  assert success[-10:].mean() > success[:10].mean() + 0.1, success


def _turn_case():
  # One prompt (N = 1), K = 3 episodes of T = 5 steps. Episode 0: a needed call closing
  # at t = 1, an unneeded one at t = 3; episode 1: one unneeded call at t = 2; episode
  # 2: no call, and its last step is past the episode's end.
  end = np.zeros((5, 1, 3), bool)
  need = np.zeros((5, 1, 3), bool)
  turn = np.zeros((5, 1, 3), np.int32)
  end[1, 0, 0] = end[3, 0, 0] = need[1, 0, 0] = True
  turn[:, 0, 0] = [0, 0, 1, 1, 2]
  end[2, 0, 1] = True
  turn[:, 0, 1] = [0, 0, 0, 1, 1]
  valid = np.ones((5, 1, 3), bool)
  valid[4, 0, 2] = False
  info = {"call_end": jnp.asarray(end), "call_needed": jnp.asarray(need),
          "turn": jnp.asarray(turn)}
  return info, jnp.asarray(valid)


def test_turn_advantages_by_hand():
  info, valid = _turn_case()
  # Pooled: the group's turn rewards are (1, 0) and (0): mean 1/3, sample std
  # sqrt(1/3); normalised 2/sqrt(3), -1/sqrt(3) and -1/sqrt(3). A token of turn j gets
  # the sum of its episode's normalised rewards from j on.
  r3 = 1.0 / np.sqrt(3.0)
  want = np.zeros((5, 3))
  want[:, 0] = [2 * r3 - r3, 2 * r3 - r3, -r3, -r3, 0.0]
  want[:, 1] = [-r3, -r3, -r3, 0.0, 0.0]
  got = token_agent.turn_advantages(info, valid, "pooled", 4)
  np.testing.assert_allclose(np.asarray(got)[:, 0], want, rtol=1e-5, atol=1e-5)
  # Per index: first calls (1, 0): mean 1/2, std sqrt(1/2) -> +-1/sqrt(2); the second
  # call has no other episode's second call to compare with: 0.
  h = 1.0 / np.sqrt(2.0)
  want = np.zeros((5, 3))
  want[:, 0] = [h, h, 0.0, 0.0, 0.0]
  want[:, 1] = [-h, -h, -h, 0.0, 0.0]
  got = token_agent.turn_advantages(info, valid, "per_index", 4)
  np.testing.assert_allclose(np.asarray(got)[:, 0], want, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match="kind"):
    token_agent.turn_advantages(info, valid, "none", 4)
  with pytest.raises(ValueError, match=r"\[T, N, K\]"):
    token_agent.turn_advantages({k: v[:, 0] for k, v in info.items()}, valid[:, 0],
                                "pooled", 4)


def test_token_counts_by_hand():
  c = _tiny(use_reference_kl=True, kl_coef=0.1)
  # k = 1: the oracle's stream is 16 tokens (15 steps), the horizon 15 + 7 = 22; 2 x 4
  # streams, 2 epochs.
  assert token_study.token_counts(c) == {
      "rollout": 176, "update": 352, "reference": 352, "value": 0, "rl_update": 880,
      "sft_step": 4 * 15}
  c = _tiny(estimator="ppo", use_reference_kl=True)
  n = token_study.token_counts(c)
  assert (n["reference"], n["value"], n["rl_update"]) == (0, 8 * 23, 176 + 352 + 184)
  c.sft_turns = (1, 2)   # k = 2: 25 tokens, 24 steps
  assert token_study.token_counts(c)["sft_step"] == 4 * (15 + 24)
  assert token_agent.make_train(c).supervised.tokens_per_step == 4 * (15 + 24)


def test_lr_scale_follows_the_kl_target():
  s = token_agent.adapt_lr_scale(jnp.ones(3), jnp.array([0.03, 0.01, 0.001]), 0.01)
  np.testing.assert_allclose(s, [1 / 1.5, 1.0, 1.5])
  np.testing.assert_allclose(token_agent.adapt_lr_scale(jnp.float32(99.0), 0.0, 0.01), 100.0)
  c = _tiny(target_kl=0.01)
  train = token_agent.make_train(c)
  state, m = jax.jit(lambda k: train.run(train.init(k), None, 3))(jax.random.key(0))
  kl, lr = np.asarray(m["approx_kl"]), np.asarray(m["lr"])
  scale = 1.0
  for i in range(3):           # the lr each update used follows the rule on the last KL
    np.testing.assert_allclose(lr[i], c.lr * scale, rtol=1e-6)
    scale = float(token_agent.adapt_lr_scale(jnp.float32(scale), kl[i], 0.01))
  np.testing.assert_allclose(state.aux["lr_scale"], scale, rtol=1e-6)


def test_auto_critic_and_from_params_graft_the_warm_start():
  c = _tiny(sft_steps=3)
  assert token_agent.critic_kind(c) == "shared"
  grpo = token_agent.make_train(c)
  warm = jax.jit(grpo.init)(jax.random.key(0)).params
  c.estimator = "ppo"
  assert token_agent.critic_kind(c) == "separate"
  ppo = token_agent.make_train(c)
  state = ppo.from_params(warm, jax.random.key(1))
  p = state.params["params"]
  assert set(p) == {"trunks_0", "trunks_1", "lm_head", "v_head"}
  for name in ("trunks_0", "lm_head"):
    jax.tree.map(np.testing.assert_array_equal, p[name], warm["params"][name])
  # The critic trunk is a fresh initialisation, not the actor's.
  assert not np.allclose(p["trunks_1"]["embed"]["embedding"],
                         warm["params"]["trunks_0"]["embed"]["embedding"])
  # The policy acts as the warm start's does: same greedy held-out success.
  ev = token_agent.make_evaluate(c, num_episodes=16)
  c.estimator = "grpo"
  ev0 = token_agent.make_evaluate(c, num_episodes=16)
  a = jax.jit(ev)(state.params, jax.random.key(2))
  b = jax.jit(ev0)(warm, jax.random.key(2))
  np.testing.assert_allclose(a["success"], b["success"])
  np.testing.assert_allclose(a["calls"], b["calls"])


def test_mixed_k_warm_start_loss_is_the_pooled_token_mean():
  c = _tiny(sft_turns=(1, 2))
  sup = token_agent.make_train(c).supervised
  params = lm.init_params(sup.network, jax.random.key(0))
  loss, acc = jax.jit(sup.loss)(params, jax.random.key(1))
  # The same demonstrations, scored one env at a time in NumPy.
  keys = jax.random.split(jax.random.key(1), 2)
  assert [e.num_turns for e, _ in sup.envs] == [1, 2]
  nll = right = count = 0.0
  for (env, p), k in zip(sup.envs, keys):
    demo = tokens_lib.demonstrations(env, p, k, c.sft_batch)
    logits = np.asarray(lm.sequence(sup.network, params, demo.obs[..., 0])[0], np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    a, m = np.asarray(demo.actions), np.asarray(demo.agent)
    chosen = np.take_along_axis(logp, a[..., None], -1)[..., 0]
    nll += -(chosen * m).sum()
    right += ((logits.argmax(-1) == a) * m).sum()
    count += m.sum()
  np.testing.assert_allclose(loss, nll / count, rtol=1e-5)
  np.testing.assert_allclose(acc, right / count, rtol=1e-6)
