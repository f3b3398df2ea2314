"""The rollout engine: runs many episodes at once, batches their requests, forks, keeps one of N, records trees.

A workflow is a generator that yields requests (`Act`, `AskLLM`, `Retrieve`, see `ragteam.protocol`) and
returns an `Answer`. The engine keeps up to `max_concurrent` episodes in flight. Each tick:

1. gather  - the pending request of every live branch of every live episode, planned by one table of request
             kinds (`_KINDS`): which backend serves it, how its batch is built (`plan.py`), how its result
             is applied; prompts too long for the model's context are cut by the stated policy (`fit.py`);
2. call    - all policy acts as ONE `policy.chat()` batch, all LLM calls as one `llm.chat()` batch, all
             retrievals as one `retriever.search()` (`backends.py`); the kinds run in threads when more than
             one is pending;
3. record  - one tree node per sample, with what the trainer needs (ids, log-probs, sampling settings);
4. resume  - each branch with its result (`branches.py`). An act that forks (`RolloutConfig.forks`: k
             samples, or one child per forced prefix) splits its branch: the first child keeps the live
             generator, the others re-run the workflow and replay the recorded path (no call is repeated,
             see `replay.py`). An act under keep-one-of-N (`RolloutConfig.best_of`) records N siblings
             scored by the engine's scorer (`scorers.py`) and continues the best;
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

from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from tqdm.auto import tqdm

from ragteam.depth import depth_rule
from ragteam.llm.base import ChatModel, Completion, ModelError
from ragteam.llm.prefix_cache import clear_prefix_caches, prefill_counters, prefill_delta, prefill_models
from ragteam.protocol import Act, Acted, AskLLM, Retrieve, Workflow
from ragteam.retrieval.base import Retriever
from ragteam.rollout.backends import batch_job
from ragteam.rollout.branches import RewardFn, add_node, advance, fail, fail_workflow
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.groups import members
from ragteam.rollout.plan import Plan, plan_act, plan_llm, plan_retrieve, sampling_record
from ragteam.rollout.replay import ReplayMismatch, describe, replay
from ragteam.rollout.scorers import Scorer, argmax, score_candidates
from ragteam.rollout.state import Branch, LiveEpisode, RolloutReport
from ragteam.rollout.tree import Episode, Node
from ragteam.types import Question

__all__ = ["Engine", "RewardFn", "RolloutConfig", "RolloutReport"]


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
        self.prefill: dict[str, dict[str, float]] = {}  # the last run's prefill by role (llm/prefix_cache.py)

    def clear_prefix_cache(self) -> None:
        """Empty the prefix caches of the in-process policy and LLM (`prefix_cache.clear_prefix_caches`): a
        trainer calls it when it pushes weights, so that no KV of old weights is served and a run does not
        depend on what earlier runs left in the cache."""
        clear_prefix_caches(self.policy, self.llm)

    # ------------------------------------------------------------------ the loop

    def run(
        self,
        workflow: Workflow,
        questions: Sequence[Question],
        reward: RewardFn | None = None,
        on_episode: Callable[[Episode], None] | None = None,
        progress: bool = False,
        config: RolloutConfig | None = None,
    ) -> RolloutReport:
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
        cached = prefill_models(self.policy, self.llm, self.config.prefix_cache_mb)
        counters = prefill_counters(cached)
        questions = members(questions, self.config.group_size)
        todo = deque(enumerate(questions))
        in_flight: list[LiveEpisode] = []
        done: dict[int, Episode] = {}
        failures: Counter = Counter()
        failed_paths = 0
        bar = tqdm(total=len(questions), desc=getattr(workflow, "name", "rollout"), disable=not progress)
        pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="ragteam-rollout")
        try:
            while todo or in_flight:
                while todo and len(in_flight) < self.config.max_concurrent:
                    index, question = todo.popleft()
                    in_flight.append(self._start(workflow, index, question, reward))
                self._tick(workflow, in_flight, reward, pool)
                still: list[LiveEpisode] = []
                for live in in_flight:
                    if live.branches:
                        still.append(live)
                        continue
                    reason = live.finish(perf_counter() - live.started)
                    if reason is not None:
                        failures[reason] += 1
                    else:
                        failed_paths += len(live.reasons)
                    done[live.index] = live.episode
                    if on_episode is not None:
                        on_episode(live.episode)
                    bar.update(1)
                    if failures:
                        bar.set_postfix(failed=sum(failures.values()))
                in_flight = still
        finally:
            pool.shutdown(wait=True)
            bar.close()
            self.prefill = prefill_delta(cached, counters, self.calls)  # this run's, in-process models only
        return RolloutReport(
            episodes=[done[i] for i in range(len(questions))],
            failed=sum(failures.values()),
            failures=dict(failures),
            failed_paths=failed_paths,
            seconds=perf_counter() - t0,
        )

    def _start(
        self, workflow: Workflow, index: int, question: Question, reward: RewardFn | None
    ) -> LiveEpisode:
        episode = Episode(
            id=question.id, workflow=getattr(workflow, "name", type(workflow).__name__), question=question
        )
        live = LiveEpisode(
            index=index,
            question=question,
            episode=episode,
            started=perf_counter(),
            depth_rule=depth_rule(workflow),
        )
        branch = Branch(gen=None)
        live.branches.append(branch)
        try:
            gen = workflow.run(question)
            if not isinstance(gen, Generator):
                raise TypeError(
                    f"{type(workflow).__name__}.run() returned {type(gen).__name__}, not a generator: "
                    "a workflow's run() must `yield` its requests and `return` an Answer"
                )
        except Exception as e:
            fail_workflow(live, branch, e, workflow)
            return live
        branch.gen = gen
        advance(self.config, live, branch, None, workflow, reward)
        return live

    def _tick(
        self,
        workflow: Workflow,
        in_flight: list[LiveEpisode],
        reward: RewardFn | None,
        pool: ThreadPoolExecutor,
    ) -> None:
        """Gather every pending request, call each backend once, then apply the results in gather order."""
        items = [(live, branch) for live in in_flight for branch in live.branches]
        batches: dict[str, list[Plan]] = {kind.backend: [] for kind in _KINDS.values()}
        planned: Counter = Counter()  # nodes a run's forks will add this tick
        for live, branch in items:
            kind = _KINDS[type(branch.pending)]
            name = kind.backend
            backend = getattr(self, name)
            if backend is None:
                what = {"policy": "the policy", "llm": "the LLM server", "retriever": "a retriever"}[name]
                fail(
                    live,
                    branch,
                    f"no {name}",
                    f"the workflow asked {what} ({describe(branch.pending)}) but the engine has none",
                )
                continue
            plan = kind.plan(self.config, backend, live, branch, planned)
            if plan.fit and plan.fit.get("refused"):  # its template alone is over the context: never sent
                fail(live, branch, "prompt too long", plan.fit["refused"])
                continue
            batches[name].append(plan)

        jobs = {
            name: batch_job(name, getattr(self, name), plans, self.calls)
            for name, plans in batches.items()
            if plans
        }
        if len(jobs) > 1:
            futures = {name: pool.submit(job) for name, job in jobs.items()}
            outputs = {name: f.result() for name, f in futures.items()}
        else:
            outputs = {name: job() for name, job in jobs.items()}

        results: dict[int, tuple[Plan, Any, float]] = {}  # id(branch) -> (plan, result, seconds)
        for name, (per_plan, seconds) in outputs.items():
            for plan, result in zip(batches[name], per_plan, strict=True):
                results[id(plan.branch)] = (plan, result, seconds)
        sets = [(p, r) for p, r, _ in results.values() if p.mode == "select"]
        if sets:
            assert self.scorer is not None
            scored = score_candidates(self.scorer, workflow, sets, reward, self.calls)
            for p, _ in sets:
                p.scores = scored.get(id(p.branch))
        for live, branch in items:  # resume in gather order, so node ids do not depend on thread timing
            if id(branch) not in results or branch not in live.branches:
                continue
            plan, result, seconds = results[id(branch)]
            self._apply(plan, result, seconds, workflow, reward)

    # ------------------------------------------------------------------ applying results

    def _apply(
        self, plan: Plan, result: Any, seconds: float, workflow: Workflow, reward: RewardFn | None
    ) -> None:
        """Record one planned request's result on the tree and resume its branch; a failed call fails it."""
        failed = self._call_failed(plan, result)
        if failed is not None:
            fail(plan.live, plan.branch, *failed)
            return
        _KINDS[type(plan.request)].apply(self, plan, result, seconds, workflow, reward)

    def _call_failed(self, plan: Plan, result: Any) -> tuple[str, str] | None:
        """(reason, message) when the backend's answer to `plan` is an error or empty, else None."""
        kind = _KINDS[type(plan.request)].backend
        if kind == "retriever":
            if not isinstance(result, BaseException):
                return None
            return (
                f"retriever {type(result).__name__}",
                f"retriever {_name(self.retriever)} failed: {result!r}",
            )
        if isinstance(result, ModelError):
            call = "policy call" if kind == "policy" else f"LLM call ({plan.request.purpose})"
            reason = f"{kind} error ({result.where})" if result.where else f"{kind} error"
            return reason, f"{call} failed: {result}"
        if not result:
            who = f"policy {_name(self.policy)}" if kind == "policy" else f"LLM {_name(self.llm)}"
            return f"{kind} error", f"{who} returned no completion"
        return None

    def _apply_act(
        self, plan: Plan, result: Any, seconds: float, workflow: Workflow, reward: RewardFn | None
    ) -> None:
        """One node per sample; the branch splits into one child per sample (`fork`) or continues with the
        best-scored one (`select`). The first child keeps the live generator, the others replay into theirs."""
        live, branch, act, scores = plan.live, plan.branch, plan.request, plan.scores
        best = argmax(scores) if scores is not None else None
        nodes: list[Node] = []
        for i, completion in enumerate(result):
            try:
                action = act.parse(completion.text)
            except Exception as e:  # parsers should never raise; this one did
                fail_workflow(live, branch, e, workflow, f"the parser of role {act.role!r} raised")
                return
            node = add_node(
                live,
                branch,
                "policy",
                role=act.role,
                messages=act.messages,
                completion=completion,
                action=action,
                sampling=sampling_record(plan.chat[min(i, len(plan.chat) - 1)]),
                fit=plan.fit,
                score=scores[i] if scores is not None else None,
                chosen=(i == best) if best is not None else None,
                seconds=seconds,
            )
            nodes.append(node)
        if best is not None:
            nodes = [nodes[best]]
        children: list[tuple[Branch, Acted]] = []
        for i, node in enumerate(nodes):
            assert node.completion is not None and node.action is not None
            acted = Acted(text=node.completion.text, action=node.action, node_id=node.id, act=act)
            child = Branch(
                gen=None,
                parent=node.id,
                depth=node.depth,
                tokens=branch.tokens + _tokens(node.completion),
                history=[*branch.history, (branch.pending, acted)],
                throws=branch.throws,
            )
            if i == 0:
                child.gen = branch.gen
            else:
                try:
                    child.gen = replay(workflow, live.question, branch.history, branch.pending)
                except ReplayMismatch as e:
                    fail(live, child, "workflow not deterministic", str(e), attach=False)
                    continue
                except Exception as e:
                    fail_workflow(live, child, e, workflow, "on replay into a fork", attach=False)
                    continue
            children.append((child, acted))
        at = live.branches.index(branch)
        live.branches[at : at + 1] = [child for child, _ in children]
        for child, acted in children:
            advance(self.config, live, child, acted, workflow, reward)

    def _apply_llm(
        self, plan: Plan, result: Any, seconds: float, workflow: Workflow, reward: RewardFn | None
    ) -> None:
        """One `llm` node; the branch goes on with the reply's text."""
        completion, ask = result[0], plan.request
        node = add_node(
            plan.live,
            plan.branch,
            "llm",
            role=ask.purpose,
            messages=ask.messages,
            completion=completion,
            sampling=sampling_record(plan.chat[0]),
            fit=plan.fit,
            seconds=seconds,
        )
        plan.branch.tokens += _tokens(completion)
        self._step(plan, node, completion.text, workflow, reward)

    def _apply_retrieve(
        self, plan: Plan, result: Any, seconds: float, workflow: Workflow, reward: RewardFn | None
    ) -> None:
        """One `retrieve` node; the branch goes on with the hits."""
        req = plan.request
        node = add_node(
            plan.live,
            plan.branch,
            "retrieve",
            queries=list(req.queries),
            k=req.k,
            hits=result,
            seconds=seconds,
        )
        self._step(plan, node, result, workflow, reward)

    def _step(self, plan: Plan, node: Node, value: Any, workflow: Workflow, reward: RewardFn | None) -> None:
        """Move the branch of a one-result request down to `node` and send the workflow `value`."""
        branch = plan.branch
        branch.history.append((branch.pending, value))
        branch.parent, branch.depth = node.id, node.depth
        advance(self.config, plan.live, branch, value, workflow, reward)


@dataclass(frozen=True)
class _Kind:
    """How one kind of request is served: the engine attribute holding its backend, its planner
    (`plan.py`), and the engine method that records its result."""

    backend: str
    plan: Callable[..., Plan]
    apply: Callable[..., None]


_KINDS: dict[type, _Kind] = {
    Act: _Kind("policy", plan_act, Engine._apply_act),
    AskLLM: _Kind("llm", plan_llm, Engine._apply_llm),
    Retrieve: _Kind("retriever", plan_retrieve, Engine._apply_retrieve),
}
"""The one table of request kinds, by request type."""


def _tokens(c: Completion) -> int:
    return c.completion_tokens or len(c.completion_ids or [])


def _name(obj: Any) -> str:
    return repr(getattr(obj, "name", type(obj).__name__))
