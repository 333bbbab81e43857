"""One exception hierarchy: user errors are :class:`TrajscaleError`, said in one line; others keep tracebacks."""

from __future__ import annotations

from os import PathLike


class TrajscaleError(Exception):
    """Base class of every error caused by input the user can fix; subclasses keep their constructor
    arguments in ``_init_args`` so the error pickles back from a worker with its type intact."""

    exit_code = 2
    #: Already reported by another MPI rank: the CLI exits without printing it again.
    reported_elsewhere = False
    _init_args: tuple = ()

    def __reduce__(self):
        if self._init_args:
            return (self.__class__, self._init_args)
        return super().__reduce__()


class _PathProblem(TrajscaleError):
    """A problem with one file: its ``path`` and the ``problem``, said as ``path: problem``."""

    def __init__(self, path: str | PathLike[str], problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        self._init_args = (self.path, problem)
        super().__init__(f"{self.path}: {problem}")


class InputFileError(_PathProblem):
    """A file that cannot be used: missing, a directory, truncated, wrong format."""


class CutShortError(InputFileError):
    """An HDF5 file shorter than its superblock records: ``cut`` says so; ``hint``, where given, how the file a
    writer left is mended (said of the formats ``trajscale repair`` mends, not of every HDF5 file)."""

    def __init__(self, path: str | PathLike[str], cut: str, hint: str = "") -> None:
        super().__init__(path, cut + hint)
        self.cut, self.hint = cut, hint
        self._init_args = (self.path, cut, hint)


class AllRefusedError(InputFileError):
    """Every trajectory of an ensemble was refused: ``refused`` holds each one's refusal, with its own reason."""

    def __init__(self, path: str | PathLike[str], problem: str, refused: tuple = ()) -> None:
        super().__init__(path, problem)
        self.refused = tuple(refused)
        self._init_args = (self.path, problem, self.refused)


class StoreError(InputFileError):
    """A training-data store that cannot be used; constructible from one message, as torch's DataLoader rebuilds it."""

    def __init__(self, path: str | PathLike[str], problem: str | None = None) -> None:
        if problem is None:
            TrajscaleError.__init__(self, str(path))
            self.path, self.problem, self._init_args = "", str(path), (str(path),)
            return
        super().__init__(path, problem)


class NotH5MDError(InputFileError):
    """An HDF5 file that does not follow the H5MD layout."""


class NotFollowableError(InputFileError):
    """A format that cannot be followed while written: refused at once, not after waiting for frames."""


class DamagedFileError(InputFileError):
    """A trajectory damaged where its first whole frame should be: nothing to analyse, and waiting does not mend it."""


class OutputError(_PathProblem):
    """The output path cannot be written (exists, missing directory, ...)."""


class SelectionError(TrajscaleError):
    """An atom selection that is invalid or selects nothing."""


class AtomCountMismatchError(TrajscaleError):
    """Topology and trajectory (or two trajectories) disagree on the atom count."""


class BadCoordinatesError(TrajscaleError):
    """Non-finite coordinates in a frame."""

    def __init__(self, frame: int, source: str, what: str = "NaN/inf coordinates") -> None:
        self.frame = frame
        self._init_args = (frame, source, what)
        super().__init__(f"{source}: {what} in frame {frame}")


class MissingBoxError(TrajscaleError):
    """A frame without a periodic box, or with one of zero (or too large a) volume, for an analysis that needs one."""

    def __init__(self, frame: int, source: str, problem: str) -> None:
        self.frame, self.path, self.problem = frame, str(source), problem
        self._init_args = (frame, self.path, problem)
        super().__init__(f"{self.path}: frame {frame} {problem}")


class FrameRangeError(TrajscaleError):
    """A frame index or range outside the trajectory."""


class ParallelUnavailableError(TrajscaleError):
    """The requested parallel feature (MPI, parallel HDF5, Dask) is not installed."""


class TaskError(TrajscaleError):
    """A task failed on a worker or rank; names where and which frames."""

    exit_code = 3

    def __init__(self, where: str, start: int, stop: int, cause: str) -> None:
        self.where = where
        self.start = start
        self.stop = stop
        self.cause = cause
        self._init_args = (where, start, stop, cause)
        super().__init__(f"task on {where} failed for frames [{start}, {stop}): {cause}")


class ServerUnreachable(TrajscaleError):
    """A server that has not answered for ``retry_seconds``: the run stops, keeps what it finished and says so;
    no file is at fault, so no trajectory is refused for it (a file's own failure is an :class:`InputFileError`)."""

    exit_code = 9

    def __init__(self, server: str, problem: str = "", kept: str = "") -> None:
        # (one argument: the whole message, as torch's DataLoader rebuilds a worker's error)
        self.server, self.problem, self.kept = server, problem, kept
        self._init_args = (server, problem, kept)
        super().__init__("; ".join(p for p in (f"{server}: {problem}" if problem else server, kept) if p))

    def keeping(self, kept: str) -> ServerUnreachable:
        """The same outage, said with what the stopped run kept."""
        said = ServerUnreachable(self.server, self.problem, kept)
        said.reported_elsewhere = self.reported_elsewhere
        return said


class ConfigError(TrajscaleError):
    """An invalid option or an unknown component name."""


class ParallelWriteError(_PathProblem):
    """Bad frame data given to a parallel writer; raised on every rank with the same message."""


class UnitError(ConfigError):
    """A unit string that is not in trajscale's tables, or an unknown unit system."""
