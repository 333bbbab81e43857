"""deeptime's estimators fed chunk by chunk: TICA, VAMP, covariances and mini-batch k-means in bounded memory.

deeptime's covariance estimators and ``MiniBatchKMeans`` learn by ``partial_fit``, keeping only moments
(merged by Chan's formulas) or centres between chunks.  :func:`stream_fit` hands an estimator ``(X, Y)``
chunks of time-lagged pairs (:func:`~trajscale.ml.lagged.lagged_chunks`) when it has a lag time, else
chunks of frames, so memory holds one trajectory's features and one chunk::

    from deeptime.clustering import MiniBatchKMeans
    from deeptime.decomposition import TICA

    features = FeatureStream(ts.Ramachandran(select="protein", sincos=True), "mdcath_dataset_*.h5")
    tica = stream_fit(TICA(lagtime=10, dim=4), features).fetch_model()   # a CovarianceKoopmanModel
    kmeans = stream_fit(MiniBatchKMeans(n_clusters=50), features, transform=tica.transform).fetch_model()
    dtrajs = stream_transform(features, tica, kmeans)

The model is deeptime's own and equals an in-memory fit on the same trajectories (``TICA(lagtime=10,
dim=4).fit(list_of_arrays)``) to rounding: the covariances within 1e-10 of each other, relatively.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from .lagged import frame_chunks, lagged_chunks


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
        for x, y in lagged_chunks(features, lag, rows):
            if transform is not None:
                x, y = transform(x), transform(y)
            estimator.partial_fit((x, y))
    else:
        for x in frame_chunks(features, rows):
            estimator.partial_fit(transform(x) if transform is not None else x)
    return estimator


__all__ = ["stream_fit"]
