"""Exports torchvision's ResNet-18 (random weights, inference mode, batch 8 at
224x224, f32) as a wrapir bundle, for the README's "Deploying a model":

    python3 examples/export_resnet18.py resnet18

Needs PyTorch with CUDA and torchvision, and the `wrapir_export` package
(`pip install ./python`, or run from the repository: `python/` is put on the path).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torchvision  # noqa: E402
import wrapir_export  # noqa: E402


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "resnet18"
    torch.manual_seed(0)
    model = torchvision.models.resnet18().cuda().eval()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    result = wrapir_export.export(model, [x], out)
    print(f"exported {result.path}: {result.kernels} kernels")


if __name__ == "__main__":
    main()
