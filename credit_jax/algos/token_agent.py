"""Token agents: a small causal LM trained on the token tool-use envs as LM pipelines do.

The policy is `credit_jax.nets.lm.TokenLM`, acting token by token with its KV cache inside
the rollout's `lax.scan` (`credit_jax/envs/tokens.py` for the stream it reads). Training:

  1. **Supervised warm start** (inside `train.init`): `sft_steps` Adam steps of
     next-token cross-entropy on fresh oracle demonstrations (`sft_batch` per step), only
     on the agent's tokens. The optimiser state is then started afresh for RL.
  2. **RL** (each update one compiled call: rollout, loss, optimiser), `config.estimator`:
       "grpo" / "rloo" / "drgrpo": `group_size` (K) samples per prompt
         (`rollout.collect_groups`), group advantages of the episode returns
         (`baselines.group_advantages`) on every agent token, GRPO's clipped surrogate
         (`group_surrogate`, aggregated as `loss_aggregation` says: Dr. GRPO as
         published pairs "drgrpo" with "constant");
       "ppo": PPO with GAE on an independent critic trunk (`network.critic = "auto"`
         or "separate"; "shared": the LM's own value head, whose value loss wrecked
         the warm-started LM, docs/results/token_agent.md), over
         `num_tasks * group_size` fresh prompts.
         Forced tokens are not decisions: discount and lambda are applied only where the
         next token is the agent's (1 elsewhere), so GAE runs on the agent's decisions.
The loss masks every step to `valid & info["agent"]`: prompt and tool tokens are context,
never policy-gradient (or value) targets.

Turn-level process reward from the env's ground truth (`prm_weight` > 0; an upper bound
for any learned PRM, labels no deployed PRM has): a closed call earns `1/k` if it was
needed (`info["call_needed"]`), i.e. the potential difference of `progress / k`; other
calls earn 0. (Charging `-1/k` for the other calls as well, tried first, took the
held-out call accuracy at 4 turns from 0.26 to 0.00 in 100 GRPO updates, below the
unshaped run's 0.06: docs/results/token_agent.md.) PPO
adds `prm_weight` times it to the rewards; the group estimators add `prm_weight` times
its return-to-go from each token to that token's advantage.

Turn-level advantages (`turn_advantage`, group estimators): each closed call j of an
episode earns a turn reward, 1 when the env's ground truth says it was needed
(`info["call_needed"]`), else 0; these are normalised within the prompt's group (pooled
over all its episodes' calls, "pooled", as DeepSeekMath's process-supervised GRPO does
with step rewards; or per turn index j over the episodes that made a j-th call,
"per_index", MT-GRPO-style, which is only a fair comparison where every episode makes
the same number of calls, not here where the agent chooses when to answer), and a token
of turn j (the calls closed before it) gets `turn_weight` times the sum of its episode's
normalised turn rewards from j on, added to the outcome advantage. `turn_advantages` has
the arithmetic; like `prm_weight` it reads ground truth no deployed agent has.

Adaptive learning rate (`target_kl` > 0): the update's mean approx_kl (over its
minibatch steps) steers a scale on `lr` kept in `aux["lr_scale"]`: divided by 1.5 when
the KL exceeds 2 x target, multiplied by 1.5 below target / 2, clipped to [1e-2, 1e2].

Optional KL to the warm-started policy (`use_reference_kl`, `kl_coef`): the reference is
the policy right after the warm start, frozen in `aux["ref_params"]`.

The rollout horizon is the env's time limit (`max_steps_in_episode`, in tokens), which
is also the LM's cache size, so the first episode of every stream ends inside the
window (a truncation only at its last step, bootstrapped from the final token's value).

Metrics: `loss`, `success` (sampled episodes), `return`, `call_accuracy` (closed calls
that were correct), `calls` and `agent_tokens` per episode, `call_rate` (episodes with a
closed call), `episode_length` (tokens),
the surrogate's pieces, `sft_loss` and `sft_accuracy` (the warm start's last step,
constant over a run); group estimators add `degenerate_frac`, PPO `value_loss`.
`make_evaluate(config)` measures a policy on the held-out half (`split` 2) greedily.

Hyperparameters in `hparams` (traced): lr, sft_lr, clip_eps, ent_coef, kl_coef, vf_coef,
gamma, gae_lambda, prm_weight, turn_weight, max_grad_norm.

Token accounting (tokens through the model per RL update and per supervised step, for
the token study's equal-token SFT control) is the study's: `token_counts` in
credit_jax/experiments/token_study/study.py.
"""
from __future__ import annotations

from typing import Callable, Dict

import jax
import jax.numpy as jnp
import ml_collections

from credit_jax import baselines, envs as envs_lib, episodes, rollout
from credit_jax.algos import losses, train as train_lib
from credit_jax.envs import tokens
from credit_jax.nets import lm, mlp
from credit_jax.returns import gae

HPARAMS = ("lr", "sft_lr", "clip_eps", "ent_coef", "kl_coef", "vf_coef", "gamma",
           "gae_lambda", "prm_weight", "turn_weight", "max_grad_norm")
ESTIMATORS = ("grpo", "rloo", "drgrpo", "ppo")
AGGREGATIONS = ("token_mean", "sequence_mean", "constant")
_TURN_ADVANTAGES = ("none", "pooled", "per_index")
CRITICS = ("auto",) + lm.CRITICS
LR_SCALE_STEP, LR_SCALE_RANGE = 1.5, (1e-2, 1e2)


def default_config() -> ml_collections.ConfigDict:
  """Warm start then GRPO on ToolArith-v0 with 2 turns of 1-digit numbers."""
  c = train_lib.base_config()
  c.algo = "token_agent"          # this recipe
  c.env_name = "ToolArith-v0"     # a token env: ToolArith-v0 | ToolLookup-v0
  c.env_kwargs.num_turns = 2      # tool calls the answer needs (the horizon dial)
  c.env_kwargs.num_digits = 1     # digits per number
  c.env_kwargs.split = 1          # train on the training half of the tasks (2: held out)

  c.estimator = "grpo"            # grpo | rloo | drgrpo | ppo
  c.num_updates = 200             # RL updates after the warm start
  c.num_tasks = 8                 # prompts per update
  c.group_size = 8                # K samples per prompt (PPO: fresh prompts, same count)
  c.update_epochs = 2             # passes over each rollout
  c.num_minibatches = 2           # minibatches of whole prompts; must divide num_tasks
  c.loss_aggregation = "token_mean"  # token_mean | sequence_mean | constant (Dr. GRPO)
  # RL learning rate (a traced hparam): 10x below the warm start's, as LM pipelines do;
  # at 3e-3 Adam's first steps wrecked a warm-started policy (held-out success 1 -> 0).
  c.lr = 3e-4
  c.clip_eps = 0.2                # ratio clip of the surrogate (a traced hparam)
  c.ent_coef = 0.0                # entropy bonus on agent tokens (a traced hparam)
  c.use_reference_kl = False      # penalise KL to the warm-started policy
  c.kl_coef = 0.0                 # its weight, used when use_reference_kl (a traced hparam)
  c.vf_coef = 0.5                 # PPO's value-loss weight (a traced hparam)
  c.gamma = 1.0                   # PPO's discount per agent token (a traced hparam)
  c.gae_lambda = 0.95             # PPO's GAE lambda per agent token (a traced hparam)
  c.prm_weight = 0.0              # turn-level shaping from env ground truth (traced)
  c.turn_advantage = "none"       # none | pooled | per_index: turn-level advantages
  c.turn_weight = 1.0             # their weight beside the outcome's (a traced hparam)
  c.target_kl = 0.0               # > 0: scale lr to hold the update's approx_kl near it

  c.sft_steps = 150               # supervised warm-start steps inside train.init (0: none)
  c.sft_batch = 16                # oracle demonstrations per warm-start step
  c.sft_lr = 3e-3                 # warm-start learning rate (a traced hparam)
  c.sft_turns = ()                # k of the warm start's demos (sft_batch each); (): env's

  # The LM (credit_jax/nets/lm.py); network.hidden_sizes/activation/shared_torso unused.
  c.network.d_model = 32          # transformer width
  c.network.num_heads = 2         # attention heads (d_model / num_heads even)
  c.network.num_layers = 2        # transformer blocks
  c.network.mlp_ratio = 4         # MLP width / d_model
  # auto: separate for ppo, shared (no value used) otherwise; shared: value head on the
  # LM trunk; separate: an own trunk.
  c.network.critic = "auto"
  c.eval_episodes = 256           # held-out episodes per make_evaluate call
  c.chunk_updates = 10            # updates per compiled call (one progress line each)
  return c


def validate_fields(config) -> None:
  """Raises `ConfigError` naming the first field of this recipe that cannot run."""
  req = train_lib.require
  train_lib.require_one_of(config.estimator, "estimator", ESTIMATORS)
  req(int(config.group_size) >= (1 if config.estimator == "ppo" else 2), "group_size",
      f"must be >= 2 for a group baseline (>= 1 for ppo), got {config.group_size}")
  train_lib.require_range(config, ("num_tasks", "num_updates", "update_epochs",
                                   "num_minibatches", "sft_batch", "eval_episodes"), 1)
  train_lib.require_range(config, "sft_steps", 0)
  req(config.num_tasks % config.num_minibatches == 0, "num_minibatches",
      f"num_tasks={config.num_tasks} is not divisible by num_minibatches="
      f"{config.num_minibatches}")
  train_lib.require_one_of(config.loss_aggregation, "loss_aggregation", AGGREGATIONS)
  train_lib.require_range(config, "clip_eps", 0.0, strict=True)
  train_lib.require_range(config, ("ent_coef", "kl_coef", "vf_coef", "prm_weight",
                                   "turn_weight", "sft_lr", "target_kl"), 0.0)
  train_lib.require_range(config, ("gamma", "gae_lambda"), 0.0, 1.0)
  net = config.network
  train_lib.require_range(net, ("d_model", "num_heads", "num_layers", "mlp_ratio"), 1,
                          prefix="network.")
  head = int(net.d_model) // max(int(net.num_heads), 1)
  req(net.d_model % net.num_heads == 0 and head % 2 == 0, "network.d_model",
      f"d_model={net.d_model} / num_heads={net.num_heads} must be an even whole number")
  train_lib.require_one_of(net.critic, "network.critic", CRITICS)
  train_lib.require_one_of(config.turn_advantage, "turn_advantage", _TURN_ADVANTAGES)
  req(config.turn_advantage == "none" or config.estimator != "ppo", "turn_advantage",
      "turn-level advantages are for the group estimators, not ppo")
  req(all(int(k) >= 1 for k in config.sft_turns), "sft_turns",
      f"must hold turns k >= 1, got {config.sft_turns}")
  req(not config.sft_turns or config.env_name == "ToolArith-v0", "sft_turns",
      "mixed-k warm starts are built for ToolArith-v0")
  req(config.env_name in ("ToolArith-v0", "ToolLookup-v0"), "env_name",
      f"must be a token env (ToolArith-v0 | ToolLookup-v0), got {config.env_name!r}")


# The token agent's program calls no hook slot: an enabled feature is refused, naming its field.
validate_config = train_lib.validator("token_agent", validate_fields, checked=False)


def critic_kind(config) -> str:
  """`network.critic` resolved: "auto" is "separate" for ppo, "shared" otherwise."""
  kind = str(config.network.critic)
  if kind == "auto":
    return "separate" if config.estimator == "ppo" else "shared"
  return kind


def make_network(config, env, horizon: int) -> lm.TokenLM:
  """The LM for `config.network` with a cache of `horizon` slots."""
  net = config.network
  return lm.TokenLM(vocab_size=env.num_actions, d_model=int(net.d_model),
                    num_heads=int(net.num_heads), num_layers=int(net.num_layers),
                    mlp_ratio=int(net.mlp_ratio), max_len=horizon,
                    critic=critic_kind(config))


def sft_envs(config):
  """`[(env, env_params)]` whose oracle demonstrations the warm start imitates: the
  recipe's env, or ToolArith-v0 at each k of `config.sft_turns` (other kwargs alike)."""
  env, env_params = train_lib.make_env(config)
  if not config.sft_turns:
    return [(env, env_params)]
  kwargs = dict(config.env_kwargs)
  split = kwargs.pop("split", 0)
  out = []
  for k in config.sft_turns:
    e, p = envs_lib.make(config.env_name, **{**kwargs, "num_turns": int(k)})
    out.append((e, p.replace(split=split)))
  return out


def turn_advantages(info, valid, kind: str, num_slots: int) -> jax.Array:
  """Turn-level advantages `[T, N, K]` from per-call ground truth (see the module doc).

  Args:
    info: the env's `call_end`, `call_needed` (bool) and `turn` (int: calls closed
      before the step) per step, each `[T, N, K]` (N prompts, K episodes each).
    valid: [T, N, K] bool, the steps of each stream's first episode.
    kind: "pooled" (normalise over all calls of a group) or "per_index" (over the
      group's j-th calls, for each j).
    num_slots: J, an upper bound on calls per episode (calls past it are dropped).
  Returns:
    `[T, N, K]`: at step t of an episode, the sum of its normalised turn rewards of
    calls j >= turn(t). Normalising: `(r - mean) / (std + 1e-6)`, std with ddof 1 as in
    `baselines.group_advantages`; 0 where fewer than 2 calls share the statistics.
  """
  if kind not in _TURN_ADVANTAGES[1:]:
    raise ValueError(f"kind must be one of {_TURN_ADVANTAGES[1:]}, got {kind!r}")
  shape = valid.shape
  for name in ("call_end", "call_needed", "turn"):
    if info[name].shape != shape or len(shape) != 3:
      raise ValueError(f"info[{name!r}] must be [T, N, K] like valid {shape}, got "
                       f"{info[name].shape}")
  ends = info["call_end"] & valid
  slot = jax.nn.one_hot(info["turn"], num_slots, dtype=jnp.float32)      # [T, N, K, J]
  present = jnp.einsum("tnk,tnkj->nkj", ends.astype(jnp.float32), slot)  # 0/1
  reward = jnp.einsum("tnk,tnkj->nkj", (ends & info["call_needed"]).astype(jnp.float32),
                      slot)
  axes = (1, 2) if kind == "pooled" else (1,)
  count = jnp.sum(present, axis=axes, keepdims=True)
  mean = jnp.sum(reward * present, axis=axes, keepdims=True) / jnp.maximum(count, 1.0)
  var = (jnp.sum(jnp.square(reward - mean) * present, axis=axes, keepdims=True)
         / jnp.maximum(count - 1.0, 1.0))
  norm = jnp.where((present > 0) & (count >= 2),
                   (reward - mean) / (jnp.sqrt(var) + 1e-6), 0.0)        # [N, K, J]
  to_go = jnp.flip(jnp.cumsum(jnp.flip(norm, -1), -1), -1)                # sum over j' >= j
  return jnp.where(valid, jnp.einsum("tnkj,nkj->tnk", slot, to_go), 0.0)


def agent_mask(traj) -> jax.Array:
  """[T, ...] bool: steps whose action the env wrote (the loss mask), first episode only."""
  return traj.valid & traj.info["agent"]


def turn_shaping(info, num_turns: int) -> jax.Array:
  """[T, ...] float32: 1/k at the end of a needed call, 0 elsewhere (progress / k as a
  potential)."""
  return (info["call_end"] & info["call_needed"]).astype(jnp.float32) / num_turns


def sft_loss(network, params, demos):
  """Next-token cross-entropy on the agent's tokens of oracle demonstrations `demos` (a
  `Demonstrations`, or a list of them of several lengths: averaged over all their agent
  tokens together); `(loss [], accuracy [])` (accuracy: the argmax is the oracle's token)."""
  nll = right = count = 0.0
  for demo in demos if isinstance(demos, list) else [demos]:
    logits, _ = lm.sequence(network, params, demo.obs[..., 0])            # [T, B, V]
    mask = demo.agent.astype(jnp.float32)
    nll += -jnp.sum(mlp.categorical_log_prob(logits, demo.actions) * mask)
    right += jnp.sum((jnp.argmax(logits, -1) == demo.actions) * mask)
    count += jnp.sum(mask)
  count = jnp.maximum(count, 1.0)
  return nll / count, right / count


class Supervised:
  """Supervised steps on fresh oracle demonstrations (the warm start, and the study's
  equal-token SFT control), for the LM of `config`.

  `init(params, hp) -> opt_state`; `run(params, opt_state, keys [S, 2], hp) -> (params,
  opt_state, (loss [S], accuracy [S]))`: one Adam step at `hp["sft_lr"]` per key, each
  on `sft_batch` demonstrations of every env of `sft_envs(config)` (split as the
  config's env). `tokens_per_step`: tokens through the model per step.
  """

  def __init__(self, config):
    self.envs = sft_envs(config)
    env, env_params = self.envs[0]
    self.network = make_network(config, env, int(env_params.max_steps_in_episode))
    self.optimizer = train_lib.make_optimizer(config)
    self.batch = int(config.sft_batch)
    self.tokens_per_step = self.batch * sum(int(e.oracle_steps) for e, _ in self.envs)

  def init(self, params, hp):
    return self.optimizer.init(params, hp["max_grad_norm"])

  def loss(self, params, key):
    keys = [key] if len(self.envs) == 1 else jax.random.split(key, len(self.envs))
    return sft_loss(self.network, params, [
        tokens.demonstrations(e, p, k, self.batch) for (e, p), k in zip(self.envs, keys)])

  def run(self, params, opt_state, keys, hp):
    grad_fn = jax.value_and_grad(self.loss, has_aux=True)

    def step(carry, k):
      params, opt_state = carry
      (loss, acc), grads = grad_fn(params, k)
      params, opt_state, _ = self.optimizer.apply(params, opt_state, grads, hp["sft_lr"],
                                                  hp["max_grad_norm"])
      return (params, opt_state), (loss, acc)
    (params, opt_state), out = jax.lax.scan(step, (params, opt_state), keys)
    return params, opt_state, out


def _graft(params, source):
  """`params` with every leaf that `source` (a checkpoint of another critic kind of the
  same LM) holds at the same path replaced by it: the warm-started actor into a network
  with a separate critic trunk, whose own trunk keeps `params`' values."""
  if isinstance(params, dict) or hasattr(params, "items"):
    return {k: _graft(v, source[k]) if k in source else v for k, v in params.items()}
  if jnp.shape(params) != jnp.shape(source):
    raise ValueError(f"checkpoint leaf {jnp.shape(source)} does not fit {jnp.shape(params)}")
  return source


def aggregation_weights(mask: jax.Array, kind: str):
  """`(weights [T, ...], normalizer [])` with `sum(x * weights) / normalizer` the loss
  aggregate of per-token terms `x [T, ...]` over the tokens in `mask [T, ...]`.

  token_mean: the mean over all masked tokens (GRPO); sequence_mean: each stream's mean
  over its masked tokens, averaged over streams; constant: the masked sum over the fixed
  token budget `mask.size` (Dr. GRPO: no length normalisation).
  """
  if kind not in AGGREGATIONS:
    raise ValueError(f"kind must be one of {AGGREGATIONS}, got {kind!r}")
  m = mask.astype(jnp.float32)
  if kind == "token_mean":
    return m, jnp.sum(m)
  if kind == "sequence_mean":
    length = jnp.maximum(jnp.sum(m, axis=0, keepdims=True), 1.0)   # [1, ...]
    return m / length, jnp.asarray(m[0].size, jnp.float32)
  return m, jnp.asarray(m.size, jnp.float32)


def group_surrogate(logits, ref_logits, mb, hp, kind: str):
  """The group estimators' loss on a minibatch: `(loss [], aux)`.

  Args:
    logits: [T, ..., V] the policy's logits at the minibatch's tokens.
    ref_logits: [T, ..., V] the frozen reference policy's, or None (no KL term).
    mb: `actions`, `log_probs` (at collection), `advantages`, `valid` (the loss mask),
      each `[T, ...]`.
    hp: traced `clip_eps`, `ent_coef`, `kl_coef`.
    kind: one of `AGGREGATIONS`.
  """
  if logits.shape[:-1] != mb["actions"].shape:
    raise ValueError(f"logits [T, ..., V] and actions [T, ...] disagree: "
                     f"{logits.shape}, {mb['actions'].shape}")
  weights, normalizer = aggregation_weights(mb["valid"], kind)
  log_probs = mlp.categorical_log_prob(logits, mb["actions"])
  # aux: policy loss on the loss's scale; entropy, clip fraction and approx KL as means
  # over the tokens weighted as the aggregate weighs them.
  loss, aux = losses.weighted_clipped_policy_loss(
      log_probs, mb["log_probs"], mb["advantages"], mlp.categorical_entropy(logits),
      weights, normalizer, hp["clip_eps"], hp["ent_coef"])
  kl = jnp.zeros(())
  if ref_logits is not None:
    ref_log_probs = mlp.categorical_log_prob(ref_logits, mb["actions"])
    kl = (jnp.sum(losses.kl_to_reference(log_probs, ref_log_probs) * weights)
          / jnp.maximum(normalizer, 1.0))
    loss = loss + hp["kl_coef"] * kl
  return loss, {**aux, "kl_ref": kl}


def ppo_loss(logits, values, mb, hp):
  """PPO's loss over the agent's tokens: `(loss [], aux)`; `mb` fields `[T, ...]` with
  `mask`, `actions`, `log_probs`, `advantages`, `targets`, `values` (at collection)."""
  mask = mb["mask"]
  n = jnp.maximum(jnp.sum(mask), 1.0)
  adv = mb["advantages"]
  mean = jnp.sum(adv * mask) / n
  std = jnp.sqrt(jnp.sum(jnp.square(adv - mean) * mask) / n)
  log_probs = mlp.categorical_log_prob(logits, mb["actions"])
  pg, clipped, approx_kl = losses.clipped_surrogate(log_probs, mb["log_probs"],
                                                    (adv - mean) / (std + 1e-8),
                                                    hp["clip_eps"])
  v_loss = losses.value_loss(values, mb["targets"], mb["values"], hp["clip_eps"])
  entropy = mlp.categorical_entropy(logits)

  def m(x):
    return episodes.masked_mean(x, mask)
  loss = m(pg) + hp["vf_coef"] * m(v_loss) - hp["ent_coef"] * m(entropy)
  return loss, {"policy_loss": m(pg), "value_loss": m(v_loss), "entropy": m(entropy),
                "approx_kl": m(approx_kl), "clip_frac": m(clipped)}


def ppo_advantages(traj, values_ext, hp, shaping):
  """GAE over the agent's decisions. `values_ext [T + 1, B]`: values at obs 0..T-1 and
  at the last step's final observation. Returns `(advantages, targets)` `[T, B]`."""
  agent_next = jnp.concatenate([traj.info["agent"][1:],
                                jnp.ones_like(traj.info["agent"][:1])], axis=0)
  discounts = jnp.where(agent_next, hp["gamma"], 1.0)
  lambdas = jnp.where(agent_next, hp["gae_lambda"], 1.0)
  rewards = traj.rewards + hp["prm_weight"] * shaping
  adv = gae(rewards, discounts, values_ext, lambdas, terminated=traj.terminated,
            truncated=traj.truncated, final_values=values_ext[1:])
  return adv, adv + values_ext[:-1]


def _metrics(traj, returns, mask):
  valid = traj.valid
  ends = traj.info["call_end"] & valid

  def per_episode(x):
    return jnp.mean(jnp.sum(x.astype(jnp.float32), axis=0))
  return {"success": jnp.mean((returns > 0).astype(jnp.float32)), "return": returns.mean(),
          "call_accuracy": jnp.sum(traj.info["call_correct"] & valid)
          / jnp.maximum(jnp.sum(ends), 1),
          "calls": per_episode(ends), "agent_tokens": per_episode(mask),
          "call_rate": jnp.mean((jnp.sum(ends, axis=0) > 0).astype(jnp.float32)),
          "episode_length": per_episode(valid)}


def make_train(config, features=()) -> train_lib.Train:
  """`Train` for a token agent; see `train_lib.Train` for how to call it. `features`:
  feature objects (`hooks.Feature`), as every recipe takes them; this one runs none (an
  enabled one is refused in one line naming why)."""
  validate_config(config, tuple(features))
  env, env_params = train_lib.make_env(config)
  horizon = int(env_params.max_steps_in_episode)
  network = make_network(config, env, horizon)
  estimator = str(config.estimator)
  is_ppo = estimator == "ppo"
  policy = lm.make_policy(network, value=is_ppo)
  num_tasks, group = int(config.num_tasks), int(config.group_size)
  n_mb, n_epochs, n_updates = (int(config.num_minibatches), int(config.update_epochs),
                               int(config.num_updates))
  sft_steps, sft_batch = int(config.sft_steps), int(config.sft_batch)
  optimizer = train_lib.make_optimizer(config)
  use_kl, agg = bool(config.use_reference_kl), str(config.loss_aggregation)
  num_turns = int(env.num_turns)
  supervised = Supervised(config)
  target_kl = float(config.target_kl)
  turn_kind = str(config.turn_advantage)
  turn_slots = horizon // 4 + 1    # a call takes >= 4 tokens (CALC END ERR ;)

  def start(params, key, hp, sft_l=None, sft_a=None):
    zero = jnp.zeros((), jnp.float32)
    aux = {"sft_loss": zero if sft_l is None else sft_l,
           "sft_accuracy": zero if sft_a is None else sft_a}
    if use_kl:
      aux["ref_params"] = params
    if target_kl > 0:
      aux["lr_scale"] = jnp.ones((), jnp.float32)
    return train_lib.TrainState(params=params, opt_state=optimizer.init(
        params, hp["max_grad_norm"]), key=key, update=jnp.zeros((), jnp.int32), aux=aux)

  def init_fn(key, hp):
    k_params, k_sft, k_run = jax.random.split(key, 3)
    params = lm.init_params(network, k_params)
    sft_l = sft_a = jnp.zeros((), jnp.float32)
    if sft_steps:
      opt = supervised.init(params, hp)
      params, _, (loss, acc) = supervised.run(params, opt, jax.random.split(k_sft, sft_steps),
                                              hp)
      sft_l, sft_a = loss[-1], acc[-1]
    return start(params, k_run, hp, sft_l, sft_a)

  def group_loss(params, mb, ref_params, hp):
    logits, _ = lm.sequence(network, params, mb["tokens"])              # [T, n, K, V]
    ref_logits = lm.sequence(network, ref_params, mb["tokens"])[0] if use_kl else None
    return group_surrogate(logits, ref_logits, mb, hp, agg)

  def group_update(state, hp, k_roll):
    traj = rollout.collect_groups(env, env_params, policy, state.params, k_roll,
                                  num_tasks, group, horizon)            # [T, N, K]
    mask = agent_mask(traj)
    returns = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)  # [N, K]
    adv, degenerate = baselines.group_advantages(returns, kind=estimator)
    shaping = jnp.where(traj.valid, turn_shaping(traj.info, num_turns), 0.0)
    to_go = jnp.flip(jnp.cumsum(jnp.flip(shaping, 0), 0), 0)
    advantages = adv[None] + hp["prm_weight"] * to_go
    if turn_kind != "none":
      advantages = advantages + hp["turn_weight"] * turn_advantages(
          traj.info, traj.valid, turn_kind, turn_slots)
    data = {"tokens": traj.obs[..., 0], "actions": traj.actions,
            "log_probs": traj.log_probs, "valid": mask, "advantages": advantages}
    return traj, returns, mask, data, {"degenerate_frac": jnp.mean(
        degenerate.astype(jnp.float32))}

  def ppo_update(state, hp, k_roll):
    traj = rollout.collect_episodes(env, env_params, policy, state.params, k_roll,
                                    num_tasks * group, horizon)          # [T, B]
    mask = agent_mask(traj)
    returns = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)
    stream = jnp.concatenate([traj.obs[..., 0], traj.final_obs[-1:, :, 0]], axis=0)
    values_ext = lm.sequence(network, state.params, stream)[1]          # [T + 1, B]
    shaping = jnp.where(traj.valid, turn_shaping(traj.info, num_turns), 0.0)
    adv, targets = ppo_advantages(traj, values_ext, hp, shaping)
    data = {"tokens": traj.obs[..., 0], "actions": traj.actions, "mask": mask,
            "log_probs": traj.log_probs, "advantages": adv, "targets": targets,
            "values": values_ext[:-1]}
    return traj, returns, mask, data, {}

  def update_fn(state, hp):
    key, k_roll, k_perm = jax.random.split(state.key, 3)
    collect = ppo_update if is_ppo else group_update
    traj, returns, mask, data, extra = collect(state, hp, k_roll)
    ref_params = state.aux.get("ref_params")
    if is_ppo:
      def loss_fn(p, mb):
        logits, values = lm.sequence(network, p, mb["tokens"])
        return ppo_loss(logits, values, mb, hp)
    else:
      def loss_fn(p, mb):
        return group_loss(p, mb, ref_params, hp)
    base_lr = hp["lr"] * state.aux["lr_scale"] if target_kl > 0 else hp["lr"]
    lr = train_lib.learning_rate(base_lr, state.update, n_updates, bool(config.anneal_lr))
    # Minibatches split axis 1 (prompts; PPO: episodes), so every stream stays whole.
    params, opt_state, metrics = train_lib.minibatch_epochs(
        loss_fn, state.params, state.opt_state, data, k_perm, num_epochs=n_epochs,
        num_minibatches=n_mb, axis=1, lr=lr, max_grad_norm=hp["max_grad_norm"],
        optimizer=optimizer)
    metrics.update(_metrics(traj, returns, mask), **extra, lr=lr,
                   sft_loss=state.aux["sft_loss"], sft_accuracy=state.aux["sft_accuracy"])
    aux = state.aux
    if target_kl > 0:
      aux = {**aux, "lr_scale": adapt_lr_scale(aux["lr_scale"], metrics["approx_kl"],
                                               target_kl)}
    return train_lib.TrainState(params=params, opt_state=opt_state, key=key,
                             update=state.update + 1, aux=aux), metrics

  def from_params(params, key, hparams=None):
    """A fresh `TrainState` (optimiser, reference, lr scale) from a checkpoint's LM
    params (`_graft`ed into this network's tree: a separate critic trunk starts from
    its initialisation), as `init` after a warm start; `key` [2] or typed."""
    hp = train._hparams(hparams)
    key = train_lib._raw_key(key)
    k_params, k_run = jax.random.split(key)
    return start(_graft(lm.init_params(network, k_params), params), k_run, hp)

  train = train_lib.Train(
      config=config, init_fn=init_fn, update_fn=update_fn,
      default_hparams={k: config[k] for k in HPARAMS}, num_updates=n_updates,
      env_steps_per_update=num_tasks * group * horizon,
      headline=("success", "value_loss" if is_ppo else "degenerate_frac"))
  train.from_params = from_params
  train.supervised = supervised
  # What evaluating a checkpoint needs (train_lib.EVALUATION): the LM on the run's own
  # env and task split, sampling tokens as in training or (greedy) taking the argmax
  # (`make_evaluate` measures the held-out split).
  sampled_lm = lm.make_policy(network, value=False)
  greedy_lm = lm.make_policy(network, value=False, greedy=True)
  return train_lib.attach_evaluation(train, env, env_params, eval_policy=lambda params,
                                     greedy=False: (greedy_lm if greedy else sampled_lm, params))


def adapt_lr_scale(scale, approx_kl, target_kl: float):
  """The lr scale after an update with mean `approx_kl` (see the module doc)."""
  scale = jnp.where(approx_kl > 2.0 * target_kl, scale / LR_SCALE_STEP,
                    jnp.where(approx_kl < 0.5 * target_kl, scale * LR_SCALE_STEP, scale))
  return jnp.clip(scale, *LR_SCALE_RANGE)


def make_evaluate(config, split: int = 2, greedy: bool = True,
                  num_episodes: int = 0) -> Callable[..., Dict[str, jax.Array]]:
  """`evaluate(params, key) -> {"success", "call_accuracy", "calls", ...: []}` over
  `num_episodes` (default `config.eval_episodes`) fresh episodes of the `split` half of
  the tasks (2: held out), greedy (argmax tokens) or sampled. Jittable and vmappable."""
  validate_config(config)
  env, env_params = train_lib.make_env(config)
  env_params = env_params.replace(split=split)
  horizon = int(env_params.max_steps_in_episode)
  network = make_network(config, env, horizon)
  policy = lm.make_policy(network, value=False, greedy=greedy)
  num = int(num_episodes or config.eval_episodes)

  def evaluate(params, key):
    traj = rollout.collect_episodes(env, env_params, policy, params, key, num, horizon)
    returns = jnp.sum(jnp.where(traj.valid, traj.rewards, 0.0), axis=0)
    return _metrics(traj, returns, agent_mask(traj))
  return evaluate
