"""How recognisable model-inversion reconstructions are."""
import numpy as np

from ..imaging.metrics import ssim


def score_reconstructions(result, X_reference, y_reference, *, evaluator, image_shape, to_reference=None):
    """Measure how recognisable the reconstructions of an ``InversionResult`` are.

    Two measures, as in the thesis's MI-Face experiments: an independent
    evaluator's top-1 accuracy on the reconstructions (does it name the
    target?) and the SSIM between each reconstruction and the target's mean
    face. The reconstructions are first mapped to the reference image space
    by ``to_reference`` (e.g. bicubic upsampling from the model's
    low-resolution input).

    Parameters
    ----------
    result : InversionResult
        The attack's output, from :meth:`MIFace.run`.
    X_reference, y_reference : arrays
        Images of the people (flat rows of ``image_shape``) and their labels; the
        target's *mean face* is the mean of its rows.
    evaluator : fitted classifier
        An independent, non-private classifier on the reference image space
        (not the attacked model): the attack succeeds on a target when the
        evaluator names the target from its reconstruction.
    image_shape : (H, W) or (C, H, W)
        Shape of one reference image.
    to_reference : callable or None
        Maps reconstructions (model-input space, e.g. 14x11) to the reference
        space (e.g. bicubic or the SR generator to 112x92).

    Returns
    -------
    scores : dict
        ``attack_accuracy`` (float, the evaluator's top-1 accuracy on the
        reconstructions), ``ssim`` (float, the mean SSIM to the targets' mean
        faces), ``ssim_per_target`` (ndarray of shape (n_targets,)) and
        ``mean_confidence`` (float, the attacked model's mean confidence in
        the targets).

    See Also
    --------
    MIFace : The attack whose reconstructions are scored.
    skdp.superres.ssim : The similarity measure.

    Examples
    --------
    Reconstructions equal to each target's mean face score perfectly:

    >>> import numpy as np
    >>> from sklearn.neighbors import NearestCentroid
    >>> from skdp.attacks import InversionResult, score_reconstructions
    >>> rng = np.random.default_rng(0)
    >>> X_ref, y_ref = rng.random((20, 64)), np.repeat([0, 1], 10)
    >>> means = np.stack([X_ref[y_ref == t].mean(0) for t in (0, 1)])
    >>> result = InversionResult(targets=np.array([0, 1]), reconstructions=means,
    ...                          confidences=np.array([0.9, 0.8]), costs=np.array([0.1, 0.2]),
    ...                          n_iter=np.array([10, 12]))
    >>> scores = score_reconstructions(result, X_ref, y_ref, evaluator=NearestCentroid().fit(X_ref, y_ref),
    ...                                image_shape=(8, 8))
    >>> scores["attack_accuracy"], round(scores["ssim"], 3), round(scores["mean_confidence"], 2)
    (1.0, 1.0, 0.85)
    """
    images = result.reconstructions if to_reference is None else to_reference(result.reconstructions)
    images = np.asarray(images, dtype=np.float32).reshape(len(result.targets), -1)
    X_reference = np.asarray(X_reference, dtype=np.float32).reshape(len(y_reference), -1)
    if images.shape[1] != X_reference.shape[1]:
        raise ValueError(f"reconstructions have {images.shape[1]} features, references {X_reference.shape[1]}; "
                         "pass to_reference to map them.")
    y_reference = np.asarray(y_reference)
    means = np.stack([X_reference[y_reference == t].mean(0) for t in result.targets])
    per_target = np.array([ssim(m[None], im[None], image_shape=tuple(image_shape)) for m, im in zip(means, images)])
    predicted = evaluator.predict(images)
    return {
        "attack_accuracy": float(np.mean(predicted == result.targets)),
        "ssim": float(per_target.mean()),
        "ssim_per_target": per_target,
        "mean_confidence": float(np.mean(result.confidences)),
    }
