"""LLM policies: vLLM, transformers, scripted baselines, and prompting."""
