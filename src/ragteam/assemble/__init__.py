"""Run assembly, below every entry point (`eval`, `collect`, `train`, `serve`, `cli`): the team config
(`config`), building its workflow, models, retriever, scorer and engine (`build`), and the resumable output
folder of a rollout over a question file (`folder`)."""
