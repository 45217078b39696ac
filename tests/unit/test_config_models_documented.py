"""Issue 19: the config models document themselves: every field of every model has a description."""

from pydantic import BaseModel

from hermes_stack.config import models


def test_every_config_field_has_a_description():
    found = [m for m in vars(models).values() if isinstance(m, type) and issubclass(m, BaseModel)
             and m.__module__ == models.__name__ and m is not models.Strict]
    assert len(found) >= 12
    missing = [f"{m.__name__}.{name}" for m in found for name, info in m.model_fields.items() if not info.description]
    assert missing == []
