"""The Contextual Distraction Vulnerability (CDV) study: questions, prompts, search, evaluation, DPO."""
