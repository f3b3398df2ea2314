"""Rollouts spread over Ray actors: each actor builds the run once and plays its share of the questions.

    ragteam eval ... --rollout.workers 4                          # a local Ray on this machine
    ragteam eval ... --rollout.workers 8 --rollout.ray-address auto   # a running Ray cluster

`RayEngine` stands where an `Engine` stands (`run(workflow, questions, reward, on_episode, progress)`,
`config`, `calls`): eval, collect and PPO call it unchanged (`spread(build, rollout)` gives eval and collect
either their usual parts or these). Each actor receives a *builder* (a picklable function returning the
engine, alone or with its workflow) and calls it once, so the policy, the LLM and the retriever are loaded
once per actor and never in the driver. A run splits the questions into contiguous shares, one per actor, ships
the workflow, the reward function and the current rollout config to every actor, and streams each finished
episode back as it ends (so `on_episode` can write a resumable trace, as in one process); the report holds
the episodes in question order.

Why the result equals one process's: every sampled request's seed derives from the run seed, the question id
and the request's place in the tree (`plan.derive_seed`), never from the batch or the process, and a
seeded request samples the same tokens whatever else shares its batch (`llm/decoder.py`, "Seeds"). Log-probs
agree up to float round-off between batch shapes (1e-6), which could in principle flip a token sampled at a
probability boundary; `tests/test_ray_rollout.py` checks that trees, tokens and answers are identical.

A policy trained in another process (PPO) gets its weights pushed with `set_policy_weights` (one `ray.put`,
read by every actor) before each rollout; see `train/sync.py` (`PushToWorkers`).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from ragteam.rollout.config import RolloutConfig
from ragteam.rollout.groups import members
from ragteam.rollout.state import RolloutReport
from ragteam.rollout.tree import Episode
from ragteam.types import Question

__all__ = ["RayEngine", "RayParts", "RolloutWorker", "close_engine", "shares", "spread"]

FORWARDED_ENV = (
    "RAGTEAM_HOME",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "TOKENIZERS_PARALLELISM",
    "MPLCONFIGDIR",
    "OPENAI_API_KEY",
)
"""Environment the actors need to find the same caches and keys as the driver (a cluster's nodes too)."""

_DONE = "done"
_EPISODE = "episode"


def shares(n: int, parts: int) -> list[range]:
    """`parts` contiguous index ranges covering range(n), sizes differing by at most one (some may be empty)."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    return [range(i * n // parts, (i + 1) * n // parts) for i in range(parts)]


def _shape(built: Any) -> str:
    """What a builder returned: `pair` (workflow, engine), `parts` (an object holding `.workflow` and
    `.engine`, `assemble.build.Team`) or `engine`."""
    if isinstance(built, tuple) and len(built) == 2:
        return "pair"
    return "parts" if hasattr(built, "engine") else "engine"


def _unpack(built: Any) -> tuple[Any, Any]:
    """(workflow, engine) from what a builder returned (workflow None for a bare engine)."""
    shape = _shape(built)
    if shape == "pair":
        return built
    if shape == "parts":
        return getattr(built, "workflow", None), built.engine
    return None, built


class RolloutWorker:
    """What one Ray actor holds: the engine (and workflow) built once by `build()`; runs the engine over the
    shares it is sent."""

    def __init__(self, build: Callable[[], Any], threads: int | None = None) -> None:
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        built = build()
        self.shape = _shape(built)
        self.workflow, self.engine = _unpack(built)

    def info(self) -> dict[str, Any]:
        """The workflow the builder made (picklable, for the driver), the backends' names, the process id."""
        e = self.engine
        return {
            "pid": os.getpid(),
            "shape": self.shape,
            "workflow": self.workflow,
            "policy": getattr(e.policy, "name", None),
            "llm": getattr(e.llm, "name", None),
            "retriever": getattr(e.retriever, "name", None),
        }

    def run(
        self,
        workflow: Any,
        indexed: list[tuple[int, Question]],
        reward: Any,
        config: RolloutConfig,
    ) -> Iterator[tuple[str, Any]]:
        """Play `workflow` on this share; yield (`episode`, (index, Episode)) as each ends, then (`done`,
        summary). The engine runs in a thread so that episodes stream out while others are in flight."""
        self.engine.config = config
        out: queue.Queue = queue.Queue()
        questions = [q for _, q in indexed]
        # question id -> its indices in the run (a question asked twice gives identical episodes)
        slots: dict[str, list[int]] = {}
        for i, q in indexed:
            slots.setdefault(q.id, []).append(i)

        def play() -> None:
            try:
                report = self.engine.run(
                    workflow, questions, reward=reward, on_episode=lambda ep: out.put((_EPISODE, ep))
                )
                out.put((_DONE, report))
            except BaseException as e:  # surfaces in the driver with this actor's traceback
                out.put(("error", e))

        thread = threading.Thread(target=play, name="ragteam-rollout-worker", daemon=True)
        thread.start()
        while True:
            kind, value = out.get()
            if kind == _EPISODE:
                yield _EPISODE, (slots[value.id].pop(0), value)
            elif kind == _DONE:
                thread.join()
                summary = {
                    "failed": value.failed,
                    "failures": dict(value.failures),
                    "failed_paths": value.failed_paths,
                    "calls": dict(self.engine.calls),
                }
                yield _DONE, summary
                return
            else:
                thread.join()
                raise value

    def set_policy_weights(self, state: dict[str, Any]) -> int:
        """Load a state dict into the policy's module (between runs); returns the number of tensors."""
        model = getattr(self.engine.policy, "model", None)
        if model is None:
            raise TypeError(
                f"the rollout policy {type(self.engine.policy).__name__} holds no local module to load "
                "weights into (a served policy gets its weights from the trainer's push to the server)"
            )
        _, unexpected = model.load_state_dict(state, strict=False)
        self.clear_prefix_cache()  # KV computed with the old weights must never be served
        if unexpected:
            raise ValueError(f"weights this policy does not have: {', '.join(sorted(unexpected)[:5])}")
        return len(state)

    def clear_prefix_cache(self) -> None:
        """Empty this actor's in-process models' prefix caches (`Engine.clear_prefix_cache`)."""
        clear = getattr(self.engine, "clear_prefix_cache", None)
        if clear is not None:
            clear()


class RayEngine:
    """An `Engine` look-alike whose runs are spread over `workers` Ray actors (see the module docstring).

    `build` is a picklable no-argument function returning an `Engine`, a (workflow, engine) pair or an
    object holding `.workflow` and `.engine` (`assemble.build.Team`); each actor calls it once. `address`
    connects to a running cluster (`auto`, `ray://host:10001`); None starts a local Ray sized for the
    actors when none is running in this process. `cpus` and `gpus` are each actor's Ray resources; `threads`
    its torch threads (default: `cpus`).
    """

    def __init__(
        self,
        build: Callable[[], Any],
        config: RolloutConfig,
        workers: int,
        address: str | None = None,
        cpus: float = 1.0,
        gpus: float = 0.0,
        threads: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        try:
            import ray
        except ImportError:
            raise ImportError(
                "--rollout.workers > 1 runs rollouts on Ray actors: pip install 'ray>=2.40' "
                "(or the project's [ray] extra)"
            ) from None
        self._ray = ray
        self.config = config
        self.calls: Counter = Counter()
        self.workers = workers
        self._started_ray = _connect(ray, address, workers, cpus)
        actor_class = ray.remote(RolloutWorker)
        options: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus}
        threads = threads if threads is not None else max(1, int(cpus))
        self.actors = [actor_class.options(**options).remote(build, threads) for _ in range(workers)]
        try:  # build every actor now, so a broken config fails here and not inside the first run
            self.info = ray.get([a.info.remote() for a in self.actors])
        except Exception as e:
            self.close()
            raise RuntimeError(f"a rollout worker failed to build its engine: {_cause(e)}") from None
        self.workflow = self.info[0]["workflow"]
        self.retriever_name = self.info[0]["retriever"]

    @classmethod
    def from_config(cls, build: Callable[[], Any], rollout: RolloutConfig) -> RayEngine:
        """The workers, address and resources that `--rollout.*` names."""
        return cls(
            build,
            rollout,
            rollout.workers,
            address=rollout.ray_address,
            cpus=rollout.worker_cpus,
            gpus=rollout.worker_gpus,
        )

    # ---- the Engine interface ----------------------------------------------------------------------

    def run(
        self,
        workflow: Any,
        questions: Sequence[Question],
        reward: Any = None,
        on_episode: Callable[[Episode], None] | None = None,
        progress: bool = False,
        config: RolloutConfig | None = None,
    ) -> RolloutReport:
        """Run `workflow` on every question over the actors; the episodes come back in question order.
        `config`: this run's settings, else the engine's."""
        from tqdm.auto import tqdm

        t0 = perf_counter()
        config = config if config is not None else self.config
        indexed = list(enumerate(members(questions, config.group_size)))
        config = config.model_copy(update={"group_size": 1})  # the members are the questions now
        parts = [[indexed[i] for i in r] for r in shares(len(indexed), len(self.actors))]
        streams = [
            actor.run.options(num_returns="streaming").remote(workflow, part, reward, config)
            for actor, part in zip(self.actors, parts)
            if part
        ]
        done: dict[int, Episode] = {}
        summaries: list[dict[str, Any]] = []
        bar = tqdm(total=len(indexed), desc=getattr(workflow, "name", "rollout"), disable=not progress)
        try:
            for kind, value in _merged(self._ray, streams):
                if kind == _EPISODE:
                    index, episode = value
                    done[index] = episode
                    if on_episode is not None:
                        on_episode(episode)
                    bar.update(1)
                else:
                    summaries.append(value)
        finally:
            bar.close()
        failures: Counter = Counter()
        self.calls = Counter()
        for s in summaries:
            failures.update(s["failures"])
            self.calls.update(s["calls"])  # each actor's engine counts over all its runs, as one Engine does
        return RolloutReport(
            episodes=[done[i] for i in range(len(indexed))],
            failed=sum(s["failed"] for s in summaries),
            failures=dict(failures),
            failed_paths=sum(s["failed_paths"] for s in summaries),
            seconds=perf_counter() - t0,
        )

    # ---- weights and lifetime ----------------------------------------------------------------------

    def set_policy_weights(self, state: dict[str, Any]) -> None:
        """Give every actor's policy these weights (one copy in Ray's object store, read by each actor)."""
        ref = self._ray.put(state)
        self._ray.get([a.set_policy_weights.remote(ref) for a in self.actors])

    def clear_prefix_cache(self) -> None:
        """Empty every actor's prefix caches (`Engine.clear_prefix_cache`; a trainer calls it at each push)."""
        self._ray.get([a.clear_prefix_cache.remote() for a in self.actors])

    def close(self) -> None:
        """Stop the actors, and the local Ray if this engine started it."""
        for actor in getattr(self, "actors", []):
            self._ray.kill(actor)
        self.actors = []
        if self._started_ray and self._ray.is_initialized():
            self._ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> RayEngine:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class RayParts:
    """What `spread` returns for a builder of `assemble.build.Team`: the same fields, the models in the actors."""

    workflow: Any
    engine: RayEngine
    policy: Any = None
    llm: Any = None
    retriever: Any = None


def spread(build: Callable[[], Any], rollout: RolloutConfig) -> Any:
    """`build()` in this process when `rollout.workers` is 1; else the same shape of result with the engine
    replaced by a `RayEngine` whose actors each call `build` (a (workflow, engine) pair stays a pair; an
    object with `.workflow` and `.engine` becomes `RayParts`; a bare Engine becomes the RayEngine).

    `build` must be picklable (a module-level function, or a `functools.partial` of one)."""
    if rollout.workers <= 1:
        return build()
    engine = RayEngine.from_config(build, rollout)
    shape = engine.info[0]["shape"]
    if shape == "pair":
        return engine.workflow, engine
    if shape == "parts":
        return RayParts(engine.workflow, engine)
    return engine


def close_engine(engine: Any) -> None:
    """Stop a RayEngine's actors (an in-process Engine has nothing to stop)."""
    close = getattr(engine, "close", None)
    if close is not None:
        close()


def _connect(ray: Any, address: str | None, workers: int, cpus: float) -> bool:
    """Join the Ray this process already runs, or the cluster at `address`, or start a local one; True when
    this call started Ray (so `close` shuts it down)."""
    if ray.is_initialized():
        return False
    env = {k: os.environ[k] for k in FORWARDED_ENV if k in os.environ}
    if address:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=False)
    else:
        needed = int(max(workers * cpus, 1))
        ray.init(
            num_cpus=max(needed, os.cpu_count() or 1),
            include_dashboard=False,
            runtime_env={"env_vars": env},
            log_to_driver=False,
        )
    return True


def _merged(ray: Any, streams: list[Any]) -> Iterator[tuple[str, Any]]:
    """The items of several actors' streams in the order they arrive (one reader thread per stream); the
    first failing stream ends the merge with an error naming its cause."""
    out: queue.Queue = queue.Queue()

    def read(k: int, stream: Any) -> None:
        try:
            for ref in stream:
                out.put(("item", ray.get(ref)))
        except BaseException as e:
            out.put(("error", (k, e)))
        out.put(("end", k))

    threads = [threading.Thread(target=read, args=(k, s), daemon=True) for k, s in enumerate(streams)]
    for t in threads:
        t.start()
    open_streams = len(streams)
    while open_streams:
        kind, value = out.get()
        if kind == "item":
            yield value
        elif kind == "error":
            k, e = value
            raise RuntimeError(f"rollout worker {k} failed: {_cause(e)}") from None
        else:
            open_streams -= 1


def _cause(e: BaseException) -> str:
    """The original error behind a Ray failure: a task's exception (`RayTaskError.cause`), else the last
    line of Ray's report (an actor whose constructor raised reports the traceback, ending with it)."""
    cause = getattr(e, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__
