"""Integrations with other training libraries. Each subpackage imports its library; nothing else in zero_core does.

- `zero_core.integrations.transformers`: `ZeroTrainer`, the Hugging Face Trainer on zero's engine
  (docs/integrations.md). Needs the optional `transformers` and `accelerate`.
"""
