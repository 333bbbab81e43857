"""An ensemble's long table a batch at a time: as NumPy columns, as Arrow record batches, as CSV and Parquet.

A batch holds at most :data:`BATCH_ROWS` rows and :data:`BATCH_TRAJECTORIES` trajectories, each read when its
batch is made: writing a table holds one batch whatever the number of trajectories. Text that repeats row after
row is held once per batch with a code per row (:class:`Coded`; dictionary-encoded in Arrow and Parquet).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from ..errors import ConfigError

#: Rows and trajectories in a batch: a CSV batch's cells become Python objects, about 60 bytes each.
BATCH_ROWS = 1 << 16
BATCH_TRAJECTORIES = 2_048


@dataclasses.dataclass(frozen=True, eq=False)
class Coded:
    """A column of few distinct texts: ``values`` once, and each row's place in them (``codes``; -1: none)."""

    codes: np.ndarray   # int32
    values: list

    @classmethod
    def joined(cls, parts: list[Coded]) -> Coded:
        """The parts one after another, each distinct value held once."""
        index: dict = {}
        codes = []
        for p in parts:
            where = np.array([index.setdefault(v, len(index)) for v in p.values] + [-1], np.int32)
            codes.append(where[p.codes])   # (-1 picks the -1 appended)
        return cls(np.concatenate(codes) if codes else np.zeros(0, np.int32), list(index))

    def rows(self) -> np.ndarray:
        """Each row's value (None where there is none), as references to the values held."""
        return np.array([*self.values, None], object)[self.codes]

    def arrow(self, pa):
        mask = self.codes < 0
        return pa.DictionaryArray.from_arrays(pa.array(self.codes, mask=mask if mask.any() else None),
                                              pa.array(self.values, pa.string()))


#: The type of a text column (held as :class:`Coded` in the table).
TEXT = np.dtype(object)


def label_dtype(values) -> np.dtype:
    """A label column's type, one rule for the table, the padded arrays and the ML datasets: bool where every
    value is true/false, int64 where every one is a whole number, float64 where every one is a number, else
    :data:`TEXT` (also where a member lacks the label, None: only the table holds such gaps, as nulls; or where a
    whole number is beyond int64's)."""
    kinds = {np.dtype(type(v)).kind if isinstance(v, float | np.bool_ | np.number) or isinstance(v, int)
             and -2**63 <= v < 2**63 else "O" for v in values}
    for dtype, allowed in ((bool, "b"), (np.int64, "iu"), (np.float64, "iuf")):
        if kinds and kinds <= set(allowed):
            return np.dtype(dtype)
    return TEXT


def label_kinds(members, names) -> dict[str, tuple]:
    """How each label column is held: ``("number", dtype)`` (:func:`label_dtype`'s) where every member has one,
    ``("object", dtype)`` where some lack it (nulls), else ``("text", None)`` (coded)."""
    columns: dict[str, list] = {n: [] for n in names}
    for m in members:   # (once: a member of a large ensemble's columns is made when asked for)
        for n, values in columns.items():
            values.append(m.labels.get(n))
    dtypes = {n: label_dtype(v for v in values if v is not None) for n, values in columns.items()}
    return {n: ("text", None) if d == TEXT else ("object" if None in columns[n] else "number", d)
            for n, d in dtypes.items()}


def frame_columns(result) -> dict[str, np.ndarray]:
    """A per-frame result's value columns, named: each array with a row per frame (2-D: a column each)."""
    n = len(result.frames)
    out = {}
    for f in dataclasses.fields(result):
        if f.name in ("frames", "times", "report"):
            continue
        v = getattr(result, f.name)
        if not isinstance(v, np.ndarray) or v.ndim == 0 or len(v) != n:
            continue
        name = getattr(result, "name", f.name) if f.name == "values" else f.name
        v2 = v.reshape(n, -1)
        if v.ndim == 1:
            out[name] = v
            continue
        labels = getattr(result, "group_names", ()) if f.name == "groups" else ()
        for j in range(v2.shape[1]):
            out[labels[j] if j < len(labels) else f"{name}_{j}"] = v2[:, j]
    return out


def _member_parts(result, member, r, kinds: dict) -> Iterator[dict]:
    """One trajectory's rows, at most :data:`BATCH_ROWS` at a time (whole frames)."""
    frames, times = np.asarray(r.frames, np.int64), np.asarray(r.times, np.float64)
    if result.features:
        k, values = len(r.feature), r.array()
        labels = r.feature_labels().columns()
    else:
        k, values = 1, frame_columns(r)
    step = max(1, BATCH_ROWS // max(k, 1))
    for a in range(0, max(len(frames), 1), step):
        f = frames[a:a + step]
        n = len(f) * k
        out = {"trajectory": Coded(np.zeros(n, np.int32), [member.name])}
        for label, (how, dtype) in kinds.items():
            v = member.labels.get(label)
            out[label] = np.full(n, v, dtype if how == "number" else object) if how != "text" else \
                Coded(np.full(n, 0 if v is not None else -1, np.int32), [] if v is None else [str(v)])
        out["frame"], out["time"] = np.repeat(f, k), np.repeat(times[a:a + step], k)
        if not result.features:
            out.update({c: v[a:a + step] for c, v in values.items()})
        else:
            out["feature_index"] = np.tile(np.arange(k, dtype=np.int64), len(f))
            for name, v in labels.items():
                if v.dtype.kind != "U":
                    out[name] = np.tile(v, len(f))
                else:
                    kept, codes = np.unique(np.asarray(v, dtype=str), return_inverse=True)
                    out[name] = Coded(np.tile(codes.astype(np.int32), len(f)), kept.tolist())
            out["value"] = values[a:a + step].reshape(-1)
        yield out


def _joined(parts: list[dict]) -> dict:
    return {k: Coded.joined([p[k] for p in parts]) if isinstance(parts[0][k], Coded)
            else np.concatenate([p[k] for p in parts]) for k in parts[0]}


def batches(result, kinds: dict | None = None) -> Iterator[dict]:
    """The long table of ``result`` as batches of named columns (text columns :class:`Coded`); one empty batch
    when it has no rows. ``kinds``: :func:`label_kinds` of its members, when known. A trajectory whose value
    columns are not the first's raises ConfigError (no one table holds both)."""
    kinds = label_kinds(result.members, result.label_names) if kinds is None else kinds
    held, rows, names = [], 0, None
    for member, r in result.items():
        for part in _member_parts(result, member, r, kinds):
            if names is None:
                names = list(part)
            elif list(part) != names:
                raise ConfigError(f"trajectory {member.name} has the columns {', '.join(part)}, the first had "
                                  f"{', '.join(names)}: no one table holds both")
            held.append(part)
            rows += len(part["frame"])
            if rows >= BATCH_ROWS or len(held) >= BATCH_TRAJECTORIES:
                yield _joined(held)
                held, rows = [], 0
    if held:
        yield _joined(held)
    elif names is None:
        yield {"trajectory": Coded(np.zeros(0, np.int32), []), "frame": np.zeros(0, np.int64), "time": np.zeros(0)}


def pyarrow():
    try:
        import pyarrow as pa
    except ImportError:
        raise ConfigError("an ensemble's table needs pyarrow: pip install 'trajscale[ensemble]'") from None
    return pa


def record_batches(result) -> Iterator:
    """:func:`batches` as ``pyarrow.RecordBatch`` es of one schema (the first's)."""
    pa = pyarrow()
    kinds = label_kinds(result.members, result.label_names)
    schema = None
    for batch in batches(result, kinds):
        arrays = {}
        for k, v in batch.items():
            if isinstance(v, Coded):
                arrays[k] = v.arrow(pa)
            elif v.dtype == object:   # (numbers with gaps)
                arrays[k] = pa.array(v, pa.from_numpy_dtype(kinds[k][1]))
            else:
                arrays[k] = pa.array(v)
        rb = pa.RecordBatch.from_pydict(arrays)
        if schema is None:
            schema = rb.schema
        elif rb.schema != schema:
            rb = pa.Table.from_batches([rb]).cast(schema).combine_chunks().to_batches()[0]
        yield rb


def write_csv(result, tmp) -> None:
    """The long table as CSV, a batch at a time (Python's ``csv``: numbers as ``repr`` writes them)."""
    import csv

    with open(tmp, "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        for i, batch in enumerate(batches(result)):
            if i == 0:
                w.writerow(list(batch))
            cols = [v.rows().tolist() if isinstance(v, Coded) else v.tolist() for v in batch.values()]
            w.writerows(zip(*cols, strict=True))


def write_parquet(result, tmp) -> None:
    """The long table as Parquet, a row group per batch."""
    pyarrow()
    import pyarrow.parquet as pq

    writer = None
    try:
        for rb in record_batches(result):
            if writer is None:
                writer = pq.ParquetWriter(str(tmp), rb.schema)
            writer.write_batch(rb)
    finally:
        if writer is not None:
            writer.close()


__all__ = ["BATCH_ROWS", "BATCH_TRAJECTORIES", "TEXT", "Coded", "batches", "frame_columns", "label_dtype",
           "label_kinds", "record_batches", "write_csv", "write_parquet"]
