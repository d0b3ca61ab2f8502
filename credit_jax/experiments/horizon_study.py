"""The horizon study under the name of its config and script (the experiment contract).

The experiment contract (credit_jax/experiments/__init__.py) pairs a module
`credit_jax/experiments/<name>.py` with `configs/<name>.py` and `scripts/<name>.py`. The
study's code lives in `horizon.py` (with `horizon_methods.py` and `horizon_report.py`);
its config and script are named `horizon_study`, so this module exports the contract's
four functions under that name:

  python3 scripts/horizon_study.py --config=configs/horizon_study.py:small --workdir=DIR
"""
from credit_jax.experiments.horizon import (  # noqa: F401 (the contract's exports)
    default_config, num_seeds, run, validate_config)

__all__ = ("default_config", "validate_config", "num_seeds", "run")
