"""The rollout engine: runs many episodes at once, batches their requests, branches, and records trees.

A workflow is a generator that yields requests (`Act`, `AskLLM`, `Retrieve`) and returns an `Answer`. The
engine keeps up to `max_concurrent` episodes in flight. Each tick:

1. gather  - the pending request of every live path of every live episode;
2. call    - all policy acts as ONE `policy.chat()` batch (a branched act asks for `n=k` samples), all LLM
             calls as one `llm.chat()` batch, all retrievals as one `retriever.search()` over the concatenated
             queries; the three kinds run in threads when more than one is pending;
3. record  - one tree node per request (timing = seconds of its batch);
4. resume  - each path with its result. A branched act splits its path into k children: the first keeps
             the live generator, the others re-run the workflow and replay the recorded path (no call is
             repeated, see `replay.py`);
5. finish  - a returned answer becomes an `answer` leaf (with `reward(question, answer)`); an episode with no
             live path left is done and its slot goes to the next question.

Budgets (policy acts on a path, generated tokens of the policy and the LLM on a path) are enforced by
throwing `BudgetExceeded` into the workflow before an over-budget act (an act's max_tokens is also capped to
what the path has left); a workflow that does not catch it ends as a `truncated` leaf. Only acts are limited,
so a workflow that catches it may still ask the LLM or the retriever to finish. A failed call (a `ModelError`
after the backend's retries, or a retriever exception) or an exception in workflow code fails that episode
only: a `failed` leaf records the error, its other paths are dropped, the other episodes go on.
"""

from __future__ import annotations

import traceback
import zlib
from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from tqdm.auto import tqdm

from ragteam.llm.base import ChatModel, ChatRequest, ChatResult, Completion, ModelError, Sampling
from ragteam.retrieval.base import Retriever
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.replay import ReplayMismatch, Step, Thrown, describe, replay, send
from ragteam.rollout.requests import (
    Act,
    Acted,
    Answer,
    AskLLM,
    BudgetExceeded,
    Episodic,
    Request,
    Retrieve,
    Workflow,
)
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Hit, Question

__all__ = ["Engine", "RewardFn", "RolloutConfig", "RunReport"]

RewardFn = Callable[[Question, str], dict[str, float]]

# How often a path may be thrown BudgetExceeded before it is cut (a workflow that catches it and keeps
# asking for acts would otherwise loop forever).
_MAX_THROWS = 3
# Retriever errors that concern one request's input: isolated by re-asking each request alone. Any other
# error (connection, timeout) fails every episode of the batch at once.
_INPUT_ERRORS = (ValueError, TypeError, KeyError, IndexError)


@dataclass
class RunReport:
    """What `Engine.run` returns: the episodes in question order, and how many failed and why."""

    episodes: list[Episode]
    failed: int = 0
    failures: dict[str, int] = field(default_factory=dict)  # reason -> count
    seconds: float = 0.0


@dataclass(eq=False)
class _Path:
    """One live root-to-leaf path: its generator, where its next node hangs, and what it has used."""

    gen: Episodic
    parent: int | None = None
    depth: int = 0  # policy acts so far
    tokens: int = 0  # generated tokens so far (policy and LLM)
    history: list[Step] = field(default_factory=list)  # requests and results, for replay into forks
    pending: Request | None = None
    throws: int = 0


@dataclass(eq=False)
class _Run:
    """One episode in flight."""

    index: int
    question: Question
    episode: Episode
    started: float
    paths: list[_Path] = field(default_factory=list)
    reason: str | None = None  # failure reason, once failed

    @property
    def failed(self) -> bool:
        return self.reason is not None


def _tokens(c: Completion) -> int:
    return c.completion_tokens or len(c.completion_ids or [])


def _derive_seed(base: int | None, question_id: str, parent: int | None, kind: str) -> int | None:
    """A request's seed from the run seed, its question and its place in the tree (not from the batch)."""
    if base is None:
        return None
    return zlib.crc32(f"{base}|{question_id}|{parent}|{kind}".encode()) & 0x7FFFFFFF


def _traceback_summary(e: BaseException, frames: int = 4) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-frames)).rstrip()


class Engine:
    """Drives workflows over questions against a policy, an LLM server and a retriever (any may be None)."""

    def __init__(
        self,
        policy: ChatModel | None,
        llm: ChatModel | None,
        retriever: Retriever | None,
        config: RolloutConfig | None = None,
    ) -> None:
        self.policy = policy
        self.llm = llm
        self.retriever = retriever
        self.config = config if config is not None else RolloutConfig()
        self.calls: Counter = Counter()

    # ------------------------------------------------------------------ the loop

    def run(
        self,
        workflow: Workflow,
        questions: Sequence[Question],
        reward: RewardFn | None = None,
        on_episode: Callable[[Episode], None] | None = None,
        progress: bool = False,
    ) -> RunReport:
        """Run `workflow` on every question; return the episodes in question order with failure counts."""
        t0 = perf_counter()
        todo = deque(enumerate(questions))
        live: list[_Run] = []
        done: dict[int, Episode] = {}
        failures: Counter = Counter()
        bar = tqdm(total=len(questions), desc=getattr(workflow, "name", "rollout"), disable=not progress)
        pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="ragteam-rollout")
        try:
            while todo or live:
                while todo and len(live) < self.config.max_concurrent:
                    index, question = todo.popleft()
                    live.append(self._start(workflow, index, question, reward))
                self._tick(workflow, live, reward, pool)
                still: list[_Run] = []
                for run in live:
                    if run.paths:
                        still.append(run)
                        continue
                    run.episode.meta["seconds"] = round(perf_counter() - run.started, 6)
                    done[run.index] = run.episode
                    if run.failed:
                        failures[run.reason] += 1
                    if on_episode is not None:
                        on_episode(run.episode)
                    bar.update(1)
                    if failures:
                        bar.set_postfix(failed=sum(failures.values()))
                live = still
        finally:
            pool.shutdown(wait=True)
            bar.close()
        episodes = [done[i] for i in range(len(questions))]
        return RunReport(
            episodes=episodes,
            failed=sum(failures.values()),
            failures=dict(failures),
            seconds=perf_counter() - t0,
        )

    def _start(self, workflow: Workflow, index: int, question: Question, reward: RewardFn | None) -> _Run:
        episode = Episode(
            id=question.id, workflow=getattr(workflow, "name", type(workflow).__name__), question=question
        )
        run = _Run(index=index, question=question, episode=episode, started=perf_counter())
        try:
            gen = workflow.run(question)
            if not isinstance(gen, Generator):
                raise TypeError(
                    f"{type(workflow).__name__}.run() returned {type(gen).__name__}, not a generator: "
                    "a workflow's run() must `yield` its requests and `return` an Answer"
                )
        except Exception as e:
            self._fail_workflow(run, _Path(gen=None), e, workflow)  # type: ignore[arg-type]
            return run
        path = _Path(gen=gen)
        run.paths.append(path)
        self._advance(run, path, None, workflow, reward)
        return run

    def _tick(
        self, workflow: Workflow, live: list[_Run], reward: RewardFn | None, pool: ThreadPoolExecutor
    ) -> None:
        items = [(run, path) for run in live for path in run.paths]
        acts: list[tuple[_Run, _Path, int]] = []
        asks: list[tuple[_Run, _Path]] = []
        searches: list[tuple[_Run, _Path]] = []
        planned: Counter = Counter()  # nodes a run's branched acts will add this tick
        for run, path in items:
            req = path.pending
            if isinstance(req, Act):
                if self.policy is None:
                    self._fail(
                        run,
                        path,
                        "no policy",
                        f"the workflow asked the policy ({describe(req)}) but the engine has none",
                    )
                    continue
                grown = len(run.episode.nodes) + planned[id(run)]
                k = (
                    1
                    if not req.branch or grown >= self.config.max_nodes
                    else self.config.branches_at(path.depth)
                )
                planned[id(run)] += k
                acts.append((run, path, k))
            elif isinstance(req, AskLLM):
                if self.llm is None:
                    self._fail(
                        run,
                        path,
                        "no llm",
                        f"the workflow asked the LLM server ({describe(req)}) but the engine has none",
                    )
                    continue
                asks.append((run, path))
            elif isinstance(req, Retrieve):
                if self.retriever is None:
                    self._fail(
                        run,
                        path,
                        "no retriever",
                        f"the workflow asked to {describe(req)} but the engine has no retriever",
                    )
                    continue
                searches.append((run, path))

        jobs: dict[str, Callable[[], tuple[list[Any], float]]] = {}
        if acts:
            jobs["policy"] = self._policy_job(acts)
        if asks:
            jobs["llm"] = self._llm_job(asks)
        if searches:
            jobs["retrieve"] = self._retrieve_job(searches)
        if len(jobs) > 1:
            futures = {name: pool.submit(job) for name, job in jobs.items()}
            outputs = {name: f.result() for name, f in futures.items()}
        else:
            outputs = {name: job() for name, job in jobs.items()}

        results: dict[int, tuple[Any, float, int]] = {}  # id(path) -> (result, seconds, k)
        for name, batch in (("policy", acts), ("llm", asks), ("retrieve", searches)):
            if name in outputs:
                out, seconds = outputs[name]
                for item, result in zip(batch, out, strict=True):
                    results[id(item[1])] = (result, seconds, item[2] if name == "policy" else 1)

        for run, path in items:  # resume in gather order, so node ids do not depend on thread timing
            if run.failed or id(path) not in results:
                continue
            result, seconds, _ = results[id(path)]
            req = path.pending
            if isinstance(req, Act):
                self._apply_act(run, path, req, result, seconds, workflow, reward)
            elif isinstance(req, AskLLM):
                self._apply_llm(run, path, req, result, seconds, workflow, reward)
            else:
                self._apply_retrieve(run, path, req, result, seconds, workflow, reward)

    # ------------------------------------------------------------------ batched calls

    def _policy_job(
        self, acts: list[tuple[_Run, _Path, int]]
    ) -> Callable[[], tuple[list[ChatResult], float]]:
        cfg = self.config
        requests = []
        for run, path, k in acts:
            act = path.pending
            assert isinstance(act, Act)
            max_tokens = min(act.max_tokens or cfg.max_tokens, cfg.max_tokens_per_episode - path.tokens)
            sampling = Sampling(
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_tokens=max(1, max_tokens),
                stop=tuple(act.stop),
                n=k,
                seed=_derive_seed(cfg.seed, run.question.id, path.parent, "policy"),
            )
            requests.append(ChatRequest(messages=act.messages, sampling=sampling))
        self.calls["policy_batches"] += 1
        self.calls["policy_requests"] += len(requests)
        self.calls["policy_samples"] += sum(k for _, _, k in acts)
        model = self.policy
        assert model is not None
        return lambda: _chat(model, requests)

    def _llm_job(self, asks: list[tuple[_Run, _Path]]) -> Callable[[], tuple[list[ChatResult], float]]:
        cfg = self.config
        requests = []
        for run, path in asks:
            ask = path.pending
            assert isinstance(ask, AskLLM)
            sampling = Sampling(
                temperature=cfg.llm_temperature,
                max_tokens=ask.max_tokens or cfg.llm_max_tokens,
                stop=tuple(ask.stop),
                n=1,
                seed=_derive_seed(cfg.seed, run.question.id, path.parent, "llm"),
            )
            requests.append(ChatRequest(messages=ask.messages, sampling=sampling))
        self.calls["llm_batches"] += 1
        self.calls["llm_requests"] += len(requests)
        model = self.llm
        assert model is not None
        return lambda: _chat(model, requests)

    def _retrieve_job(self, searches: list[tuple[_Run, _Path]]) -> Callable[[], tuple[list[Any], float]]:
        reqs = [path.pending for _, path in searches]
        n_queries = sum(len(r.queries) for r in reqs)  # type: ignore[union-attr]
        if n_queries:
            self.calls["retrieve_batches"] += 1
            self.calls["retrieve_queries"] += n_queries
        retriever = self.retriever
        assert retriever is not None
        return lambda: _search(retriever, reqs)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ applying results

    def _apply_act(
        self,
        run: _Run,
        path: _Path,
        act: Act,
        result: Any,
        seconds: float,
        workflow: Workflow,
        reward: RewardFn | None,
    ) -> None:
        if isinstance(result, ModelError):
            self._fail(run, path, _model_reason("policy", result), f"policy call failed: {result}")
            return
        if not result:
            self._fail(run, path, "policy error", f"policy {_name(self.policy)} returned no completion")
            return
        nodes: list[Node] = []
        for completion in result:
            try:
                action = act.parse(completion.text)
            except Exception as e:  # parsers should never raise; this one did
                self._fail_workflow(run, path, e, workflow, f"the parser of role {act.role!r} raised")
                return
            nodes.append(
                run.episode.add(
                    Node(
                        id=-1,
                        parent=path.parent,
                        kind="policy",
                        role=act.role,
                        depth=path.depth + 1,
                        messages=act.messages,
                        completion=completion,
                        action=action,
                        seconds=seconds,
                    )
                )
            )
        children: list[tuple[_Path, Acted]] = []
        for i, node in enumerate(nodes):
            assert node.completion is not None and node.action is not None
            acted = Acted(text=node.completion.text, action=node.action, node_id=node.id)
            if i == 0:
                gen = path.gen
            else:
                try:
                    gen = replay(workflow, run.question, path.history, act)
                except ReplayMismatch as e:
                    self._fail(run, path, "workflow not deterministic", str(e))
                    return
                except Exception as e:
                    self._fail_workflow(run, path, e, workflow, "on replay into a fork")
                    return
            child = _Path(
                gen=gen,
                parent=node.id,
                depth=path.depth + 1,
                tokens=path.tokens + _tokens(node.completion),
                history=[*path.history, (act, acted)],
                throws=path.throws,
            )
            children.append((child, acted))
        at = run.paths.index(path)
        run.paths[at : at + 1] = [child for child, _ in children]
        for child, acted in children:
            if run.failed:
                return
            self._advance(run, child, acted, workflow, reward)

    def _apply_llm(
        self,
        run: _Run,
        path: _Path,
        ask: AskLLM,
        result: Any,
        seconds: float,
        workflow: Workflow,
        reward: RewardFn | None,
    ) -> None:
        if isinstance(result, ModelError):
            self._fail(run, path, _model_reason("llm", result), f"LLM call ({ask.purpose}) failed: {result}")
            return
        if not result:
            self._fail(run, path, "llm error", f"LLM {_name(self.llm)} returned no completion")
            return
        completion = result[0]
        node = run.episode.add(
            Node(
                id=-1,
                parent=path.parent,
                kind="llm",
                role=ask.purpose,
                depth=path.depth,
                messages=ask.messages,
                completion=completion,
                seconds=seconds,
            )
        )
        path.parent = node.id
        path.tokens += _tokens(completion)
        path.history.append((ask, completion.text))
        self._advance(run, path, completion.text, workflow, reward)

    def _apply_retrieve(
        self,
        run: _Run,
        path: _Path,
        req: Retrieve,
        result: Any,
        seconds: float,
        workflow: Workflow,
        reward: RewardFn | None,
    ) -> None:
        if isinstance(result, BaseException):
            self._fail(
                run,
                path,
                f"retriever {type(result).__name__}",
                f"retriever {_name(self.retriever)} failed: {result!r}",
            )
            return
        node = run.episode.add(
            Node(
                id=-1,
                parent=path.parent,
                kind="retrieve",
                depth=path.depth,
                queries=list(req.queries),
                k=req.k,
                hits=result,
                seconds=seconds,
            )
        )
        path.parent = node.id
        path.history.append((req, result))
        self._advance(run, path, result, workflow, reward)

    # ------------------------------------------------------------------ driving one path

    def _advance(
        self, run: _Run, path: _Path, value: Any, workflow: Workflow, reward: RewardFn | None
    ) -> None:
        """Send `value` into the path's workflow and leave it pending on its next request, or finish it."""
        try:
            request = send(path.gen, value)
            while True:
                if not isinstance(request, (Act, AskLLM, Retrieve)):
                    raise TypeError(
                        f"workflow yielded {type(request).__name__} ({request!r:.80}); "
                        "expected Act, AskLLM or Retrieve"
                    )
                over = self._over_budget(path, request)
                if over is None:
                    break
                path.throws += 1
                if path.throws > _MAX_THROWS:
                    path.gen.close()
                    self._leaf(
                        run,
                        path,
                        Answer(""),
                        "truncated",
                        reward,
                        f"{over} (kept asking after BudgetExceeded)",
                    )
                    return
                path.history.append((request, Thrown(over)))
                request = path.gen.throw(BudgetExceeded(over))
        except StopIteration as stop:
            self._leaf(run, path, stop.value, "ok", reward)
            return
        except BudgetExceeded as e:
            self._leaf(run, path, Answer(""), "truncated", reward, str(e))
            return
        except Exception as e:
            self._fail_workflow(run, path, e, workflow)
            return
        path.pending = request

    def _over_budget(self, path: _Path, request: Request) -> str | None:
        """Why an act may not run on this path, or None. Only policy acts are limited."""
        if not isinstance(request, Act):
            return None
        cfg = self.config
        if path.depth >= cfg.max_depth:
            return f"max_depth {cfg.max_depth} policy acts reached"
        if path.tokens >= cfg.max_tokens_per_episode:
            return f"max_tokens_per_episode {cfg.max_tokens_per_episode} reached ({path.tokens} generated)"
        return None

    def _leaf(
        self,
        run: _Run,
        path: _Path,
        answer: Any,
        status: str,
        reward: RewardFn | None,
        error: str | None = None,
    ) -> None:
        if isinstance(answer, str):
            answer = Answer(answer)
        if not isinstance(answer, Answer):
            e = TypeError(f"workflow returned {type(answer).__name__} ({answer!r:.80}); expected an Answer")
            self._fail(run, path, "workflow TypeError", f"workflow {run.episode.workflow!r}: {e}")
            return
        rewards: dict[str, float] = {}
        if reward is not None:
            try:
                rewards = {k: float(v) for k, v in reward(run.question, answer.text).items()}
            except Exception as e:
                self._fail(
                    run,
                    path,
                    f"reward {type(e).__name__}",
                    f"reward function raised:\n{_traceback_summary(e)}",
                )
                return
        run.episode.add(
            Node(
                id=-1,
                parent=path.parent,
                kind="answer",
                depth=path.depth,
                answer=answer.text,
                info=dict(answer.info),
                status=status,
                rewards=rewards,
                error=error,
            )
        )
        run.paths.remove(path)

    def _fail_workflow(
        self, run: _Run, path: _Path, e: BaseException, workflow: Workflow, context: str = ""
    ) -> None:
        name = getattr(workflow, "name", type(workflow).__name__)
        where = f" ({context})" if context else ""
        message = f"workflow {name!r} raised {type(e).__name__}{where}: {e}\n{_traceback_summary(e)}"
        self._fail(run, path, f"workflow {type(e).__name__}", message)

    def _fail(self, run: _Run, path: _Path, reason: str, message: str) -> None:
        """Fail the episode: a failed leaf under `path` records the error; its other paths are dropped."""
        if run.failed:
            return
        run.reason = reason
        run.episode.status = "failed"
        run.episode.error = message
        run.episode.add(
            Node(
                id=-1,
                parent=path.parent,
                kind="answer",
                depth=path.depth,
                answer="",
                status="failed",
                error=message,
            )
        )
        for other in run.paths:
            try:
                other.gen.close()
            except Exception:  # a workflow misbehaving on close changes nothing: the episode has failed
                pass
        run.paths.clear()


# ---------------------------------------------------------------------- calls (run in worker threads)


def _elapsed(t0: float) -> float:
    """Seconds since `t0`, rounded as traces store them (so a tree loads back equal)."""
    return round(perf_counter() - t0, 6)


def _name(obj: Any) -> str:
    return repr(getattr(obj, "name", type(obj).__name__))


def _model_reason(kind: str, err: ModelError) -> str:
    return f"{kind} error ({err.where})" if err.where else f"{kind} error"


def _chat(model: ChatModel, requests: list[ChatRequest]) -> tuple[list[ChatResult], float]:
    """One batched chat call; a raising backend or a wrong-length answer becomes a ModelError per request."""
    t0 = perf_counter()
    where = getattr(model, "name", type(model).__name__)
    try:
        out = list(model.chat(requests))
        if len(out) != len(requests):
            out = [ModelError(f"returned {len(out)} results for {len(requests)} requests", where)] * len(
                requests
            )
    except Exception as e:
        out = [ModelError(f"{type(e).__name__}: {e}", where)] * len(requests)
    return out, _elapsed(t0)


def _search(
    retriever: Retriever, reqs: list[Retrieve]
) -> tuple[list[list[list[Hit]] | BaseException], float]:
    """One search over all requests' queries at the largest k, each cut to its own k; results per request."""
    t0 = perf_counter()
    queries = [q for r in reqs for q in r.queries]
    if not queries:
        return [[] for _ in reqs], _elapsed(t0)
    try:
        hits = _search_checked(retriever, queries, max(r.k for r in reqs))
    except _INPUT_ERRORS as e:
        if len(reqs) == 1:
            return [e], _elapsed(t0)
        out: list[Any] = []
        for r in reqs:  # isolate the request(s) whose input the retriever rejects
            try:
                out.append(_search_checked(retriever, list(r.queries), r.k) if r.queries else [])
            except Exception as e_one:
                out.append(e_one)
        return out, _elapsed(t0)
    except Exception as e:
        return [e] * len(reqs), _elapsed(t0)
    out = []
    start = 0
    for r in reqs:
        out.append([ranked[: r.k] for ranked in hits[start : start + len(r.queries)]])
        start += len(r.queries)
    return out, _elapsed(t0)


def _search_checked(retriever: Retriever, queries: list[str], k: int) -> list[list[Hit]]:
    hits = retriever.search(queries, k)
    if len(hits) != len(queries):
        raise RuntimeError(f"retriever returned {len(hits)} result lists for {len(queries)} queries")
    return [list(ranked) for ranked in hits]
