"""deeptime's estimators fed chunk by chunk: TICA, VAMP, covariances and mini-batch k-means in bounded memory.

:func:`stream_fit` hands a ``partial_fit`` estimator ``(X, Y)`` chunks of time-lagged pairs when it has a lag
time, else chunks of frames, so memory holds one trajectory's features, one chunk and the estimator's state
(:data:`MOMENTS` sets of covariances), whatever the number of trajectories. The model equals an in-memory fit to
rounding (covariances within 1e-10, relatively); docs/ensembles.md shows the use.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from .lagged import frame_chunks, lagged_chunks

#: Sets of moments a TICA's or VAMP's covariances are merged into between chunks: what a streamed fit
#: holds besides its chunk is this many times two features x features matrices, whatever the data.
MOMENTS = 2


def stream_fit(estimator, features, *, lagtime: int | None = None, rows: int | None = None,
               transform: Callable | None = None):
    """Fit ``estimator`` on ``features`` chunk by chunk through its ``partial_fit``; returns the estimator
    (``.fetch_model()`` gives its model).

    Parameters
    ----------
    estimator
        A deeptime estimator with ``partial_fit``: ``TICA``, ``VAMP``, ``Covariance``,
        ``KoopmanWeightingEstimator`` (fed ``(X, Y)`` pairs ``lagtime`` frames apart), ``MiniBatchKMeans`` or a
        ``Covariance`` of instantaneous moments only (fed frames).
    features
        Per-trajectory features (:func:`~trajscale.ml.lagged.trajectories`: arrays, an ensemble's per-frame
        result, a :class:`~trajscale.ml.lagged.FeatureStream`).
    lagtime
        Frames between the two halves of a pair; default: the estimator's own ``lagtime`` (set to this one
        where it has none, so that its model records it).
    rows
        Pairs (or frames) per ``partial_fit`` call; default: as many as
        :data:`~trajscale.ml.lagged.CHUNK_BYTES` (16 MiB) holds, so that memory stays flat whatever the
        feature count.
    transform
        Applied to each chunk before the fit (``tica_model.transform`` to cluster in TICA's space).

    Raises
    ------
    ConfigError
        The estimator has no ``partial_fit``, a lag time that disagrees with ``lagtime``, or none where it
        needs one; or ``features`` hold no trajectory.
    AllRefusedError
        Every member of a :class:`~trajscale.ml.lagged.FeatureStream` was refused (each named with its reason).
    """
    if not callable(getattr(estimator, "partial_fit", None)):
        raise ConfigError(f"a {type(estimator).__name__} has no partial_fit: it cannot be fed chunk by chunk")
    own = getattr(estimator, "lagtime", None)
    if lagtime is not None and own is not None and int(own) != int(lagtime):
        raise ConfigError(f"lagtime={lagtime} but the {type(estimator).__name__} was made with lagtime={own}")
    # a Covariance says whether it computes lagged moments; TICA, VAMP and Koopman weights always do
    lagged = getattr(estimator, "is_lagged", hasattr(estimator, "lagtime"))
    lag = (lagtime if lagtime is not None else own) if lagged else None
    if lagged and lag is None:
        raise ConfigError(f"a {type(estimator).__name__} learns from time-lagged pairs: give it a lagtime")
    if lagged and own is None:
        estimator.lagtime = int(lag)
    if lag is not None:
        # TICA's and VAMP's own covariance estimator keeps log2(chunks) sets of moments (features x features
        # each): memory that grows with the data. One of theirs made with at most MOMENTS sets is fed
        # instead, as their partial_fit feeds it, and the estimator fitted from it.
        covariances = None
        if callable(getattr(estimator, "fit_from_covariances", None)):
            covariances = estimator.covariance_estimator(lagtime=int(lag), ncov=MOMENTS)
            observe = estimator.observable_transform
        for x, y in lagged_chunks(features, lag, rows):
            if transform is not None:
                x, y = transform(x), transform(y)
            if covariances is None:
                estimator.partial_fit((x, y))
            else:
                covariances.partial_fit((observe(x), observe(y)))
        if covariances is not None:
            estimator.fit_from_covariances(covariances)
    else:
        for x in frame_chunks(features, rows):
            estimator.partial_fit(transform(x) if transform is not None else x)
    return estimator


__all__ = ["MOMENTS", "stream_fit"]
