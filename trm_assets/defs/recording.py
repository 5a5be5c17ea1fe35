"""What a Dagster run records about an experiment, derived from the workspace alone.

* :meth:`Recorder.new_events`: every fact the instance does not hold yet — the frozen pools, each
  skill version per task type it changed (accept, rollback, momentum, delivery) and each prompt
  version (evolution, R2 revert), the batches of a started epoch — as materializations with the
  content hash as data version, plus the evaluations of the checks that guard them. Called after
  every unit of work, so a version is recorded by the run that created it; idempotent (keyed by
  partition, version and kind), so re-running or re-publishing adds nothing.
* :meth:`Recorder.epoch` / :meth:`Recorder.step`: the metadata and input provenance of an
  evaluation, naming exactly the versions the run log says it evaluated — their hashes and the
  ``skill_versions`` / ``prompt_versions`` materializations that recorded them.

Dagster's own input provenance for a partitioned upstream points at the latest materialization of
any partition (DAGSTER-NOTES A7), so the provenance tags are written here:
``dagster/input_data_version/<exp>/skill_versions`` is Dagster's own formula (sha256 of the
partitions' data versions, sorted by partition key) over the evaluated versions.

Why it is long: it is the Dagster layer's one place that turns the workspace into materializations,
metadata and provenance tags (versions, steps, epochs, references, pools, the baseline cache), so
every asset and check reads the same facts the same way.
"""

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import dagster as dg

from trm_assets.defs.experiments import EXPERIMENT_TAG, Experiment
from trm_assets.defs.partitions import ExperimentPartitions, ensure_partitions, epoch_key
from trm_assets.domain.pools import POOL_NAMES, Pools, pools_from_dict
from trm_assets.harness.data.dataset import load_dataset
from trm_assets.harness.reports.audit import unsafe_skill_paths
from trm_assets.harness.reports.lineage import (
    VersionEvent,
    VersionRef,
    epoch_summary,
    evaluated_versions,
    gate_rows,
    load_state_dict,
    per_task_accuracy,
    prompt_ref,
    prompt_version_events,
    skill_refs,
    skill_version_events,
)
from trm_assets.harness.storage.cache_store import BaselineCacheStore
from trm_assets.harness.storage.pools import pools_summary
from trm_assets.harness.storage.versions import read_version_files
from trm_assets.harness.storage.workspace import store_roots

SIMULATED_NOTE = "SIMULATED world: synthetic data and a simulated model (see data/README.md)"
DATA_VERSION_TAG = "dagster/data_version"
USER_DV_TAG = "dagster/data_version_is_user_provided"
INPUT_DV = "dagster/input_data_version"
INPUT_POINTER = "dagster/input_event_pointer"

Event = dg.AssetMaterialization | dg.AssetCheckEvaluation


class _AssetKeyOf:
    """``keys.<asset>``: the asset key ``<experiment>/<asset>``, named after the attribute."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.asset = name

    def __get__(self, keys: "ExperimentKeys", owner: type | None = None) -> dg.AssetKey:
        return keys.key(self.asset)


@dataclass(frozen=True)
class ExperimentKeys:
    """The asset keys of one experiment (``<name>/<asset>``)."""

    name: str

    def key(self, asset: str) -> dg.AssetKey:
        return dg.AssetKey([self.name, asset])

    pools = _AssetKeyOf()
    skill_versions = _AssetKeyOf()
    prompt_versions = _AssetKeyOf()
    baseline_cache = _AssetKeyOf()
    batches = _AssetKeyOf()
    step_results = _AssetKeyOf()
    epoch_eval = _AssetKeyOf()
    holdout_report = _AssetKeyOf()


@dataclass(frozen=True)
class Scope:
    """What every op of an experiment needs: the experiment, its partitions and LLM key."""

    experiment: Experiment
    partitions: ExperimentPartitions
    llm_key: str

    @property
    def name(self) -> str:
        return self.experiment.name

    @property
    def keys(self) -> ExperimentKeys:
        return ExperimentKeys(self.experiment.name)

    @property
    def pool(self) -> str:
        return f"trm_{self.experiment.name}"

    def op_name(self, name: str) -> str:
        return f"{self.experiment.name}__{name}"

    def recorder(self, instance: dg.DagsterInstance) -> "Recorder":
        return Recorder(self.experiment, self.partitions, instance)


def sim_md(simulated: bool) -> dict[str, Any]:
    return {"simulated": simulated, **({"note": SIMULATED_NOTE} if simulated else {})}


def dv_tags(data_version: str) -> dict[str, str]:
    return {DATA_VERSION_TAG: data_version, USER_DV_TAG: "true"}


def provenance_tags(
    upstream: dg.AssetKey, data_version: str, storage_id: int | None
) -> dict[str, str]:
    s = upstream.to_user_string()
    return {f"{INPUT_DV}/{s}": data_version, f"{INPUT_POINTER}/{s}": str(storage_id or "NULL")}


def partitions_data_version(data_versions: dict[str, str]) -> str:
    """Dagster's data version of several upstream partitions (``data_version_cache.py``)."""
    joined = "".join(data_versions[k] for k in sorted(data_versions))
    return hashlib.sha256(joined.encode("utf8")).hexdigest()


@dataclass(frozen=True)
class Recorded:
    """A version materialization already in the instance."""

    storage_id: int
    data_version: str
    run_id: str


def all_materializations(
    instance: dg.DagsterInstance, key: dg.AssetKey
) -> Iterator[dg.EventLogRecord]:
    """Every materialization of ``key``, newest first (paged: the API caps one fetch)."""
    cursor = None
    while True:
        page = instance.fetch_materializations(key, limit=1000, cursor=cursor)
        yield from page.records
        if not page.has_more:
            return
        cursor = page.cursor


def recorded_versions(
    instance: dg.DagsterInstance, key: dg.AssetKey
) -> dict[tuple[str | None, str, str], Recorded]:
    """``{(partition, version, kind): record}`` of every materialization of a versions asset."""
    out: dict[tuple[str | None, str, str], Recorded] = {}
    for rec in all_materializations(instance, key):
        mat = rec.asset_materialization
        if mat is None:
            continue
        md = mat.metadata
        version = md.get("version")
        kind = md.get("kind")
        if version is None or kind is None:
            continue
        out.setdefault(
            (mat.partition, str(version.value), str(kind.value)),
            Recorded(rec.storage_id, (mat.tags or {}).get(DATA_VERSION_TAG, ""), rec.run_id),
        )
    return out


def _latest(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None
) -> dg.EventLogRecord | None:
    flt = dg.AssetRecordsFilter(
        asset_key=key, asset_partitions=[partition] if partition is not None else None
    )
    records = instance.fetch_materializations(flt, limit=1).records
    return records[0] if records else None


def _latest_by_partition(
    instance: dg.DagsterInstance, key: dg.AssetKey
) -> dict[str, dg.EventLogRecord]:
    """``{partition: newest materialization}`` of a partitioned asset, in two queries (one per
    partition took ``_latest`` a query each: 12 per unit for the baseline caches)."""
    ids = instance.get_latest_storage_id_by_partition(
        key, dg.DagsterEventType.ASSET_MATERIALIZATION
    )
    if not ids:
        return {}
    flt = dg.AssetRecordsFilter(asset_key=key, storage_ids=sorted(ids.values()))
    out: dict[str, dg.EventLogRecord] = {}
    for rec in instance.fetch_materializations(flt, limit=len(ids)).records:
        mat = rec.asset_materialization
        if mat is not None and mat.partition is not None:
            out[mat.partition] = rec
    return out


@dataclass
class Recorder:
    """Records one experiment's facts into an instance (see the module docstring)."""

    experiment: Experiment
    partitions: ExperimentPartitions
    instance: dg.DagsterInstance
    keys: ExperimentKeys = field(init=False)

    def __post_init__(self) -> None:
        self.keys = ExperimentKeys(self.experiment.name)

    @property
    def workspace(self) -> Path:
        return self.experiment.workspace_dir()

    # -- facts not recorded yet ------------------------------------------------------------------

    def new_events(self) -> Iterator[Event]:
        if not (self.workspace / "manifest.json").is_file():
            return
        yield from self._pools()
        yield from self._versions()
        yield from self._batches()
        yield from self._baseline_caches()

    def _pools(self) -> Iterator[Event]:
        path = self.workspace / "pools.json"
        if not path.is_file():
            return
        pools = pools_from_dict(json.loads(path.read_text(encoding="utf-8")), str(path))
        last = _latest(self.instance, self.keys.pools, None)
        mat = last.asset_materialization if last is not None else None
        if mat is not None and (mat.tags or {}).get(DATA_VERSION_TAG) == pools.fingerprint:
            return
        cfg = self.experiment.run_config()
        ds = load_dataset(cfg, with_trees=False)
        md = pools_metadata(pools_summary(pools, ds.questions), pools.fingerprint)
        yield dg.AssetMaterialization(
            asset_key=self.keys.pools,
            metadata={**md, **sim_md(cfg.llm_provider == "sim")},
            tags=dv_tags(pools.fingerprint),
        )
        yield dg.AssetCheckEvaluation(  # pools_from_dict refuses overlapping pools
            asset_key=self.keys.pools,
            check_name="pools_disjoint",
            passed=True,
            metadata={"fingerprint": pools.fingerprint, "questions": pools_size(pools)},
        )

    def _versions(self) -> Iterator[Event]:
        types = self.partitions.task_type_keys()
        logged_skill = False
        for key, events in (
            (self.keys.prompt_versions, prompt_version_events(self.workspace)),
            (self.keys.skill_versions, skill_version_events(self.workspace, types)),
        ):
            done = recorded_versions(self.instance, key)
            for ev in events:
                if (ev.partition, ev.version, ev.kind) in done:
                    continue
                yield version_materialization(self.workspace, key, ev)
                logged_skill = logged_skill or ev.store == "skills"
        if logged_skill:
            bad = unsafe_skill_paths(self.workspace)
            yield dg.AssetCheckEvaluation(
                asset_key=self.keys.skill_versions,
                check_name="skill_paths_inside_skills_dir",
                passed=not bad,
                metadata={"unsafe": str(bad)},
            )

    def _batches(self) -> Iterator[Event]:
        state = load_state_dict(self.workspace)
        if state is None or not state.get("batches") or state.get("epoch_started", -1) < 0:
            return
        e = epoch_key(int(state["epoch_started"]))
        if _latest(self.instance, self.keys.batches, e) is not None:
            return
        ensure_partitions(self.instance, self.partitions.epochs_name, [e])
        yield dg.AssetMaterialization(
            asset_key=self.keys.batches,
            partition=e,
            metadata=batches_metadata(state),
            tags=dv_tags(_digest(state["batches"])),  # the question ids, batch by batch
        )

    def _baseline_caches(self) -> Iterator[Event]:
        directory = self.workspace / "baseline_cache"
        if not directory.is_dir():
            return
        stores = [BaselineCacheStore(directory, t) for t in self.partitions.task_type_keys()]
        stores = [store for store in stores if store.path.is_file()]
        latest = _latest_by_partition(self.instance, self.keys.baseline_cache) if stores else {}
        for store in stores:
            md = baseline_cache_metadata(store)
            last = latest.get(store.task_type)
            mat = last.asset_materialization if last is not None else None
            recorded = mat.metadata.get("entries") if mat is not None else None
            if recorded is not None and recorded.value == md["entries"]:
                continue
            yield dg.AssetMaterialization(
                asset_key=self.keys.baseline_cache, partition=store.task_type, metadata=md
            )

    # -- evaluations ------------------------------------------------------------------------------

    def recorded(self) -> "RecordedVersions":
        """Every version materialization in the instance (skills, prompts): two scans."""
        return RecordedVersions(
            recorded_versions(self.instance, self.keys.skill_versions),
            recorded_versions(self.instance, self.keys.prompt_versions),
        )

    def references(
        self, skills: str, prompts: str, recorded: "RecordedVersions | None" = None
    ) -> "References":
        """The evaluated versions' content hashes and the materializations that recorded them
        (``recorded``: read once by a caller resolving several version pairs)."""
        types = self.partitions.task_type_keys()
        done_s, done_p = recorded if recorded is not None else self.recorded()
        rows = []
        for ref in skill_refs(self.workspace, skills, types):
            rec = _origin(done_s, ref)
            rows.append((ref, rec))
        pref = prompt_ref(self.workspace, prompts)
        return References(rows, (pref, _origin(done_p, pref)))

    def step(self, epoch: int, step: int) -> tuple[dict[str, Any], dict[str, str]]:
        """(metadata, tags) of ``step_results[e|s]``: the step's batch rollouts were made with
        the step-start versions (run ``train_e<E>_s<S>``); every gate of the step."""
        run_id = f"train_e{epoch}_s{step}"
        skills, prompts = evaluated_versions(self.workspace, run_id)
        refs = self.references(skills, prompts)
        gates = gate_rows(self.workspace, epoch, step)
        counts = {a: sum(1 for g in gates if g["action"] == a) for a in ("accept", "reject")}
        md: dict[str, Any] = {
            "experiment": self.experiment.name,
            "epoch": epoch,
            "step": step,
            "rollout_run_id": run_id,
            "skills_version": skills,
            "prompts_version": prompts,
            "accepted": counts["accept"],
            "rejected": counts["reject"],
            "gates": gates_table(gates),
            # the batch's rollouts by task type (a batch covers some types: the others n = 0)
            "per_task_type": refs.table(per_task_accuracy(self.workspace / "runs.duckdb", run_id)),
        }
        # the epoch's batches event (recorded before this one, by the epoch's first step); its
        # data version and pointer as Dagster would write them for that one partition
        rec = _latest(self.instance, self.keys.batches, epoch_key(epoch))
        mat = rec.asset_materialization if rec is not None else None
        batches_dv = (mat.tags or {}).get(DATA_VERSION_TAG, "") if mat is not None else ""
        batches = provenance_tags(
            self.keys.batches,
            partitions_data_version({epoch_key(epoch): batches_dv}),
            rec.storage_id if rec is not None else None,
        )
        # its own data version: two steps with the same inputs gate different edits
        own = _digest({"run": run_id, "versions": [skills, prompts], "gates": gates})
        return md, {**refs.provenance(self.keys), **batches, **dv_tags(own)}

    def epoch(
        self, epoch: int, simulated: bool
    ) -> tuple[tuple[dict[str, Any], dict[str, str]], tuple[dict[str, Any], dict[str, str]]]:
        """((metadata, tags) of ``epoch_eval[e]``, same of ``holdout_report[e]``). Requires the
        epoch's report (the slow update's function 9)."""
        ws = self.workspace
        s = epoch_summary(ws, epoch)
        if s is None:
            raise LookupError(f"{ws}: epoch {epoch} has no slow-update report yet")
        skills, prompts = evaluated_versions(ws, s["val_run_id"])
        recorded = self.recorded()  # one read for the evaluation and every held-out label
        refs = self.references(skills, prompts, recorded)
        accuracy = per_task_accuracy(ws / "runs.duckdb", s["val_run_id"])
        gates = gate_rows(ws, epoch)
        eval_md: dict[str, Any] = {
            "experiment": self.experiment.name,
            "workspace": str(ws),
            "val_accuracy": dg.MetadataValue.float(float(s["val_accuracy"] or 0.0)),
            "val_run_id": s["val_run_id"],
            "skills_version": skills,
            "prompts_version": prompts,
            "gates": gates_table(gates),
            "per_task_type": refs.table(accuracy),
            "rollouts": int(s["rollouts"]),
            "tokens": int(s["tokens"]),
            "accepted": int(s["accepted"]),
            "rejected": int(s["rejected"]),
            "rolled_back": int(s["rolled_back"]),
            "gate_count": int(s["gates"]),
            "best_skills_version": s["best"]["skills_version"],
            "probations": probations_table(s.get("probations") or {}),
            "unevaluated_types": dg.MetadataValue.json(s.get("unevaluated_types") or []),
            **{f"skill_hash/{r.file}": r.content_hash for r, _ in refs.skills},
            **sim_md(simulated),
        }
        if s.get("val_expected_accuracy") is not None:
            eval_md["val_expected_accuracy"] = dg.MetadataValue.float(
                float(s["val_expected_accuracy"])
            )
        eval_dv = _digest(
            {
                "run": s["val_run_id"],
                "refs": refs.data_versions(),
                "accuracy": s["val_accuracy"],
            }
        )
        eval_tags = {**refs.provenance(self.keys), **dv_tags(eval_dv)}
        hold_md: dict[str, Any] = {"experiment": self.experiment.name, **sim_md(simulated)}
        rows = []
        provenance: dict[str, str] = {}
        for label, h in s["holdout"].items():
            if h["accuracy"] is not None:
                hold_md[f"test_accuracy/{label}"] = dg.MetadataValue.float(float(h["accuracy"]))
            if h.get("expected") is not None:
                hold_md[f"test_expected_accuracy/{label}"] = dg.MetadataValue.float(
                    float(h["expected"])
                )
            hold_md[f"versions/{label}"] = f"{h['skills']}/{h['prompts']}"
            label_refs = self.references(h["skills"], h["prompts"], recorded)
            rows.extend(label_refs.records(label))
            if label == "current":  # provenance holds one version per input: the epoch's end
                provenance = label_refs.provenance(self.keys)
        hold_md["evaluated"] = dg.MetadataValue.table(rows, schema=_LABELLED_SCHEMA)
        hold_dv = _digest({k: v for k, v in sorted(s["holdout"].items())})
        return (eval_md, eval_tags), (hold_md, {**provenance, **dv_tags(hold_dv)})


class RecordedVersions(NamedTuple):
    """``recorded_versions`` of the skill_versions and prompt_versions assets."""

    skills: dict[tuple[str | None, str, str], Recorded]
    prompts: dict[tuple[str | None, str, str], Recorded]


@dataclass(frozen=True)
class References:
    """The evaluated versions with the materialization recording each (None: not recorded)."""

    skills: list[tuple[VersionRef, Recorded | None]]
    prompts: tuple[VersionRef, Recorded | None]

    def data_versions(self) -> dict[str, str]:
        out = {str(r.partition): r.data_version for r, _ in self.skills}
        out["prompts"] = self.prompts[0].data_version
        return out

    def provenance(self, keys: ExperimentKeys) -> dict[str, str]:
        by_partition = {
            str(r.partition): (rec.data_version if rec else "") for r, rec in self.skills
        }
        ids = [rec.storage_id for _, rec in self.skills if rec is not None]
        pref, prec = self.prompts
        return {
            **provenance_tags(
                keys.skill_versions, partitions_data_version(by_partition), max(ids, default=None)
            ),
            **provenance_tags(
                keys.prompt_versions,
                pref.data_version,
                prec.storage_id if prec else None,
            ),
        }

    def table(self, accuracy: dict[str, dict[str, Any]] | None = None) -> dg.TableMetadataValue:
        rows = []
        for ref, rec in self.skills:
            acc = (accuracy or {}).get(str(ref.partition), {})
            a = acc.get("accuracy")
            rows.append(
                dg.TableRecord(
                    {
                        "task_type": str(ref.partition),
                        "accuracy": float(a) if a is not None else None,
                        "n": int(acc.get("n") or 0),
                        **_ref_columns(ref, rec),
                    }
                )
            )
        pref, prec = self.prompts
        rows.append(
            dg.TableRecord(
                {"task_type": "(prompts)", "accuracy": None, "n": 0} | _ref_columns(pref, prec)
            )
        )
        return dg.MetadataValue.table(rows, schema=_REF_SCHEMA)

    def records(self, label: str) -> list[dg.TableRecord]:
        out = [
            dg.TableRecord({"label": label, "task_type": str(r.partition), **_ref_columns(r, rec)})
            for r, rec in self.skills
        ]
        pref, prec = self.prompts
        out.append(
            dg.TableRecord({"label": label, "task_type": "(prompts)", **_ref_columns(pref, prec)})
        )
        return out


def _origin(done: dict[tuple[str | None, str, str], Recorded], ref: VersionRef) -> Recorded | None:
    """The creation materialization of ``ref``'s content (never a delivery record)."""
    for (partition, version, kind), rec in done.items():
        if partition == ref.partition and version == ref.introduced_in and kind != "delivery":
            return rec
    return None


def _ref_columns(ref: VersionRef, rec: Recorded | None) -> dict[str, Any]:
    return {
        "file": ref.file or "(prompt set)",
        "version": ref.evaluated,
        "introduced_in": ref.introduced_in,
        "content_hash": ref.data_version,
        "referenced_data_version": rec.data_version if rec else "",
        "referenced_event": rec.storage_id if rec else -1,
    }


_REF_COLUMNS = [
    dg.TableColumn("file", "string"),
    dg.TableColumn("version", "string", description="the version the run log says was evaluated"),
    dg.TableColumn("introduced_in", "string", description="the version that created this content"),
    dg.TableColumn("content_hash", "string", description="sha256 of the file (first 16 hex)"),
    dg.TableColumn(
        "referenced_data_version",
        "string",
        description="data version of the referenced skill_versions / prompt_versions event",
    ),
    dg.TableColumn("referenced_event", "int", description="its event storage id"),
]
_REF_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("task_type", "string"),
        dg.TableColumn("accuracy", "float"),
        dg.TableColumn("n", "int"),
        *_REF_COLUMNS,
    ]
)
_LABELLED_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("label", "string"),
        dg.TableColumn("task_type", "string"),
        *_REF_COLUMNS,
    ]
)
_PROBATION_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("skill_file", "string"),
        dg.TableColumn("verdict", "string", description="KEEP, KEEP_CONFIRMED, DEFER, ROLLBACK"),
        dg.TableColumn("wins", "int", description="questions right now, wrong at the anchor"),
        dg.TableColumn("losses", "int", description="questions wrong now, right at the anchor"),
        dg.TableColumn("pairs", "int"),
        dg.TableColumn("edits", "int", description="accepted edits in the bundle"),
        dg.TableColumn("reason", "string"),
        dg.TableColumn("new_skills_version", "string", description="the rollback's version"),
    ]
)
_GATE_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("step", "int"),
        dg.TableColumn("skill_file", "string"),
        dg.TableColumn("action", "string"),
        dg.TableColumn("verdict", "string"),
        dg.TableColumn("wins", "int"),
        dg.TableColumn("losses", "int"),
        dg.TableColumn("blocks", "int"),
        dg.TableColumn("rollouts", "int", description="candidate + baseline rollouts"),
        dg.TableColumn("cache_hits", "int"),
        dg.TableColumn("new_skills_version", "string"),
    ]
)


def probations_table(settled: dict[str, dict[str, Any]]) -> dg.TableMetadataValue:
    """The probations the epoch's slow update settled (GATE §7), one row per skill file."""
    rows = [
        dg.TableRecord(
            {
                "skill_file": name,
                **{k: e[k] for k in ("verdict", "wins", "losses", "pairs", "edits", "reason")},
                "new_skills_version": e.get("new_skills_version") or "",
            }
        )
        for name, e in sorted(settled.items())
    ]
    return dg.MetadataValue.table(rows, schema=_PROBATION_SCHEMA)


def gates_table(gates: list[dict[str, Any]]) -> dg.TableMetadataValue:
    return dg.MetadataValue.table([dg.TableRecord(g) for g in gates], schema=_GATE_SCHEMA)


def _digest(obj: Any) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def version_materialization(
    workspace: Path, key: dg.AssetKey, ev: VersionEvent
) -> dg.AssetMaterialization:
    skills_root, prompts_root = store_roots(workspace)
    md: dict[str, Any] = {
        "version": ev.version,
        "kind": ev.kind,
        "reason": ev.reason,
        "parent": ev.parent or "",
        "content_hash": ev.content_hash,
        "created_at": ev.created_at,
    }
    if ev.file is not None:
        text = read_version_files(skills_root, ev.version).get(ev.file, "")
        md["skill_file"] = ev.file
        md["head"] = dg.MetadataValue.md(
            "```markdown\n" + "\n".join(text.splitlines()[:12]) + "\n```"
        )
    else:
        md["files"] = len(read_version_files(prompts_root, ev.version))
    return dg.AssetMaterialization(
        asset_key=key,
        partition=ev.partition,
        description=f"{ev.kind}: {ev.reason}",
        metadata=md,
        tags={**dv_tags(ev.data_version), "trm/version": ev.version, "trm/kind": ev.kind},
    )


def pools_metadata(summary: dict[str, Any], fingerprint: str) -> dict[str, Any]:
    rows = [dg.TableRecord({"task_type": t, **c}) for t, c in summary["by_task_type"].items()]
    sizes = summary["sizes"]
    return {
        "fingerprint": str(fingerprint),
        **{name: int(sizes[name]) for name in POOL_NAMES},
        "by_task_type": dg.MetadataValue.table(
            rows,
            schema=dg.TableSchema(
                columns=[
                    dg.TableColumn("task_type", "string"),
                    *(dg.TableColumn(name, "int") for name in POOL_NAMES),
                ]
            ),
        ),
    }


def baseline_cache_metadata(store: BaselineCacheStore) -> dict[str, Any]:
    entries = list(store.entries)
    return {
        "entries": len(entries),
        "skill_hashes": len({k.skill_hash for k in entries}),
        "questions": len({k.qid for k in entries}),
        "path": str(store.path),
    }


def pools_size(pools: Pools) -> int:
    return len(pools.test) + len(pools.validation) + len(pools.diagnosis)


def batches_metadata(state: dict[str, Any]) -> dict[str, Any]:
    sizes = [len(b) for b in state["batches"]]
    return {
        "epoch": int(state["epoch_started"]),
        "batches": len(sizes),
        "questions": sum(sizes),
        "sizes": str(sizes),
    }


def run_tags(experiment: Experiment) -> dict[str, str]:
    return {EXPERIMENT_TAG: experiment.name, "trm/workspace": experiment.workspace}
