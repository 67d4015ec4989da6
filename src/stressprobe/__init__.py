"""stressprobe: stress-testing LLM-based evaluation (persona-conditioned judging and CDV)."""

__version__ = "0.1.0"
