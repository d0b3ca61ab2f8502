"""Extension by argument (issue 45): no config block is silently ignored, for every
recipe; features passed as objects; the typed context every recipe binds."""
import ml_collections
import pytest

from credit_jax import algos
from credit_jax.addons import hindsight_credit, rudder
from credit_jax.config import ConfigError


def _block(c):
  c.my_credit = ml_collections.ConfigDict({"enabled": True, "weight": 0.5})
  return c


@pytest.mark.parametrize("algo", sorted(algos.RECIPES))
@pytest.mark.parametrize("name,add", [
    ("my_credit", _block),
    ("rudder", rudder.add_config),
    ("hca", lambda c: hindsight_credit.add_config(c, "hca")),
    ("cocoa", lambda c: hindsight_credit.add_config(c, "cocoa"))])
def test_a_block_no_feature_of_the_recipe_runs_is_refused(algo, name, add):
  module = algos.RECIPES[algo]
  c = add(module.default_config())
  accepts = getattr(getattr(module, "RECIPE", None), "accepts", ())
  if name in accepts:   # the recipe runs it: validation may only refuse another field
    try:
      algos.validate_config(c)
    except ConfigError as e:
      assert f"config.{name}" not in str(e).split(":")[0]
    return
  with pytest.raises(ConfigError, match=rf"^config\.{name}[.:]") as e:
    algos.validate_config(c)
  assert "\n" not in str(e.value)
