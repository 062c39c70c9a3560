"""A prediction of the collectives beside what the runs measured: the tables behind notebooks 03's and
05's "predict, then observe" (the plots are workshop.comm.plots).

Each run is read from its log or folder (summary.json's `comm`, run_args.json's config); the
communication model (workshop.comm.model) predicts it from that config, and a prediction of one's
own (a student's) may stand beside both. A run that measured nothing shows "not measured" and why,
never zeros.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pandas as pd

from workshop.comm.model import KINDS, predict_config
from workshop.comm.timeline import read_timeline
from workshop.results.logs import load, load_named

NOT_MEASURED = "not measured"
MEASURES = ("elements", "bytes", "sent_elements", "sent_bytes", "calls", "time_ms")
NaN = float("nan")


def _status(comm: Mapping[str, Any] | None) -> str:
    if not comm:
        return f"{NOT_MEASURED}: the run recorded no collectives (a run from before the recorder)"
    if comm.get("status") != "measured":
        return f"{NOT_MEASURED}: {comm.get('reason') or 'no reason given'}"
    return "measured"


def run_status(run: Any) -> str:
    """"measured", or "not measured: why" for a run whose step was not recorded (its summary's `comm`)."""
    return _status((load(run).summary or {}).get("comm"))


TIMELINE_COLUMNS = ("compute_ms", "copy_ms", "collective_ms", "overlapped_ms", "exposed_ms")


def timeline_table(run: Any) -> pd.DataFrame:
    """One run's recorded step per rank: milliseconds of compute, of copies (FSDP2's buffer copies and
    host<->device transfers, apart from compute), of collectives, of collective time that
    overlapped compute and that was exposed (workshop.comm.timeline), and `status`. A run with no
    trace of its step has one row per rank with NaN figures and "not measured: why" (its summary's
    reason), never zeros."""
    try:
        return pd.DataFrame([{**r, "status": "measured"} for r in read_timeline(run).summary()]).set_index("rank")
    except FileNotFoundError:
        pass
    summary = load(run).summary or {}
    status = _status(summary.get("comm"))
    if status == "measured":
        status = f"{NOT_MEASURED}: the run counted its collectives but kept no trace of the step"
    hosts = summary.get("hosts") or []
    world = int(summary.get("world_size") or len(hosts) or 1)
    df = pd.DataFrame([{"rank": r, "host": hosts[r] if r < len(hosts) else NaN, **dict.fromkeys(TIMELINE_COLUMNS, NaN),
                        "status": status} for r in range(world)]).set_index("rank")
    df.attrs["notes"] = [status]
    return df


def _read(runs: Sequence[Any], names: Sequence[str] | None,
          notes: list[str]) -> list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any] | None, str]]:
    """(name, summary, config, comm, status) per run; a note for each run that measured nothing."""
    out = []
    for name, log in load_named(runs, names):
        summary = log.summary or {}
        status = _status(summary.get("comm"))
        if status != "measured":
            notes.append(f"{name}: {status}")
        out.append((name, summary, log.config or {}, summary.get("comm"), status))
    return out


def _own(predicted: Mapping[str, Any] | None, name: str, kind: str) -> float:
    """A prediction of one's own for a run and kind: {run: {kind: value}} (its total: the sum of the kinds,
    unless it gives one) or {run: total}."""
    if predicted is None or name not in predicted or predicted[name] is None:
        return NaN
    value = predicted[name]
    if isinstance(value, Mapping):
        v = value.get(kind)
        if kind == "total" and v is None and value:
            return float(sum(float(x) for x in value.values() if x is not None))
        return NaN if v is None else float(v)
    return float(value) if kind == "total" else NaN


def comm_table(runs: Sequence[Any], names: Sequence[str] | None = None,
               predicted: Mapping[str, Any] | None = None, measure: str = "sent_elements",
               rank: int = 0) -> pd.DataFrame:
    """Rows (run, kind), kinds all_gather, reduce_scatter, all_reduce (and any other the run measured),
    then `total`; one rank's figures per optimizer step (`rank`, 0 by default: every rank of the course's
    runs sends the same).

    Columns: `model` (the communication model, for the run's own config), `predicted` (yours, when
    `predicted` = {run name: {kind: value}} or {run name: total} is given), `measured`, `rel_error`
    (yours when given, else the model's, against the measurement) and `status` ("measured", or "not
    measured: why"; its `measured` is NaN, never 0). `measure`: elements | bytes | sent_elements |
    sent_bytes | calls | time_ms (time: measured only)."""
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}; use one of {', '.join(MEASURES)}")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for name, summary, config, comm, status in _read(runs, names, notes):
        model: dict[str, dict[str, float]] = {}
        if config or summary:
            try:
                model = predict_config(config, summary).by_kind(rank)
            except (ValueError, IndexError) as e:
                notes.append(f"{name}: no model prediction ({e})")
        got: dict[str, Any] = {}
        if status == "measured":
            per_rank = {r["rank"]: r for r in comm.get("per_rank", [])}
            got = (per_rank.get(rank) or {}).get("by_kind", {})
        kinds = [k for k in KINDS if k in model or k in got] + [k for k in got if k not in KINDS]
        for kind in [*kinds, "total"]:
            if kind == "total":
                want = sum(v.get(measure, 0) for v in model.values()) if measure != "time_ms" else NaN
                measured = sum(v.get(measure, 0) for v in got.values()) if status == "measured" else NaN
            else:
                want = model.get(kind, {}).get(measure, 0) if measure != "time_ms" else NaN
                measured = got.get(kind, {}).get(measure, 0) if status == "measured" else NaN
            own = _own(predicted, name, kind)
            reference = own if predicted is not None else want
            rows.append({"run": name, "kind": kind, "model": float(want), "predicted": own,
                         "measured": float(measured), "rel_error": _rel(reference, measured), "status": status})
    df = pd.DataFrame(rows).set_index(["run", "kind"])
    if predicted is None:
        df = df.drop(columns="predicted")
    df.attrs["notes"] = notes
    df.attrs["measure"] = measure
    return df


def network_table(runs: Sequence[Any], names: Sequence[str] | None = None, by: str = "rank",
                  split_kinds: bool = False) -> pd.DataFrame:
    """What crosses between nodes, per rank (`by="rank"`) or per node (`by="node"`), measured beside the
    model, in bytes per optimizer step, all kinds together.

    Per rank: `inter_node_bytes`, what the rank sends in collectives whose group spans nodes (all of its
    ring traffic in them, the rule notebook 05 uses); `network_bytes`, the part its ring sends to a rank on
    another node; `kinds_across`, the kinds whose group spans nodes. Per node: `network_bytes`, the
    bytes that leave the node (its ranks' network_bytes). Each with `model_` beside it; NaN plus a
    "not measured" status where the run measured nothing. `split_kinds` (per node) adds the measured
    network bytes of each kind, `network_bytes[KIND]` (0: measured, none of that kind left the node)."""
    if by not in ("rank", "node"):
        raise ValueError("by must be 'rank' or 'node'")
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for name, summary, config, comm, status in _read(runs, names, notes):
        pred = predict_config(config, summary)
        hosts = summary.get("hosts") or []
        model_ranks = pred.per_rank()
        measured_ranks = {r["rank"]: r for r in (comm or {}).get("per_rank", [])} if status == "measured" else {}
        if by == "rank":
            for entry in model_ranks:
                got = measured_ranks.get(entry["rank"])
                rows.append({"run": name, "rank": entry["rank"],
                             "host": hosts[entry["rank"]] if entry["rank"] < len(hosts) else NaN,
                             "model_inter_node_bytes": sum(entry["inter_node_bytes"].values()),
                             "inter_node_bytes": _total(got, "inter_node_bytes"),
                             "model_network_bytes": sum(entry["network_bytes"].values()),
                             "network_bytes": _total(got, "network_bytes"),
                             "kinds_across": sorted(got["inter_node_bytes"], key=_kind_order) if got
                             else NOT_MEASURED, "status": status})
        else:
            measured_nodes = (comm or {}).get("per_node", {}) if status == "measured" else {}
            by_ranks = {tuple(v["ranks"]): (host, v) for host, v in measured_nodes.items()}
            for node, entry in pred.per_node().items():
                host, got = by_ranks.get(tuple(entry["ranks"]), (NaN, None))
                row = {"run": name, "node": node, "host": host, "ranks": entry["ranks"],
                       "model_network_bytes": sum(entry["network_bytes"].values()),
                       "network_bytes": sum(got["network_bytes"].values()) if got else NaN, "status": status}
                if split_kinds:
                    measured = got["network_bytes"] if got else {}
                    for kind in [*KINDS, *sorted(k for k in measured if k not in KINDS)]:
                        row[f"network_bytes[{kind}]"] = float(measured.get(kind, 0)) if got else NaN
                rows.append(row)
    df = pd.DataFrame(rows).set_index(["run", by])
    if split_kinds:   # the kinds' columns before the status
        df = df[[c for c in df.columns if c != "status"] + ["status"]]
    df.attrs["notes"] = notes
    return df


def _total(entry: Mapping[str, Any] | None, key: str) -> float:
    return float(sum(entry[key].values())) if entry else NaN


def _kind_order(kind: str) -> int:
    return KINDS.index(kind) if kind in KINDS else len(KINDS)


def _rel(reference: float, measured: float) -> float:
    if math.isnan(reference) or math.isnan(measured):
        return NaN
    if measured == 0:
        return 0.0 if reference == 0 else NaN
    return round((reference - measured) / measured, 6)
