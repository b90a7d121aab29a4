"""scikit-learn's estimator checks for the image transformers.

Most of sklearn's checks fit on small flat tables (2-10 columns) without an
image shape. An image transformer must refuse those: it can not tell how a
row of 6 numbers is laid out as an image, and guessing would silently
resample the wrong axes. Those checks are expected failures for that one
reason; what they test (pickling, NaN, dtypes, not overwriting parameters,
fit returning self, idempotence) is covered on image data in
test_preprocessing.py, test_srgan.py and below.
"""
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdp.preprocessing import CenterNormalize, Downsample, Upsample
from skdp.superres import SRGANTransformer

FLAT_TABLES = ("check_dict_unchanged", "check_dont_overwrite_parameters", "check_dtype_object",
               "check_estimators_dtypes", "check_estimators_fit_returns_self", "check_estimators_nan_inf",
               "check_estimators_overwrite_params", "check_estimators_pickle", "check_f_contiguous_array_estimator",
               "check_fit2d_1feature", "check_fit2d_1sample", "check_fit2d_predict1d", "check_fit_check_is_fitted",
               "check_fit_idempotent", "check_fit_score_takes_y", "check_methods_sample_order_invariance",
               "check_methods_subset_invariance", "check_n_features_in", "check_n_features_in_after_fitting",
               "check_pipeline_consistency", "check_positive_only_tag_during_fit", "check_readonly_memmap_input",
               "check_transformer_data_not_an_array", "check_transformer_general",
               "check_transformer_preserve_dtypes")
REASON = "fits on flat tables without image_shape, which image transformers refuse (module docstring)"
TINY_SR = dict(scale=2, n_filters=4, discriminator_filters=4, n_residual_blocks=1, pretrain_epochs=1, gan_epochs=0,
               random_state=0)


def expected_failures(estimator):
    if isinstance(estimator, CenterNormalize):
        return {}
    passes = {"check_fit2d_1sample"} if isinstance(estimator, SRGANTransformer) else set()  # refused first
    return {name: REASON for name in FLAT_TABLES if name not in passes}


@parametrize_with_checks([CenterNormalize(), Downsample(2), Upsample(2), SRGANTransformer(**TINY_SR)],
                         expected_failed_checks=expected_failures)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check(estimator)


@pytest.mark.parametrize("make", [lambda: Downsample(2), lambda: Upsample(2), lambda: SRGANTransformer(**TINY_SR)],
                         ids=["Downsample", "Upsample", "SRGANTransformer"])
def test_what_the_flat_table_checks_cover_on_images(make):
    rng = np.random.default_rng(0)
    X = rng.random((6, 8, 8)).astype(np.float32)
    X_before = X.copy()
    est = make()
    params = clone(est).get_params()
    assert est.fit(X) is est
    assert est.get_params().keys() == params.keys()
    assert all(est.get_params()[k] is params[k] or est.get_params()[k] == params[k] for k in params)
    np.testing.assert_array_equal(X, X_before)
    low = X if not isinstance(est, SRGANTransformer) else X[:, ::2, ::2]
    out = est.transform(low)
    assert out.dtype == np.float32
    np.testing.assert_allclose(est.transform(low[::-1]), out[::-1], rtol=1e-5, atol=1e-6)  # order invariant
    np.testing.assert_allclose(est.transform(low[:2]), out[:2], rtol=1e-5, atol=1e-6)  # subset invariant
