"""The bundled demo: its questions (hotpotqa-dev-50.jsonl) and the report the `ragteam demo` stages write."""
