"""Driving one branch of an episode in flight: sending a result into its workflow generator and leaving it
pending on its next request, the budgets that stop an act (`BudgetExceeded` thrown into the workflow), and
the leaves that end a branch: an `answer` (with its rewards) or a `failed` one recording why.

Failures are per branch: a failed call, a replay mismatch or an exception in workflow code ends that branch
with a `failed` leaf; its siblings go on (`LiveEpisode.finish` decides the episode's status).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from ragteam.protocol import Act, Answer, AskLLM, BudgetExceeded, Request, Retrieve, Workflow
from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.replay import Thrown, send
from ragteam.rollout.state import Branch, LiveEpisode
from ragteam.rollout.tree import Node
from ragteam.types import Question

RewardFn = Callable[[Question, str], dict[str, float]]

MAX_THROWS = 3
"""How often a branch may be thrown BudgetExceeded before it is cut (a workflow that catches it and keeps
asking for acts would otherwise loop forever)."""


def advance(
    cfg: RolloutConfig,
    live: LiveEpisode,
    branch: Branch,
    value: Any,
    workflow: Workflow,
    reward: RewardFn | None,
) -> None:
    """Send `value` into the path's workflow and leave it pending on its next request, or finish it."""
    assert branch.gen is not None
    try:
        request = send(branch.gen, value)
        while True:
            if not isinstance(request, (Act, AskLLM, Retrieve)):
                raise TypeError(
                    f"workflow yielded {type(request).__name__} ({request!r:.80}); "
                    "expected Act, AskLLM or Retrieve"
                )
            over = over_budget(cfg, live, branch, request)
            if over is None:
                break
            branch.throws += 1
            if branch.throws > MAX_THROWS:
                branch.close()
                leaf(
                    live,
                    branch,
                    Answer(""),
                    "truncated",
                    reward,
                    f"{over} (kept asking after BudgetExceeded)",
                )
                return
            branch.history.append((request, Thrown(over)))
            request = branch.gen.throw(BudgetExceeded(over))
    except StopIteration as stop:
        leaf(live, branch, stop.value, "ok", reward)
        return
    except BudgetExceeded as e:
        leaf(live, branch, Answer(""), "truncated", reward, str(e))
        return
    except Exception as e:
        fail_workflow(live, branch, e, workflow)
        return
    branch.pending = request


def over_budget(cfg: RolloutConfig, live: LiveEpisode, branch: Branch, request: Request) -> str | None:
    """Why an act may not run on this path, or None. Only policy acts are limited."""
    if not isinstance(request, Act):
        return None
    rule = live.depth_rule
    if not rule.act_fits(branch.depth, cfg.max_depth):
        after = f" and {rule.tail} closing steps" if rule.tail else ""
        return (
            f"max_depth {cfg.max_depth} reached: an act at depth {branch.depth + rule.step('policy')}{after} "
            f"would pass it (depth counted as {rule.name})"
        )
    if branch.tokens >= cfg.max_tokens_per_episode:
        return f"max_tokens_per_episode {cfg.max_tokens_per_episode} reached ({branch.tokens} generated)"
    return None


def leaf(
    live: LiveEpisode,
    branch: Branch,
    answer: Any,
    status: str,
    reward: RewardFn | None,
    error: str | None = None,
) -> None:
    """End the branch with an `answer` leaf of `status` carrying the reward of `answer` (a workflow that
    returned something else, or a reward function that raised, fails the branch instead)."""
    if isinstance(answer, str):
        answer = Answer(answer)
    if not isinstance(answer, Answer):
        e = TypeError(f"workflow returned {type(answer).__name__} ({answer!r:.80}); expected an Answer")
        fail(live, branch, "workflow TypeError", f"workflow {live.episode.workflow!r}: {e}")
        return
    rewards: dict[str, float] = {}
    if reward is not None:
        try:
            rewards = {k: float(v) for k, v in reward(live.question, answer.text).items()}
        except Exception as e:
            fail(live, branch, f"reward {type(e).__name__}", f"reward function raised:\n{traceback_tail(e)}")
            return
    add_node(
        live,
        branch,
        "answer",
        answer=answer.text,
        info=dict(answer.info),
        status=status,
        rewards=rewards,
        error=error,
    )
    live.branches.remove(branch)


def fail_workflow(
    live: LiveEpisode,
    branch: Branch,
    e: BaseException,
    workflow: Workflow,
    context: str = "",
    attach: bool = True,
) -> None:
    """Fail the branch with the workflow's exception and the end of its traceback."""
    name = getattr(workflow, "name", type(workflow).__name__)
    where = f" ({context})" if context else ""
    message = f"workflow {name!r} raised {type(e).__name__}{where}: {e}\n{traceback_tail(e)}"
    fail(live, branch, f"workflow {type(e).__name__}", message, attach)


def fail(live: LiveEpisode, branch: Branch, reason: str, message: str, attach: bool = True) -> None:
    """Fail one path: a `failed` leaf under it records the error; the episode's other paths go on.

    `attach=False` is for a path that is not (yet) among the run's live paths (a fork that could not
    be replayed)."""
    live.reasons.append(reason)
    add_node(live, branch, "answer", answer="", status="failed", error=message)
    branch.close()
    if attach and branch in live.branches:
        live.branches.remove(branch)


def add_node(live: LiveEpisode, branch: Branch, kind: str, **fields: Any) -> Node:
    """A new node of `kind` under the branch's last node, its depth by the workflow's rule."""
    node = Node(
        id=-1, parent=branch.parent, kind=kind, depth=branch.depth + live.depth_rule.step(kind), **fields
    )
    return live.episode.add(node)


def traceback_tail(e: BaseException, frames: int = 4) -> str:
    """The last `frames` frames of `e`'s traceback, for a failed leaf's error."""
    return "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-frames)).rstrip()
