"""SRGAN training speed: public (no DP) against private (DP-SGD on both networks), per phase.

Same process, same data (the 40 public ORL faces, 112x92, scale 8), same widths (32). The private
fit uses group normalisation (batch statistics have no per-example gradient), so the public fit
is also timed with group normalisation to separate the cost of DP from the cost of the norm.
Ratios are of training images per second.

Run: python benchmarks/bench_srgan.py [--data ../shared/data/orl_faces.npz]
"""
import argparse
import warnings

import numpy as np

from _common import SHARED_DATA, environment, markdown_table, write_result
from skdp.datasets import load_orl_faces
from skdp.superres import SRGANTransformer

PHASES = {"content pre-training": dict(pretrain_epochs=4, gan_epochs=0),
          "adversarial": dict(pretrain_epochs=0, gan_epochs=3)}
SETTINGS = {"public, batch norm": dict(norm="batch"), "public, group norm": dict(norm="group"),
            "private (eps 10), group norm": dict(norm="group", epsilon=10.0, delta=1e-3)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default=str(SHARED_DATA / "orl_faces.npz"))
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    faces, target = load_orl_faces(args.data)
    public = faces[[np.flatnonzero(target == s)[0] for s in np.unique(target)]].astype(np.float32) / 255
    # Warm-up (first-call allocations), not timed.
    SRGANTransformer(scale=8, n_filters=32, discriminator_filters=32, pretrain_epochs=1, gan_epochs=1,
                     random_state=0).fit(public)
    rows = []
    for phase, epochs in PHASES.items():
        speeds = {}
        for name, setting in SETTINGS.items():
            sr = SRGANTransformer(scale=8, n_filters=32, discriminator_filters=32, batch_size=16, random_state=0,
                                  degradation="area", **epochs, **setting).fit(public)
            speeds[name] = sr.images_per_second_
        base = speeds["public, group norm"]
        for name, speed in speeds.items():
            rows.append([phase, name, f"{speed:.1f}", f"{base / speed:.2f}"])
        print(rows[-3:], flush=True)
    write_result("srgan_speed.md", f"""# SRGAN training speed: public vs DP-SGD

`python benchmarks/bench_srgan.py` · {environment()}

{__doc__.split("Run:")[0].strip()}

{markdown_table(["phase", "setting", "images / s", "time vs public group norm"], rows)}

Where the private cost goes: the generator's layers (convolutions, PReLU, group norm) are clipped by the
book-keeping hooks (one backward, per-layer norms). The discriminator sees two images per example (real
and super-resolved), which the hooks can not attribute, so it takes the torch.func per-example path,
the slow one; the adversarial phase pays for it.
""")


if __name__ == "__main__":
    main()
