"""trajscale: MD trajectory I/O and analysis at the speed of the storage.

>>> import trajscale as ts
>>> r = ts.run(ts.RMSD(select="protein and name CA"), "top.tpr", "traj.h5md",
...            executor="processes", n_workers=2)
>>> r.rmsd, r.frames, r.times, r.report

``import trajscale`` imports nothing heavy: each name below is imported on first use
(:mod:`trajscale._lazy`), so a command or a worker pays only for what it runs.
"""

from __future__ import annotations

from ._lazy import attach
from .analysis import BUILTIN  # the analysis registry: its classes are names here (cheap: a dict)
from .registered import register

# Every kind of Source (by where its traits are declared; formats in the order their first bytes are asked)
# and the engine's own analyses, registered downward: the root stands above every layer, so no layer below
# names a package above it. Strings only: nothing is imported until a registry is first read.
register(formats=("trajscale.sources.traits:SEGMENTS", "trajscale.mdcath.traits:MDCATH", "trajscale.h5md.traits:H5MD",
                  "trajscale.xdr.traits:XDR", "trajscale.npy.traits:NPY", "trajscale.mdareaders.traits:MDA_PART"),
         kinds=("trajscale.mdareaders.traits:MDA", "trajscale.h5md.traits:GROWING_H5MD",
                "trajscale.ensemble.traits:ENSEMBLE"),
         analyses={"ensemble": "trajscale.ensemble.analysis:EnsembleAnalysis"})

TYPE_CHECKING = False   # (type checkers read it as True; importing typing would cost every import)

if TYPE_CHECKING:
    from ._version import __version__
    from .analysis import Analysis, AnalysisGroup, per_frame  # noqa: F401 (and every class of BUILTIN)
    from .arrays import open_dataset
    from .block import Block, FrameRange
    from .ensemble import Ensemble
    from .errors import TrajscaleError
    from .executors import make_executor
    from .h5md.layout import Layout
    from .plans import read_plan
    from .pwrite import ParallelWriter
    from .report.timing import RunReport
    from .run import run
    from .runspec import RunOptions
    from .sources import H5MDSource, MDASource, open_source
    from .storage.location import Location

# every analysis in the registry (``trajscale.analysis.BUILTIN``: its class and module) is a name here
_ANALYSIS_NAMES = [cls for cls, _ in BUILTIN.values()] + ["Analysis", "AnalysisGroup", "per_frame"]

__all__ = [
           *_ANALYSIS_NAMES,
           "Block",
           "Ensemble",
           "FrameRange",
           "H5MDSource",
           "Layout",
           "Location",
           "MDASource",
           "ParallelWriter",
           "RunOptions",
           "RunReport",
           "TrajscaleError",
           "__version__",
           "make_executor",
           "open_dataset",
           "open_source",
           "read_plan",
           "run",
]

__getattr__, __dir__ = attach(__name__, {
    **dict.fromkeys(_ANALYSIS_NAMES, ".analysis"),
    "Block": ".block", "FrameRange": ".block", "TrajscaleError": ".errors", "make_executor": ".executors",
    "ParallelWriter": ".pwrite", "RunReport": ".report.timing", "run": ".run", "RunOptions": ".runspec",
    "H5MDSource": ".h5md.source", "MDASource": ".mdareaders.universe", "open_source": ".sources",
    "Layout": ".h5md.layout",
    "__version__": "._version", "open_dataset": ".arrays", "Ensemble": ".ensemble", "read_plan": ".plans",
    "Location": ".storage.location",
}, submodules=("_version", "analysis", "block", "errors", "executors", "kernels", "parallel", "pwrite", "report",
               "sources", "store", "util"))
