"""Collecting training data from episode trees: what `ragteam collect sft|process` writes for `ragteam train`.

- `sft`      rejection sampling: the policy acts on paths that end correct (C-3PO's tree rollout or N samples)
- `mmoa`     MMOA-RAG's warm-start data: heuristic Selector labels, gold Generator targets, teacher rewrites
             kept when they retrieve the gold paragraphs better than the question
- `process`  RAG-Gym's process data: ranked keep-one-of-N candidates on correct trajectories -> pairs
- `accept`   when a leaf is correct (`--accept cover_em|em|f1>=0.5|judge`)
- `rows`     writing rows in the trainer's formats (`ragteam.train.data`)
- `run`      the command: rollout (resumable trace) -> rows -> summary

The selection functions (`sft.kept_nodes`, `sft.sft_rows`, `process.process_pairs`, `mmoa.mmoa_rows`,
`mmoa.selector_labels`) are pure: an episode tree in, rows out; no model, no I/O. Nothing heavy is imported
here, so `import ragteam.collect` stays cheap.
"""
