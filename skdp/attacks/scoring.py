"""How recognisable model-inversion reconstructions are."""
import numpy as np

from ..imaging.metrics import ssim


def score_reconstructions(result, X_reference, y_reference, *, evaluator, image_shape, to_reference=None):
    """Attack success of an ``InversionResult`` against reference images of the targets.

    Parameters
    ----------
    result : InversionResult
    X_reference, y_reference : arrays
        Images of the people (flat rows of ``image_shape``) and their labels; the
        target's *mean face* is the mean of its rows.
    evaluator : fitted classifier
        An independent, non-private classifier on the reference image space
        (not the attacked model): the attack succeeds on a target when the
        evaluator names the target from its reconstruction.
    image_shape : (H, W) or (C, H, W)
    to_reference : callable or None
        Maps reconstructions (model-input space, e.g. 14x11) to the reference
        space (e.g. bicubic or the SR generator to 112x92).

    Returns
    -------
    dict with ``attack_accuracy`` (evaluator top-1 on the reconstructions),
    ``ssim`` (mean SSIM to the target's mean face), ``ssim_per_target`` and
    ``mean_confidence`` (the attacked model's confidence).
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
