#!/usr/bin/env python3
"""scripts/gpu_torch_ref.py -- PyTorch eager on the GPU, for scripts/gpu_check.sh's end-to-end
comparison: torchvision's ResNet-18 and MobileNetV2 (random weights, eval mode), fp32 with TF32
off, batch 1, 3x224x224, input and output on the device; one line per network,

    torch.NET: M ms per call (median of N calls after W warm-up; DEVICE, torch VERSION)

the time of a call followed by torch.cuda.synchronize(), as kiln's calls wait for their kernels.
Exit status 77 (skip) where torch, torchvision or a CUDA device is missing.
usage: gpu_torch_ref.py [--calls N] [--warmup W] [NET ...]"""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("nets", nargs="*", default=["resnet18", "mobilenet_v2"])
    a = ap.parse_args()
    if a.calls < 1 or a.warmup < 0:
        ap.error("--calls must be at least 1 and --warmup at least 0")
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"skip: {e}")
        return 77
    if not torch.cuda.is_available():
        print("skip: torch sees no CUDA device")
        return 77
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.cuda.get_device_name(0)
    for name in a.nets:
        if not hasattr(torchvision.models, name):
            print(f"gpu_torch_ref: torchvision has no model {name!r}", file=sys.stderr)
            return 2
        m = getattr(torchvision.models, name)().eval().cuda()
        x = torch.randn(1, 3, 224, 224, device="cuda")
        ts = []
        with torch.no_grad():
            for _ in range(a.warmup):
                m(x)
            torch.cuda.synchronize()
            for _ in range(a.calls):
                t0 = time.perf_counter()
                m(x)
                torch.cuda.synchronize()
                ts.append(time.perf_counter() - t0)
        ts.sort()
        print(f"torch.{name}: {ts[len(ts) // 2] * 1e3:.3f} ms per call (median of {a.calls} calls "
              f"after {a.warmup} warm-up; {dev}, torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
