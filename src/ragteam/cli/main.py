"""The `ragteam` command. Each subcommand lives in its own module with a `Config` class and `run(cfg)`.

Modules are imported only when their command runs, so `ragteam --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import yaml

from ragteam.allocator import return_freed_memory
from ragteam.config import (
    Config,
    ConfigError,
    add_config_arguments,
    config_from_args,
    quiet_libraries,
    read_yaml,
    setup_caches,
)
from ragteam.precedence import layered

# command words -> (module under ragteam.cli, one-line summary)
COMMANDS: dict[tuple[str, ...], tuple[str, str]] = {
    ("demo",): ("demo", "Run the demo end to end on the bundled data (the main job)."),
    ("index",): ("index", "Build a BM25 / dense index from a corpus file or a dataset's paragraphs."),
    ("search",): ("search", "Search an index and print the ranked passages."),
    ("score",): ("score", "Score a prediction against gold answers (EM, F1, cover-EM) as JSON."),
    ("eval-retrieval",): ("eval_retrieval", "Recall@k of supporting paragraphs for bm25, dense and hybrid."),
    ("ask",): ("ask", "Run one question through a workflow and print its trace."),
    ("eval",): ("evaluate", "Evaluate a workflow on a benchmark file: traces, metrics, statistics, plots."),
    ("compare",): ("compare", "Compare two runs on the same questions: paired bootstrap and McNemar."),
    ("train", "sft"): ("train_sft", "Supervised fine-tuning of the policy on SFT rows (TRL; full or LoRA)."),
    ("train", "dpo"): ("train_dpo", "DPO of the policy on ranked pairs (TRL; full or LoRA)."),
    ("train", "prm"): ("train_prm", "Train a process reward model on ranked pairs (Bradley-Terry)."),
    ("train", "ppo"): ("train_ppo", "Multi-agent PPO of the policy over a workflow's roles (a recipe)."),
    ("collect",): ("collect", "Collect training rows: SFT (rejection sampling, MMOA-RAG) or ranked pairs."),
    ("serve", "retriever"): ("serve_retriever", "Serve an index over HTTP: Search-R1's POST /retrieve."),
    ("serve", "llm"): ("serve_llm", "Serve a local model over the OpenAI chat-completions API."),
    ("serve", "team"): ("serve_team", "Serve a workflow's team as one model over the OpenAI chat API."),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragteam",
        description="Train and run small teams of LM agents (C-3PO, MMOA-RAG, RAG-Gym) between a retriever "
        "and an LLM. Every command takes --config FILE.yaml; flags override the file.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction] = {}
    for words, (module, summary) in COMMANDS.items():
        target = sub
        if len(words) == 2:
            if words[0] not in groups:
                group = sub.add_parser(words[0], help=f"{words[0]} subcommands")
                groups[words[0]] = group.add_subparsers(dest="subcommand", metavar="WHAT", required=True)
            target = groups[words[0]]
        cmd = target.add_parser(words[-1], help=summary, description=summary)
        cmd.add_argument("--config", help="YAML file with this command's settings; flags override it")
        cmd.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if problem := _unencodable_argument(argv):
        print(f"ragteam: {problem}", file=sys.stderr)
        return 2
    quiet_libraries()
    parser = build_parser()
    module_name = _command_from_argv(argv)
    if module_name is None:
        if not argv:
            parser.print_help()
            return 0
        parser.parse_args(argv)  # prints the help or the usage error
        return 2
    module = importlib.import_module(f"ragteam.cli.{module_name}")
    if problem := _renamed_flag(argv, getattr(module, "RENAMED", {})):
        print(f"ragteam: {problem}", file=sys.stderr)
        return 2
    config_cls = command_config(module.Config, argv)
    _add_command_flags(parser, module_name, module, config_cls)
    args = parser.parse_args(argv)
    setup_caches()
    return_freed_memory()  # freed tensors go back to the system (glibc's heap would keep them: allocator.py)
    try:
        cfg = config_from_args(config_cls, _strip(args))
    except ConfigError as e:
        print(f"ragteam: {e}", file=sys.stderr)
        return 2
    try:
        return int(module.run(cfg) or 0)
    except (ValueError, FileNotFoundError) as e:
        print(f"ragteam: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # an output path that is a file, a full disk, no permission: a message, no traceback
        print(f"ragteam: error: {_os_error(e)}", file=sys.stderr)
        return 1


def _unencodable_argument(argv: list[str]) -> str | None:
    """Why an argument is no text, or None. A byte that is not UTF-8 in a shell argument (`$'\\xff'`) arrives
    as a lone surrogate (Python's surrogateescape); left in, it failed deep inside a run (a TypeError in the
    episode, a write that cannot encode), so it is refused here, where it enters, naming the argument."""
    for i, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as e:
            byte = f"0x{ord(arg[e.start]) - 0xDC00:02x}" if 0xDC80 <= ord(arg[e.start]) <= 0xDCFF else "?"
            shown = arg.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
            return (
                f"argument {i} ({shown[:80]!s}) is not UTF-8 text (byte {byte} at character {e.start + 1}); "
                "ragteam reads arguments as UTF-8"
            )
    return None


def _renamed_flag(argv: list[str], renamed: dict[str, str]) -> str | None:
    """What a flag the command no longer takes is now called (its module's `RENAMED`: old -> new, a key
    ending in `.` renaming a whole group), or None. Not an alias: the command stops, naming the new
    spelling, where argparse would only say `unrecognized arguments`."""
    for arg in argv:
        flag = arg.split("=", 1)[0]
        for old, new in renamed.items():
            if flag == old or (old.endswith(".") and flag.startswith(old)):
                now = new + flag[len(old) :] if old.endswith(".") else new
                return f"{flag} is now {now}"
    return None


def _os_error(e: OSError) -> str:
    """An OSError as one line naming the path (`out/x: a file is in the way of a folder`)."""
    if not e.filename and not e.strerror:  # raised with a message of its own (`X: not a folder of ...`)
        return str(e)
    where = f"{e.filename}: " if e.filename else ""
    if isinstance(e, (FileExistsError, NotADirectoryError)):
        return f"{where}a file is in the way of an output folder ({e.strerror})"
    return f"{where}{e.strerror or e}"


def _command_from_argv(argv: list[str]) -> str | None:
    words = [a for a in argv if not a.startswith("-")]
    for cmd_words, (module, _) in COMMANDS.items():
        if tuple(words[: len(cmd_words)]) == cmd_words:
            return module
    return None


def command_config(cls: type[Config], argv: list[str]) -> type[Config]:
    """The command's config class with the options of the workflow it runs: the `--workflow` flag, else
    the `--config` file's, else the recipe's (`train ppo --recipe`), else the default; so `--max-turns` is a
    flag of `--workflow search-r1` alone, and `--help` with a workflow lists its options. Found before the
    parser is built; a file or recipe that does not read leaves `cls` (resolving reports the problem)."""
    if "workflow" not in cls.model_fields or not hasattr(cls, "for_workflow"):
        return cls
    early = argparse.ArgumentParser(add_help=False)
    for flag in ("--workflow", "--config", "--recipe"):
        early.add_argument(flag)
    known, _ = early.parse_known_args(argv)
    flags = {k: v for k, v in vars(known).items() if v is not None and k != "config"}
    try:
        data = read_yaml(known.config) if known.config else {}
        given = [("file", data if isinstance(data, dict) else {}), ("flag", flags)]
        workflow = layered(cls, given)[0].get("workflow", cls.model_fields["workflow"].default)
    except (ConfigError, OSError, yaml.YAMLError):
        return cls
    return cls.for_workflow(workflow) if isinstance(workflow, str) else cls


def _add_command_flags(
    parser: argparse.ArgumentParser, module_name: str, module, config_cls: type[Config] | None = None
) -> None:
    """Add the flags of the command's config (`config_cls`, else the module's `Config`) to its parser."""
    for action in parser._subparsers._group_actions:  # type: ignore[union-attr]
        for choice in action.choices.values():
            _add_to_matching(choice, module_name, config_cls or module.Config)


def _add_to_matching(p: argparse.ArgumentParser, module_name: str, config_cls: type[Config]) -> None:
    if p.get_default("_module") == module_name:
        add_config_arguments(p, config_cls)
        return
    if p._subparsers is not None:
        for action in p._subparsers._group_actions:
            for choice in action.choices.values():
                _add_to_matching(choice, module_name, config_cls)


def _strip(args: argparse.Namespace) -> argparse.Namespace:
    return argparse.Namespace(
        **{k: v for k, v in vars(args).items() if k not in ("_module", "subcommand", "command")}
    )


if __name__ == "__main__":
    raise SystemExit(main())
