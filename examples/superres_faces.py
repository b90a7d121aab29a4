"""
Super-resolved faces, a private classifier, and model inversion
===============================================================

The SRGAN thesis: faces seen only at low resolution (14x11 pixels) are super-resolved by a generator
trained on *public* faces, then identified by a classifier trained with DP-SGD with momentum, and
finally attacked with MI-Face (Fredrikson et al. 2015), white-box through the generator.

**Shown, not run** when this site is built: it needs the ORL faces, which are not shipped with
scikit-learn and are never downloaded (pass the path of an ``.npz`` with ``images`` (400, 112, 92)
and ``target``; the repository's benchmarks use ``../shared/data/orl_faces.npz``), and takes about
2 minutes on 2 CPU cores::

    python examples/superres_faces.py [path/to/orl_faces.npz]

``benchmarks/reproduce_thesis.py`` is the full study (11 minutes). Low resolution, bicubic and SRGAN
faces from that run:

.. image:: ../../benchmarks/results/thesis_sr_examples.png
   :alt: low-resolution, bicubic and super-resolved faces
   :width: 640px
"""
import sys
from pathlib import Path

import numpy as np
from sklearn.frozen import FrozenEstimator
from sklearn.pipeline import make_pipeline

from skdp import DPMomentumClassifier, SRGANTransformer
from skdp.attacks import MIFace
from skdp.datasets import load_orl_faces
from skdp.preprocessing import CenterNormalize, Downsample
from skdp.superres import psnr

path = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "shared/data/orl_faces.npz"
faces, target = load_orl_faces(path)
images = faces.astype(np.float32) / 255
public = np.array([np.flatnonzero(target == s)[0] for s in np.unique(target)])  # one face per person
private = np.setdiff1d(np.arange(len(target)), public)
train, test = private[np.arange(len(private)) % 9 < 6], private[np.arange(len(private)) % 9 >= 6]

# Public data: the SRGAN is not private (epsilon=None declares it) and is trained once.
sr = SRGANTransformer(scale=8, n_filters=32, discriminator_filters=32, pretrain_epochs=40, gan_epochs=5,
                      degradation="area", random_state=0, verbose=1).fit(images[public])
low = Downsample(8, method="area").fit_transform(images).reshape(len(images), -1)  # 14x11 rows
print(f"PSNR of SR on private faces: {psnr(images[private], sr.transform(low[private].reshape(-1, 14, 11))):.2f} dB")

sr_public = sr.transform(low[public])
pipe = make_pipeline(FrozenEstimator(sr), CenterNormalize(sr_public.mean(0)),
                     DPMomentumClassifier(epsilon=5.0, delta=1e-3, classes=range(40), batch_size=len(train),
                                          max_epochs=30, lr=3.33, random_state=0))
pipe.fit(low[train], target[train])
print(f"test accuracy {pipe.score(low[test], target[test]):.3f} at epsilon {pipe[-1].epsilon_:.2f}, delta 1e-3")

result = MIFace(pipe, alpha=100, lambda_=10.0, process=lambda x: x.clamp(0, 1)).run([0, 1, 2])
print("MI-Face target confidences:", np.round(result.confidences, 2))
