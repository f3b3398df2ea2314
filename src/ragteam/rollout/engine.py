"""The rollout engine: runs many episodes at once, batches their requests, forks, keeps one of N, records trees.

A workflow is a generator that yields requests (`Act`, `AskLLM`, `Retrieve`, see `ragteam.protocol`) and
returns an `Answer`. The engine keeps up to `max_concurrent` episodes in flight. Each tick:

1. gather  - the pending request of every live path of every live episode, planned by one table of request
             kinds (`_KINDS`): which backend serves it, how its batch is built, how its result is applied;
             prompts too long for the model's context are cut by the stated policy (`fit.py`);
2. call    - all policy acts as ONE `policy.chat()` batch, all LLM calls as one `llm.chat()` batch, all
             retrievals as one `retriever.search()`; the kinds run in threads when more than one is pending;
3. record  - one tree node per sample, with what the trainer needs (ids, log-probs, sampling settings);
4. resume  - each path with its result. An act that forks (`RolloutConfig.forks`: k samples, or one child
             per forced prefix) splits its path: the first child keeps the live generator, the others
             re-run the workflow and replay the recorded path (no call is repeated, see `replay.py`). An
             act under keep-one-of-N (`RolloutConfig.best_of`) records N scored siblings and continues the
             best;
5. finish  - a returned answer becomes an `answer` leaf (with `reward(question, answer)`); an episode with no
             live path left is done and its slot goes to the next question.

Depth is counted by the workflow's `DepthRule` (`depth.py`: policy acts, or C-3PO's steps): each node
records its depth, the fork schedule reads the depth of the state an act is taken in, and the depth limit
refuses an act whose node, with the steps every path still takes after it, would pass `max_depth`.

Budgets (depth, generated tokens on a path) are enforced by throwing `BudgetExceeded` into the workflow
before an over-budget act; a workflow that does not catch it ends as a `truncated` leaf.

Failures are per path: a failed call, a replay mismatch or an exception in workflow code ends that path
with a `failed` leaf; its siblings go on. An episode fails only when no path reached an answer (status
`failed`); one that answered on some paths but not all is `partial`.
"""

from __future__ import annotations

import traceback
from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from time import perf_counter
from typing import Any

from tqdm.auto import tqdm

from ragteam.depth import depth_rule
from ragteam.llm.base import ChatModel, ChatRequest, Completion, ModelError, Sampling, TokenCounter
from ragteam.protocol import Act, Acted, Answer, AskLLM, BudgetExceeded, Request, Retrieve, Workflow
from ragteam.retrieval.base import Retriever
from ragteam.rollout import calls
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.fit import fit_request
from ragteam.rollout.groups import members
from ragteam.rollout.replay import ReplayMismatch, Thrown, describe, replay, send
from ragteam.rollout.scorers import Candidates, Scorer, argmax
from ragteam.rollout.state import Path, Plan, Run, RunReport
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Action, Question

__all__ = ["Engine", "RewardFn", "RolloutConfig", "RunReport"]

RewardFn = Callable[[Question, str], dict[str, float]]

# How often a path may be thrown BudgetExceeded before it is cut (a workflow that catches it and keeps
# asking for acts would otherwise loop forever).
_MAX_THROWS = 3


class Engine:
    """Drives workflows over questions against a policy, an LLM server and a retriever (any may be None).

    `scorer` ranks candidates when `config.best_of.n > 1` (`ragteam.rollout.scorers`; an entry point builds
    the one its config names with `ragteam.assemble.build.build_scorer`).
    """

    def __init__(
        self,
        policy: ChatModel | None,
        llm: ChatModel | None,
        retriever: Retriever | None,
        config: RolloutConfig | None = None,
        scorer: Scorer | None = None,
    ) -> None:
        self.policy = policy
        self.llm = llm
        self.retriever = retriever
        self.config = config if config is not None else RolloutConfig()
        self.scorer = scorer
        if self.config.best_of.n > 1 and scorer is None:
            raise ValueError(
                f"best_of.n={self.config.best_of.n} needs a scorer ({self.config.best_of.scorer}); "
                "build one with ragteam.assemble.build.build_scorer"
            )
        self.calls: Counter = Counter()

    # ------------------------------------------------------------------ the loop

    def run(
        self,
        workflow: Workflow,
        questions: Sequence[Question],
        reward: RewardFn | None = None,
        on_episode: Callable[[Episode], None] | None = None,
        progress: bool = False,
        config: RolloutConfig | None = None,
    ) -> RunReport:
        """Run `workflow` on every question; return the episodes in question order with failure counts
        (`config.group_size` K > 1: K episodes per question, in a row, see `rollout/groups.py`). `config`:
        this run's settings (a trainer's sampling seed per iteration, greedy evaluation), else the engine's."""
        if config is not None:
            saved, self.config = self.config, config
            try:
                return self.run(workflow, questions, reward, on_episode, progress)
            finally:
                self.config = saved
        t0 = perf_counter()
        questions = members(questions, self.config.group_size)
        todo = deque(enumerate(questions))
        live: list[Run] = []
        done: dict[int, Episode] = {}
        failures: Counter = Counter()
        failed_paths = 0
        bar = tqdm(total=len(questions), desc=getattr(workflow, "name", "rollout"), disable=not progress)
        pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="ragteam-rollout")
        try:
            while todo or live:
                while todo and len(live) < self.config.max_concurrent:
                    index, question = todo.popleft()
                    live.append(self._start(workflow, index, question, reward))
                self._tick(workflow, live, reward, pool)
                still: list[Run] = []
                for run in live:
                    if run.paths:
                        still.append(run)
                        continue
                    reason = run.finish(perf_counter() - run.started)
                    if reason is not None:
                        failures[reason] += 1
                    else:
                        failed_paths += len(run.reasons)
                    done[run.index] = run.episode
                    if on_episode is not None:
                        on_episode(run.episode)
                    bar.update(1)
                    if failures:
                        bar.set_postfix(failed=sum(failures.values()))
                live = still
        finally:
            pool.shutdown(wait=True)
            bar.close()
        return RunReport(
            episodes=[done[i] for i in range(len(questions))],
            failed=sum(failures.values()),
            failures=dict(failures),
            failed_paths=failed_paths,
            seconds=perf_counter() - t0,
        )

    def _start(self, workflow: Workflow, index: int, question: Question, reward: RewardFn | None) -> Run:
        episode = Episode(
            id=question.id, workflow=getattr(workflow, "name", type(workflow).__name__), question=question
        )
        run = Run(
            index=index,
            question=question,
            episode=episode,
            started=perf_counter(),
            depth_rule=depth_rule(workflow),
        )
        path = Path(gen=None)
        run.paths.append(path)
        try:
            gen = workflow.run(question)
            if not isinstance(gen, Generator):
                raise TypeError(
                    f"{type(workflow).__name__}.run() returned {type(gen).__name__}, not a generator: "
                    "a workflow's run() must `yield` its requests and `return` an Answer"
                )
        except Exception as e:
            self._fail_workflow(run, path, e, workflow)
            return run
        path.gen = gen
        self._advance(run, path, None, workflow, reward)
        return run

    def _tick(
        self, workflow: Workflow, live: list[Run], reward: RewardFn | None, pool: ThreadPoolExecutor
    ) -> None:
        """Gather every pending request, call each backend once, then apply the results in gather order."""
        items = [(run, path) for run in live for path in run.paths]
        batches: dict[str, list[Plan]] = {kind.backend: [] for kind in _KINDS.values()}
        planned: Counter = Counter()  # nodes a run's forks will add this tick
        for run, path in items:
            kind = _KINDS[type(path.pending)]
            name = kind.backend
            backend = getattr(self, name)
            if backend is None:
                what = {"policy": "the policy", "llm": "the LLM server", "retriever": "a retriever"}[name]
                self._fail(
                    run,
                    path,
                    f"no {name}",
                    f"the workflow asked {what} ({describe(path.pending)}) but the engine has none",
                )
                continue
            plan = kind.plan(self, run, path, planned)
            if plan.fit and plan.fit.get("refused"):  # its template alone is over the context: never sent
                self._fail(run, path, "prompt too long", plan.fit["refused"])
                continue
            batches[name].append(plan)

        jobs = {name: self._job(name, plans) for name, plans in batches.items() if plans}
        if len(jobs) > 1:
            futures = {name: pool.submit(job) for name, job in jobs.items()}
            outputs = {name: f.result() for name, f in futures.items()}
        else:
            outputs = {name: job() for name, job in jobs.items()}

        results: dict[int, tuple[Plan, Any, float]] = {}  # id(path) -> (plan, result, seconds)
        for name, (per_plan, seconds) in outputs.items():
            for plan, result in zip(batches[name], per_plan, strict=True):
                results[id(plan.path)] = (plan, result, seconds)
        selected = self._select(
            workflow, [(p, r) for p, r, _ in results.values() if p.mode == "select"], reward
        )
        for run, path in items:  # resume in gather order, so node ids do not depend on thread timing
            if id(path) not in results or path not in run.paths:
                continue
            plan, result, seconds = results[id(path)]
            _KINDS[type(path.pending)].apply(self, plan, result, seconds, workflow, reward, selected)

    # ------------------------------------------------------------------ batched calls

    def _job(self, name: str, plans: list[Plan]) -> Callable[[], tuple[list[Any], float]]:
        """A no-argument call serving every plan of one kind; returns (one result per plan, seconds)."""
        if name == "retriever":
            reqs = [p.request for p in plans]
            n_queries = sum(len(r.queries) for r in reqs)
            if n_queries:
                self.calls["retrieve_batches"] += 1
                self.calls["retrieve_queries"] += n_queries
            retriever = self.retriever
            assert retriever is not None
            return lambda: calls.search(retriever, reqs)
        model = self.policy if name == "policy" else self.llm
        assert model is not None
        flat = [req for p in plans for req in p.chat]
        self.calls[f"{name}_batches"] += 1
        self.calls[f"{name}_requests"] += len(flat)
        if name == "policy":
            self.calls["policy_samples"] += sum(req.sampling.n for req in flat)

        def job() -> tuple[list[Any], float]:
            out, seconds = calls.chat(model, flat)
            per_plan, start = [], 0
            for p in plans:  # regroup: a plan's completions in order, or its first error
                mine = out[start : start + len(p.chat)]
                start += len(p.chat)
                error = next((r for r in mine if isinstance(r, ModelError)), None)
                per_plan.append(error if error is not None else [c for r in mine for c in r])
            return per_plan, seconds

        return job

    def _fit(
        self, model: ChatModel | None, request: Act | AskLLM, max_tokens: int, max_prompt: int | None = None
    ) -> tuple[Any, int, Any]:
        """The request cut to the model's context (and to `max_prompt` tokens) when the model can count
        tokens (else as it is)."""
        if not isinstance(model, TokenCounter):
            return request, max_tokens, None
        try:
            context = int(model.context_length)
            return fit_request(request, max_tokens, context, model.count_tokens, max_prompt=max_prompt)
        except Exception as e:  # counting failed: send it as it is; the backend answers with an error value
            return request, max_tokens, {"error": f"{type(e).__name__}: {e}"}

    def _plan_act(self, run: Run, path: Path, planned: Counter) -> Plan:
        cfg = self.config
        act = path.pending
        assert isinstance(act, Act)
        max_tokens = max(1, min(act.max_tokens or cfg.max_tokens, cfg.max_tokens_per_episode - path.tokens))
        act, max_tokens, fit = self._fit(self.policy, act, max_tokens, cfg.max_prompt_tokens)
        seed = calls.derive_seed(cfg.seed, run.question.id, path.parent, "policy")
        base = Sampling(cfg.temperature, cfg.top_p, max_tokens, tuple(act.stop), 1, seed)
        room = len(run.episode.nodes) + planned[id(run)] < cfg.max_nodes
        rule = cfg.fork_at(act.role, path.depth) if act.branch and room else None
        prefix = act.prefix  # the act's own forced prefix replaces a rule's forced ones (k still applies)
        if act.branch and cfg.best_of.applies(act.role):
            plan = Plan(
                run,
                path,
                act,
                [
                    ChatRequest(
                        act.messages, base.with_(n=cfg.best_of.n), prefix=prefix, constraint=act.constraint
                    )
                ],
                "select",
                fit,
            )
        elif rule is not None and rule.forced and not prefix:
            chat = [
                ChatRequest(
                    act.messages,
                    base.with_(seed=None if seed is None else seed + i),
                    prefix=f.text,
                    sample_after_prefix=f.sample,
                    constraint=act.constraint,
                )
                for i, f in enumerate(rule.forced)
            ]
            plan = Plan(run, path, act, chat, "fork", fit)
        else:
            n = rule.k if rule else 1
            chat = [ChatRequest(act.messages, base.with_(n=n), prefix=prefix, constraint=act.constraint)]
            plan = Plan(run, path, act, chat, "fork", fit)
        planned[id(run)] += sum(r.sampling.n for r in plan.chat)
        return plan

    def _plan_llm(self, run: Run, path: Path, planned: Counter) -> Plan:
        cfg = self.config
        ask = path.pending
        assert isinstance(ask, AskLLM)
        ask, max_tokens, fit = self._fit(self.llm, ask, ask.max_tokens or cfg.llm_max_tokens)
        seed = calls.derive_seed(cfg.seed, run.question.id, path.parent, "llm")
        sampling = Sampling(cfg.llm_temperature, 1.0, max_tokens, tuple(ask.stop), 1, seed)
        return Plan(run, path, ask, [ChatRequest(ask.messages, sampling)], "call", fit)

    def _plan_retrieve(self, run: Run, path: Path, planned: Counter) -> Plan:
        return Plan(run, path, path.pending, [], "call")

    # ------------------------------------------------------------------ keep one of N

    def _select(
        self, workflow: Workflow, pairs: list[tuple[Plan, Any]], reward: RewardFn | None
    ) -> dict[int, list[float]]:
        """Scores of every keep-one-of-N act's candidates this tick, by id(path) (one scorer call)."""
        ok = [(p, r) for p, r in pairs if isinstance(r, list) and r]
        if not ok:
            return {}
        batch = [
            Candidates(
                question=p.run.question,
                act=p.request,
                texts=[c.text for c in r],
                acted=[Acted(c.text, _parse_or_invalid(p.request, c.text), -1, p.request) for c in r],
                history=list(p.path.history),
                workflow=workflow,
                reward=reward,
            )
            for p, r in ok
        ]
        assert self.scorer is not None
        self.calls["select_sets"] += len(batch)
        try:
            scores = self.scorer.scores(batch)
        except Exception as e:  # a failed scorer keeps the first candidate of each set, and says so
            self.calls["select_errors"] += 1
            scores = [[0.0] * len(c.texts) for c in batch]
            for p, _ in ok:
                p.run.episode.meta.setdefault("scorer_errors", []).append(f"{type(e).__name__}: {e}")
        return {id(p.path): s for (p, _), s in zip(ok, scores)}

    # ------------------------------------------------------------------ applying results

    def _apply_act(
        self,
        plan: Plan,
        result: Any,
        seconds: float,
        workflow: Workflow,
        reward: RewardFn | None,
        selected: dict[int, list[float]],
    ) -> None:
        run, path, act = plan.run, plan.path, plan.request
        if isinstance(result, ModelError):
            self._fail(run, path, _model_reason("policy", result), f"policy call failed: {result}")
            return
        if not result:
            self._fail(run, path, "policy error", f"policy {_name(self.policy)} returned no completion")
            return
        scores = selected.get(id(path)) if plan.mode == "select" else None
        best = argmax(scores) if scores is not None else None
        nodes: list[Node] = []
        for i, completion in enumerate(result):
            try:
                action = act.parse(completion.text)
            except Exception as e:  # parsers should never raise; this one did
                self._fail_workflow(run, path, e, workflow, f"the parser of role {act.role!r} raised")
                return
            request = plan.chat[min(i, len(plan.chat) - 1)]
            nodes.append(
                run.episode.add(
                    Node(
                        id=-1,
                        parent=path.parent,
                        kind="policy",
                        role=act.role,
                        depth=path.depth + run.depth_rule.step("policy"),
                        messages=act.messages,
                        completion=completion,
                        action=action,
                        sampling=_sampling_record(request),
                        fit=plan.fit,
                        score=scores[i] if scores is not None else None,
                        chosen=(i == best) if best is not None else None,
                        seconds=seconds,
                    )
                )
            )
        if best is not None:
            nodes = [nodes[best]]
        children: list[tuple[Path, Acted]] = []
        for i, node in enumerate(nodes):
            assert node.completion is not None and node.action is not None
            acted = Acted(text=node.completion.text, action=node.action, node_id=node.id, act=act)
            child = Path(
                gen=None,
                parent=node.id,
                depth=node.depth,
                tokens=path.tokens + _tokens(node.completion),
                history=[*path.history, (path.pending, acted)],
                throws=path.throws,
            )
            if i == 0:
                child.gen = path.gen
            else:
                try:
                    child.gen = replay(workflow, run.question, path.history, path.pending)
                except ReplayMismatch as e:
                    self._fail(run, child, "workflow not deterministic", str(e), attach=False)
                    continue
                except Exception as e:
                    self._fail_workflow(run, child, e, workflow, "on replay into a fork", attach=False)
                    continue
            children.append((child, acted))
        at = run.paths.index(path)
        run.paths[at : at + 1] = [child for child, _ in children]
        for child, acted in children:
            self._advance(run, child, acted, workflow, reward)

    def _apply_llm(
        self,
        plan: Plan,
        result: Any,
        seconds: float,
        workflow: Workflow,
        reward: RewardFn | None,
        selected: dict[int, list[float]],
    ) -> None:
        run, path, ask = plan.run, plan.path, plan.request
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
                depth=path.depth + run.depth_rule.step("llm"),
                messages=ask.messages,
                completion=completion,
                sampling=_sampling_record(plan.chat[0]),
                fit=plan.fit,
                seconds=seconds,
            )
        )
        path.history.append((path.pending, completion.text))
        path.parent = node.id
        path.depth = node.depth
        path.tokens += _tokens(completion)
        self._advance(run, path, completion.text, workflow, reward)

    def _apply_retrieve(
        self,
        plan: Plan,
        result: Any,
        seconds: float,
        workflow: Workflow,
        reward: RewardFn | None,
        selected: dict[int, list[float]],
    ) -> None:
        run, path, req = plan.run, plan.path, plan.request
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
                depth=path.depth + run.depth_rule.step("retrieve"),
                queries=list(req.queries),
                k=req.k,
                hits=result,
                seconds=seconds,
            )
        )
        path.parent = node.id
        path.depth = node.depth
        path.history.append((req, result))
        self._advance(run, path, result, workflow, reward)

    # ------------------------------------------------------------------ driving one path

    def _advance(self, run: Run, path: Path, value: Any, workflow: Workflow, reward: RewardFn | None) -> None:
        """Send `value` into the path's workflow and leave it pending on its next request, or finish it."""
        assert path.gen is not None
        try:
            request = send(path.gen, value)
            while True:
                if not isinstance(request, (Act, AskLLM, Retrieve)):
                    raise TypeError(
                        f"workflow yielded {type(request).__name__} ({request!r:.80}); "
                        "expected Act, AskLLM or Retrieve"
                    )
                over = self._over_budget(run, path, request)
                if over is None:
                    break
                path.throws += 1
                if path.throws > _MAX_THROWS:
                    path.close()
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

    def _over_budget(self, run: Run, path: Path, request: Request) -> str | None:
        """Why an act may not run on this path, or None. Only policy acts are limited."""
        if not isinstance(request, Act):
            return None
        cfg = self.config
        rule = run.depth_rule
        if not rule.act_fits(path.depth, cfg.max_depth):
            after = f" and {rule.tail} closing steps" if rule.tail else ""
            return (
                f"max_depth {cfg.max_depth} reached: an act at depth {path.depth + rule.step('policy')}{after} "
                f"would pass it (depth counted as {rule.name})"
            )
        if path.tokens >= cfg.max_tokens_per_episode:
            return f"max_tokens_per_episode {cfg.max_tokens_per_episode} reached ({path.tokens} generated)"
        return None

    def _leaf(
        self,
        run: Run,
        path: Path,
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
                    run, path, f"reward {type(e).__name__}", f"reward function raised:\n{_traceback(e)}"
                )
                return
        run.episode.add(
            Node(
                id=-1,
                parent=path.parent,
                kind="answer",
                depth=path.depth + run.depth_rule.step("answer"),
                answer=answer.text,
                info=dict(answer.info),
                status=status,
                rewards=rewards,
                error=error,
            )
        )
        run.paths.remove(path)

    def _fail_workflow(
        self,
        run: Run,
        path: Path,
        e: BaseException,
        workflow: Workflow,
        context: str = "",
        attach: bool = True,
    ) -> None:
        name = getattr(workflow, "name", type(workflow).__name__)
        where = f" ({context})" if context else ""
        message = f"workflow {name!r} raised {type(e).__name__}{where}: {e}\n{_traceback(e)}"
        self._fail(run, path, f"workflow {type(e).__name__}", message, attach)

    def _fail(self, run: Run, path: Path, reason: str, message: str, attach: bool = True) -> None:
        """Fail one path: a `failed` leaf under it records the error; the episode's other paths go on.

        `attach=False` is for a path that is not (yet) among the run's live paths (a fork that could not
        be replayed)."""
        run.reasons.append(reason)
        run.episode.add(
            Node(
                id=-1,
                parent=path.parent,
                kind="answer",
                depth=path.depth + run.depth_rule.step("answer"),
                answer="",
                status="failed",
                error=message,
            )
        )
        path.close()
        if attach and path in run.paths:
            run.paths.remove(path)


@dataclass(frozen=True)
class _Kind:
    """How one kind of request is served: the engine attribute holding its backend, its planner, its applier."""

    backend: str
    plan: Callable[..., Plan]
    apply: Callable[..., None]


_KINDS: dict[type, _Kind] = {
    Act: _Kind("policy", Engine._plan_act, Engine._apply_act),
    AskLLM: _Kind("llm", Engine._plan_llm, Engine._apply_llm),
    Retrieve: _Kind("retriever", Engine._plan_retrieve, Engine._apply_retrieve),
}
"""The one table of request kinds, by request type."""


def _parse_or_invalid(act: Act, text: str) -> Action:
    """The act's parse of `text` for a scorer; a raising parser gives an invalid action here (the path fails
    with the parser's traceback when the result is applied)."""
    try:
        return act.parse(text)
    except Exception as e:
        return Action("invalid", valid=False, error=f"parser raised {type(e).__name__}: {e}")


def _sampling_record(request: ChatRequest) -> dict[str, Any]:
    """The sampling settings of a node's call, as traces store them."""
    d = asdict(request.sampling)
    d["stop"] = list(d["stop"])
    if request.prefix:
        d["prefix"] = request.prefix
        d["sample_after_prefix"] = request.sample_after_prefix
    return d


def _tokens(c: Completion) -> int:
    return c.completion_tokens or len(c.completion_ids or [])


def _name(obj: Any) -> str:
    return repr(getattr(obj, "name", type(obj).__name__))


def _model_reason(kind: str, err: ModelError) -> str:
    return f"{kind} error ({err.where})" if err.where else f"{kind} error"


def _traceback(e: BaseException, frames: int = 4) -> str:
    return "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-frames)).rstrip()
