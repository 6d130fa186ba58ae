"""Test helper: random-weight cisl model folders (the product's codegen/randmodel.py)."""

from codegen.randmodel import config_for_tokens, make_model_dir, random_weights, windows

__all__ = ["config_for_tokens", "make_model_dir", "random_weights", "windows"]
