"""The persona-conditioned judging study: data, persona pools, prompts, judging, evaluation, metrics, analysis."""
