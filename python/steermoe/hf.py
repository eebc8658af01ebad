"""HF transformers harness (written next)."""
