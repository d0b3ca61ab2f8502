"""credit_jax: long-horizon credit assignment as pure, jit-compiled JAX functions.

The public API is flat: `cj.gae`, `cj.lambda_returns`, `cj.group_advantages`,
`cj.envs.make`, ... The package is layered (envs/, the core modules, nets/, search/,
addons/, algos/, runtime/, experiments/, sweep/), each layer importing only from itself
and those below it; docs/ARCHITECTURE.md says what each holds.

Importing credit_jax (or any of its modules) changes nothing outside it: it registers no
lowering, sets no environment variable or XLA flag and runs no JAX computation. The CPU
fast paths are opt-in: `cj.fast_paths.enable()` (see credit_jax/fast_paths.py).
"""
import importlib as _importlib

__version__ = "0.1.0"

# The public names and the module each comes from. Nothing is imported until first use
# (PEP 562 `__getattr__` below): `import credit_jax` imports no JAX and starts no XLA
# backend (gymnax, which the environments build on, runs a JAX operation when it is
# imported), so the optional `cj.configure_process()` right after it can still set
# XLA_FLAGS in the process itself.
_SUBMODULES = ("algos", "baselines", "diagnostics", "envs", "fast_paths", "nets", "relabel",
               "replay", "returns", "rollout", "search")
_NAMES = {
    "credit_jax.types": ("PolicyFn", "PolicyState", "PresampledPolicy", "SequencePolicy",
                         "Trajectory", "to_batch_major"),
    "credit_jax.returns": ("discounted_returns", "gae", "lambda_returns", "td_errors"),
    "credit_jax.baselines": ("RunningBaseline", "group_advantages",
                             "running_baseline_advantages", "running_baseline_init",
                             "running_baseline_update"),
    "credit_jax.search": ("SearchOutput", "SearchStats", "SearchTree", "make_mctx_search",
                          "make_search"),
    "credit_jax.algos": ("make_train",),
}
_HOME = {name: module for module, names in _NAMES.items() for name in names}
_HOME.update({name: f"credit_jax.{name}" for name in _SUBMODULES})


def configure_process(num_seeds=None, **kwargs):
  """Optional XLA CPU settings, before the first JAX computation; returns the flags added.

  Nothing in the library needs it: every network's initialiser is safe to vmap on every
  supported jaxlib (credit_jax/nets/initializers.py, BUILD.md "No hang from Python").
  See `credit_jax.runtime.launch.configure_process` for `num_seeds` and the options.
  """
  from credit_jax.runtime import launch   # imports no JAX
  return launch.configure_process(num_seeds, **kwargs)


def __getattr__(name):
  if name in _HOME:
    module = _importlib.import_module(_HOME[name])
    value = module if name in _SUBMODULES else getattr(module, name)
    globals()[name] = value           # later lookups skip __getattr__
    return value
  raise AttributeError(f"module 'credit_jax' has no attribute {name!r}")


def __dir__():
  return sorted(set(globals()) | set(__all__))


__all__ = [
    "PolicyFn", "PolicyState", "PresampledPolicy", "RunningBaseline", "SearchOutput",
    "SearchStats", "SearchTree", "SequencePolicy", "Trajectory", "algos",
    "baselines", "configure_process", "diagnostics", "discounted_returns", "envs",
    "fast_paths", "gae", "group_advantages",
    "lambda_returns", "make_mctx_search", "make_search", "make_train", "nets",
    "relabel",
    "replay", "returns", "rollout", "running_baseline_advantages", "running_baseline_init",
    "running_baseline_update", "search", "td_errors", "to_batch_major",
]
