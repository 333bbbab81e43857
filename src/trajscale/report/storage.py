"""Which storage a predicted run meets, cold or cached, chosen from evidence (``report --predict --storage``).

A second read of a file on one machine comes from the page cache, so a prediction says which it predicts.  With a
probe profile's cold (``c``) and cached (``w``) rates and the report's cached share (``f``), a rank's read of a byte
is its own cost ``own = s - f / w - (1 - f) / c`` plus the storage's time to deliver it (cold: queued with the
other ranks' reads, :func:`~trajscale.report.predict.storage_wait`).  ``auto`` (:func:`choose`): cold for a file
larger than a node's memory or another machine; else the report's own case."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .fit import Model
from .machine import Machine
from .predict import Prediction, predict_model

CASES = ("cold", "cached")
AUTO = "auto"
#: A report that found this share of its files' pages cached (or more) predicts cached reads.
HALF = 0.5


@dataclass(frozen=True, slots=True)
class StorageCase:
    """The storage case a prediction is for, how it was chosen (``auto`` or ``given``) and the evidence."""

    case: str
    chosen: str
    evidence: str

    @property
    def other(self) -> str:
        return CASES[1 - CASES.index(self.case)]

    def row(self) -> tuple[str, str, str]:
        """The assumptions block's row."""
        what = "page cache: reads from memory" if self.case == "cached" else "cold: reads from the storage"
        return ("storage case", f"{self.case} ({what}); {self.evidence}", "chosen from evidence" if
                self.chosen == AUTO else "given")


def _share_cached(model: Model, machine: Machine) -> tuple[float | None, str]:
    """The share of the report's reads that came from the page cache, and how it is known."""
    if model.page_cache is not None:
        return model.page_cache, (f"the report's run found {model.page_cache:.0%} of its files' pages in the "
                                  "page cache at its start")
    cold = machine.cold_read_bps
    if cold and model.read_s_per_byte:
        rate = 1 / model.read_s_per_byte
        if rate > cold:
            return 1.0, (f"the report read at {rate / 1e9:.3g} GB/s, faster than the storage's cold "
                         f"{cold / 1e9:.3g} GB/s: from the page cache")
        return 0.0, (f"the report read at {rate / 1e9:.3g} GB/s, no faster than the storage's cold "
                     f"{cold / 1e9:.3g} GB/s (its cache state was not recorded)")
    return None, "the report did not record its cache state and no probe rates compare it"


def choose(model: Model, machine: Machine, asked: str = AUTO) -> StorageCase:
    """The case to predict: ``asked`` if it names one, else chosen from the evidence (module docstring)."""
    share, how = _share_cached(model, machine)
    rates = ""
    if machine.cold_read_bps and machine.cached_read_bps:
        rates = (f"; the probe: cold {machine.cold_read_bps / 1e9:.3g} GB/s, page cache "
                 f"{machine.cached_read_bps / 1e9:.3g} GB/s for one reader")
    if asked in CASES:
        return StorageCase(asked, "given", how + rates)
    per_node = model.file_bytes / max(1, machine.nodes)
    if machine.memory_bytes and per_node > machine.memory_bytes:
        return StorageCase("cold", AUTO, f"the file ({model.file_bytes / 1e9:.3g} GB) is larger than a node's "
                                         f"memory ({machine.memory_bytes / 2**30:.3g} GiB){rates}")
    if model.host and (machine.name != model.host or machine.nodes > 1):
        return StorageCase("cold", AUTO, f"the target ({machine.name or 'unnamed'}, {machine.nodes} node(s)) is "
                                         f"not the machine the report ran on ({model.host}): its first read is "
                                         f"cold{rates}")
    if share is None:
        return StorageCase("cold", AUTO, how + "; a first read is cold")
    fits = (f"; the file ({model.file_bytes / 1e9:.3g} GB) fits in a node's memory "
            f"({machine.memory_bytes / 2**30:.3g} GiB)") if machine.memory_bytes and model.file_bytes else ""
    case = "cached" if share >= HALF else "cold"   # half cached or more: a second run finds the rest cached too
    return StorageCase(case, AUTO, how + fits + rates)


def for_case(model: Model, machine: Machine, case: str) -> Model:
    """The model whose prediction on ``machine`` is that of ``case`` (module docstring)."""
    share = _share_cached(model, machine)[0]
    cold, warm = machine.cold_read_bps, machine.cached_read_bps
    if case == "cached":
        model = replace(model, storage_reads="none")
    if cold and warm and share is not None and model.read_s_per_byte:
        own = max(0.0, model.read_s_per_byte - share / warm - (1 - share) / cold)
        if case == "cached":
            return replace(model, read_s_per_byte=own + 1 / warm)
        return replace(model, read_s_per_byte=own, storage_reads="apart")
    return model


@dataclass(frozen=True, slots=True)
class StoragePredictions:
    """The predictions of the chosen case, and those of the other case for comparison."""

    storage: StorageCase
    model: Model
    preds: list[Prediction]
    other: list[Prediction]

    def other_column(self) -> list[str]:
        """Per N, the other case's wall time where it falls outside this case's range ('' elsewhere)."""
        return [f"{self.storage.other} {o.t_wall:.4g}" if not p.t_low <= o.t_wall <= p.t_high else ""
                for p, o in zip(self.preds, self.other, strict=True)]


def predict_storage(model: Model, ns: list[int], machine: Machine, asked: str = AUTO) -> StoragePredictions:
    """The prediction for the storage case ``asked`` (or chosen by :func:`choose`), and the other case's."""
    storage = choose(model, machine, asked)
    m, other = for_case(model, machine, storage.case), for_case(model, machine, storage.other)
    return StoragePredictions(storage, m, predict_model(m, ns, machine), predict_model(other, ns, machine))


__all__ = ["AUTO", "CASES", "StorageCase", "StoragePredictions", "choose", "for_case", "predict_storage"]
