"""`ragteam serve team`: serve a whole team (a workflow with its policy, LLM and retriever) as an OpenAI model.

    ragteam serve team --workflow c3po --retriever.index indexes/hotpot --port 8002
    curl -s localhost:8002/v1/chat/completions \\
        -d '{"model": "c3po", "messages": [{"role": "user", "content": "Who directed Doctor Strange?"}]}'

The last user message is the question, the answer is the reply; `"ragteam": {"trace": true}` adds the episode
tree, `"stream": true` streams the answer. The team is assembled as `ragteam ask` and `ragteam eval` assemble it
(`--policy.*`, `--llm.*`, `--retriever.*`, `--rollout.*` and the workflow options); concurrent requests share
engine runs, so their model calls and searches are batched. See docs/serving.md and `ragteam.serve.team`.
`--port 0` picks a free port; once listening it prints `serving on http://HOST:PORT` (`ragteam.serve.listen`).
"""

from __future__ import annotations

import time

from pydantic import Field

from ragteam.assemble.config import TeamConfig
from ragteam.cli.serve_llm import MAX_BATCH_TOKENS, PREFILL_CHUNK
from ragteam.serve.guard import MAX_WAIT_MS
from ragteam.serve.listen import ServerConfig


class Config(TeamConfig, ServerConfig):
    """Settings of `ragteam serve team`."""

    data: str | None = Field(
        None,
        description="dataset whose paragraphs --corpus distractor (all of them: a server's questions "
        "arrive later) and --corpus pooled search, when neither --retriever.index nor --retriever.url is given",
    )
    format: str | None = Field(None, description="reader format of --data (default: detected from the file)")
    served_name: str | None = Field(
        None,
        description="model name clients send and /v1/models lists (default: the team's name, its class's "
        "`name`; a --workflow module path is accepted as an alias)",
    )
    max_batch: int | None = Field(
        None,
        ge=1,
        description="most questions gathered into one engine run (default: --rollout.max-concurrent)",
    )
    batch_wait_ms: float = Field(
        10.0,
        ge=0,
        le=MAX_WAIT_MS,
        description="how long to wait for more questions before starting an engine run",
    )
    max_question_chars: int = Field(8000, ge=1, description="longest question accepted, in characters")
    max_body_bytes: int = Field(1_000_000, ge=1024, description="largest request body accepted, in bytes")
    max_batch_tokens: int = Field(
        MAX_BATCH_TOKENS,
        ge=1,
        description="local models: most padded tokens decoded in one batch (rows x (longest prompt + longest "
        "max_tokens)); a long prompt runs apart from short ones, a batch out of memory is run again row by row",
    )
    prefill_chunk: int = Field(
        PREFILL_CHUNK,
        ge=1,
        description="local models: input tokens per prefill forward pass; a longer prompt is prefilled in chunks "
        "over the KV cache, so its memory grows linearly with its length; same replies",
    )


def served_names(served_name: str | None, workflow, requested: str) -> tuple[str, tuple[str, ...]]:
    """The model id a team is served as, and the other names a request may send: --served-name alone when
    given; else the team's one name (`protocol.team_name`), with the --workflow value as an alias when it
    differs (`selfask.team:SelfAsk` for a class named `self-ask`)."""
    from ragteam.protocol import team_name

    if served_name:
        return served_name, ()
    name = team_name(workflow, requested)
    return name, (requested,) if requested != name else ()


def run(cfg: Config) -> int:
    from ragteam.assemble.build import build_team, build_workflow, needs_retriever
    from ragteam.assemble.corpus import choose_corpus
    from ragteam.protocol import team_name
    from ragteam.serve.guard import resolve_api_key
    from ragteam.serve.listen import serve
    from ragteam.serve.team import make_app, warm_up

    title = team_name(build_workflow(cfg), cfg.workflow)  # the class's name from the first line on (no model)
    print(f"ragteam: building team {title!r} (indexes, models)", flush=True)
    start = time.monotonic()
    built, _ = choose_corpus(cfg, cfg.data, cfg.format, needs_retriever(cfg))  # questions come later:
    parts = build_team(built, data=cfg.data, fmt=cfg.format)  # distractor = every paragraph of --data
    print(f"ragteam: team built ({time.monotonic() - start:.1f} s)", flush=True)
    for model in (parts.policy, parts.llm):  # a local model decodes within the budget
        if model is not None and hasattr(model, "max_batch_tokens"):
            model.max_batch_tokens = cfg.max_batch_tokens
            model.prefill_chunk = cfg.prefill_chunk
    startup = warm_up(parts.engine, say=lambda line: print(line, flush=True))
    name, aliases = served_names(cfg.served_name, parts.workflow, cfg.workflow)
    app = make_app(
        parts.engine,
        parts.workflow,
        name,
        max_batch=cfg.max_batch,
        batch_wait_ms=cfg.batch_wait_ms,
        max_question_chars=cfg.max_question_chars,
        max_body_bytes=cfg.max_body_bytes,
        api_key=resolve_api_key(cfg.api_key),
        docs=cfg.docs,
        read_timeout=cfg.read_timeout,
        startup=startup,
        aliases=aliases,
    )
    pieces = [f"policy {cfg.policy.model}" if parts.policy is not None else None]
    pieces.append(f"LLM {cfg.llm.model}" if parts.llm is not None else None)
    pieces.append(f"{parts.retriever.name} retriever" if parts.retriever is not None else None)
    team = ", ".join(p for p in pieces if p)
    serve(
        app,
        cfg.host,
        cfg.port,
        log_level=cfg.log_level,
        announce=[f"ragteam: team {title!r} ({team}) as model {name!r}; OpenAI API under /v1"],
        read_timeout=cfg.read_timeout,
        max_connections=cfg.max_connections,
    )
    return 0
