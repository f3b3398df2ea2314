"""ragteam: train small teams of language-model agents between any retriever and any LLM."""

__version__ = "0.1.0"
