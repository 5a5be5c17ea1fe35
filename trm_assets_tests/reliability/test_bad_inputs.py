"""The bad-input corpus (issue 9): every case yields a clear error naming the location (file and
row / field / key), exits without a traceback, and leaves the workspace byte-identical.

Cases that reach the user through ``trm train`` are run through the command itself (in process,
``click.testing.CliRunner``) against a workspace that has trained two units (init + the first
step: state, pools, ladder, baseline cache, run log and versions exist). Kernel-level inputs that
never pass through a command line (hostile skill names proposed by a model, malformed edit JSON)
are run through the function that guards them, next to the same workspace snapshot.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from trm_assets.cli.init import init_cmd
from trm_assets.cli.train import train_cmd
from trm_assets.domain.edit_schema import EditProposal
from trm_assets.domain.edits import UnsafeSkillPathError, resolve_skill_file
from trm_assets.evolution.calls import parse_json_reply
from trm_assets.harness.data.config import config_to_yaml
from trm_assets.harness.loop.context import loop_context
from trm_assets.harness.loop.runner import train
from trm_assets.llm.factory import build_providers
from trm_assets_tests.reliability.conftest import snapshot
from trm_assets_tests.tiny import REPO, tiny_config
from trm_bench.overhead import new_workspace

SMOKE = REPO / "data" / "smoke"
#: ``trm train`` runs every unit as a Dagster run by default; the corpus checks the loaders.
NO_DAGSTER: tuple[str, ...] = (
    ("--no-dagster",) if any(p.name == "no_dagster" for p in train_cmd.params) else ()
)


@dataclass(frozen=True)
class Base:
    workspace: Path  # trained for two units
    config: dict[str, Any]  # the resolved tiny config (relative data paths)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Base:
    mp = pytest.MonkeyPatch()
    mp.chdir(REPO)
    root = tmp_path_factory.mktemp("corpus")
    cfg = tiny_config()
    ws = new_workspace(root / "ws", cfg)
    with loop_context(ws, cfg, build_providers(cfg.provider_spec())) as ctx:
        train(ctx, max_units=2)
    mp.undo()
    return Base(ws, yaml.safe_load(config_to_yaml(cfg)))


@dataclass
class Env:
    """One case's sandbox: a copy of the workspace and of the smoke data, and a config file."""

    root: Path
    ws: Path
    data: Path
    config: dict[str, Any]

    @property
    def state(self) -> Path:
        return self.ws / "state.json"

    def write_config(self, **changes: Any) -> Path:
        cfg = {**self.config, **changes}
        path = self.root / "config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        return path

    def use_data_copy(self, **changes: Any) -> Path:
        """A config reading the data copy (questions, trees, ground truth); the workspace's
        manifest is pointed at the copied questions file (as ``trm init`` would have)."""
        questions = changes.pop("questions", str(self.data / "questions.json"))
        manifest = self.ws / "manifest.json"
        m = json.loads(manifest.read_text(encoding="utf-8"))
        m["questions_ref"] = questions
        manifest.write_text(json.dumps(m, indent=2, sort_keys=True), encoding="utf-8")
        return self.write_config(
            questions=questions,
            trees=str(self.data / "trees"),
            ground_truth=str(self.data / "ground_truth.json"),
            **changes,
        )

    def questions(self) -> list[dict[str, Any]]:
        data: list[dict[str, Any]] = json.loads(
            (self.data / "questions.json").read_text(encoding="utf-8")
        )
        return data

    def flat_rows(self) -> list[dict[str, Any]]:
        rows = []
        for v in self.questions():
            for q in v["questions"]:
                rows.append(
                    {
                        **{k: v[k] for k in ("video_id", "duration", "domain", "sub_category")},
                        "url": v["url"],
                        "videoID": v["videoID"],
                        **q,
                    }
                )
        return rows


#: A case: prepare the sandbox and return the ``trm train`` arguments (after --workspace), or
#: run a guarded kernel function itself and return its error message.
Prepare = Callable[[Env], list[str] | str]


@dataclass(frozen=True)
class Case:
    id: str
    prepare: Prepare
    expect: tuple[str, ...]  # substrings of the error: the location and what is wrong


def _resume(env: Env, cfg: Path | None = None, *extra: str) -> list[str]:
    return ["--config", str(cfg or env.write_config()), "--resume", *extra]


# -- configs ---------------------------------------------------------------------------------


def _cfg_text(text: str) -> Prepare:
    def prep(env: Env) -> list[str]:
        p = env.root / "config.yaml"
        p.write_text(text, encoding="utf-8")
        return ["--config", str(p), "--resume"]

    return prep


def _cfg(**changes: Any) -> Prepare:
    return lambda env: _resume(env, env.write_config(**changes))


def _set(*overrides: str) -> Prepare:
    def prep(env: Env) -> list[str]:
        args = _resume(env)
        for o in overrides:
            args += ["--set", o]
        return args

    return prep


# -- question files ----------------------------------------------------------------------------


def _questions_json(edit: Callable[[list[dict[str, Any]]], None]) -> Prepare:
    def prep(env: Env) -> list[str]:
        data = env.questions()
        edit(data)
        (env.data / "questions.json").write_text(json.dumps(data), encoding="utf-8")
        return _resume(env, env.use_data_copy())

    return prep


def _questions_text(text: str, name: str = "questions.json") -> Prepare:
    def prep(env: Env) -> list[str]:
        (env.data / name).write_text(text, encoding="utf-8")
        return _resume(env, env.use_data_copy(questions=str(env.data / name)))

    return prep


def _truncated_questions(env: Env) -> list[str]:
    p = env.data / "questions.json"
    p.write_bytes(p.read_bytes()[:5000])
    return _resume(env, env.use_data_copy())


def _csv(edit: Callable[[pd.DataFrame], pd.DataFrame]) -> Prepare:
    def prep(env: Env) -> list[str]:
        df = pd.DataFrame(env.flat_rows())
        df["options"] = df["options"].map(json.dumps)
        p = env.data / "questions.csv"
        edit(df).to_csv(p, index=False)
        return _resume(env, env.use_data_copy(questions=str(p)))

    return prep


def _parquet(edit: Callable[[pd.DataFrame], pd.DataFrame]) -> Prepare:
    def prep(env: Env) -> list[str]:
        p = env.data / "questions.parquet"
        duckdb.from_df(edit(pd.DataFrame(env.flat_rows()))).write_parquet(str(p))
        return _resume(env, env.use_data_copy(questions=str(p)))

    return prep


def _set_cell(row: int, column: str, value: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def edit(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        df[column] = df[column].astype(object)
        df.at[row, column] = value
        return df

    return edit


def _q(vi: int, qi: int, **changes: Any) -> Callable[[list[dict[str, Any]]], None]:
    def edit(data: list[dict[str, Any]]) -> None:
        q = data[vi]["questions"][qi]
        for k, v in changes.items():
            if v is _DROP:
                q.pop(k)
            else:
                q[k] = v

    return edit


_DROP = object()


def _duplicate_id(data: list[dict[str, Any]]) -> None:
    data[1]["questions"][0]["question_id"] = data[0]["questions"][0]["question_id"]


def _other_answer(data: list[dict[str, Any]]) -> None:
    """A valid file whose first question's answer is another letter: not the data the pools
    were frozen on (resume accepted it, and one question had two truths in one workspace)."""
    q = data[0]["questions"][0]
    q["answer"] = "B" if q["answer"] == "A" else "A"


def _type_variant(data: list[dict[str, Any]]) -> None:
    """One question's type respelled ("Action Reasoning" → "action  reasoning"): one file."""
    other = next(q["task_type"] for v in data for q in v["questions"] if " " in q["task_type"])
    data[0]["questions"][0]["task_type"] = other.lower().replace(" ", "  ")


# -- trees ---------------------------------------------------------------------------------------

TREE = "A7w43e8nyxD.json"


def _tree(edit: Callable[[dict[str, Any]], None] | None = None, raw: str | None = None) -> Prepare:
    def prep(env: Env) -> list[str]:
        p = env.data / "trees" / TREE
        if raw is not None:
            p.write_text(raw, encoding="utf-8")
        else:
            assert edit is not None
            data = json.loads(p.read_text(encoding="utf-8"))
            edit(data)
            p.write_text(json.dumps(data), encoding="utf-8")
        return _resume(env, env.use_data_copy())

    return prep


def _tree_missing(env: Env) -> list[str]:
    (env.data / "trees" / TREE).unlink()
    return _resume(env, env.use_data_copy())


def _drop_root(d: dict[str, Any]) -> None:
    d.pop("root_id")


def _bad_times(d: dict[str, Any]) -> None:
    d["nodes"]["s0"]["end"] = -5.0


def _dangling_child(d: dict[str, Any]) -> None:
    d["nodes"]["v"]["children"].append("s9")


# -- checkpoints and workspace files ------------------------------------------------------------


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        d.pop(key)

    return edit


def _state(edit: Callable[[dict[str, Any]], Any]) -> Prepare:
    def prep(env: Env) -> list[str]:
        data = json.loads(env.state.read_text(encoding="utf-8"))
        out = edit(data)
        env.state.write_text(json.dumps(data if out is None else out), encoding="utf-8")
        return _resume(env)

    return prep


def _truncate(name: str, keep: float = 0.5) -> Prepare:
    def prep(env: Env) -> list[str]:
        p = env.ws / name
        data = p.read_bytes()
        p.write_bytes(data[: int(len(data) * keep)])
        return _resume(env)

    return prep


def _json_file(name: str, value: Any) -> Prepare:
    def prep(env: Env) -> list[str]:
        (env.ws / name).write_text(json.dumps(value), encoding="utf-8")
        return _resume(env)

    return prep


def _pools(edit: Callable[[dict[str, Any]], Any]) -> Prepare:
    def prep(env: Env) -> list[str]:
        p = env.ws / "pools.json"
        data = json.loads(p.read_text(encoding="utf-8"))
        out = edit(data)
        p.write_text(json.dumps(data if out is None else out), encoding="utf-8")
        return _resume(env)

    return prep


def _old_two_pool(d: dict[str, Any]) -> dict[str, Any]:
    return {"validation": d["validation"], "diagnosis": d["diagnosis"]}


def _overlap(d: dict[str, Any]) -> None:
    d["test"] = [*d["test"], d["validation"][0]]


def _unknown_qid(d: dict[str, Any]) -> None:
    """A well-formed pools file (fingerprint recomputed) naming a question the data lacks."""
    from trm_assets.domain.pools import make_pools

    d["validation"] = ["no-such-question", *d["validation"][1:]]
    d["fingerprint"] = make_pools(d["test"], d["validation"], d["diagnosis"]).fingerprint


def _manifest(edit: Callable[[dict[str, Any]], None]) -> Prepare:
    def prep(env: Env) -> list[str]:
        p = env.ws / "manifest.json"
        data = json.loads(p.read_text(encoding="utf-8"))
        edit(data)
        p.write_text(json.dumps(data), encoding="utf-8")
        return _resume(env)

    return prep


def _missing_version(d: dict[str, Any]) -> None:
    d["current"]["skills"] = "v99"


def _symlinked_skill(env: Env) -> list[str]:
    """A symlink planted in the current skills version (read by the next unit)."""
    current = json.loads((env.ws / "manifest.json").read_text(encoding="utf-8"))["current"]
    skills = env.ws / "store" / "skills" / current["skills"]
    target = env.root / "outside-secret.md"
    target.write_text("# not a skill\n", encoding="utf-8")
    (skills / "evil.md").symlink_to(target)
    return _resume(env)


def _binary_skill(env: Env) -> list[str]:
    """A skill file of the current version that is not UTF-8 text."""
    current = json.loads((env.ws / "manifest.json").read_text(encoding="utf-8"))["current"]
    skill = next((env.ws / "store" / "skills" / current["skills"]).glob("*.md"))
    skill.write_bytes(b"\xff\xfe\x00garbage")
    return _resume(env)


def _not_utf8(where: str) -> Prepare:
    """``config`` / ``questions`` / ``state``: that file holds bytes that are not UTF-8."""

    def prep(env: Env) -> list[str]:
        junk = b"\x00\xff\xfe garbage"
        if where == "config":
            p = env.root / "config.yaml"
            p.write_bytes(junk)
            return _resume(env, p)
        if where == "questions":
            (env.data / "questions.json").write_bytes(junk)
            return _resume(env, env.use_data_copy())
        env.state.write_bytes(junk)
        return _resume(env)

    return prep


def _init_over(**changes: Any) -> Prepare:
    """``trm init`` over the existing workspace with data the config cannot train on: refused
    before the workspace is archived (it archived, then every train failed)."""

    def prep(env: Env) -> list[str]:
        return ["init", "--config", str(env.write_config(**changes))]

    return prep


def _remove(name: str) -> Prepare:
    def prep(env: Env) -> list[str]:
        (env.ws / name).unlink()
        return _resume(env)

    return prep


def _state_lost(env: Env) -> list[str]:
    env.state.unlink()
    return _resume(env)


def _truncated_cache(env: Env) -> list[str]:
    for p in sorted((env.ws / "baseline_cache").glob("*.json")):
        p.write_bytes(p.read_bytes()[:40])
    return _resume(env)


def _hostile_prompt_set(env: Env) -> list[str]:
    """``trm init`` over the existing workspace with a prompt set holding a symlinked skill:
    refused before the workspace is archived."""
    prompts = env.root / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    (prompts / "skills" / "evil.md").symlink_to("/etc/hostname")
    return ["init", "--config", str(env.write_config()), "--prompts-dir", str(prompts)]


def _init_type_without_skill(env: Env) -> list[str]:
    """``trm init`` on data with a task type the prompt set has no skill file for: init passed,
    and only `trm train` refused the workspace."""
    data = env.questions()
    old = data[0]["questions"][0]["task_type"]
    for v in data:
        for q in v["questions"]:
            if q["task_type"] == old:
                q["task_type"] = "Evil Type"
    (env.data / "questions.json").write_text(json.dumps(data), encoding="utf-8")
    return ["init", "--config", str(env.use_data_copy())]


# -- hostile skill names and malformed edit JSON (guarded functions) ---------------------------


def _skill_name(name: str) -> Prepare:
    def prep(env: Env) -> str:
        skills = env.ws / "store" / "skills" / "v1"
        with pytest.raises(UnsafeSkillPathError) as info:
            resolve_skill_file(skills, name)
        return str(info.value)

    return prep


def _edit_reply(content: str) -> Prepare:
    def prep(env: Env) -> str:
        value, reason = parse_json_reply(content, EditProposal)
        assert value is None
        return reason

    return prep


def _evolve_with_malformed_replies(env: Env) -> str:
    """The evolve call end to end: two malformed replies (the repair retry included) → a
    ``malformed`` record, no edit, nothing written."""
    from trm_assets.evolution.evolve import evolve_single_skill, load_evolve_prompts
    from trm_assets.evolution.types import SkillCasePack
    from trm_assets.harness.storage.workspace import prompt_store, resolve_paths, skill_store
    from trm_assets.llm.protocol import ChatResponse, Usage

    class Scripted:
        model = "scripted"
        is_simulated = True
        usage = Usage()

        def __init__(self, replies: list[str]) -> None:
            self.replies = replies

        async def chat(self, messages: Any, **kw: Any) -> ChatResponse:
            return ChatResponse(content=self.replies.pop(0), tool_calls=(), usage=Usage())

    store = skill_store(resolve_paths(env.ws))
    name = store.list_files()[1]
    pack = SkillCasePack(skill_file=name, task_type=name[:-3], cases=())
    llm = Scripted(['{"edits": [{"op": "rewrite"}]}', '{"edits": [ {"op": "add", "text": ""'])
    template = load_evolve_prompts(prompt_store(resolve_paths(env.ws))).evolve_skill
    rec = asyncio.run(evolve_single_skill(pack, store, llm=llm, template=template, budget=2))
    assert rec.status == "no_edit" and rec.candidate_text == rec.original_text, rec
    return rec.detail


CASES: tuple[Case, ...] = (
    # configs
    Case("config-yaml-syntax", _cfg_text("seed: 2\nepochs: [1, 2\n"), ("config.yaml", "line")),
    Case("config-top-level-list", _cfg_text("- seed: 2\n"), ("config.yaml", "mapping")),
    Case("config-unknown-key", _cfg(gate_alhpa=0.1), ("config.yaml", "gate_alhpa")),
    Case("config-wrong-type", _cfg(batch_size="twelve"), ("config.yaml", "batch_size")),
    Case(
        "config-minibatch-layer",
        _cfg(min_class_per_batch=12),
        ("min_class_per_batch", "batch_size"),
    ),
    Case("config-gate-lambda-dir", _cfg(gate_lambda_dir=0.5), ("gate_lambda_dir",)),
    Case("config-val-size-vs-data", _cfg(val_size=6), ("val_size", "eval_min_per_class")),
    Case("config-bad-set-override", _set("epochs=0"), ("epochs",)),
    Case("config-missing-questions", _cfg(questions="data/nope.json"), ("data/nope.json",)),
    # question files, each format
    Case("questions-json-truncated", _truncated_questions, ("questions.json", "line")),
    Case(
        "questions-json-missing-answer",
        _questions_json(_q(0, 0, answer=_DROP)),
        ("questions.json", "video #1", "question #1", "answer"),
    ),
    Case(
        "questions-json-bad-answer-letter",
        _questions_json(_q(2, 1, answer="Z")),
        ("questions.json", "video #3", "question #2", "answer"),
    ),
    Case(
        "questions-json-duplicate-id",
        _questions_json(_duplicate_id),
        ("questions.json", "question_id", "001-1"),
    ),
    Case(
        "questions-json-task-type-no-letters",
        _questions_json(_q(0, 0, task_type="!!!")),
        ("questions.json", "task_type", "'!!!'", "skill file"),
    ),
    Case(
        "questions-json-task-types-share-a-skill-file",
        _questions_json(_type_variant),
        ("questions.json", "task_type", "would share"),
    ),
    Case(
        "questions-json-task-type-is-the-default-strategy",
        _questions_json(_q(0, 0, task_type="Default Strategy")),
        ("questions.json", "task_type", "default-strategy.md"),
    ),
    Case(
        "init-task-type-without-a-skill-file",
        _init_type_without_skill,
        ("evil-type.md", "'Evil Type'"),
    ),
    Case(
        "questions-changed-since-the-pools-were-frozen",
        _questions_json(_other_answer),
        ("pools.json", "question_digests", "1 pooled question(s) changed since (001-", "trm init"),
    ),
    Case("questions-json-not-a-list", _questions_text('{"a": 1}'), ("questions.json", "list")),
    Case(
        "questions-csv-missing-column",
        _csv(lambda df: df.drop(columns=["answer"])),
        ("questions.csv", "answer"),
    ),
    Case(
        "questions-csv-bad-options",
        _csv(_set_cell(4, "options", "not a list of options")),
        ("questions.csv", "row 6", "options"),
    ),
    Case(
        "questions-parquet-bad-answer",
        _parquet(_set_cell(7, "answer", "Q")),
        ("questions.parquet", "row 7", "answer"),
    ),
    Case(
        "questions-parquet-garbage",
        _questions_text("PAR1 not really parquet", "questions.parquet"),
        ("questions.parquet", "parquet"),
    ),
    Case("questions-unknown-suffix", _questions_text("x", "questions.txt"), ("questions.txt",)),
    # trees
    Case("tree-invalid-json", _tree(raw='{"video": '), (TREE,)),
    Case("tree-missing-field", _tree(_drop_root), (TREE, "root_id")),
    Case("tree-bad-times", _tree(_bad_times), (TREE, "s0")),
    Case("tree-dangling-child", _tree(_dangling_child), (TREE, "s9")),
    Case("tree-missing-for-a-video", _tree_missing, ("trees", "A7w43e8nyxD")),
    # checkpoints
    Case(
        "state-missing-key",
        _state(_drop("gate_epoch_observed")),
        ("state.json", "gate_epoch_observed"),
    ),
    Case(
        "state-structural-key-change",
        _state(lambda d: d.__setitem__("rejected", d.pop("rejected_buffer"))),
        ("state.json", "rejected_buffer", "rejected"),
    ),
    Case("state-truncated-json", _truncate("state.json"), ("state.json", "line")),
    Case("state-not-utf8", _not_utf8("state"), ("state.json: not UTF-8 text",)),
    Case(
        "state-epoch-not-a-number",
        _state(lambda d: d.__setitem__("epoch", "zero")),
        ("state.json", "epoch: 'zero' (expected an integer"),
    ),
    Case(
        "state-epoch-past-its-history",  # silently finalized
        _state(lambda d: d.__setitem__("epoch", 99)),
        ("state.json", "epoch: 99 disagrees with the history"),
    ),
    Case(
        "state-slow-done-out-of-range",
        _state(lambda d: d.__setitem__("slow_done", 50)),
        ("state.json", "slow_done: 50 (expected an integer in 0..10)"),
    ),
    Case(
        "state-finalized-not-a-bool",
        _state(lambda d: d.__setitem__("finalized", "no")),
        ("state.json", "finalized: 'no' (expected true or false)"),
    ),
    Case("state-lost-after-training", _state_lost, ("state.json: missing, but the workspace",)),
    Case("init-pools-do-not-fit", _init_over(val_size=1000), ("leaves no diagnosis question",)),
    Case("init-trees-missing", _init_over(trees="/nonexistent-trees"), ("/nonexistent-trees",)),
    Case("config-not-utf8", _not_utf8("config"), ("config.yaml", "not UTF-8 text")),
    Case("questions-not-utf8", _not_utf8("questions"), ("questions.json", "UTF-8")),
    Case("state-wrong-format", _state(lambda d: d.__setitem__("format", "v0")), ("state.json",)),
    Case("state-not-an-object", _state(lambda d: [d]), ("state.json", "object")),
    Case(
        "state-bad-probation",
        _state(lambda d: d.__setitem__("probations", {"x.md": {"skill_file": "x.md"}})),
        ("state.json", "corrupt"),
    ),
    Case(
        "state-structural-config-change",
        _set("seed=3"),
        ("state.json", "structural"),
    ),
    # pools
    Case("pools-old-format", _pools(_old_two_pool), ("pools.json", "test", "old")),
    Case("pools-overlap", _pools(_overlap), ("pools.json", "disjoint")),
    Case("pools-unknown-question", _pools(_unknown_qid), ("pools.json", "no-such-question")),
    Case("pools-truncated", _truncate("pools.json"), ("pools.json", "line")),
    # other workspace files
    Case("manifest-truncated", _truncate("manifest.json"), ("manifest.json",)),
    Case("manifest-missing-version", _manifest(_missing_version), ("v99",)),
    Case("ladder-truncated", _truncate("ladder.json"), ("ladder.json",)),
    Case("ladder-missing", _remove("ladder.json"), ("ladder.json", "cannot be rebuilt")),
    Case("ladder-not-an-object", _json_file("ladder.json", [1, 2]), ("ladder.json",)),
    Case("baseline-cache-truncated", _truncated_cache, ("baseline_cache",)),
    Case("skill-not-utf8", _binary_skill, ("UTF-8",)),
    # hostile skill paths
    Case("skill-symlink-in-store", _symlinked_skill, ("evil.md",)),
    Case("skill-symlink-in-prompt-set", _hostile_prompt_set, ("evil.md", "symbolic link")),
    Case("skill-name-parent", _skill_name("../escape.md"), ("../escape.md",)),
    Case("skill-name-absolute", _skill_name("/etc/passwd.md"), ("/etc/passwd.md",)),
    Case("skill-name-subdir", _skill_name("sub/x.md"), ("sub/x.md",)),
    Case("skill-name-backslash", _skill_name("..\\x.md"), ("x.md",)),
    Case("skill-name-drive", _skill_name("C:evil.md"), ("C:evil.md",)),
    Case("skill-name-nul", _skill_name("x.md\x00.txt"), ("x.md",)),
    Case("skill-name-hidden", _skill_name(".hidden.md"), (".hidden.md",)),
    Case("skill-name-not-markdown", _skill_name("notes.txt"), ("notes.txt",)),
    # malformed edit JSON
    Case("edit-json-truncated", _edit_reply('{"edits": [{"op": "add"'), ("no JSON object",)),
    Case("edit-json-invalid", _edit_reply('{"edits": [}'), ("invalid JSON", "character")),
    Case("edit-json-unknown-op", _edit_reply('{"edits": [{"op": "rewrite"}]}'), ("edits", "op")),
    Case(
        "edit-json-replace-without-anchor",
        _edit_reply('{"edits": [{"op": "replace", "text": "x"}]}'),
        ("edits", "anchor"),
    ),
    Case("edit-json-extra-key", _edit_reply('{"edits": [], "patch": 1}'), ("patch",)),
    Case("edit-json-edits-not-a-list", _edit_reply('{"edits": "add x"}'), ("edits",)),
    Case("edit-json-empty-reply", _edit_reply("   "), ("empty",)),
    Case("edit-json-evolve-call", _evolve_with_malformed_replies, ("malformed",)),
)


def test_corpus_size() -> None:
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)


#: Known bugs outside this issue's files, as ``case id → strict-xfail reason`` (empty: the two
#: found — ladder.json read after a step's first write, a truncated baseline cache escaping as a
#: raw JSONDecodeError — were fixed in the training-loop files).
KNOWN_BUGS: dict[str, str] = {}


def _params() -> list[Any]:
    return [
        pytest.param(
            c,
            id=c.id,
            marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[c.id])]
            if c.id in KNOWN_BUGS
            else [],
        )
        for c in CASES
    ]


@pytest.mark.parametrize("case", _params())
def test_bad_input_is_refused_cleanly(case: Case, base: Base, tmp_path: Path) -> None:
    env = Env(tmp_path, tmp_path / "ws", tmp_path / "data", base.config)
    shutil.copytree(base.workspace, env.ws, symlinks=True)
    shutil.copytree(SMOKE, env.data)
    prepared = case.prepare(env)
    before = snapshot(env.ws)
    if isinstance(prepared, str):
        message = prepared
    else:
        if prepared and prepared[0] == "init":
            args, cmd = ["--workspace", str(env.ws), *prepared[1:]], init_cmd
        else:  # the harness path; the Dagster path is checked by test_dagster_path_bad_input
            args, cmd = ["--workspace", str(env.ws), *prepared, *NO_DAGSTER], train_cmd
        res = CliRunner().invoke(cmd, args, env={"TRM_LLM_API_KEY": None})
        message = res.output
        assert res.exit_code == 2, f"exit {res.exit_code}: {res.output}\n{res.exception!r}"
        assert "Traceback" not in message and "\nerror: " in f"\n{message}", message
    for needle in case.expect:
        assert needle in message, f"{needle!r} not in: {message}"
    assert snapshot(env.ws) == before, "the workspace changed (partial write)"
    assert not list(env.root.glob(f"{env.ws.name}.archive-*"))


def test_dagster_path_bad_input_is_refused_cleanly(base: Base, tmp_path: Path) -> None:
    if not NO_DAGSTER:
        pytest.skip("`trm train` has no Dagster path")
    env = Env(tmp_path, tmp_path / "ws", tmp_path / "data", base.config)
    shutil.copytree(base.workspace, env.ws, symlinks=True)
    shutil.copytree(SMOKE, env.data)
    (env.ws / "ladder.json").write_text("{", encoding="utf-8")
    res = CliRunner().invoke(
        train_cmd, ["--workspace", str(env.ws), "--config", str(env.write_config()), "--resume"]
    )
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "ladder.json" in res.output
