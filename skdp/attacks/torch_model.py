"""A fitted estimator or Pipeline as one differentiable torch function, for white-box attacks.

Steps take part through a small protocol: transformers with ``torch_transform``
(skdp's resamplers, ``CenterNormalize``, ``SRGANTransformer``) and a final
classifier with ``torch_predict_proba`` (``DPMomentumClassifier``).
``FrozenEstimator`` is looked through; "passthrough" is the identity.
"""
import numpy as np

from ..exceptions import TorchUnavailableError
from ..utils.steps import pipeline_steps


def torch_model(estimator):
    """Return ``x -> class probabilities`` as a differentiable torch function of the estimator's input rows.

    Each transformer of a ``Pipeline`` must have ``torch_transform`` and the
    final classifier ``torch_predict_proba``; ``FrozenEstimator`` is looked
    through and "passthrough" is the identity. This is the white-box path of
    :class:`MIFace`: gradients flow through every step, e.g. through a
    super-resolution generator to its low-resolution input.

    Parameters
    ----------
    estimator : fitted classifier or Pipeline
        The model to differentiate.

    Returns
    -------
    proba : callable
        ``proba(x)`` maps a float tensor of input rows to a tensor of class
        probabilities of shape (n, n_classes).

    Raises
    ------
    TorchUnavailableError
        If a step has no torch path; use a black-box attack instead.

    See Also
    --------
    MIFace : The attack that uses it.

    Examples
    --------
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skdp.attacks import TorchUnavailableError, torch_model
    >>> try:
    ...     torch_model(LogisticRegression())
    ... except TorchUnavailableError as exc:
    ...     print(exc)
    LogisticRegression has no torch_predict_proba; use mode='black_box'.
    """
    steps = pipeline_steps(estimator)
    *transforms, final = steps
    for step in transforms:
        if not hasattr(step, "torch_transform"):
            raise TorchUnavailableError(f"{type(step).__name__} has no torch_transform; use mode='black_box'.")
    if not hasattr(final, "torch_predict_proba"):
        raise TorchUnavailableError(f"{type(final).__name__} has no torch_predict_proba; use mode='black_box'.")

    def proba(x):
        for step in transforms:
            x = step.torch_transform(x)
        return final.torch_predict_proba(x)
    return proba


def input_dim(estimator):
    """Features per input row: a super-resolution step takes low-resolution rows."""
    first = pipeline_steps(estimator)[0]
    low_res = getattr(first, "low_res_shape_", None)
    if low_res is not None:
        return int(np.prod(low_res))
    n = getattr(first, "n_features_in_", None)
    if n is None:
        raise ValueError("Can not tell the estimator's input size; pass n_features.")
    return int(n)
