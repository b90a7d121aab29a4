"""Where skdp's DP step spends its time, by torch.profiler: ten steps of the MLP and SmallCNN (batch 256).

The engine's defaults (guards on, noise drawn ahead), after 20 warm-up steps; on a GPU the CPU rows
(kernel launches, host copies) beside the kernels' own time say whether the step is launch-bound.
Tables to ``dpsgd_profile{_cuda}.md`` (issue 29).

Run: python benchmarks/profile_dpsgd.py [--device cuda]
"""
import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import bench_dpsgd as b
from _common import environment, write_result
from skdp.engine import DPSGDEngine


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    b.DEVICE = dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * cuda
    where = f"GPU: {torch.cuda.get_device_name(dev)}" if cuda else "CPU"
    text = f"# torch.profiler of skdp's DP step (batch {b.B}, {where})\n\n{environment()}\n\n"
    torch.manual_seed(0)
    for name, make in (("MLP 784-256-10", b.mlp), ("SmallCNN", b.cnn)):
        X, y = torch.randn(b.B, 1, 28, 28, device=dev), torch.randint(0, 10, (b.B,), device=dev)
        model = make().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        engine = DPSGDEngine(model, max_grad_norm=1.0, noise_multiplier=1.0, expected_batch_size=b.B,
                             generator=torch.Generator(dev).manual_seed(0))

        def step():
            opt.zero_grad()
            engine.private_gradients(b.loss_fn, (X, y))
            opt.step()
        for _ in range(20):
            step()
        b.sync()
        with profile(activities=activities) as prof:
            for _ in range(10):
                step()
            b.sync()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
        text += f"## {name}: ten steps, by self CPU time\n\n```\n{table}\n```\n\n"
        if cuda:
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=15)
            text += f"## {name}: ten steps, by GPU time\n\n```\n{table}\n```\n\n"
        engine.close()
    print(text)
    write_result(f"dpsgd_profile{'_cuda' if cuda else ''}.md", text)


if __name__ == "__main__":
    main()
